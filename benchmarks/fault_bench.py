"""benchmarks/fault_bench.py: faults treated as faults, against real masters.

Scenarios, each on a fresh master (a subprocess serving gRPC on a loopback port):

- restart: workers training (threads of this process, each with the real typed
  client, its Connect streams and the worker's outbox), the master SIGKILLed and
  kept down for 45 s and 90 s, then restarted on the same database and port. It
  counts the models abandoned, the acknowledged reports whose images are not in
  the database at the end, and how long each worker took to beat again.
- db_outage: a throwaway PostgreSQL cluster (initdb/pg_ctl, a free port, never a
  shared server) stopped for a while under load, and `aiperf status` run during
  it: the status codes the calls got (INTERNAL counted) and the CLI's exit code.
- bounds: every numeric bound at its maximum through the RPCs that store it
  (tests/test_bound_edges.py's path), refused or stored, never INTERNAL.
- credentials: a copied credential used while its owner is alive (accepted: 1).

    python -m benchmarks.fault_bench [--outages 45,90] [--workers 3]

Ends with `RESULT models_abandoned_after_restart=... acked_lost=...
internal_during_db_outage=... cli_exit_during_db_outage=... stolen_credential_accepted=...`
(goals 0, 0, 0, 3, 0).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiperf.api import aiperf_pb2 as pb
from aiperf.api.client import Accelerator, ApiError, ControlClient, WorkerClient
from aiperf.flops import count_flops
from aiperf.hyperparameters import Hyperparameters
from aiperf.profiles import get_profile
from tests.support.ports import free_port
from worker.outbox import Outbox, call_until_done

ROOT = Path(__file__).resolve().parent.parent

log = logging.getLogger("fault_bench")

TOKENS = {"worker_token": "fault-worker", "admin_token": "fault-admin"}
HP = Hyperparameters(32, 3)
HEARTBEAT_S = 5.0
REPORT_S = 1.0
IMAGES_PER_REPORT = 64

_MASTER = """
import signal, sys
from master.server import MasterConfig, serve
h = serve(MasterConfig({db!r}, port={port}, host="127.0.0.1", data_dir={data!r}, heartbeat_interval_s={hb},
                       worker_token={wt!r}, admin_token={at!r}, env={{}}, resume_outage_s={resume}))
