"""The master's side of `--frontends N`: the relay's server and the front-end processes.

`RelayServer` answers the calls the front ends pass over the relay
(master/relay.py) with the same servicers as the master's own gRPC server,
on the master's event loop: one process still holds every piece of the run's
state, so nothing is shared between processes but the port. `FrontEnds`
starts the N processes (master/frontend.py), restarts one that dies and
stops them with the master.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import select
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
import grpc

from aiperf.api import aiperf_pb2 as pb
from aiperf.api.calls import CREDENTIAL_METADATA
from master.auth import Tokens
from master.relay import MAX_CALL_FRAME, METHOD_INDEX, METHODS, FrameConnection, parse_call, reply_frame
from master.servicers import ControlServicer, WorkerServicer, decoder

log = logging.getLogger(__name__)

START_TIMEOUT_S = 60.0
RESTART_DELAY_S = 2.0  # between restarts of a front end that keeps dying


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

    async def abort(self, code: grpc.StatusCode, details: str = "") -> None:
        raise Refused(code, details)


class RelayServer:
    """Answers relayed calls: each frame is decoded and served as the master's own server would."""

    def __init__(self, worker: WorkerServicer, control: ControlServicer) -> None:
        self._worker = worker
        self._connect = METHOD_INDEX[(WorkerServicer.SERVICE, "Connect")]
        self._handlers = []
        for service, name, _ in METHODS:
            descriptor = pb.DESCRIPTOR.services_by_name[service.rsplit(".", 1)[1]].methods_by_name[name]
            servicer = worker if service == WorkerServicer.SERVICE else control
            self._handlers.append((getattr(servicer, name), decoder(getattr(pb, descriptor.input_type.name))))
        self._decode_message = self._handlers[self._connect][1]
        self.tasks: set[asyncio.Task[None]] = set()
        self.connections: set[FrameConnection] = set()

    def connection(self) -> FrameConnection:
        """The protocol of one front end's connection."""
        connection: FrameConnection

        def on_frame(frame: bytes) -> None:
            call_id, method, credential, request = parse_call(frame)  # FrameError: the connection closes
            if method == self._connect:  # most are heartbeats answered from memory: no task for them
                message = self._decode_message(request)
                reply = self._worker.answer_now(message, credential.decode("utf-8", "replace"))
                if reply is not None:
                    connection.send(reply_frame(call_id, 0, reply.SerializeToString()))
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

    async def _later(self, connection: FrameConnection, call_id: int, message: object, credential: bytes) -> None:
        reply = await self._worker.answer_later(message, credential.decode("utf-8", "replace"))
        connection.send(reply_frame(call_id, 0, reply.SerializeToString()))

    async def _serve(self, connection: FrameConnection, call_id: int, method: int, credential: bytes,
                     request: bytes) -> None:
        status, payload = await self.answer(method, credential.decode("utf-8", "replace"), request)
        connection.send(reply_frame(call_id, status, payload))

    async def answer(self, method: int, credential: str, request: bytes) -> tuple[int, bytes]:
        """(0, the reply) or (a status code number, its message) for one relayed request."""
        handler, decode = self._handlers[method]
        try:
            reply = await handler(decode(request), RelayContext(credential))
            return 0, reply.SerializeToString()
        except Refused as exc:
            return exc.code.value[0], exc.message.encode()
        except Exception as exc:  # noqa: BLE001 - the servicers refuse what they know; this is a bug
            log.error("event=relay_internal_error method=%s", METHODS[method][1], exc_info=exc)
            return grpc.StatusCode.INTERNAL.value[0], f"internal error ({type(exc).__name__}); see the master's log".encode()


@dataclass(frozen=True)
class FrontEndConfig:
    """What every front end is started with (master/frontend.py reads it as JSON)."""

    relay: str
    host: str
    tokens: Tokens
    tls_cert: Path | None
    tls_key: Path | None
    grace_s: float = 1.0

    def as_json(self, port: int) -> str:
        return json.dumps({
            "relay": self.relay, "host": self.host, "port": port, "worker_token": self.tokens.worker,
            "admin_token": self.tokens.admin, "tls_cert": str(self.tls_cert) if self.tls_cert else None,
            "tls_key": str(self.tls_key) if self.tls_key else None, "grace_s": self.grace_s,
            "log_level": logging.getLogger().getEffectiveLevel(),  # as the master's
        })


