"""The master process: gRPC server (worker + control + health services),
token auth, optional TLS, Prometheus endpoint and the background thread that
enforces deadlines and detects lost workers.

In-process use (tests, `aiperf demo`)::

    from master.server import serve
    handle = serve("sqlite:///demo/master.db", port=0, data_dir=Path("demo"))
    handle.address, handle.worker_token, handle.admin_token
    ...
    handle.stop()
"""

from __future__ import annotations

import asyncio
import gc
import logging
import threading
import time
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from aiperf.api import aiperf_pb2 as pb
from aiperf.api.bounds import MAX_REQUEST_BYTES
from aiperf.api.client import MAX_MESSAGE_BYTES
from master import scrape
from master.auth import TokenInterceptor, Tokens, load_tokens
from master.dburl import mask_url
from master.metrics import MasterMetrics
from master.master import Master
from master.servicers import ControlServicer, WorkerServicer, add_to_server
from master.sqlstore import SqlStore

log = logging.getLogger(__name__)

SERVICE_NAMES = (
    pb.DESCRIPTOR.services_by_name["WorkerService"].full_name,
    pb.DESCRIPTOR.services_by_name["ControlService"].full_name,
)


GC_YOUNG_THRESHOLD = 20_000  # allocations between young-generation collections (Python's default: 700)


def default_db_url(data_dir: Path) -> str:
    return f"sqlite:///{(data_dir / 'master.db').resolve()}"


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
    _server: grpc.aio.Server
    _health: health.aio.HealthServicer
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
        if self._loop_thread.is_alive():
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
        try:
            master.tick(flush=False)
        except Exception:  # noqa: BLE001 - keep the loop alive; the next tick retries
            log.exception("event=tick_failed")


def serve(
    db_url: str | None = None,
    port: int = 50051,
    host: str = "[::]",
    data_dir: Path | str = Path(".aiperf"),
    heartbeat_interval_s: float = 5.0,
    stop_grace_s: float = 300.0,
    metrics_port: int | None = None,
    tls_cert: Path | None = None,
    tls_key: Path | None = None,
    worker_token: str | None = None,
    admin_token: str | None = None,
    worker_token_file: Path | None = None,
    admin_token_file: Path | None = None,
    env: dict[str, str] | None = None,
    max_workers: int = 64,
    tick_s: float | None = None,
    clock: Callable[[], float] = time.time,
) -> MasterHandle:
    """Start a master and return its handle (port 0: any free port).

    The database is migrated first (refused when its schema is newer).
    Tokens: argument > env (AIPERF_TOKEN / AIPERF_ADMIN_TOKEN) > file > generated
    into data_dir. TLS when tls_cert and tls_key are given.

    The gRPC server is grpc.aio on an event-loop thread: thousands of
    workers each hold one Connect stream, which a thread-per-call server
    cannot do; database work runs on a pool of max_workers threads.
    """
    data_dir = Path(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    credentials = _server_credentials(tls_cert, tls_key)
    tokens = load_tokens(data_dir, worker_token, admin_token, worker_token_file, admin_token_file, env)
    store = SqlStore(db_url or default_db_url(data_dir))
    master = Master(store, heartbeat_interval_s=heartbeat_interval_s, stop_grace_s=stop_grace_s,
                    clock=clock, metrics=MasterMetrics())
    scrape.watch(master, store.engine)  # run gauges at scrape time, database errors counted
    pool = futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="aiperf-rpc")
    address = f"{host}:{port}"
    try:
        loop, loop_thread, server, health_servicer, bound = _run_grpc(address, credentials, tokens, master, pool)
    except OSError as exc:
        master.close()
        store.close()
        pool.shutdown(wait=False)
        raise OSError(str(exc)) from None
    metrics_bound = master.metrics.serve(metrics_port) if metrics_port is not None else None
    period = tick_s if tick_s is not None else max(0.05, min(1.0, heartbeat_interval_s / 4))
    stop, thread = _start_background(master, period)
    log.info("event=master_listening address=%s tls=%s db=%s heartbeat_interval_s=%g",
             address.replace("[::]", "0.0.0.0"), credentials is not None, mask_url(store.url),
             heartbeat_interval_s)
    return MasterHandle(
        port=bound, host=host, tokens=tokens, master=master, store=store, metrics_port=metrics_bound,
        tls=credentials is not None, _server=server, _health=health_servicer, _loop=loop, _loop_thread=loop_thread,
        _pool=pool, _stop_event=stop, _thread=thread,
    )


