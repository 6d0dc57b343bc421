"""The master's end of the relay: it answers the calls its front ends pass on.

Each frame (master/frontends/wire.py) is decoded and served by the same servicers as
the master's own gRPC server, on the master's event loop, so one process still
holds every piece of the run's state. A Connect heartbeat whose answer is all
in memory is answered in the read callback itself (most of the traffic);
everything else is a task. The socket lives in a directory of mode 0700: only
the master's user can reach it (whoever can bypasses the token check, which
the front ends make).
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import tempfile

import grpc

from aiperf.api.calls import CREDENTIAL_METADATA
from aiperf.api.client import MAX_MESSAGE_BYTES
from master.frontends.wire import MAX_CALL_FRAME, METHOD_INDEX, METHODS, PING, FrameConnection, parse_call, reply_frame
from master.rpc.servicers import ControlServicer, WorkerServicer, decoder
from master.rpc.services import request_type

log = logging.getLogger(__name__)

MAX_SOCKET_PATH_BYTES = 107  # sockaddr_un's sun_path, less its terminating NUL


class Refused(Exception):
    """A relayed call's handler ended it with a status code (its `context.abort`)."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


class RelayContext:
    """What the servicers ask of a call's context, for a call a front end relayed."""

    __slots__ = ("_metadata",)

    def __init__(self, credential: str) -> None:
        self._metadata = ((CREDENTIAL_METADATA, credential),) if credential else ()

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return self._metadata

    def time_remaining(self) -> float | None:
        return None  # the caller's deadline stays with the front end

    async def abort(self, code: grpc.StatusCode, details: str = "") -> None:
        raise Refused(code, details)


class RelayServer:
    """Answers relayed calls as the master's own server would."""

    def __init__(self, worker: WorkerServicer, control: ControlServicer) -> None:
        self._worker = worker
        self._connect = METHOD_INDEX[(WorkerServicer.SERVICE, "Connect")]
        self._handlers = []
        for service, name, _ in METHODS:
            servicer = worker if service == WorkerServicer.SERVICE else control
            self._handlers.append((getattr(servicer, name), decoder(request_type(service, name))))
        self._decode_message = self._handlers[self._connect][1]
        self.tasks: set[asyncio.Task[None]] = set()
        self.connections: set[FrameConnection] = set()

    def connection(self) -> FrameConnection:
        """The protocol of one front end's connection."""
        connection: FrameConnection

        def on_frame(frame: bytes) -> None:
            call_id, method, raw_credential, request = parse_call(frame)  # FrameError: the connection closes
            if method == PING:  # the front end's health: this loop answers
                connection.send(reply_frame(call_id, 0, b""))
                return
            credential = raw_credential.decode("utf-8", "replace")
            if method == self._connect:  # most are heartbeats answered from memory: no task for them
                message = self._decode_message(request)
                reply = self._worker.answer_now(message, credential)
                if reply is not None:
                    _send(connection, call_id, 0, reply.SerializeToString())
                    return
                coro = self._later(connection, call_id, message, credential)
            else:
                coro = self._serve(connection, call_id, method, credential, request)
            task = asyncio.get_running_loop().create_task(coro)
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

        connection = FrameConnection(MAX_CALL_FRAME, on_frame, on_lost=lambda: self.connections.discard(connection))
        self.connections.add(connection)
        return connection

    async def _later(self, connection: FrameConnection, call_id: int, message: object, credential: str) -> None:
        reply = await self._worker.answer_later(message, credential)
        _send(connection, call_id, 0, reply.SerializeToString())

    async def _serve(self, connection: FrameConnection, call_id: int, method: int, credential: str,
                     request: bytes) -> None:
        status, payload = await self.answer(method, credential, request)
        _send(connection, call_id, status, payload)

    async def answer(self, method: int, credential: str, request: bytes) -> tuple[int, bytes]:
        """(0, the reply) or (a status code number, its message) for one relayed unary request."""
        handler, decode = self._handlers[method]
        try:
            reply = await handler(decode(request), RelayContext(credential))
            return 0, reply.SerializeToString()
        except Refused as exc:
            return exc.code.value[0], exc.message.encode()
        except Exception as exc:  # noqa: BLE001 - the servicers refuse what they know; this is a bug
            log.error("event=relay_internal_error method=%s", METHODS[method][1], exc_info=exc)
            return grpc.StatusCode.INTERNAL.value[0], f"internal error ({type(exc).__name__}); see the master's log".encode()

    def close(self) -> None:
        """Close the front ends' connections and cancel the calls in flight (on the loop)."""
        for connection in list(self.connections):
            if connection.transport is not None:
                connection.transport.close()
        for task in list(self.tasks):
            task.cancel()


def _send(connection: FrameConnection, call_id: int, status: int, payload: bytes) -> None:
    """A reply, or RESOURCE_EXHAUSTED when it is larger than a gRPC reply may be (as the master's
    own server answers: the front end would refuse the frame and drop its every call)."""
    if status == 0 and len(payload) > MAX_MESSAGE_BYTES:
        status = grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
        payload = f"reply of {len(payload)} bytes exceeds the limit of {MAX_MESSAGE_BYTES}".encode()
    connection.send(reply_frame(call_id, status, payload))


def relay_directory() -> tuple[str, str]:
    """A private directory (mode 0700) in the temporary directory and the relay socket's path in it;
    OSError naming the path when it is too long for a Unix socket (TMPDIR too deep)."""
    directory = tempfile.mkdtemp(prefix="aiperf-relay-")
    path = os.path.join(directory, "master.sock")
    if len(os.fsencode(path)) > MAX_SOCKET_PATH_BYTES:
        shutil.rmtree(directory, ignore_errors=True)
        raise OSError(f"the relay socket's path {path} is longer than {MAX_SOCKET_PATH_BYTES} bytes; "
                      "set TMPDIR to a shorter directory")
    return directory, path


def remove_relay_directory(directory: str) -> None:
    shutil.rmtree(directory, ignore_errors=True)


def serve_relay(loop: asyncio.AbstractEventLoop, relay: RelayServer, path: str) -> asyncio.AbstractServer:
    """The relay's Unix-socket server, started on the master's event loop."""
    async def start() -> asyncio.AbstractServer:
        return await loop.create_unix_server(relay.connection, path)
    return asyncio.run_coroutine_threadsafe(start(), loop).result(60)


def close_relay(loop: asyncio.AbstractEventLoop, server: asyncio.AbstractServer, relay: RelayServer) -> None:
    """Stop accepting front ends and close the connections of those left (a front end then stops)."""
    async def close() -> None:
        server.close()  # (Python 3.11 leaves the open connections open)
        relay.close()
    asyncio.run_coroutine_threadsafe(close(), loop).result(30)