def _child_env() -> dict[str, str]:
    """The master's environment, with the directory this package is in first on the import path."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    return env


def start_frontend(config: FrontEndConfig, port: int) -> tuple[subprocess.Popen[bytes], int]:
    """A started front end and the port it listens on; OSError with its reason when it cannot start."""
    proc = subprocess.Popen([sys.executable, "-m", "master.frontend"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, env=_child_env())
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(config.as_json(port).encode() + b"\n")  # stdin stays open: the master's orders
    proc.stdin.flush()
    ready, _, _ = select.select([proc.stdout], [], [], START_TIMEOUT_S)
    line = proc.stdout.readline().decode(errors="replace").strip() if ready else ""
    proc.stdout.close()
    if line.startswith("ready "):
        return proc, int(line.split()[1])
    _kill(proc)
    reason = line.removeprefix("error ") if line else f"front end did not start (exit status {proc.returncode})"
    raise OSError(reason)


class FrontEnds:
    """N front-end processes on one port, restarted when one dies, stopped with the master."""

    def __init__(self, count: int, config: FrontEndConfig, port: int) -> None:
        self._config = config
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._watcher = threading.Thread(target=self._watch, name="aiperf-frontends", daemon=True)
        first, self.port = start_frontend(config, port)
        self._procs = [first]
        try:
            for _ in range(count - 1):
                self._procs.append(start_frontend(config, self.port)[0])
        except OSError:
            self.stop(0)
            raise
        self._watcher.start()

    @property
    def pids(self) -> list[int]:
        with self._lock:
            return [proc.pid for proc in self._procs]

    def _watch(self) -> None:
        while not self._stopping.wait(0.5):
            for i, proc in enumerate(list(self._procs)):
                if proc.poll() is None or self._stopping.is_set():
                    continue
                log.error("event=frontend_exited pid=%d code=%s", proc.pid, proc.returncode)
                _close_stdin(proc)
                try:
                    new, _ = start_frontend(self._config, self.port)
                except OSError as exc:
                    log.error("event=frontend_restart_failed error=%s", exc)
                    time.sleep(RESTART_DELAY_S)
                    continue
                with self._lock:  # stop() takes the list under this lock: a late one is stopped here
                    if self._stopping.is_set():
                        _kill(new)
                        return
                    self._procs[i] = new
                log.info("event=frontend_restarted pid=%d", new.pid)

    def stop(self, grace_s: float) -> None:
        """Tell each to stop (they finish their calls within grace_s), then kill what is left."""
        with self._lock:
            self._stopping.set()
            procs = list(self._procs)
        for proc in procs:
            try:
                assert proc.stdin is not None
                proc.stdin.write(f"stop {grace_s:g}\n".encode())
                proc.stdin.flush()
            except (OSError, ValueError):  # gone already (broken pipe), or its input closed
                pass
        deadline = time.monotonic() + grace_s + 10
        for proc in procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _kill(proc)
            _close_stdin(proc)
        if self._watcher.is_alive() and self._watcher is not threading.current_thread():
            self._watcher.join(timeout=START_TIMEOUT_S + 5)


def _kill(proc: subprocess.Popen[bytes]) -> None:
    proc.kill()
    proc.wait()
    _close_stdin(proc)


def _close_stdin(proc: subprocess.Popen[bytes]) -> None:
    try:
        if proc.stdin is not None:
            proc.stdin.close()
    except OSError:  # a broken pipe while flushing: the process is gone
        pass


def relay_directory() -> tuple[str, str]:
    """A private directory (mode 0700: only this user can connect) and the relay socket's path in it."""
    directory = tempfile.mkdtemp(prefix="aiperf-relay-")
    return directory, os.path.join(directory, "master.sock")


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
        for connection in list(relay.connections):
            if connection.transport is not None:
                connection.transport.close()
    asyncio.run_coroutine_threadsafe(close(), loop).result(30)

