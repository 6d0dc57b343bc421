"""Share of a demo's wall time spent in training steps, from the master's own timestamps.

A demo-like smoke run: a master on SQLite in this process, one worker agent (a
thread of this process, the smoke profile on the built-in digits) for
--minutes, twice: with the look-ahead (worker/lookahead.py: the next round
chosen, built and traced while one trains) and without it (the baseline), in
the same process one after the other. The worker sends phase reports (after a
round's first training step and at the end of each epoch's training steps),
so the master's progress timestamps delimit the training steps: the interval
between two reports of the same model is training time when the later one
carries trained images and no validated ones. For each worker the script prints
the fraction of the run's window (the master's run start to its deadline) in
which no model was in its training steps, the look-ahead's hand-over gaps, and
ends with

    RESULT training_share=<0..1> training_share_without_lookahead=<0..1> ratio_vs_without=<x>

Goal (docs/benchmarks.md): training_share >= 0.70 over a 5-minute demo.

--official also measures the hand-over on the official shape (ResNet-50 at
224x224, batch 16, random images): round A trains while round B is prepared
on the look-ahead thread; the gap from A's last step to B's first step (less
one step), in seconds and as a share of a 15-epoch ImageNet round at the
measured images/s (RESULT handover_gap_s=... handover_share_of_round=...).

Usage: python -m benchmarks.idle_bench [--minutes 5] [--only on|off] [--official]
(--minutes 1: about 2.5 minutes in all on 2 cores; the default 5: about 11).
"""

from __future__ import annotations

import argparse
import logging
import os
import sqlite3
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

IMAGENET_TRAIN_IMAGES = 1_281_167
OFFICIAL_ROUND_EPOCHS = 15
WORKER_TOKEN, ADMIN_TOKEN = "idle-bench-worker", "idle-bench-admin"


@dataclass
class WorkerShare:
    """One worker's time in training steps over the run's window."""

    worker_id: int
    window_s: float
    training_s: float
    models: int

    @property
    def share(self) -> float:
        return self.training_s / self.window_s if self.window_s > 0 else 0.0


@dataclass
class DemoResult:
    lookahead: bool
    shares: list[WorkerShare]
    models: list[tuple[int, str, int, int]] = field(default_factory=list)  # (round, hash, batch, kernel)
    gaps_s: list[float] = field(default_factory=list)  # hand-overs: a model's last training report to the next's first

    @property
    def share(self) -> float:
        return sum(s.share for s in self.shares) / len(self.shares) if self.shares else 0.0


def training_spans(rows: list[tuple[int, int, float, int, int]]) -> list[tuple[int, float, float, int]]:
    """The spans in training steps from progress rows (model, worker, t, trained, validated) ordered
    by model and seq, as (model, start, end, images trained): between two reports of one model, when
    the later one carries trained images and no validated ones."""
    spans: list[tuple[int, float, float, int]] = []
    previous: tuple[int, float] | None = None  # (model, t)
    for model, _worker, t, trained, validated in rows:
        if previous is not None and previous[0] == model and trained > 0 and validated == 0 and t > previous[1]:
            spans.append((model, previous[1], t, trained))
        previous = (model, t)
    return spans


def training_intervals(rows: list[tuple[int, int, float, int, int]]) -> dict[int, list[tuple[float, float]]]:
    """Per worker, its intervals in training steps (training_spans; a model is one worker's)."""
    owner = {model: worker for model, worker, *_ in rows}
    out: dict[int, list[tuple[float, float]]] = {}
    for model, start, end, _images in training_spans(rows):
        out.setdefault(owner[model], []).append((start, end))
    return out


def clipped_length(intervals: list[tuple[float, float]], start: float, end: float) -> float:
    """Total length of the union of `intervals` within [start, end]."""
    total, reach = 0.0, start
    for a, b in sorted(intervals):
        a, b = max(a, reach), min(b, end)
        if b > a:
            total += b - a
            reach = b
    return total


def handover_gaps(rows: list[tuple[int, int, float, int, int]]) -> list[float]:
    """Seconds from a model's last report carrying trained images to the next model's first report
    (its first step done), per worker: the hand-over seen from the master (one step included)."""
    last_trained: dict[int, tuple[int, float]] = {}  # worker -> (model, t)
    first_seen: dict[int, float] = {}
    gaps = []
    for model, worker, t, trained, _validated in rows:
        if model not in first_seen:
            first_seen[model] = t
            before = last_trained.get(worker)
            if before is not None and before[0] != model and trained > 0:
                gaps.append(t - before[1])
        if trained > 0:
            last_trained[worker] = (model, t)
    return gaps


