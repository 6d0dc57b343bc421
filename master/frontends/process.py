"""One front-end process of a master started with `--frontends N`.

It serves the master's gRPC services on the master's port, beside the other
front ends (SO_REUSEPORT: the kernel spreads the workers' connections over
them), checks each call's bearer token and passes the call, unparsed, to the
master over the relay (master/frontends/wire.py); the master's reply or status goes
back to the caller as is. It keeps no state of the run. It ends when the
master says so (after a grace period for the calls in flight) or when the
master is gone: then its callers get UNAVAILABLE.

Started by master/frontends/supervisor.py as `python -m master.frontends.process`, which writes
its configuration to the process's standard input as one line of JSON: relay
(the socket's path), host, port (0: any), worker_token, admin_token, tls_cert,
tls_key (paths or null), grace_s (on SIGTERM), log_level, methods_digest (its
master's `METHODS_DIGEST`: another is refused), ping_s (the health check's
period, default 5). The process answers
on standard output with one line: `ready <port>` or `error <reason>`. Its
standard input stays open: `stop <seconds>` stops it with that grace period,
and its end (the master is gone) stops it at once.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import signal
import sys
from pathlib import Path
from typing import Any, AsyncIterator, Callable

import grpc
from grpc_health.v1 import health

from aiperf.api.calls import CREDENTIAL_METADATA
from master.frontends.wire import (
    MAX_REPLY_FRAME,
    METHODS,
    METHODS_DIGEST,
    PING,
    FrameConnection,
    FrameError,
    call_frame,
    parse_reply,
)
from master.rpc.garbage_collector import StreamMemory, settle_collector
from master.rpc.listener import listen, server_credentials, set_health
from master.rpc.tokens import Tokens, worker_credential

log = logging.getLogger(__name__)

_STATUS = {code.value[0]: code for code in grpc.StatusCode}
PING_S = 5.0  # how often the master is pinged, and how long its answer may take


class RelayLost(Exception):
    """The relay to the master closed."""


STREAM_MEMORY = StreamMemory()  # the worker streams this front end held and closed


class RelayClient(FrameConnection):
    """The front end's side of the relay: a call out, its reply back by call id."""

    def __init__(self) -> None:
        super().__init__(MAX_REPLY_FRAME, self._on_reply)
        self._pending: dict[int, asyncio.Future[tuple[int, bytes]]] = {}
        self._ids = itertools.count(1)
        self.lost = asyncio.Event()

    async def call(self, method: int, credential: bytes, request: bytes) -> tuple[int, bytes]:
        """(status, reply or error message) of one call; RelayLost when the master is gone."""
        if self.lost.is_set():
            raise RelayLost()
        call_id = next(self._ids)
        future: asyncio.Future[tuple[int, bytes]] = asyncio.get_running_loop().create_future()
        self._pending[call_id] = future
        try:
            self.send(call_frame(call_id, method, credential, request))
            return await future
        finally:
            self._pending.pop(call_id, None)

    def _on_reply(self, frame: bytes) -> None:
        call_id, status, payload = parse_reply(frame)
        future = self._pending.get(call_id)
        if future is not None and not future.done():
            future.set_result((status, payload))

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost.set()
        for future in self._pending.values():
            if not future.done():
                future.set_exception(RelayLost())


async def _relayed(relay: RelayClient, method: int, request: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> bytes:
    """The master's reply to one relayed request; its refusal ends the call with the master's status."""
    credential = worker_credential(context.invocation_metadata()).encode()
    try:
        status, payload = await relay.call(method, credential, request)
    except RelayLost:
        await context.abort(grpc.StatusCode.UNAVAILABLE, "the master is gone; this front end is stopping")
    except FrameError as exc:  # (gRPC's own metadata limit is far below the frame's)
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"{CREDENTIAL_METADATA}: {exc}")
    if status:
        await context.abort(_STATUS.get(status, grpc.StatusCode.INTERNAL), payload.decode("utf-8", "replace"))
    return payload


def _handler(relay: RelayClient, method: int, streaming: bool) -> grpc.RpcMethodHandler[Any, Any]:
    """A pass-through handler: requests and replies stay bytes (no serializers)."""
    if not streaming:
        async def unary(request: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> bytes:
            return await _relayed(relay, method, request, context)
        return grpc.unary_unary_rpc_method_handler(unary)

    async def stream(requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[bytes]:
        try:
            async for request in requests:  # one reply per message, in order (as the master's own Connect)
                yield await _relayed(relay, method, request, context)
        finally:
            STREAM_MEMORY.closed()
    return grpc.stream_stream_rpc_method_handler(stream)


def add_relay_handlers(server: grpc.aio.Server, relay: RelayClient) -> None:
    """Every method of both services, passed to the master through the relay."""
    services: dict[str, dict[str, grpc.RpcMethodHandler[Any, Any]]] = {}
    for index, (service, name, streaming) in enumerate(METHODS):
        services.setdefault(service, {})[name] = _handler(relay, index, streaming)
    for service, handlers in services.items():
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, handlers),))
        server.add_registered_method_handlers(service, handlers)


