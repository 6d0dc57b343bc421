"""The front-end processes of a master started with `--frontends N`.

`FrontEnds` starts N processes (master/frontends/process.py) on the master's port,
restarts one that dies (backing off when it keeps dying) and stops them with
the master. They are started from this package's directory in a session of
their own (Ctrl-C is the master's to handle), with the master's environment
less its database URL and tokens; the tokens reach them on standard input.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import select
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from master.frontends.wire import METHODS_DIGEST
from master.rpc.tokens import Tokens

log = logging.getLogger(__name__)

START_TIMEOUT_S = 60.0
SHORT_LIFE_S = 10.0  # a front end that dies sooner is restarted after a growing delay
MAX_RESTART_DELAY_S = 60.0
PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # the directory holding the `master` package
_SECRET_ENV = ("AIPERF_DB", "AIPERF_TOKEN", "AIPERF_ADMIN_TOKEN")


@dataclass(frozen=True)
class FrontEndConfig:
    """What every front end is started with (master/frontends/process.py reads it as JSON)."""

    relay: str
    host: str
    tokens: Tokens = field(repr=False)
    tls_cert: Path | None
    tls_key: Path | None
    grace_s: float = 1.0

    def as_json(self, port: int) -> str:
        return json.dumps({
            "relay": self.relay, "host": self.host, "port": port, "worker_token": self.tokens.worker,
            "admin_token": self.tokens.admin, "grace_s": self.grace_s, "methods_digest": METHODS_DIGEST,
            # absolute: a front end runs in this package's directory
            "tls_cert": str(Path(self.tls_cert).resolve()) if self.tls_cert else None,
            "tls_key": str(Path(self.tls_key).resolve()) if self.tls_key else None,
            "log_level": logging.getLogger().getEffectiveLevel(),  # as the master's
        })


def _child_env() -> dict[str, str]:
    """The master's environment less its secrets (a front end parses what the network sends), with
    this package's directory first on the import path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_SECRET_ENV)}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(PACKAGE_ROOT), env.get("PYTHONPATH", "")) if p)
    return env


def start_frontend(config: FrontEndConfig, port: int,
                   cancel: threading.Event | None = None) -> tuple[subprocess.Popen[bytes], int]:
    """A started front end and the port it listens on; OSError with its reason when it cannot start
    (or when `cancel` is set while it starts: the master is stopping)."""
    # cwd: `python -m` puts the working directory first on the import path; the master's may be
    # anyone's (/tmp). A session of its own: Ctrl-C in a terminal is the master's to handle.
    proc = subprocess.Popen([sys.executable, "-m", "master.frontends.process"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, env=_child_env(), cwd=PACKAGE_ROOT, start_new_session=True)
    assert proc.stdin is not None and proc.stdout is not None
    line = ""
    try:
        proc.stdin.write(config.as_json(port).encode() + b"\n")  # stdin stays open: the master's orders
        proc.stdin.flush()
        deadline = time.monotonic() + START_TIMEOUT_S
        ready: list[IO[bytes]] = []
        while not ready and time.monotonic() < deadline and not (cancel is not None and cancel.is_set()):
            ready, _, _ = select.select([proc.stdout], [], [], 0.2)  # slices: a stop need not wait a minute
        line = proc.stdout.readline().decode(errors="replace").strip() if ready else ""
    except OSError:  # it died before reading its configuration (a broken pipe)
        pass
    finally:
        proc.stdout.close()
    if line.startswith("ready "):
        return proc, int(line.split()[1])
    _kill(proc)
    reason = line.removeprefix("error ") if line else f"front end did not start (exit status {proc.returncode})"
    raise OSError(reason)


def check_port_free(host: str, port: int) -> None:
    """OSError when another process listens on host:port. Front ends share their port
    (SO_REUSEPORT), so another master's front ends would be let in beside them; a plain bind is not."""
    if port == 0:
        return
    bare = host.strip("[]") or "::"
    family = socket.AF_INET6 if ":" in bare else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gRPC: TIME_WAIT is no owner
        try:
            sock.bind((bare, port))
        except OSError as exc:
            reason = "address already in use" if exc.errno == errno.EADDRINUSE else (exc.strerror or str(exc))
            raise OSError(f"cannot listen on {host}:{port}: {reason}") from None


class FrontEnds:
    """N front-end processes on one port, restarted when one dies, stopped with the master."""

    def __init__(self, count: int, config: FrontEndConfig, port: int) -> None:
        self._config = config
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._watcher = threading.Thread(target=self._watch, name="aiperf-frontends", daemon=True)
        check_port_free(config.host, port)
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
        started = [time.monotonic()] * len(self._procs)
        delays = [0.0] * len(self._procs)
        while not self._stopping.wait(0.5):
            for i, proc in enumerate(list(self._procs)):
                if proc.poll() is None or self._stopping.is_set():
                    continue
                lived = time.monotonic() - started[i]
                delays[i] = 0.0 if lived >= SHORT_LIFE_S else min(MAX_RESTART_DELAY_S, max(1.0, 2 * delays[i]))
                log.error("event=frontend_exited pid=%d code=%s lived_s=%.1f restart_in_s=%g", proc.pid,
                          proc.returncode, lived, delays[i])
                _close_stdin(proc)
                if self._stopping.wait(delays[i]):
                    return
                started[i] = time.monotonic()
                try:
                    new, _ = start_frontend(self._config, self.port, cancel=self._stopping)
                except OSError as exc:
                    if self._stopping.is_set():
                        return  # given up because the master stops
                    log.error("event=frontend_restart_failed error=%s", exc)
                    continue  # the dead one stays in its slot: retried after a longer delay
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
            self._watcher.join(timeout=30)  # a start in progress gives up within 0.2 s of the stop


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


