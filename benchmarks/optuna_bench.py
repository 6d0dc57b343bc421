"""Closed loop: the master against Optuna's gRPC storage proxy, N clients writing results.

Each of N clients sends one write, waits for its answer, sends the next. Ours:
a worker's progress report (an accuracy at an epoch, no images) on its Connect
stream; the master checks it, records it in SQLite (group commit) and answers.
Optuna's: `set_trial_intermediate_value` (a trial's value at a step) through
`GrpcStorageProxy` to `run_grpc_proxy_server` over its RDB storage on SQLite
(`get_storage`, as Optuna's documentation advises). The same kind of record,
the same database kind, each server in a process of its own with its defaults,
the clients threads of this process, one gRPC channel each (a node each).

    python benchmarks/optuna_bench.py [--clients 20,100] [--window 10] [--warmup 2]

Prints writes/s and p50/p99 latency per N for both, and ends with
`RESULT optuna_ratio_<N>=...` (our writes/s over Optuna's; issue 15 asks >= 10)
and `RESULT optuna_p99_ratio_<N>=...` (Optuna's p99 over ours). Prints `SKIP ...`
without Optuna 4.2 or newer (`pip install 'optuna>=4.2'`; `make bench` installs it).
About 2 minutes.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.master_bench import ADMIN_TOKEN, WORKER_TOKEN, _free_port, _pct, _serve  # noqa: E402

Write = Callable[[int], None]  # one closed-loop write (its step number), blocking until answered


def _serve_optuna(db_url: str, port: int, ready: mp.Event) -> None:
    from optuna.storages import get_storage, run_grpc_proxy_server

    _quiet_optuna()
    storage = get_storage(db_url)
    threading.Timer(1.0, ready.set).start()  # run_grpc_proxy_server blocks; it listens within a second
    run_grpc_proxy_server(storage, host="127.0.0.1", port=port)


def _quiet_optuna() -> None:
    """No INFO lines, no warning that the gRPC proxy is experimental (it is, since 4.2)."""
    import warnings

    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)


def _optuna_clients(port: int, n: int) -> list[Write]:
    from optuna.storages import GrpcStorageProxy
    from optuna.study import StudyDirection

    _quiet_optuna()

    first = GrpcStorageProxy(host="127.0.0.1", port=port)
    study_id = first.create_new_study([StudyDirection.MAXIMIZE], "bench")
    writes = []
    for _ in range(n):
        proxy = GrpcStorageProxy(host="127.0.0.1", port=port)
        trial_id = proxy.create_new_trial(study_id)
        writes.append(lambda step, p=proxy, t=trial_id: p.set_trial_intermediate_value(t, step, 0.5))
    return writes


def _our_clients(address: str, n: int) -> tuple[list[Write], list]:
    from aiperf.api.client import Accelerator, ControlClient, WorkerClient
    from aiperf.resnet import resnet50

    graph = resnet50(input_size=32, channels=3, classes=10, width=0.25)
    with ControlClient(address, ADMIN_TOKEN) as control:
        control.start_run(3600, profile="smoke")
    writes, clients = [], []
    for i in range(n):
        client = WorkerClient(address, WORKER_TOKEN)
        wid = client.register(f"bench-{i}", f"bench-{i}", [Accelerator("sim", 1)], cpus=8).worker_id
        mid = client.submit_model(wid, graph.to_json(), graph.hash(), 0, 1,
                                  {"batch_size": 32, "kernel_size": 3}).model_id
        clients.append(client)
        writes.append(lambda step, c=client, w=wid, m=mid: c.report_progress(w, m, step, 0, 0, 1, 0, 0.5))
    return writes, clients


def closed_loop(writes: list[Write], warmup_s: float, window_s: float) -> tuple[float, float, float]:
    """Every client writing as fast as it is answered: (writes/s, p50 s, p99 s) over the window."""
    start = time.perf_counter()
    measure_from, end = start + warmup_s, start + warmup_s + window_s
    latencies: list[list[float]] = [[] for _ in writes]
    errors: list[BaseException] = []

    def client(k: int) -> None:
        step = 0
        try:
            while (t := time.perf_counter()) < end:
                step += 1
                writes[k](step)
                if t >= measure_from:
                    latencies[k].append(time.perf_counter() - t)
        except BaseException as exc:  # noqa: BLE001 - reported after the window
            errors.append(exc)

    threads = [threading.Thread(target=client, args=(k,), daemon=True) for k in range(len(writes))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise RuntimeError(f"{len(errors)} clients failed; the first: {errors[0]!r}")
    every = [x for lat in latencies for x in lat]
    return len(every) / window_s, _pct(every, 0.50), _pct(every, 0.99)


def _measure(name: str, target: Callable, args: tuple, ready: mp.Event, make: Callable[[], list[Write]],
             warmup_s: float, window_s: float) -> tuple[float, float, float]:
    """Start a server process (target(*args) sets `ready`), make its clients, run the closed loop."""
    proc = mp.get_context("spawn").Process(target=target, args=args, daemon=True)
    proc.start()
    try:
        if not ready.wait(60):
            raise RuntimeError(f"{name}: the server did not start")
        rate, p50, p99 = closed_loop(make(), warmup_s, window_s)
    finally:
        proc.kill()
        proc.join(10)
    print(f"  {name:6s} {rate:8.0f} writes/s  p50 {p50 * 1e3:7.2f} ms  p99 {p99 * 1e3:7.2f} ms", flush=True)
    return rate, p50, p99


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
    ctx = mp.get_context("spawn")
    results = []
    for n in [int(x) for x in args.clients.split(",") if x]:
        print(f"N={n} clients, closed loop, SQLite behind both:", flush=True)
        with tempfile.TemporaryDirectory() as d:
            port, ready = _free_port(), ctx.Event()
            kept: list = []

            def ours(port: int = port) -> list[Write]:
                writes, clients = _our_clients(f"127.0.0.1:{port}", n)
                kept.extend(clients)  # closed after the measurement
                return writes

            master = _measure("master", _serve, (f"sqlite:///{d}/master.db", port, d, ready, ctx.Event(), 64, 0),
                              ready, ours, args.warmup, args.window)
            for c in kept:
                c.close()
            port, ready = _free_port(), ctx.Event()
            optuna = _measure("optuna", _serve_optuna, (f"sqlite:///{d}/optuna.db", port, ready), ready,
                              lambda port=port: _optuna_clients(port, n), args.warmup, args.window)
        ratio, p99_ratio = master[0] / optuna[0], optuna[2] / master[2]
        print(f"  ratio: {ratio:.1f}x the writes/s, Optuna's p99 {p99_ratio:.1f}x ours", flush=True)
        results.append((n, ratio, p99_ratio))
    for n, ratio, p99_ratio in results:
        print(f"RESULT optuna_ratio_{n}={ratio:.2f} optuna_p99_ratio_{n}={p99_ratio:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