print("ready", flush=True)
signal.sigwait({{signal.SIGTERM, signal.SIGINT}})
h.stop(grace_s=0)
"""


class MasterProcess:
    """A master in a subprocess, killed with SIGKILL and restarted on the same database and port."""

    def __init__(self, workdir: Path, db_url: str, resume_outage_s: float = 600.0) -> None:
        self.workdir, self.db_url, self.resume_outage_s = workdir, db_url, resume_outage_s
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None
        self.lives = 0

    def start(self, timeout_s: float = 120.0) -> float:
        """Start it; the time.time() at which it serves."""
        script = _MASTER.format(db=self.db_url, port=self.port, data=str(self.workdir / "data"), hb=HEARTBEAT_S,
                                wt=TOKENS["worker_token"], at=TOKENS["admin_token"], resume=self.resume_outage_s)
        out = open(self.workdir / f"master{self.lives}.log", "w")
        self.lives += 1
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=out, text=True,
                                     env=env, cwd=self.workdir)
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout_s
        line = self.proc.stdout.readline()
        if line.strip() != "ready" or time.monotonic() > deadline:
            raise RuntimeError(f"master did not start: {(self.workdir / f'master{self.lives - 1}.log').read_text()}")
        return time.time()

    def kill(self) -> float:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)
        return time.time()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


@dataclass
class SimWorker:
    """A worker's calls without TensorFlow: register, heartbeats on a stream of their own every
    HEARTBEAT_S, a model reported every REPORT_S through the worker's outbox (retried through
    outages, in order), finished when asked. `acked` holds each acknowledged report."""

    address: str
    name: str
    graph: Any
    acked: list[tuple[int, int, int]] = field(default_factory=list)  # (model, seq, images)
    beats_ok: list[float] = field(default_factory=list)  # time.time() of each answered heartbeat
    lost_seen: bool = False
    models: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.client = WorkerClient(self.address, TOKENS["worker_token"])
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.outbox = Outbox(f"outbox-{self.name}")

    def start(self) -> None:
        reg = call_until_done(lambda: self.client.register(
            name=self.name, host=self.name, accelerators=[Accelerator("X", 1 << 30, 1e15)]),
            self._stop, lambda exc, delay: None)
        self.worker_id = reg.worker_id
        for target in (self._beat, self._train):
            t = threading.Thread(target=target, daemon=True)
            t.start()
            self._threads.append(t)

    def _beat(self) -> None:
        stream = self.client.connect()
        while not self._stop.wait(HEARTBEAT_S):
            try:
                hb = stream.heartbeat(self.worker_id, self.models[-1] if self.models else 0)
            except ApiError:
                continue
            self.beats_ok.append(time.time())
            if hb.worker_state == pb.WORKER_LOST:
                self.lost_seen = True
        stream.close()

    def _train(self) -> None:
        fc = count_flops(self.graph)
        stream = self.client.connect()
        sub = call_until_done(lambda: self.client.submit_model(
            self.worker_id, self.graph.to_json(), self.graph.hash(), 0, 1, HP), self._stop, lambda exc, delay: None)
        mid = sub.model_id
        self.models.append(mid)
        seq = 0
        while not self._stop.wait(REPORT_S):
            seq += 1

            def send(seq: int = seq) -> None:
                ack = stream.report_progress(self.worker_id, mid, seq, IMAGES_PER_REPORT, 0, 1,
                                             fc.ops(IMAGES_PER_REPORT, 0))
                self.acked.append((mid, ack.seq, IMAGES_PER_REPORT))

            self.outbox.put(f"report {mid}/{seq}", send)
        self.outbox.put(f"finish {mid}", lambda: self.client.finish_model(self.worker_id, mid, "done",
                                                                          best_accuracy=0.5))

    def finish(self, timeout_s: float = 120.0) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=HEARTBEAT_S + 30)
        self.outbox.close(timeout_s)
        self.client.close()


def restart_scenario(workdir: Path, outage_s: float, workers: int = 3, train_s: float = 6.0,
                     after_s: float = 12.0, resume_outage_s: float = 600.0) -> dict[str, Any]:
    """Workers training, the master killed, down for outage_s, restarted; what was lost."""
    workdir.mkdir(parents=True, exist_ok=True)
    master = MasterProcess(workdir, f"sqlite:///{workdir / 'master.db'}", resume_outage_s)
    master.start()
    control = ControlClient(master.address, TOKENS["admin_token"])
    graph = get_profile("smoke").base_graph()  # a parentless submission is the seed
    sims = [SimWorker(master.address, f"w{i}", graph) for i in range(workers)]
    try:
        control.start_run(3600.0)
        for s in sims:
            s.start()
        time.sleep(train_s)
        killed_at = master.kill()
        time.sleep(outage_s)
        serving_at = master.start()
        time.sleep(after_s + (0 if outage_s <= resume_outage_s else HEARTBEAT_S))
        back_s = [min((t for t in s.beats_ok if t >= serving_at), default=float("inf")) - serving_at for s in sims]
        for s in sims:
            s.finish()
        models = {m.model_id: m for m in control.list_models(limit=1000).models}
    finally:
        control.close()
        master.stop()
    acked: dict[int, int] = {}
    for s in sims:
        for mid, _seq, images in s.acked:
            acked[mid] = acked.get(mid, 0) + images
    lost = sum(max(0, n - models[mid].images_trained) for mid, n in acked.items())
    return {
        "outage_s": outage_s, "killed_at": killed_at, "workers": workers,
        "models": len(models),
        "abandoned": sum(1 for m in models.values() if m.state == pb.MODEL_ABANDONED),
        "reasons": sorted({m.reason for m in models.values() if m.reason}),
        "acked_images_lost": lost, "acked_reports": sum(len(s.acked) for s in sims),
        "back_after_s": back_s, "lost_seen": [s.lost_seen for s in sims],
        "dropped": [d for s in sims for d in s.outbox.dropped],
    }


def _in_process_master(db_url: str, workdir: Path, **kwargs: Any) -> Any:
    from master.server import MasterConfig, serve

    return serve(MasterConfig(db_url, port=0, host="127.0.0.1", data_dir=workdir / "data", env={}, **TOKENS,
                              **kwargs))


def _load(h: Any, graph: Any, stop: threading.Event, codes: dict[str, int]) -> None:
    """Calls of every kind, as fast as they are answered, until `stop`: their status codes counted."""
    w = WorkerClient(h.address, h.worker_token, retries=0)
    c = ControlClient(h.address, h.admin_token, retries=0)
    fc = count_flops(graph)
    wid = w.register(name="load", host="load", accelerators=[Accelerator("X", 1 << 30, 1e15)]).worker_id
    mid = w.submit_model(wid, graph.to_json(), graph.hash(), 0, 1, HP).model_id
    calls = [lambda seq: w.report_progress(wid, mid, seq, 1, 0, 1, fc.ops(1, 0)),
             lambda seq: w.register(name=f"extra-{seq}", host="x"), lambda seq: c.run_status(),
             lambda seq: c.list_models(), lambda seq: w.heartbeat(wid, mid)]
    seq = 0
    while not stop.is_set():
        seq += 1
        try:
            calls[seq % len(calls)](seq)
            name = "OK"
        except ApiError as exc:
            name = exc.code.name
        codes[name] = codes.get(name, 0) + 1
        time.sleep(0.01)
    w.close()
    c.close()


def db_outage_scenario(workdir: Path, down_s: float = 10.0) -> dict[str, Any]:
    """A throwaway PostgreSQL cluster stopped for down_s under load, and `aiperf status` during it."""
    from benchmarks.throwaway_db import ThrowawayPostgres

    workdir.mkdir(parents=True, exist_ok=True)
    pg = ThrowawayPostgres()
    codes: dict[str, int] = {}
    try:
        pg.start()
        h = _in_process_master(pg.url, workdir)
        graph = get_profile("smoke").base_graph()  # a parentless submission is the seed
        ControlClient(h.address, h.admin_token).start_run(3600.0)
        stop = threading.Event()
        before: dict[str, int] = {}
        loader = threading.Thread(target=_load, args=(h, graph, stop, before))
        loader.start()
        time.sleep(2.0)
        snapshot = dict(before)
        pg.stop("fast")
        time.sleep(1.0)
        cli = subprocess.run([sys.executable, "-m", "aiperf_cli", "status", "--master", h.address, "--admin-token",
                              h.admin_token], capture_output=True, text=True, timeout=120,
                             env={**os.environ, "PYTHONPATH": str(ROOT)})
        time.sleep(max(0.0, down_s - 1.0))
        during = {k: v - snapshot.get(k, 0) for k, v in before.items()}
        pg.start()
        time.sleep(3.0)
        stop.set()
        loader.join(60)
        after = {k: v - during.get(k, 0) - snapshot.get(k, 0) for k, v in before.items()}
        h.stop(grace_s=0)
    finally:
        pg.close()
    codes = during
    return {"down_s": down_s, "codes_during": codes, "codes_after": after,
            "internal": codes.get("INTERNAL", 0) + codes.get("UNKNOWN", 0),
            "cli_exit": cli.returncode, "cli_line": cli.stderr.strip().splitlines()[-1:] or [""]}


def credential_scenario(workdir: Path) -> dict[str, Any]:
    """A copy of a live worker's credential presented to Register; and after its owner restarted."""
    workdir.mkdir(parents=True, exist_ok=True)
    h = _in_process_master(f"sqlite:///{workdir / 'cred.db'}", workdir, heartbeat_interval_s=1.0)
    accepted = 0
    try:
        owner = WorkerClient(h.address, h.worker_token, retries=0)
        reg = owner.register(name="victim", host="victim")
        copy = reg.credential
        owner.heartbeat(reg.worker_id)
        try:  # while the owner is active
            WorkerClient(h.address, h.worker_token, retries=0).register(name="victim", host="thief", credential=copy)
            accepted += 1
        except ApiError:
            pass
        owner2 = WorkerClient(h.address, h.worker_token, retries=0)
        deadline = time.monotonic() + 30
        while True:  # the owner comes back once the name is free (marked lost)
            try:
                reg2 = owner2.register(name="victim", host="victim")
                break
            except ApiError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        time.sleep(1.1)  # silent, as a restarted process would be
        try:  # the old copy after the owner's restart
            WorkerClient(h.address, h.worker_token, retries=0).register(name="victim", host="thief", credential=copy)
            accepted += 1
        except ApiError:
            pass
        conflicts = h.master.metrics.credential_conflicts._value.get()
    finally:
        h.stop(grace_s=0)
    return {"accepted": accepted, "conflicts_reported": conflicts, "owner_back_with_new": reg2.credential != copy}