def measure(db_path: Path, run_id: int) -> tuple[list[WorkerShare], list[float], list[tuple[int, str, int, int]]]:
    """Training shares per worker from the master's database: its run window and progress timestamps."""
    with sqlite3.connect(db_path) as db:
        started, deadline, stopped = db.execute(
            "SELECT started_at, deadline, stopped_at FROM runs WHERE id = ?", (run_id,)).fetchone()
        end = min(x for x in (deadline, stopped) if x is not None)
        rows = db.execute("SELECT model_id, worker_id, t, images_trained, images_validated FROM progress "
                          "WHERE run_id = ? ORDER BY model_id, seq", (run_id,)).fetchall()
        per_worker_models = dict(db.execute(
            "SELECT worker_id, COUNT(*) FROM models WHERE run_id = ? GROUP BY worker_id", (run_id,)).fetchall())
        models = db.execute("SELECT round, graph_hash, batch_size, kernel_size FROM models WHERE run_id = ? "
                            "ORDER BY id", (run_id,)).fetchall()
    intervals = training_intervals(rows)
    shares = [WorkerShare(w, end - started, clipped_length(intervals.get(w, []), started, end), n)
              for w, n in sorted(per_worker_models.items())]
    # rows are ordered by model: the gaps need them by time
    return shares, handover_gaps(sorted(rows, key=lambda r: (r[2], r[0]))), [tuple(m) for m in models]


def run_demo(minutes: float, lookahead: bool, workdir: Path, seed: int = 1, max_rounds: int = 0,
             max_epochs: int = 0, deterministic: bool = False) -> DemoResult:
    """One demo-like smoke run (master + one in-process worker); its training shares."""
    from aiperf.api import aiperf_pb2 as pb
    from aiperf.api.client import ControlClient
    from master.server import MasterConfig, serve
    from worker.agent import Agent, AgentConfig

    name = "lookahead" if lookahead else "sequential"
    db_path = workdir / f"{name}.db"
    handle = serve(MasterConfig(f"sqlite:///{db_path}", port=0, host="127.0.0.1", data_dir=workdir / name,
                                worker_token=WORKER_TOKEN, admin_token=ADMIN_TOKEN, env={}))
    agent = None
    try:
        agent = Agent(AgentConfig(master=handle.address, token=WORKER_TOKEN, name=f"bench-{name}",
                                  generator_processes=1, exit_when_run_ends=True, measure_peak=False,
                                  lookahead=lookahead, phase_reports=True))
        with ControlClient(handle.address, ADMIN_TOKEN) as control:
            run = control.start_run(duration_s=minutes * 60, profile="smoke", seed=seed, min_workers=1,
                                    max_rounds_per_worker=max_rounds, max_epochs_per_round=max_epochs,
                                    deterministic=deterministic)
            run_id = run.config.run_id
            thread = threading.Thread(target=agent.run, name="agent", daemon=True)
            thread.start()
            while thread.is_alive():
                state = control.run_status(run_id).run.state
                if state in (pb.RUN_FINISHED, pb.RUN_ABORTED):
                    break
                thread.join(1.0)
            thread.join(180)
            if control.run_status(run_id).run.state == pb.RUN_RUNNING:  # the worker hit max_rounds
                control.stop_run(run_id, reason="benchmark done")
        shares, gaps, models = measure(db_path, run_id)
        return DemoResult(lookahead, shares, models, gaps)
    finally:
        if agent is not None:
            agent.stop()
        handle.stop(grace_s=0)