async def serve(config: dict[str, Any], orders: asyncio.StreamReader, say: Callable[[str], None]) -> int:
    """Serve until the master's order (0) or until the master is gone (1: the relay or standard input
    closed); 2 when it cannot start (said as `error ...`)."""
    if config.get("methods_digest") != METHODS_DIGEST:
        say("error this front end's API differs from its master's (code changed under a running master?): "
            "restart the master")
        return 2
    relay = RelayClient()
    try:
        await asyncio.get_running_loop().create_unix_connection(lambda: relay, config["relay"])
    except OSError as exc:
        say(f"error cannot reach the master's relay: {exc}")
        return 2
    tls = [Path(config[key]) if config.get(key) else None for key in ("tls_cert", "tls_key")]
    tokens = Tokens(worker=config["worker_token"], admin=config["admin_token"])
    try:
        server, health_servicer, bound = await listen(
            f"{config['host']}:{config['port']}", server_credentials(*tls), tokens,
            lambda server: add_relay_handlers(server, relay), shared_port=True)  # with the other front ends
    except OSError as exc:
        say(f"error {exc}")
        return 2
    say(f"ready {bound}")
    settle_collector()
    watch = asyncio.get_running_loop().create_task(
        _watch_master(relay, health_servicer, float(config.get("ping_s", PING_S))))
    grace = await _until_stopped(relay, orders, float(config.get("grace_s", 1.0)))
    watch.cancel()
    if grace is None:
        log.error("event=frontend_master_gone")
    await health_servicer.enter_graceful_shutdown()  # NOT_SERVING from now on
    await server.stop(grace or 0.0)
    return 0 if grace is not None else 1


async def _watch_master(relay: RelayClient, health_servicer: health.aio.HealthServicer, ping_s: float) -> None:
    """The health service says SERVING while the master's event loop answers a ping (one every
    ping_s) within ping_s, NOT_SERVING otherwise: a probe then sees a hung master."""
    serving = True
    while True:
        await asyncio.sleep(ping_s)
        STREAM_MEMORY.release_if_idle()  # a burst of closed worker streams: their memory given back
        try:
            await asyncio.wait_for(relay.call(PING, b"", b""), ping_s)
            answered = True
        except (asyncio.TimeoutError, RelayLost):
            answered = False
        if answered != serving:
            serving = answered
            log.log(logging.INFO if answered else logging.ERROR, "event=frontend_master_%s",
                    "answers" if answered else "silent")
            await set_health(health_servicer, serving=answered)


async def _until_stopped(relay: RelayClient, orders: asyncio.StreamReader, sigterm_grace_s: float) -> float | None:
    """The grace period to stop with: the master's `stop <seconds>` line, or SIGTERM's; None when
    the master is gone (its relay or this process's standard input closed)."""
    loop = asyncio.get_running_loop()
    terminated = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, terminated.set)
    waits = {loop.create_task(terminated.wait()): "sigterm", loop.create_task(relay.lost.wait()): "gone",
             loop.create_task(_stop_order(orders)): "order"}
    done, pending = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    for task in pending:
        task.cancel()
    task = done.pop()
    if waits[task] == "sigterm":
        return sigterm_grace_s
    return task.result() if waits[task] == "order" else None


async def _stop_order(orders: asyncio.StreamReader) -> float | None:
    """The grace period of the master's `stop <seconds>` line; None at the end of the input."""
    while line := await orders.readline():
        words = line.split()
        if len(words) == 2 and words[0] == b"stop":
            try:
                return max(0.0, float(words[1]))
            except ValueError:
                log.warning("event=frontend_bad_order line=%r", line[:80])
    return None


async def _main() -> int:
    orders = asyncio.StreamReader()
    loop = asyncio.get_running_loop()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(orders), sys.stdin)
    try:
        config = json.loads(await orders.readline())
    except ValueError:
        print("error no configuration (one line of JSON) on standard input: master/frontends/supervisor.py starts "
              "front ends", flush=True)
        return 2
    logging.basicConfig(level=int(config.get("log_level", logging.INFO)), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s frontend %(process)d %(name)s: %(message)s")

    def say(line: str) -> None:
        print(line, flush=True)

    return await serve(config, orders, say)


def main() -> int:
    # Ctrl-C in a terminal reaches the whole process group: the master decides when front ends stop
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    return asyncio.run(_main())


if __name__ == "__main__":
    sys.exit(main())
