"""Master load benchmark: N simulated workers heartbeating and reporting every second.

The master runs in its own process (as in production); the simulated workers
are asyncio gRPC clients in this process, spread evenly over each second. Each
holds a Connect stream and sends its heartbeat and report on it, as the
worker agent does.
For growing N it prints the sustained reports/s, p50/p99 latency of the
reports and heartbeats, and the largest N held (p99 of both < 100 ms, no
errors and at least 95% of the offered reports answered), on SQLite and, when
AIPERF_TEST_POSTGRES_URL is set, on PostgreSQL (a fresh schema, dropped after).

    python -m benchmarks.master_bench [--steps 250,500,1000,1500,2000] [--window 6]
                                      [--production 10000:5:30] [--production-window 30]
                                      [--backends noop,sqlite,postgres] [--postgres-url URL] [--max-workers N]

The `noop` backend is the baseline: the same gRPC server (grpc.aio, token
check) with handlers that do nothing, against the same clients. Its
largest N held is the ceiling of any Python master on the machine; each
backend's figures are printed next to it, with the master's CPU per RPC as a
multiple of the no-op server's (steadier than latency when the machine is shared).

The last steps run --production N[,N...]:heartbeat_s:report_s, the pattern of a
real deployment: N workers each sending a heartbeat every heartbeat_s and a
report every report_s seconds (default 10,000 workers, 5 s and 30 s: 2,000
heartbeats/s + 333 reports/s), measured over --production-window seconds
(at least one report period) after one report period unmeasured (the steady
state: every worker's stream is open and its first report, which reads its
model from the database, is made; that period's p99 is printed apart). Held: p99 of both < 100 ms, no errors, at
least 95% of the offered heartbeats and reports answered. The script ends
with `RESULT production_workers_held_<backend>=N` per backend: the largest
production N held (0: none).

The simulated workers share one process, so its garbage collector would stall
all of them at once (a full collection over 10,000 streams' objects takes
0.3-0.5 s, every ~10 s) and that pause would be counted as the master's
latency; real workers are processes of their own. The fleet's objects are
therefore frozen (gc.freeze) once registered and again before each window.
The simulation's own event loop is probed too (a 50 ms sleep, how late it
wakes): printed beside each step, its delay is latency the master did not cause.

Whole script: about 3 minutes on a 2-core machine without the production
steps; registering 10,000 simulated workers adds a few minutes per backend.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import multiprocessing as mp
import os
import socket
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from aiperf.api import aiperf_pb2 as pb
from aiperf.api import aiperf_pb2_grpc as pb_grpc
from benchmarks.pg_schema import temporary_schema

WORKER_TOKEN = "bench-worker-token"
ADMIN_TOKEN = "bench-admin-token"
P99_LIMIT_S = 0.100
HELD_FRACTION = 0.95


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve(db_url: str, port: int, data_dir: str, ready: mp.Event, stop: mp.Event, max_workers: int,
           frontends: int) -> None:
    logging.basicConfig(level=logging.WARNING)
    from master.server import MasterConfig, serve

    # a long heartbeat interval: simulated workers idle between steps must not be declared lost
    handle = serve(MasterConfig(db_url, port=port, host="127.0.0.1", data_dir=Path(data_dir),
                                heartbeat_interval_s=600.0, worker_token=WORKER_TOKEN, admin_token=ADMIN_TOKEN, env={},
                                max_workers=max_workers, frontends=frontends))
    ready.set()
    stop.wait()
    handle.stop(grace_s=0)


def _serve_noop(port: int, ready: mp.Event, stop: mp.Event, max_workers: int) -> None:
    """The same gRPC server (grpc.aio, options, token check) with handlers
    that do nothing: the ceiling any master on this machine can reach."""
    import itertools

    from aiperf.api.client import MAX_MESSAGE_BYTES
    from master.rpc.tokens import TokenInterceptor, Tokens

    ids = itertools.count(1)
    run = pb.RunInfo(config=pb.RunConfig(run_id=1), state=pb.RUN_RUNNING)

    def heartbeat() -> pb.HeartbeatResponse:
        return pb.HeartbeatResponse(has_run=True, run=run, master_time=time.time(), heartbeat_interval_s=600.0,
                                    worker_state=pb.WORKER_ALIVE)

    def ack(r: pb.ProgressReport) -> pb.ProgressAck:
        return pb.ProgressAck(model_id=r.model_id, seq=r.seq, master_flops=r.worker_flops,
                              run_state=pb.RUN_RUNNING, model_state=pb.MODEL_TRAINING)

    class Noop(pb_grpc.WorkerServiceServicer, pb_grpc.ControlServiceServicer):
        async def Register(self, request, context):  # noqa: N802 - gRPC method names
            return pb.RegisterResponse(worker_id=next(ids), heartbeat_interval_s=600.0, has_run=True, run=run)

        async def SubmitModel(self, request, context):  # noqa: N802
            return pb.SubmitModelResponse(model_id=next(ids), state=pb.MODEL_TRAINING)

        async def Connect(self, request_iterator, context):  # noqa: N802
            async for m in request_iterator:
                if m.WhichOneof("body") == "heartbeat":
                    yield pb.MasterMessage(heartbeat=heartbeat())
                else:
                    yield pb.MasterMessage(progress=ack(m.progress))

        async def StartRun(self, request, context):  # noqa: N802
            return pb.StartRunResponse(run=run)

    async def main() -> None:
        server = grpc.aio.server(
            interceptors=[TokenInterceptor(Tokens(WORKER_TOKEN, ADMIN_TOKEN))],
            options=[("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                     ("grpc.max_send_message_length", MAX_MESSAGE_BYTES), ("grpc.so_reuseport", 0)])
        pb_grpc.add_WorkerServiceServicer_to_server(Noop(), server)
        pb_grpc.add_ControlServiceServicer_to_server(Noop(), server)
        server.add_insecure_port(f"127.0.0.1:{port}")
        await server.start()
        ready.set()
        while not stop.is_set():
            await asyncio.sleep(0.2)
        await server.stop(0)

    asyncio.run(main())


@dataclass(frozen=True)
class Step:
    """One load step: n workers, a heartbeat every heartbeat_s, a report with every report_every-th."""

    n: int
    heartbeat_s: float = 1.0
    report_every: int = 1

    @property
    def production(self) -> bool:
        return (self.heartbeat_s, self.report_every) != (1.0, 1)

    @property
    def label(self) -> str:
        if not self.production:
            return "every 1 s"
        return f"hb {self.heartbeat_s:g} s, report {self.heartbeat_s * self.report_every:g} s"


@dataclass
class Stats:
    report: list[float] = field(default_factory=list)
    heartbeat: list[float] = field(default_factory=list)
    errors: int = 0
    offered: int = 0  # reports offered in the measured window
    offered_heartbeats: int = 0
    calls: int = 0  # RPCs answered during the whole step (warm-up included), for CPU per call
    warmup_report: list[float] = field(default_factory=list)  # latencies before the window (printed apart)
    warmup_heartbeat: list[float] = field(default_factory=list)
    error_codes: dict[str, int] = field(default_factory=dict)
    loop_lag: list[float] = field(default_factory=list)  # the simulation's own event-loop delays, in the window


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process (Linux /proc)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return float("nan")


def _cpu_tree(pid: int) -> dict[int, float]:
    """CPU seconds (as _cpu_s) of a process and of each of its children (a master's front ends)."""
    import psutil

    try:
        children = [c.pid for c in psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        children = []
    return {p: _cpu_s(p) for p in (pid, *children)}


def _cpu_used(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU seconds between two _cpu_tree readings, never negative: a process started in between
    counts whole, one gone in between (a restarted front end) is left out (what it used after the
    first reading is not known), as is one that could not be read."""
    return sum(max(0.0, cpu - before.get(p, 0.0)) for p, cpu in after.items()
               if cpu == cpu and before.get(p, 0.0) == before.get(p, 0.0))  # nan: unreadable


def default_max_workers() -> int:
    """The master's own default number of gRPC/database threads (`serve`'s max_workers)."""
    import inspect

    from master.server import serve
    return int(inspect.signature(serve).parameters["max_workers"].default)


def _freeze_heap() -> None:
    """Collect once, then keep everything alive now out of later collections."""
    gc.collect()
    gc.freeze()


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    v = sorted(values)
    return v[min(len(v) - 1, int(q * len(v)))]


LAG_PROBE_S = 0.05  # period of the simulation's event-loop lag probe
WORKERS_PER_CHANNEL = 64  # real workers each have their own connection; the simulation shares a few


class Fleet:
    """Simulated workers: each holds a Connect stream and sends its heartbeat
    and report on it (what the worker agent does)."""

    def __init__(self, address: str, workers_per_channel: int = WORKERS_PER_CHANNEL) -> None:
        self.address = address
        self.per_channel = workers_per_channel
        self.channels: list[grpc.aio.Channel] = []
        self.stubs: list[pb_grpc.WorkerServiceStub] = []
        self.md = (("authorization", f"Bearer {WORKER_TOKEN}"),)
        self.workers: list[tuple[int, int, str]] = []  # (worker id, model id, worker credential)
        self.streams: dict[int, Any] = {}  # worker index -> open Connect call
        self.seq: dict[int, int] = {}

    def stub(self, i: int) -> pb_grpc.WorkerServiceStub:
        while len(self.stubs) <= i // self.per_channel:
            self.channels.append(grpc.aio.insecure_channel(self.address))
            self.stubs.append(pb_grpc.WorkerServiceStub(self.channels[-1]))
        return self.stubs[i // self.per_channel]

    def worker_md(self, credential: str) -> tuple:
        """The metadata of a worker's calls after Register: the token and its own credential."""
        return self.md + ((("aiperf-worker-credential", credential),) if credential else ())

    async def grow(self, n: int, graph_json: str, graph_hash: str) -> None:
        sem = asyncio.Semaphore(64)

        async def one(i: int) -> tuple[int, int, str]:
            async with sem:
                stub = self.stub(i)
                reg = await stub.Register(pb.RegisterRequest(name=f"sim-{i}", host=f"sim-{i}", cpus=8,
                                                             accelerators=[pb.Accelerator(model="sim", memory_bytes=1)]),
                                          metadata=self.md, timeout=60)
                sub = await stub.SubmitModel(pb.SubmitModelRequest(
                    worker_id=reg.worker_id, graph_json=graph_json, graph_hash=graph_hash, round=1,
                    hyperparameters=pb.Hyperparameters(batch_size=32, kernel_size=3)),
                    metadata=self.worker_md(reg.credential), timeout=60)
                return reg.worker_id, sub.model_id, reg.credential

        start = len(self.workers)
        self.workers += await asyncio.gather(*(one(i) for i in range(start, n)))

    async def exchange(self, i: int, message: pb.WorkerMessage) -> pb.MasterMessage:
        """Send one message on worker i's Connect stream (opened on first use) and await its reply."""
        call = self.streams.get(i)
        if call is None:
            call = self.streams[i] = self.stub(i).Connect(metadata=self.worker_md(self.workers[i][2]))
        await call.write(message)
        reply = await asyncio.wait_for(call.read(), timeout=10)
        if reply is grpc.aio.EOF:
            self.streams.pop(i, None)
            raise RuntimeError("stream ended")
        if reply.WhichOneof("body") == "error":
            raise RuntimeError(reply.error.message)
        return reply

    async def load(self, n: int, window_s: float, warmup_s: float, flops_per_image: int, step: Step) -> Stats:
        """Each worker sends a heartbeat every step.heartbeat_s and, with every
        step.report_every-th of them, a report; workers spread evenly over both periods."""
        stats = Stats()
        loop = asyncio.get_running_loop()
        begin = loop.time() + 0.1
        measure_from = begin + warmup_s
        end = measure_from + window_s
        period_s, every = step.heartbeat_s, step.report_every
        # Freeze the fleet's objects (10,000 streams' worth) before the window: otherwise this
        # one process's full collections stall all its workers at once every ~10 s (0.3-0.5 s at
        # 10,000), which would be counted as the master's latency; real workers are processes
        # of their own, each with a small heap. Once every stream is open (one heartbeat period),
        # and long before the window where there is time: the freeze's own collection stalls the
        # fleet too, and the burst of messages held back meanwhile takes the master a while.
        loop.call_at(max(begin, min(begin + period_s + 1.0, measure_from - 1.0)), _freeze_heap)

        async def worker(i: int) -> None:
            wid, mid, _ = self.workers[i]
            tick = begin + period_s * i / n  # spread evenly over the heartbeat period
            beat = i % every  # and the reports over the report period
            while tick < end:
                await asyncio.sleep(max(0.0, tick - loop.time()))
                measured = tick >= measure_from
                reporting = beat % every == 0
                if measured:
                    stats.offered_heartbeats += 1
                    stats.offered += reporting
                try:
                    t = time.perf_counter()
                    await self.exchange(i, pb.WorkerMessage(heartbeat=pb.HeartbeatRequest(worker_id=wid, model_id=mid)))
                    hb = time.perf_counter() - t
                    stats.calls += 1
                    if measured and loop.time() <= end + 1.0:
                        stats.heartbeat.append(hb)
                    elif not measured:
                        stats.warmup_heartbeat.append(hb)
                    if reporting:
                        seq = self.seq.get(mid, 0) + 1
                        report = pb.ProgressReport(worker_id=wid, model_id=mid, seq=seq, images_trained=32,
                                                   images_validated=0, epoch=1, worker_flops=32 * flops_per_image)
                        self.seq[mid] = seq
                        t = time.perf_counter()
                        await self.exchange(i, pb.WorkerMessage(progress=report))
                        rep = time.perf_counter() - t
                        stats.calls += 1
                        if measured and loop.time() <= end + 1.0:
                            stats.report.append(rep)
                        elif not measured:
                            stats.warmup_report.append(rep)
                except (grpc.aio.AioRpcError, RuntimeError, asyncio.TimeoutError) as exc:
                    self.streams.pop(i, None)
                    if measured:
                        stats.errors += 1
                        name = exc.code().name if isinstance(exc, grpc.aio.AioRpcError) else type(exc).__name__
                        stats.error_codes[name] = stats.error_codes.get(name, 0) + 1
                tick += period_s
                beat += 1

        async def lag_probe() -> None:
            # how late the simulation's own event loop wakes: latency the master did not cause
            while loop.time() < end:
                t = loop.time()
                await asyncio.sleep(LAG_PROBE_S)
                if t >= measure_from:
                    stats.loop_lag.append(loop.time() - t - LAG_PROBE_S)

        await asyncio.gather(lag_probe(), *(worker(i) for i in range(n)))
        return stats

    async def close(self) -> None:
        for call in self.streams.values():
            await call.done_writing()
        for c in self.channels:
            await c.close()


async def _bench(address: str, steps: list[Step], window_s: float, warmup_s: float, production_window_s: float,
                 server_pid: int) -> list[dict]:
    from aiperf.flops import count_flops
    from aiperf.resnet import resnet50

    graph = resnet50(input_size=32, channels=3, classes=10, width=0.125)  # the smoke seed: submitted without a parent
    fc = count_flops(graph)
    ctl = pb_grpc.ControlServiceStub(grpc.aio.insecure_channel(address))
    md = (("authorization", f"Bearer {ADMIN_TOKEN}"),)
    await ctl.StartRun(pb.StartRunRequest(duration_s=3600, profile=pb.PROFILE_SMOKE), metadata=md, timeout=30)
    fleet = Fleet(address)
    rows = []
    far_over: set[bool] = set()  # the kinds of step (production or not) already far over the limit
    for step in steps:
        n = step.n
        if step.production in far_over:
            continue
        window, warmup = window_s, warmup_s
        if step.production:  # every worker reports in the window, after one report period unmeasured:
            # a worker's first report and beats (its stream opened, its model's state read from the
            # database) are the start of a run, printed apart; the window is the steady state
            window = max(production_window_s, step.heartbeat_s * step.report_every)
            warmup = max(warmup_s, step.heartbeat_s * step.report_every)
        t = time.perf_counter()
        await fleet.grow(n, graph.to_json(), graph.hash())
        grow_s = time.perf_counter() - t
        _freeze_heap()  # the registered fleet; its streams, opened in the first period, before the window
        print(f"  N={n:5d} {step.label}: load begins ({grow_s:.0f} s to register)", flush=True)
        cpu0, own0, mine0, wall0 = _cpu_tree(server_pid), _cpu_s(server_pid), _cpu_s(os.getpid()), time.perf_counter()
        st = await fleet.load(n, window, warmup, fc.train, step)
        wall = time.perf_counter() - wall0
        server_cpu_s = _cpu_used(cpu0, _cpu_tree(server_pid))  # with front ends: theirs too
        own_cpu_s = _cpu_s(server_pid) - own0  # the master process alone
        server_cpu = server_cpu_s / wall
        cpu_per_call_us = server_cpu_s / st.calls * 1e6 if st.calls else float("nan")
        own_per_call_us = own_cpu_s / st.calls * 1e6 if st.calls else float("nan")
        client_cpu = (_cpu_s(os.getpid()) - mine0) / wall
        rate = len(st.report) / window
        p50, p99 = _pct(st.report, 0.50), _pct(st.report, 0.99)
        hb50, hb99 = _pct(st.heartbeat, 0.50), _pct(st.heartbeat, 0.99)
        held = (st.errors == 0 and p99 < P99_LIMIT_S and hb99 < P99_LIMIT_S
                and len(st.report) >= HELD_FRACTION * st.offered
                and len(st.heartbeat) >= HELD_FRACTION * st.offered_heartbeats)
        rows.append({"n": n, "production": step.production, "label": step.label, "reports_s": rate, "p50_ms": p50 * 1e3, "p99_ms": p99 * 1e3, "hb_p50_ms": hb50 * 1e3,
                     "hb_p99_ms": hb99 * 1e3, "errors": st.errors, "offered_s": st.offered / window,
                     "heartbeats_s": len(st.heartbeat) / window,
                     "held": held, "setup_s": grow_s, "server_cpu": server_cpu, "client_cpu": client_cpu,
                     "cpu_per_call_us": cpu_per_call_us, "own_cpu_per_call_us": own_per_call_us,
                     "sim_lag_p99_ms": _pct(st.loop_lag, 0.99) * 1e3})
        r = rows[-1]
        print(f"  N={n:5d} {step.label}  reports/s={r['reports_s']:7.0f} (offered {r['offered_s']:6.0f}) "
              f"heartbeats/s={r['heartbeats_s']:6.0f}  "
              f"report p50={r['p50_ms']:6.1f} ms p99={r['p99_ms']:7.1f} ms  "
              f"heartbeat p50={r['hb_p50_ms']:6.1f} ms p99={r['hb_p99_ms']:7.1f} ms  errors={st.errors}{' ' + str(st.error_codes) if st.error_codes else ''}  "
              f"cpu master={server_cpu:4.2f} ({cpu_per_call_us:3.0f} us/call, "
              f"{own_per_call_us:3.0f} in its main process) sim={client_cpu:4.2f} "
              f"(its loop late by p50 {_pct(st.loop_lag, 0.5) * 1e3:.1f} ms, p99 {r['sim_lag_p99_ms']:.1f} ms)  "
              f"{'held' if held else 'NOT held'}", flush=True)
        if step.production:
            print(f"  N={n:5d} {step.label}  first report period (not in the window): report p99="
                  f"{_pct(st.warmup_report, 0.99) * 1e3:7.1f} ms, heartbeat p99={_pct(st.warmup_heartbeat, 0.99) * 1e3:7.1f} ms",
                  flush=True)
        if not held and max(p99, hb99) > 4 * P99_LIMIT_S:
            far_over.add(step.production)  # larger N at this rate only takes longer to fail
    await fleet.close()
    return rows


def run_backend(name: str, db_url: str | None, steps: list[Step], window_s: float,
                warmup_s: float, production_window_s: float, max_workers: int, frontends: int = 0) -> list[dict]:
    """db_url None: the no-op server (baseline); frontends: the master's front-end processes."""
    port = _free_port()
    ctx = mp.get_context("spawn")
    ready, stop = ctx.Event(), ctx.Event()
    with tempfile.TemporaryDirectory() as data_dir:
        if db_url is None:
            proc = ctx.Process(target=_serve_noop, args=(port, ready, stop, max_workers), daemon=True)
        else:
            proc = ctx.Process(target=_serve, args=(db_url, port, data_dir, ready, stop, max_workers, frontends),
                               daemon=True)
        proc.start()
        if not ready.wait(60):
            proc.kill()
            raise RuntimeError(f"{name}: master did not start")
        print(f"== {name}: master pid {proc.pid} on 127.0.0.1:{port}", flush=True)
        try:
            rows = asyncio.run(_bench(f"127.0.0.1:{port}", steps, window_s, warmup_s, production_window_s, proc.pid))
        finally:
            # the closed fleet's frozen objects would never be collected: the next backend's
            # simulation would carry 10,000 dead streams' worth of heap
            gc.unfreeze()
            gc.collect()
            stop.set()
            proc.join(30)
            if proc.is_alive():
                proc.kill()
    per_second = [r for r in rows if not r["production"]]
    if per_second:
        top = max(per_second, key=lambda r: r["reports_s"])
        print(f"== {name}: largest N held at 1 report + 1 heartbeat per second (p99 < {P99_LIMIT_S * 1e3:.0f} ms): "
              f"{_largest_held(rows)}; peak sustained {top['reports_s']:.0f} reports/s (+ as many heartbeats/s) "
              f"at N={top['n']}", flush=True)
    for r in rows:
        if r["production"]:
            print(f"== {name}: N={r['n']} {r['label']}: {'held' if r['held'] else 'NOT held'} "
                  f"(heartbeat p99 {r['hb_p99_ms']:.1f} ms, report p99 {r['p99_ms']:.1f} ms, "
                  f"{r['cpu_per_call_us']:.0f} us master CPU per call, {r['own_cpu_per_call_us']:.0f} in its "
                  "main process)", flush=True)
    return rows


def _largest_held(rows: list[dict], production: bool = False) -> int:
    held = [r["n"] for r in rows if r["held"] and r["production"] == production]
    return max(held) if held else 0


def _cpu_ratio(rows: list[dict], base: list[dict]) -> float:
    """Median over the steps both ran (1 s steps and production steps alike) of master CPU
    per RPC / the no-op server's (steadier than latency on a shared machine)."""
    noop = {(r["n"], r["production"]): r["cpu_per_call_us"] for r in base}
    v = sorted(r["cpu_per_call_us"] / noop[r["n"], r["production"]] for r in rows if (r["n"], r["production"]) in noop)
    return v[len(v) // 2] if v else float("nan")


def _name(backend: str, frontends: int) -> str:
    return f"{backend}_frontends{frontends}" if frontends else backend


def _compare_frontends(results: dict[str, list[dict]], frontends: int) -> None:
    """The main process's CPU per call and the largest N held, with front ends against without."""
    for backend in ("sqlite", "postgres"):
        alone, split = results.get(backend), results.get(_name(backend, frontends))
        if not alone or not split:
            continue
        own = {(r["n"], r["production"]): r["own_cpu_per_call_us"] for r in alone}
        ratios = sorted(r["own_cpu_per_call_us"] / own[(r["n"], r["production"])] for r in split
                        if (r["n"], r["production"]) in own)
        median = ratios[len(ratios) // 2] if ratios else float("nan")
        print(f"== {backend}: with {frontends} front ends the master's main process uses {median:.2f}x the CPU per "
              f"call of the master serving gRPC itself (median over the common steps); largest N held "
              f"{_largest_held(split)} vs {_largest_held(alone)} (1 s steps), "
              f"{_largest_held(split, True)} vs {_largest_held(alone, True)} (production)", flush=True)
        print(f"RESULT frontends_main_cpu_ratio_{backend}={median:.3f}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", default="250,500,1000,1500,2000", help="worker counts, ascending")
    parser.add_argument("--window", type=float, default=6.0, help="measured seconds per step")
    parser.add_argument("--production", default="10000:5:30",
                        help="N[,N...]:heartbeat_s:report_s of the last steps, at a production cadence ('' to skip)")
    parser.add_argument("--production-window", type=float, default=30.0,
                        help="measured seconds per production step (at least one report period)")
    parser.add_argument("--postgres-url", default=os.environ.get("AIPERF_TEST_POSTGRES_URL"),
                        help="PostgreSQL for the postgres backend (default: $AIPERF_TEST_POSTGRES_URL); "
                             "the bench works in a schema of its own, dropped after")
    parser.add_argument("--max-workers", type=int, default=None,
                        help="gRPC server threads (default: the master's own default)")
    parser.add_argument("--warmup", type=float, default=1.5, help="unmeasured seconds per step")
    parser.add_argument("--backends", default="noop,sqlite,postgres",
                        help="noop: the same gRPC server with do-nothing handlers (the baseline)")
    parser.add_argument("--frontends", type=int, default=0,
                        help="also measure each database backend served by this many front-end processes "
                             "(`aiperf master serve --frontends N`), right after the master serving gRPC itself")
    args = parser.parse_args()
    if args.max_workers is None:
        args.max_workers = default_max_workers()
    steps = [Step(int(x)) for x in args.steps.split(",") if x]
    if args.production:
        ns, heartbeat_s, report_s = args.production.split(":")
        every = max(1, round(float(report_s) / float(heartbeat_s)))
        steps += [Step(int(n), float(heartbeat_s), every) for n in ns.split(",")]
    print(f"master_bench: {os.cpu_count()} CPUs; each worker sends its heartbeats and progress reports "
          "on its Connect stream", flush=True)
    t = time.perf_counter()
    results: dict[str, list[dict]] = {}
    if "noop" in args.backends:
        results["noop"] = run_backend("noop", None, steps, args.window, args.warmup, args.production_window,
                                      args.max_workers)
    variants = [0] + ([args.frontends] if args.frontends else [])
    timing = (steps, args.window, args.warmup, args.production_window, args.max_workers)
    if "sqlite" in args.backends:
        for fe in variants:
            with tempfile.TemporaryDirectory() as d:
                results[_name("sqlite", fe)] = run_backend(_name("sqlite", fe), f"sqlite:///{d}/bench.db", *timing, fe)
    if "postgres" in args.backends:
        if not args.postgres_url:
            print("== postgres: skipped (no --postgres-url, AIPERF_TEST_POSTGRES_URL not set)")
        for fe in variants if args.postgres_url else []:
            with temporary_schema(args.postgres_url) as url:
                results[_name("postgres", fe)] = run_backend(_name("postgres", fe), url, *timing, fe)
    if args.frontends:
        _compare_frontends(results, args.frontends)
    if "noop" in results:
        production = all(s.production for s in steps)  # compare what was run
        base = _largest_held(results["noop"], production)
        for name, rows in results.items():
            if name != "noop":
                n = _largest_held(rows, production)
                ratio = f"{n / base:.2f}" if base else "n/a"
                cost = _cpu_ratio(rows, results["noop"])
                print(f"== {name} vs noop baseline: largest N held{' in the production pattern' if production else ''}"
                      f" {n} / {base} = {ratio}; "
                      f"master CPU per call {cost:.2f}x the no-op server's", flush=True)
    print(f"master_bench: done in {time.perf_counter() - t:.0f} s")
    if any(s.production for s in steps):  # machine-readable, last
        for name, rows in results.items():
            print(f"RESULT production_workers_held_{name}={_largest_held(rows, production=True)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
