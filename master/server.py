"""The master process: gRPC server (worker + control + health services),
token auth, optional TLS, Prometheus endpoint and the background thread that
enforces deadlines and detects lost workers.

In-process use (tests, `aiperf demo`)::

    from master.server import MasterConfig, serve
    handle = serve(MasterConfig("sqlite:///demo/master.db", port=0, data_dir=Path("demo")))
    handle.address, handle.worker_token, handle.admin_token
    ...
    handle.stop()
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import grpc
from grpc_health.v1 import health

from master.core import scrape
from master.core.master import Master
from master.core.restart import RESUME_OUTAGE_S
from master.frontends.master_end import RelayServer, close_relay, relay_directory, remove_relay_directory, serve_relay
from master.frontends.supervisor import FrontEndConfig, FrontEnds
from master.observability.metrics import MasterMetrics
from master.rpc.garbage_collector import StreamMemory, settle_collector
from master.rpc.listener import check_port_free, listen, server_credentials
from master.rpc.servicers import ControlServicer, WorkerServicer, add_to_server
from master.rpc.tokens import Tokens, load_tokens
from master.store.errors import StorageFull, Unavailable
from master.store.sql.engine import count_errors
from master.store.sql.sql_store import SqlStore
from master.store.sql.urls import mask_url

log = logging.getLogger(__name__)

# The Connect streams closed in this process (every master in it): their memory is process-wide
STREAM_MEMORY = StreamMemory()

def default_db_url(data_dir: Path) -> str:
    return f"sqlite:///{(data_dir / 'master.db').resolve()}"


@dataclass
class Relay:
    """The front-end processes of a master started with frontends > 0, and the relay they call."""

    frontends: FrontEnds
    relay: RelayServer
    server: asyncio.AbstractServer
    directory: str
    loop: asyncio.AbstractEventLoop

    def stop(self, grace_s: float, loop_alive: bool) -> None:
        try:
            self.frontends.stop(grace_s)  # first: their calls in flight still reach the master
            if loop_alive:
                close_relay(self.loop, self.server, self.relay)
        finally:
            remove_relay_directory(self.directory)


@dataclass
class MasterHandle:
    """A running master. `stop()` shuts it down (idempotent)."""

    port: int
    host: str
    tokens: Tokens
    master: Master
    store: SqlStore
    metrics_port: int | None
    tls: bool
    _server: grpc.aio.Server | None  # None with front ends: they serve gRPC
    _health: health.aio.HealthServicer | None
    _relay: Relay | None
    _loop: asyncio.AbstractEventLoop
    _loop_thread: threading.Thread
    _pool: futures.ThreadPoolExecutor
    _stop_event: threading.Event
    _thread: threading.Thread
    _stopped: bool = field(default=False)

    @property
    def address(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "[::]", "") else self.host
        return f"{host}:{self.port}"

    @property
    def worker_token(self) -> str:
        return self.tokens.worker

    @property
    def admin_token(self) -> str:
        return self.tokens.admin

    def wait(self) -> None:
        """Block until the server stops (Ctrl-C in `aiperf master serve`)."""
        # short joins keep Ctrl-C responsive
        while self._loop_thread.is_alive():
            self._loop_thread.join(timeout=0.5)

    def _call(self, coro: Any, timeout_s: float = 60.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout_s)

    def stop(self, grace_s: float = 1.0) -> None:
        if self._stopped:
            return
        self._stopped = True
        self._stop_event.set()
        try:
            if self._relay is not None:
                self._relay.stop(grace_s, self._loop_thread.is_alive())
        except Exception:  # noqa: BLE001 - the rest of the stop (the writer's flush) must run
            log.exception("event=frontends_stop_failed")
        if self._loop_thread.is_alive():
            if self._server is not None and self._health is not None:
                self._call(self._health.enter_graceful_shutdown())
                self._call(self._server.stop(grace_s), timeout_s=grace_s + 60)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._loop_thread.join(timeout=30)
        self._thread.join(timeout=30)
        self._pool.shutdown(wait=True)
        self.master.close()
        try:
            self.master.tick()  # persist the last heartbeats
        except Exception:  # noqa: BLE001 - shutting down; the database may be gone
            log.exception("event=final_tick_failed")
        self.master.metrics.stop()
        self.store.close()
        log.info("event=master_stopped port=%d", self.port)


def _background(master: Master, stop: threading.Event, period_s: float) -> None:
    while not stop.wait(period_s):
        STREAM_MEMORY.release_if_idle()
        try:
            master.tick(flush=False)
        except (Unavailable, StorageFull):
            pass  # the database's outage: the store logged its start and logs its end; the next tick retries
        except Exception:  # noqa: BLE001 - keep the loop alive; the next tick retries
            log.exception("event=tick_failed")


@dataclass(frozen=True)
class MasterConfig:
    """How `serve` starts a master; the defaults are `aiperf master serve`'s."""

    db_url: str | None = None           # None: SQLite in data_dir
    port: int = 50051                   # 0: any free port
    host: str = "[::]"
    data_dir: Path | str = Path(".aiperf")
    heartbeat_interval_s: float = 5.0
    stop_grace_s: float = 300.0
    metrics_port: int | None = None     # None: no Prometheus endpoint
    tls_cert: Path | None = None        # TLS when both are given
    tls_key: Path | None = None
    worker_token: str | None = None     # tokens: given > env (AIPERF_TOKEN / AIPERF_ADMIN_TOKEN) > file > generated
    admin_token: str | None = None
    worker_token_file: Path | None = None
    admin_token_file: Path | None = None
    env: dict[str, str] | None = None   # None: os.environ
    max_workers: int = 64               # threads doing the database work of RPCs
    tick_s: float | None = None         # None: a quarter of the heartbeat interval, within 0.05-1 s
    clock: Callable[[], float] = time.time
    frontends: int = 0                  # processes serving gRPC and relaying to this one; 0: none
    resume_outage_s: float = RESUME_OUTAGE_S  # after a longer outage, the models of before end


