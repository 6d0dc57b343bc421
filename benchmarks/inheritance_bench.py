"""Does weight inheritance pay? Two smoke runs of equal length and seed, with and without it.

Each run is a smoke run on this machine as `aiperf demo` runs it: a fresh master on
SQLite (in this process), one worker as a child process (`python -m aiperf_cli worker
--exit-when-done`, its checkpoint store in the run's directory), a run of
`--minutes` on the master's clock (the clock starts when the worker is alive).
The only difference between the two runs is `--no-inherit`.

Printed per run: the best validation accuracy observed by each multiple of
`--step` seconds of run time (from the master's time line: equal wall time for
both runs), the models done, how many of them inherited their parent's weights,
and every model (parent, inherited_from, epochs, accuracy). Ends with RESULT lines:

    RESULT inherit_best_accuracy=... scratch_best_accuracy=... inherit_models_done=... scratch_models_done=...
    RESULT inherited_models=... at_s=... inherit_best_at=... scratch_best_at=...

One seed and two short runs on a shared CPU say little about the general case:
the figures are what this machine showed, not a law (report them as such).

Usage: .venv/bin/python -m benchmarks.inheritance_bench [--minutes 2.5] [--seed 1] [--epochs 1]
       [--warmup 2] [--step 30] [--dir DIR]
About 2 × (minutes + 1) minutes (worker start-up and the last round's stop).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from aiperf.api import aiperf_pb2 as pb
from aiperf.api.client import ControlClient
from master.server import MasterConfig, serve

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Outcome:
    curve: tuple[tuple[float, float | None], ...]  # (elapsed s, best accuracy by then)
    models: tuple[pb.Model, ...]
    best_accuracy: float
    seconds: float

    @property
    def done(self) -> int:
        return sum(1 for m in self.models if m.state == pb.MODEL_DONE)

    @property
    def inherited(self) -> int:
        return sum(1 for m in self.models if m.inherited_from)

    def best_at(self, t: float) -> float | None:
        """Best accuracy observed by `t` seconds of run time (None: none yet)."""
        best = None
        for elapsed, acc in self.curve:
            if elapsed <= t and acc is not None:
                best = acc if best is None else max(best, acc)
        return best


def one_run(args: argparse.Namespace, inherit: bool, workdir: Path) -> Outcome:
    """A fresh master and worker, one run of `args.minutes`; its time line and models."""
    start = time.monotonic()
    workdir.mkdir(parents=True, exist_ok=True)
    # heartbeats every 5 s (lost after 15 s): on a loaded machine a 2 s interval loses the worker
    handle = serve(MasterConfig(port=0, host="127.0.0.1", data_dir=workdir, heartbeat_interval_s=5.0,
                                stop_grace_s=5.0))
    env = dict(os.environ, AIPERF_MASTER=handle.address, AIPERF_TOKEN=handle.worker_token,
               AIPERF_WORKER_NAME="bench-worker", AIPERF_WORKER_STATE_DIR=str(workdir / "worker-state"),
               AIPERF_CHECKPOINTS=str(workdir / "checkpoints"), PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")
    control = ControlClient(handle.address, handle.admin_token)
    try:
        run = control.start_run(duration_s=args.minutes * 60, profile="smoke", seed=args.seed, min_workers=1,
                                max_epochs_per_round=args.epochs, warmup_rounds=args.warmup, inherit=inherit)
        run_id = run.config.run_id
        with open(workdir / "worker.log", "w") as log:
            worker = subprocess.run(
                [sys.executable, "-m", "aiperf_cli", "worker", "--exit-when-done", "--generator-processes", "1",
                 "--no-measure-peak"],
                env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, timeout=args.minutes * 60 + 600)
        if worker.returncode != 0:
            raise RuntimeError(f"the worker exited with {worker.returncode}; see {workdir / 'worker.log'}")
        deadline = time.monotonic() + 120
        while control.run_status(run_id).run.state not in (pb.RUN_FINISHED, pb.RUN_ABORTED):
            if time.monotonic() > deadline:
                raise RuntimeError("the run did not finish within 120 s of the worker's exit")
            time.sleep(0.5)
        models = tuple(sorted(control.list_models(run_id, limit=1000).models, key=lambda m: m.model_id))
        timeline = control.timeline(run_id)
        board = control.scoreboard(run_id)
    finally:
        control.close()
        handle.stop()
    curve = tuple((p.elapsed_s, p.best_accuracy if p.has_accuracy else None) for p in timeline.points)
    return Outcome(curve, models, board.best_accuracy if board.error < 1.0 else 0.0, time.monotonic() - start)


def report(name: str, o: Outcome, steps: list[float]) -> None:
    print(f"\n== {name} ({o.seconds:.0f} s in all) ==")
    print(f"models done {o.done}, inherited {o.inherited}, best accuracy {o.best_accuracy:.4f}")
    print("best accuracy by run time: " + ", ".join(
        f"{t:.0f} s: {'-' if o.best_at(t) is None else f'{o.best_at(t):.4f}'}" for t in steps))
    state = {pb.MODEL_DONE: "done", pb.MODEL_FAILED: "failed", pb.MODEL_ABANDONED: "abandoned"}
    for m in o.models:
        acc = f"{m.best_accuracy:.4f}" if m.has_accuracy else "-"
        print(f"  model {m.model_id:3d} parent {m.parent_id:3d} inherited_from {m.inherited_from:3d} "
              f"kernel {m.hyperparameters.kernel_size} epochs {m.epochs} {state.get(m.state, 'open'):9s} "
              f"accuracy {acc}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=2.5, help="length of each run (master's clock)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--epochs", type=int, default=1, help="epochs per round (cap)")
    parser.add_argument("--warmup", type=int, default=2, help="warm-up rounds (TPE after)")
    parser.add_argument("--step", type=float, default=30.0, help="seconds between the compared points")
    parser.add_argument("--dir", type=Path, default=None, help="keep the runs' databases, logs and checkpoints")
    args = parser.parse_args()
    if args.minutes <= 0 or args.step <= 0 or args.epochs < 1:
        parser.error("--minutes and --step must be > 0, --epochs >= 1")
    root = args.dir or Path(tempfile.mkdtemp(prefix="aiperf-inheritance-"))
    print(f"smoke profile, seed {args.seed}, {args.minutes:g} min per run, rounds of at most {args.epochs} "
          f"epoch(s), warm-up {args.warmup}; files in {root}")
    inherit = one_run(args, True, root / "inherit")
    scratch = one_run(args, False, root / "scratch")
    length = args.minutes * 60
    steps = [min(length, args.step * n) for n in range(1, int(length // args.step) + 1)]
    if not steps or steps[-1] < length:
        steps.append(length)
    report("with inheritance", inherit, steps)
    report("from scratch (--no-inherit)", scratch, steps)
    fmt = lambda v: "nan" if v is None else f"{v:.4f}"  # noqa: E731
    print(f"\nRESULT inherit_best_accuracy={inherit.best_accuracy:.4f} scratch_best_accuracy={scratch.best_accuracy:.4f} "
          f"inherit_models_done={inherit.done} scratch_models_done={scratch.done}")
    half = steps[len(steps) // 2 - 1] if len(steps) > 1 else steps[0]
    print(f"RESULT inherited_models={inherit.inherited} at_s={half:.0f} inherit_best_at={fmt(inherit.best_at(half))} "
          f"scratch_best_at={fmt(scratch.best_at(half))}")


if __name__ == "__main__":
    main()
