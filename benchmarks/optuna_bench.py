"""Closed loop: the master against Optuna's gRPC storage proxy, N clients writing results.

Each of N clients sends one write, waits for its answer, sends the next. Ours:
a worker's progress report (an accuracy at an epoch, no images) on its Connect
stream; the master checks it, records it in SQLite (group commit) and answers.
Optuna's: `set_trial_intermediate_value` (a trial's value at a step) through
`GrpcStorageProxy` to `run_grpc_proxy_server` over its RDB storage on SQLite
(`get_storage`, as Optuna's documentation advises). The same kind of record,
the same database kind, each server in a process of its own with its defaults.
The clients run in this process, each side with the cheapest client it offers,
so that the server is what is measured: Optuna's proxy is synchronous (a thread
per client, a channel each); ours are master_bench.py's simulated workers
(asyncio, a Connect stream each). Each figure prints the cores the server and
the clients used: a server near one core is the limit (one interpreter); the
clients near one core would be.

    python -m benchmarks.optuna_bench [--clients 20,100] [--window 10] [--warmup 2]

Prints writes/s and p50/p99 latency per N for both, and ends with
`RESULT optuna_ratio_<N>=...` (our writes/s over Optuna's; the goal is >= 10)
and `RESULT optuna_p99_ratio_<N>=...` (Optuna's p99 over ours). Prints `SKIP ...`
without Optuna 4.2 or newer (`pip install 'optuna>=4.2'`; `make bench` installs it).
About 2 minutes.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import socket
import sys
import tempfile
import threading
import time
from typing import Awaitable, Callable, NamedTuple

import grpc

from aiperf.api import aiperf_pb2 as pb
from aiperf.api import aiperf_pb2_grpc as pb_grpc
from benchmarks.master_bench import ADMIN_TOKEN, Fleet, _cpu_s, _free_port, _pct, _serve, default_max_workers

Write = Callable[[int], None]  # one closed-loop write (its step number), blocking until answered
AsyncWrite = Callable[[int], Awaitable[object]]  # the same, awaited


class Figures(NamedTuple):
    rate: float  # writes answered per second in the window
    p50: float  # latency, seconds
    p99: float
    client_cpu: float  # the clients' process, in cores: near 1, the clients may be the limit
    server_cpu: float = float("nan")  # the server's process, in cores (filled in by `compare`)


def _serve_optuna(db_url: str, port: int, ready: mp.Event) -> None:
    from optuna.storages import get_storage, run_grpc_proxy_server

    _quiet_optuna()
    storage = get_storage(db_url)
    # run_grpc_proxy_server blocks: a thread says ready once the port takes connections
    threading.Thread(target=_set_when_listening, args=(port, ready), daemon=True).start()
    run_grpc_proxy_server(storage, host="127.0.0.1", port=port)


def _set_when_listening(port: int, ready: mp.Event, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1.0).close()
        except OSError:
            time.sleep(0.05)
            continue
        ready.set()
        return


def _quiet_optuna() -> None:
    """No INFO lines, no warning that the gRPC proxy is experimental (it is, since 4.2)."""
    import warnings

    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)


def _optuna_clients(port: int, n: int) -> list[Write]:
    from optuna.storages import GrpcStorageProxy
    from optuna.study import StudyDirection

    first = GrpcStorageProxy(host="127.0.0.1", port=port)
    study_id = first.create_new_study([StudyDirection.MAXIMIZE], "bench")
    writes = []
    for _ in range(n):
        proxy = GrpcStorageProxy(host="127.0.0.1", port=port)
        trial_id = proxy.create_new_trial(study_id)
        writes.append(lambda step, p=proxy, t=trial_id: p.set_trial_intermediate_value(t, step, 0.5))
    return writes


async def _our_writes(address: str, n: int) -> tuple[list[AsyncWrite], Fleet]:
    """n simulated workers (master_bench's fleet), each with a model in a running run."""
    from aiperf.resnet import resnet50

    graph = resnet50(input_size=32, channels=3, classes=10, width=0.125)  # the smoke seed: submitted without a parent
    async with grpc.aio.insecure_channel(address) as channel:
        await pb_grpc.ControlServiceStub(channel).StartRun(
            pb.StartRunRequest(duration_s=3600, profile=pb.PROFILE_SMOKE),
            metadata=(("authorization", f"Bearer {ADMIN_TOKEN}"),), timeout=30)
    fleet = Fleet(address, workers_per_channel=1)  # a connection each, as Optuna's clients
    await fleet.grow(n, graph.to_json(), graph.hash())

    def write(i: int) -> AsyncWrite:
        wid, mid, _ = fleet.workers[i]
        return lambda step: fleet.exchange(i, pb.WorkerMessage(progress=pb.ProgressReport(
            worker_id=wid, model_id=mid, seq=step, epoch=1, has_accuracy=True, val_accuracy=0.5)))
    return [write(i) for i in range(n)], fleet


class _Window:
    """One closed-loop measurement: when it is measured, each client's latencies, the figures."""

    def __init__(self, clients: int, warmup_s: float, window_s: float) -> None:
        self.cpu0, self.start = time.process_time(), time.perf_counter()
        self.measure_from, self.end = self.start + warmup_s, self.start + warmup_s + window_s
        self.window_s = window_s
        self.latencies: list[list[float]] = [[] for _ in range(clients)]

    def record(self, k: int, sent: float) -> None:
        """Client k's write sent at `sent` is answered now (counted when sent in the window)."""
        if sent >= self.measure_from:
            self.latencies[k].append(time.perf_counter() - sent)

    def figures(self, errors: list[BaseException]) -> Figures:
        if errors:
            raise RuntimeError(f"{len(errors)} clients failed; the first: {errors[0]!r}")
        every = [x for lat in self.latencies for x in lat]
        cpu = (time.process_time() - self.cpu0) / (time.perf_counter() - self.start)
        return Figures(len(every) / self.window_s, _pct(every, 0.50), _pct(every, 0.99), cpu)


def closed_loop(writes: list[Write], warmup_s: float, window_s: float) -> Figures:
    """Every client (a thread) writing as fast as it is answered; figures over the window."""
    w = _Window(len(writes), warmup_s, window_s)
    errors: list[BaseException] = []

    def client(k: int) -> None:
        step = 0
        try:
            while (t := time.perf_counter()) < w.end:
                step += 1
                writes[k](step)
                w.record(k, t)
        except BaseException as exc:  # noqa: BLE001 - reported after the window
            errors.append(exc)

    threads = [threading.Thread(target=client, args=(k,), daemon=True) for k in range(len(writes))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return w.figures(errors)


async def closed_loop_async(writes: list[AsyncWrite], warmup_s: float, window_s: float) -> Figures:
    """As `closed_loop`, each client a coroutine."""
    w = _Window(len(writes), warmup_s, window_s)

    async def client(k: int) -> None:
        step = 0
        while (t := time.perf_counter()) < w.end:
            step += 1
            await writes[k](step)
            w.record(k, t)

    outcomes = await asyncio.gather(*(client(k) for k in range(len(writes))), return_exceptions=True)
    return w.figures([o for o in outcomes if isinstance(o, BaseException)])


def _server(target: Callable, args: tuple, ready: mp.Event) -> mp.Process:
    """A server process (target(*args) sets `ready` once it listens)."""
    proc = mp.get_context("spawn").Process(target=target, args=args, daemon=True)
    proc.start()
    if not ready.wait(60):
        proc.kill()
        raise RuntimeError(f"{target.__name__}: the server did not start")
    return proc


def _print(name: str, f: Figures) -> None:
    print(f"  {name:6s} {f.rate:8.0f} writes/s  p50 {f.p50 * 1e3:7.2f} ms  p99 {f.p99 * 1e3:7.2f} ms  "
          f"(cores used: server {f.server_cpu:.2f}, clients {f.client_cpu:.2f})", flush=True)


def _with_server_cpu(pid: int, run: Callable[[], Figures]) -> Figures:
    """run()'s figures with the server process's CPU over it, in cores."""
    cpu0, t0 = _cpu_s(pid), time.perf_counter()
    figures = run()
    return figures._replace(server_cpu=(_cpu_s(pid) - cpu0) / (time.perf_counter() - t0))


def compare(n: int, warmup_s: float, window_s: float) -> tuple[Figures, Figures]:
    """The master's figures and Optuna's with n clients, SQLite behind both."""
    ctx = mp.get_context("spawn")
    with tempfile.TemporaryDirectory() as d:
        port, ready = _free_port(), ctx.Event()
        proc = _server(_serve, (f"sqlite:///{d}/master.db", port, d, ready, ctx.Event(), default_max_workers(), 0),
                       ready)
        try:
            async def ours() -> Figures:
                writes, fleet = await _our_writes(f"127.0.0.1:{port}", n)
                try:
                    return await closed_loop_async(writes, warmup_s, window_s)
                finally:
                    await fleet.close()
            master = _with_server_cpu(proc.pid, lambda: asyncio.run(ours()))
        finally:
            proc.kill()
        _print("master", master)
        port, ready = _free_port(), ctx.Event()
        proc = _server(_serve_optuna, (f"sqlite:///{d}/optuna.db", port, ready), ready)
        try:
            writes = _optuna_clients(port, n)
            optuna = _with_server_cpu(proc.pid, lambda: closed_loop(writes, warmup_s, window_s))
        finally:
            proc.kill()
        _print("optuna", optuna)
    return master, optuna


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", default="20,100", help="numbers of concurrent clients")
    parser.add_argument("--window", type=float, default=10.0, help="measured seconds per run")
    parser.add_argument("--warmup", type=float, default=2.0, help="unmeasured seconds first")
    args = parser.parse_args()
    try:
        from optuna.storages import GrpcStorageProxy  # noqa: F401 - Optuna 4.2 and newer
    except ImportError:
        print("SKIP optuna>=4.2 is not installed (pip install 'optuna>=4.2'; `make bench` installs it)")
        return 2  # as validation_bench.py: not measured
    _quiet_optuna()  # its clients here; its server quiets itself
    results = []
    for n in [int(x) for x in args.clients.split(",") if x]:
        print(f"N={n} clients, closed loop, SQLite behind both:", flush=True)
        master, optuna = compare(n, args.warmup, args.window)
        ratio, p99_ratio = master.rate / optuna.rate, optuna.p99 / master.p99
        print(f"  ratio: {ratio:.1f}x the writes/s, Optuna's p99 {p99_ratio:.1f}x ours", flush=True)
        results.append((n, ratio, p99_ratio))
    for n, ratio, p99_ratio in results:
        print(f"RESULT optuna_ratio_{n}={ratio:.2f} optuna_p99_ratio_{n}={p99_ratio:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