def serve(config: MasterConfig) -> MasterHandle:
    """Start a master and return its handle (port 0: any free port).

    The database is migrated first (refused when its schema is newer).
    Tokens: argument > env (AIPERF_TOKEN / AIPERF_ADMIN_TOKEN) > file > generated
    into data_dir. TLS when tls_cert and tls_key are given.

    The gRPC server is grpc.aio on an event-loop thread: thousands of
    workers each hold one Connect stream, which a thread-per-call server
    cannot do; database work runs on a pool of max_workers threads. With
    frontends > 0, that many processes serve gRPC on the port instead and
    relay every call to this one (master/frontends/supervisor.py).
    """
    c = config
    if c.frontends < 0:
        raise ValueError(f"frontends must be 0 or more, not {c.frontends}")
    if not c.frontends:  # front ends share the port (SO_REUSEPORT): they report a taken one themselves
        check_port_free(c.host, c.port)  # before the database is migrated: one line saying why
    data_dir = Path(c.data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    credentials = server_credentials(c.tls_cert, c.tls_key)
    tokens = load_tokens(data_dir, c.worker_token, c.admin_token, c.worker_token_file, c.admin_token_file, c.env)
    store = SqlStore(c.db_url or default_db_url(data_dir))
    master = Master(store, heartbeat_interval_s=c.heartbeat_interval_s, stop_grace_s=c.stop_grace_s,
                    clock=c.clock, metrics=MasterMetrics(), resume_outage_s=c.resume_outage_s)
    scrape.watch(master, store)  # run gauges at scrape time
    count_errors(store.engine, master.metrics.database_errors.inc)
    pool = futures.ThreadPoolExecutor(max_workers=c.max_workers, thread_name_prefix="aiperf-rpc")
    address = f"{c.host}:{c.port}"
    loop, loop_thread = _start_loop()
    server: grpc.aio.Server | None = None
    health_servicer: health.aio.HealthServicer | None = None
    relay: Relay | None = None
    try:
        if c.frontends:
            relay = _start_relay(loop, c.frontends, c.host, c.port, tokens, c.tls_cert, c.tls_key, master, pool)
            bound = relay.frontends.port
        else:
            server, health_servicer, bound = asyncio.run_coroutine_threadsafe(
                _start_grpc(address, credentials, tokens, master, pool), loop).result(60)
    except OSError as exc:
        loop.call_soon_threadsafe(loop.stop)
        loop_thread.join(timeout=30)
        master.close()
        store.close()
        pool.shutdown(wait=False)
        raise OSError(str(exc)) from None
    master.serving()  # workers can reconnect from now: a restart's grace counts from here
    metrics_bound = master.metrics.serve(c.metrics_port) if c.metrics_port is not None else None
    period = c.tick_s if c.tick_s is not None else max(0.05, min(1.0, c.heartbeat_interval_s / 4))
    stop, thread = _start_background(master, period)
    log.info("event=master_listening address=%s tls=%s db=%s heartbeat_interval_s=%g frontends=%d",
             f"{c.host}:{bound}".replace("[::]", "0.0.0.0"), credentials is not None, mask_url(store.url),
             c.heartbeat_interval_s, c.frontends)
    return MasterHandle(
        port=bound, host=c.host, tokens=tokens, master=master, store=store, metrics_port=metrics_bound,
        tls=credentials is not None, _server=server, _health=health_servicer, _relay=relay, _loop=loop,
        _loop_thread=loop_thread,
        _pool=pool, _stop_event=stop, _thread=thread,
    )


def _start_loop() -> tuple[asyncio.AbstractEventLoop, threading.Thread]:
    """The master's event loop, running on a thread of its own (gRPC or the relay is served on it)."""
    loop = asyncio.new_event_loop()
    loop_thread = threading.Thread(target=loop.run_forever, name="aiperf-grpc", daemon=True)
    loop_thread.start()
    return loop, loop_thread


def _start_relay(loop: asyncio.AbstractEventLoop, count: int, host: str, port: int, tokens: Tokens,
                 tls_cert: Path | None, tls_key: Path | None, master: Master, pool: futures.Executor) -> Relay:
    """The relay served on the loop and `count` front ends started on the port; OSError when they cannot listen."""
    relay = RelayServer(WorkerServicer(master, pool, STREAM_MEMORY), ControlServicer(master, pool))
    directory, path = relay_directory()
    server = None
    try:
        server = serve_relay(loop, relay, path)
        fronts = FrontEnds(count, FrontEndConfig(path, host, tokens, tls_cert, tls_key), port)
    except OSError:
        if server is not None:
            close_relay(loop, server, relay)
        remove_relay_directory(directory)
        raise
    return Relay(fronts, relay, server, directory, loop)


async def _start_grpc(address: str, credentials: grpc.ServerCredentials | None, tokens: Tokens, master: Master,
                      pool: futures.Executor) -> tuple[grpc.aio.Server, health.aio.HealthServicer, int]:
    """The started gRPC server (worker, control and health services) and its port; OSError when it cannot listen."""
    def add_services(server: grpc.aio.Server) -> None:
        add_to_server(server, WorkerServicer(master, pool, STREAM_MEMORY), "WorkerService")
        add_to_server(server, ControlServicer(master, pool), "ControlService")

    return await listen(address, credentials, tokens, add_services, shared_port=False)


def _start_background(master: Master, period_s: float) -> tuple[threading.Event, threading.Thread]:
    """A first tick, then the background thread that ticks every period_s until the event is set."""
    stop = threading.Event()
    master.tick()
    settle_collector()
    thread = threading.Thread(target=_background, args=(master, stop, period_s), name="aiperf-master-tick",
                              daemon=True)
    thread.start()
    return stop, thread