def bounds_scenario(workdir: Path) -> dict[str, Any]:
    """Every bound at its maximum through the RPCs that store it (SQLite): answers counted."""
    from aiperf import limits
    from aiperf.api.client import ResourceSample

    workdir.mkdir(parents=True, exist_ok=True)
    h = _in_process_master(f"sqlite:///{workdir / 'bounds.db'}", workdir)
    codes: dict[str, int] = {}

    def call(fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            out = fn(*args, **kwargs)
            codes["OK"] = codes.get("OK", 0) + 1
            return out
        except ApiError as exc:
            codes[exc.code.name] = codes.get(exc.code.name, 0) + 1
            return None

    try:
        w = WorkerClient(h.address, h.worker_token, retries=0)
        c = ControlClient(h.address, h.admin_token, retries=0)
        graph = get_profile("smoke").base_graph()  # a parentless submission is the seed
        fc = count_flops(graph)
        accs = [Accelerator("A" * limits.MAX_MODEL_NAME_CHARS, limits.MAX_ACCELERATOR_MEMORY_BYTES,
                            limits.MAX_OPS_PER_S_PER_ACCELERATOR)] * limits.MAX_ACCELERATORS_PER_WORKER
        wid = call(w.register, name="n" * limits.MAX_NAME_CHARS, host="h", accelerators=accs, cpus=limits.MAX_CPUS,
                   memory_bytes=limits.MAX_HOST_MEMORY_BYTES).worker_id
        call(c.start_run, limits.MAX_RUN_DURATION_S, seed=limits.MAX_SEED, max_models=limits.MAX_MODELS,
             max_rounds_per_worker=limits.MAX_ROUND, max_epochs_per_round=limits.MAX_EPOCH,
             warmup_rounds=limits.MAX_ROUND, keep_checkpoints=limits.MAX_KEEP_CHECKPOINTS)
        mid = call(w.submit_model, wid, graph.to_json(), graph.hash(), 0, limits.MAX_ROUND, HP).model_id
        for seq in (limits.MAX_SEQ - 1, limits.MAX_SEQ):
            call(w.report_progress, wid, mid, seq, limits.MAX_IMAGES_PER_REPORT, limits.MAX_IMAGES_PER_REPORT,
                 limits.MAX_EPOCH, limits.MAX_OPS_PER_REPORT, val_accuracy=1.0)
            call(w.report_progress, wid, mid, seq, 1000, 0, limits.MAX_EPOCH, fc.ops(1000, 0), val_accuracy=0.5)
        call(w.send_resource_samples, wid, [ResourceSample(
            age_s=limits.MAX_SAMPLE_AGE_S, accelerator_index=limits.MAX_ACCELERATORS_PER_WORKER - 1,
            accelerator_util=1.0, accelerator_memory_used=limits.MAX_ACCELERATOR_MEMORY_BYTES, cpu_util=1.0,
            memory_used=limits.MAX_HOST_MEMORY_BYTES)])
        call(w.finish_model, wid, mid, "done", best_accuracy=1.0, predicted_accuracy=1.0)
        for fn in (c.scoreboard, c.timeline, c.list_models, c.list_workers, c.run_status):
            call(fn)
    finally:
        h.stop(grace_s=0)
    return {"codes": codes, "internal": codes.get("INTERNAL", 0) + codes.get("UNKNOWN", 0)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--outages", default="45,90", help="master outage lengths in seconds, comma-separated")
    ap.add_argument("--workers", type=int, default=3)
    ap.add_argument("--db-down", type=float, default=10.0, help="seconds the PostgreSQL cluster is down")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.ERROR, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    results: dict[str, Any] = {"restart": []}
    with tempfile.TemporaryDirectory(prefix="fault-bench-") as tmp:
        for outage in (float(x) for x in args.outages.split(",") if x):
            r = restart_scenario(Path(tmp) / f"restart-{outage:g}", outage, workers=args.workers)
            results["restart"].append(r)
            print(f"restart outage_s={outage:g} models={r['models']} abandoned={r['abandoned']} "
                  f"acked_reports={r['acked_reports']} acked_images_lost={r['acked_images_lost']} "
                  f"back_after_s={','.join(f'{b:.1f}' for b in r['back_after_s'])}", flush=True)
        db = results["db_outage"] = db_outage_scenario(Path(tmp) / "db", args.db_down)
        print(f"db_outage down_s={db['down_s']:g} codes_during={db['codes_during']} codes_after={db['codes_after']} "
              f"cli_exit={db['cli_exit']} cli={db['cli_line'][0]!r}", flush=True)
        b = results["bounds"] = bounds_scenario(Path(tmp) / "bounds")
        print(f"bounds codes={b['codes']}", flush=True)
        cr = results["credentials"] = credential_scenario(Path(tmp) / "cred")
        print(f"credentials accepted={cr['accepted']} conflicts_reported={cr['conflicts_reported']:g} "
              f"owner_back_with_new={cr['owner_back_with_new']}", flush=True)
    if args.json:
        print(json.dumps(results, default=str))
    abandoned = sum(r["abandoned"] for r in results["restart"])
    lost = sum(r["acked_images_lost"] for r in results["restart"])
    print(f"RESULT models_abandoned_after_restart={abandoned} acked_lost={lost} "
          f"internal_during_db_outage={db['internal'] + b['internal']} cli_exit_during_db_outage={db['cli_exit']} "
          f"stolen_credential_accepted={cr['accepted']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