def _server_credentials(tls_cert: Path | None, tls_key: Path | None) -> grpc.ServerCredentials | None:
    """TLS credentials from a certificate and key, or None (plain)."""
    if (tls_cert is None) != (tls_key is None):
        raise ValueError("TLS needs both a certificate and a key")
    if tls_cert is None or tls_key is None:
        return None
    return grpc.ssl_server_credentials([(Path(tls_key).read_bytes(), Path(tls_cert).read_bytes())])


def _run_grpc(address: str, credentials: grpc.ServerCredentials | None, tokens: Tokens, master: Master,
              pool: futures.Executor
              ) -> tuple[asyncio.AbstractEventLoop, threading.Thread, grpc.aio.Server, health.aio.HealthServicer, int]:
    """The gRPC server started on an event loop of its own thread; OSError (loop stopped) when it cannot listen."""
    loop = asyncio.new_event_loop()
    loop_thread = threading.Thread(target=loop.run_forever, name="aiperf-grpc", daemon=True)
    loop_thread.start()
    try:
        server, health_servicer, bound = asyncio.run_coroutine_threadsafe(
            _start_grpc(address, credentials, tokens, master, pool), loop).result(60)
    except OSError:
        loop.call_soon_threadsafe(loop.stop)
        loop_thread.join(timeout=30)
        raise
    return loop, loop_thread, server, health_servicer, bound


async def _start_grpc(address: str, credentials: grpc.ServerCredentials | None, tokens: Tokens, master: Master,
                      pool: futures.Executor) -> tuple[grpc.aio.Server, health.aio.HealthServicer, int]:
    """The started gRPC server (worker, control and health services) and its port; OSError when it cannot listen."""
    server = grpc.aio.server(
        interceptors=[TokenInterceptor(tokens)],
        options=[
            ("grpc.max_receive_message_length", MAX_REQUEST_BYTES),  # larger: RESOURCE_EXHAUSTED
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ("grpc.so_reuseport", 0),
        ],
    )
    add_to_server(server, WorkerServicer(master, pool), "WorkerService")
    add_to_server(server, ControlServicer(master, pool), "ControlService")
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    try:
        bound = server.add_secure_port(address, credentials) if credentials else server.add_insecure_port(address)
    except RuntimeError as exc:
        raise OSError(f"cannot listen on {address}: {exc}") from None
    if bound == 0:
        raise OSError(f"cannot listen on {address}")
    await server.start()
    for name in ("", *SERVICE_NAMES):
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    return server, health_servicer, bound


def _start_background(master: Master, period_s: float) -> tuple[threading.Event, threading.Thread]:
    """A first tick, then the background thread that ticks every period_s until the event is set."""
    stop = threading.Event()
    master.tick()
    # Everything alive now (modules, the schema, caches) lives as long as the
    # process: keep it out of the collector, so that full collections with
    # thousands of open worker streams stay short (they show up as RPC latency).
    gc.freeze()
    # Every message allocates short-lived objects (requests, replies, futures, domain
    # records); at the default threshold of 700 the collections took about 40% of the
    # event loop's CPU per message (measured in-process at 500 workers: 120 -> 70 us).
    gc.set_threshold(GC_YOUNG_THRESHOLD)
    thread = threading.Thread(target=_background, args=(master, stop, period_s), name="aiperf-master-tick",
                              daemon=True)
    thread.start()
    return stop, thread