def official_handover(steps: int = 30) -> dict[str, float]:
    """Round A (official shape) trains `steps` steps while round B is prepared ahead; B's first step after."""
    import tensorflow as tf

    from aiperf.hyperparameters import Hyperparameters
    from aiperf.profiles import OFFICIAL
    from worker.lookahead import Basis, LookAhead, PlannedRound
    from worker.trainer import prepare_round, run_round

    class Synthetic:
        image_size, num_classes, train_size, validation_size = 224, 1000, 16 * steps, 16

        def train(self, batch_size: int, *, seed: int = 0) -> Any:
            x = tf.random.stateless_uniform((batch_size, 224, 224, 3), (seed, 1))
            y = tf.one_hot(tf.zeros((batch_size,), tf.int32), 1000)
            return tf.data.Dataset.from_tensors((x, y)).repeat(steps)

        def validation(self, batch_size: int) -> Any:
            return self.train(batch_size).take(1)

        def train_steps(self, batch_size: int) -> int:
            return steps

    data, hyper = Synthetic(), Hyperparameters(16, 3)
    graph = OFFICIAL.base_graph()

    def plan(basis: Basis) -> PlannedRound:
        from aiperf.search import Candidate

        prepared = prepare_round(graph, hyper, data, OFFICIAL, 1, epochs=1, seed=basis.round_index)
        return PlannedRound(basis.key, Candidate(graph, None), 0, hyper, "default", prepared)

    with LookAhead(plan) as ahead:
        a = ahead.take(Basis.of(1, 1, [], {}))
        ahead.start(b_basis := Basis.of(1, 2, [], {}))
        result_a = run_round(a.prepared, on_progress=lambda p: None)
        a_end = time.monotonic()
        b = ahead.take(b_basis)
        first_b = [0.0]
        run_round(b.prepared, on_progress=lambda p: first_b.__setitem__(0, first_b[0] or time.monotonic()),
                  should_stop=lambda: first_b[0] > 0, phase_reports=True)
    step_s = result_a.timings["train"] / steps
    gap = max(0.0, first_b[0] - a_end - step_s)
    rate = result_a.images_trained / result_a.timings["train"]
    round_s = OFFICIAL_ROUND_EPOCHS * IMAGENET_TRAIN_IMAGES / rate
    return {"handover_gap_s": gap, "images_per_s": rate, "round_s": round_s, "share": gap / round_s,
            "first_step_after_s": first_b[0] - a_end, "step_s": step_s,
            "prepared_ahead": float(b.ahead), "waited_s": ahead.waited_s, "prepare_s": b.seconds}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=5.0, help="length of each demo run (default 5)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--only", choices=("on", "off"), help="one run only: with or without the look-ahead")
    parser.add_argument("--official", action="store_true", help="also the official shape's hand-over gap")
    args = parser.parse_args(argv)
    if not 0 < args.minutes <= 60:
        parser.error("--minutes must be in (0, 60]")
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    modes = {"on": [True], "off": [False]}.get(args.only or "", [True, False])
    results = {}
    with tempfile.TemporaryDirectory(prefix="aiperf-idle-bench-") as tmp:
        for on in modes:
            begin = time.monotonic()
            res = results[on] = run_demo(args.minutes, on, Path(tmp), seed=args.seed)
            label = "look-ahead on " if on else "look-ahead off"
            for s in res.shares:
                print(f"{label}: worker {s.worker_id}: {s.models} models, window {s.window_s:.0f} s, "
                      f"training {s.training_s:.0f} s ({s.share:.1%}), idle {1 - s.share:.1%}")
            if res.gaps_s:
                gaps = sorted(res.gaps_s)
                print(f"{label}: hand-overs {len(gaps)}, median {gaps[len(gaps) // 2]:.2f} s, "
                      f"max {gaps[-1]:.2f} s (last training report to the next model's first step)")
            print(f"{label}: wall {time.monotonic() - begin:.0f} s", flush=True)
    fields = []
    if True in results:
        fields.append(f"training_share={results[True].share:.3f}")
    if False in results:
        fields.append(f"training_share_without_lookahead={results[False].share:.3f}")
    if True in results and False in results and results[False].share > 0:
        fields.append(f"ratio_vs_without={results[True].share / results[False].share:.3f}")
    print("RESULT " + " ".join(fields))
    if args.official:
        o = official_handover()
        print(f"official shape: {o['images_per_s']:.1f} images/s, next round prepared in {o['prepare_s']:.0f} s "
              f"(ahead: {bool(o['prepared_ahead'])}, hand-over waited {o['waited_s']:.1f} s for it); "
              f"hand-over gap {o['handover_gap_s']:.2f} s = {o['share']:.2e} of a {OFFICIAL_ROUND_EPOCHS}-epoch "
              f"ImageNet round ({o['round_s'] / 3600:.0f} h at this rate); the next round's first step ended "
              f"{o['first_step_after_s']:.2f} s after the last one's end, a step takes {o['step_s']:.2f} s")
        print(f"RESULT handover_gap_s={o['handover_gap_s']:.3f} handover_share_of_round={o['share']:.3g}")


if __name__ == "__main__":
    main()
