"""The relay between the master's front-end processes and the master.

With `--frontends N` the master serves gRPC from N processes (master/frontends/process.py)
that share its port (SO_REUSEPORT) and do what costs most per message in Python:
HTTP/2, the open streams, the token check. Each passes every call's request,
unparsed, to the one master process over a Unix socket, and its reply back.
The master parses and decides everything as it does for its own gRPC server
(master/rpc/servicers.py), so one process still holds all the run's state.

The wire is frames, many per write (a write per event-loop turn):

    call:  length u32 | call id u64 | method u16 | credential length u16 | credential | request
    reply: length u32 | call id u64 | status u32 | reply (status 0) or error message (UTF-8)

`length` counts what follows it. `method` indexes `METHODS` (or is `PING`); for
Connect, each stream message is one call, answered by one reply, in order. The
status is a gRPC status code number.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import struct
from typing import Callable, Iterator

from aiperf.api.client import MAX_MESSAGE_BYTES
from aiperf.limits import MAX_REQUEST_BYTES
from master.rpc.services import SERVICES

log = logging.getLogger(__name__)

# the relay carries unary calls and streams of requests each answered by one reply (Connect)
assert all(m.client_streaming == m.server_streaming for s in SERVICES for m in s.methods)

# (service, method, streaming): every method both services serve, in a fixed order
METHODS: tuple[tuple[str, str, bool], ...] = tuple(
    (service.full_name, method.name, method.client_streaming) for service in SERVICES for method in service.methods)
METHOD_INDEX = {(service, name): i for i, (service, name, _) in enumerate(METHODS)}
# Both ends must number the methods alike (the token a front end checks is for the method it
# served): a front end started from other code than its master's refuses to start.
METHODS_DIGEST = hashlib.sha256(repr(METHODS).encode()).hexdigest()
PING = 0xFFFF  # a front end's health check: answered by the master's event loop, with an empty reply

_LENGTH = struct.Struct(">I")
_CALL = struct.Struct(">QHH")
_REPLY = struct.Struct(">QI")
MAX_CREDENTIAL_BYTES = 0xFFFF
MAX_CALL_FRAME = _CALL.size + MAX_CREDENTIAL_BYTES + MAX_REQUEST_BYTES
MAX_REPLY_FRAME = _REPLY.size + MAX_MESSAGE_BYTES


class FrameError(Exception):
    """A frame that breaks the format: the connection that sent it is closed."""


def call_frame(call_id: int, method: int, credential: bytes, request: bytes) -> bytes:
    """One call, ready to write."""
    if len(credential) > MAX_CREDENTIAL_BYTES:
        raise FrameError(f"credential of {len(credential)} bytes (at most {MAX_CREDENTIAL_BYTES})")
    body = _CALL.pack(call_id, method, len(credential))
    return _LENGTH.pack(len(body) + len(credential) + len(request)) + body + credential + request


def reply_frame(call_id: int, status: int, payload: bytes) -> bytes:
    """One reply, ready to write."""
    return _LENGTH.pack(_REPLY.size + len(payload)) + _REPLY.pack(call_id, status) + payload


def parse_call(frame: bytes) -> tuple[int, int, bytes, bytes]:
    """(call id, method, credential, request) of a call frame's body; FrameError when malformed."""
    if len(frame) < _CALL.size:
        raise FrameError(f"call frame of {len(frame)} bytes")
    call_id, method, cred_len = _CALL.unpack_from(frame)
    if method >= len(METHODS) and method != PING:
        raise FrameError(f"unknown method {method}")
    end = _CALL.size + cred_len
    if end > len(frame):
        raise FrameError("credential longer than its frame")
    return call_id, method, frame[_CALL.size:end], frame[end:]


def parse_reply(frame: bytes) -> tuple[int, int, bytes]:
    """(call id, status, payload) of a reply frame's body; FrameError when malformed."""
    if len(frame) < _REPLY.size:
        raise FrameError(f"reply frame of {len(frame)} bytes")
    call_id, status = _REPLY.unpack_from(frame)
    return call_id, status, frame[_REPLY.size:]


class FrameReader:
    """Cuts a byte stream into frame bodies (what follows each length)."""

    def __init__(self, max_frame: int) -> None:
        self._buffer = bytearray()
        self._max = max_frame

    def feed(self, data: bytes) -> Iterator[bytes]:
        """The frames `data` completes; FrameError on a length above the maximum."""
        buffer = self._buffer
        buffer += data
        start = 0
        while len(buffer) - start >= _LENGTH.size:
            (length,) = _LENGTH.unpack_from(buffer, start)
            if length > self._max:
                raise FrameError(f"frame of {length} bytes (at most {self._max})")
            end = start + _LENGTH.size + length
            if end > len(buffer):
                break
            yield bytes(buffer[start + _LENGTH.size:end])
            start = end
        del buffer[:start]


class FrameConnection(asyncio.Protocol):
    """A relay connection's end: frames in through `on_frame`, frames out in one
    write per event-loop turn (thousands of small writes would each be a system call)."""

    def __init__(self, max_frame: int, on_frame: Callable[[bytes], None],
                 on_lost: Callable[[], None] | None = None) -> None:
        self._reader = FrameReader(max_frame)
        self._on_frame = on_frame
        self._on_lost = on_lost
        self._out: list[bytes] = []
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        if self._on_lost is not None:
            self._on_lost()

    def data_received(self, data: bytes) -> None:
        try:
            for frame in self._reader.feed(data):
                self._on_frame(frame)
        except FrameError as exc:
            log.error("event=relay_frame_error error=%s", exc)
            if self.transport is not None:
                self.transport.close()

    def send(self, frame: bytes) -> None:
        if not self._out:
            asyncio.get_running_loop().call_soon(self._flush)
        self._out.append(frame)

    def _flush(self) -> None:
        out, self._out = self._out, []
        if self.transport is not None and not self.transport.is_closing():
            self.transport.writelines(out)
