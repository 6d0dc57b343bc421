"""Is a run repeatable? The same seed, run several times through the real master and worker.

Each repetition is a short smoke run on this machine, as `aiperf demo` runs it:
a fresh master on SQLite (in this process), one worker as a child process
(`python -m aiperf_cli worker --exit-when-done`), a run limited by rounds per worker
rather than by time (a deadline would cut the last round at a different point
every time). It is done once with `--deterministic` (TensorFlow op determinism,
seeded rounds) and once without, `--repeats` times each, all with one seed.

Printed per repetition: the child sequence (graph hashes in model order, per
worker, with each model's hyperparameters and accuracy), the score (the
scoreboard's, FLOPS so far: these runs are shorter than the smoke profile's
minimum running time), the best accuracy and the operations counted. Then,
per mode, whether the sequences were identical and the coefficient of
variation (sample standard deviation / mean) of score, best accuracy and
operations. Ends with RESULT lines:

    RESULT deterministic_identical=1 normal_identical=... score_cv_deterministic=... score_cv_normal=...

Usage: .venv/bin/python -m benchmarks.repeatability_bench [--repeats 3] [--rounds 3]
       [--epochs 1] [--warmup 2] [--seed 1] [--modes deterministic,normal]
About 19 minutes with the defaults on a shared 2-core CPU (six runs of 2-4 minutes);
--modes deterministic halves it; longer runs: more --rounds or --epochs.
"""

from __future__ import annotations

import argparse
import os
import statistics
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
    sequence: tuple[tuple[int, str, int, int, str], ...]  # worker, hash, batch, kernel, state
    accuracies: tuple[float, ...]
    score: float
    best_accuracy: float
    total_ops: float
    seconds: float


def one_run(args: argparse.Namespace, deterministic: bool, workdir: Path) -> Outcome:
    """A fresh master and worker, one run of `args.rounds` rounds; its models and score."""
    start = time.monotonic()
    handle = serve(MasterConfig(port=0, host="127.0.0.1", data_dir=workdir, heartbeat_interval_s=2.0,
                                stop_grace_s=60.0))
    env = dict(os.environ, AIPERF_MASTER=handle.address, AIPERF_TOKEN=handle.worker_token,
               AIPERF_WORKER_NAME="bench-worker", AIPERF_WORKER_STATE_DIR=str(workdir / "worker-state"),
               PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")
    control = ControlClient(handle.address, handle.admin_token)
    try:
        run = control.start_run(duration_s=args.duration, profile="smoke", seed=args.seed, min_workers=1,
                                max_rounds_per_worker=args.rounds, max_epochs_per_round=args.epochs,
                                warmup_rounds=args.warmup, deterministic=deterministic)
        run_id = run.config.run_id
        with open(workdir / "worker.log", "w") as log:
            worker = subprocess.run(
                [sys.executable, "-m", "aiperf_cli", "worker", "--exit-when-done", "--generator-processes", "1"],
                env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, timeout=args.timeout)
        if worker.returncode != 0:
            raise RuntimeError(f"the worker exited with {worker.returncode}; see {workdir / 'worker.log'}")
        control.stop_run(run_id, reason="bench: rounds done")
        deadline = time.monotonic() + 120
        while control.run_status(run_id).run.state not in (pb.RUN_FINISHED, pb.RUN_ABORTED):
            if time.monotonic() > deadline:
                raise RuntimeError("the run did not finish within 120 s of its stop")
            time.sleep(0.5)
        models = sorted(control.list_models(run_id, limit=1000).models, key=lambda m: m.model_id)
        board = control.scoreboard(run_id)
    finally:
        control.close()
        handle.stop()
    state = {pb.MODEL_DONE: "done", pb.MODEL_FAILED: "failed", pb.MODEL_ABANDONED: "abandoned"}
    return Outcome(
        sequence=tuple((m.worker_id, m.graph_hash, m.hyperparameters.batch_size, m.hyperparameters.kernel_size,
                        state.get(m.state, "open")) for m in models),
        accuracies=tuple(round(m.predicted_accuracy or m.best_accuracy, 6) for m in models),
        score=board.score, best_accuracy=board.best_accuracy, total_ops=board.total_ops,
        seconds=time.monotonic() - start)


def cv(values: list[float]) -> float:
    """Coefficient of variation: sample standard deviation over mean (0 for equal values)."""
    mean = statistics.fmean(values)
    return statistics.stdev(values) / mean if len(values) > 1 and mean else 0.0


def report(mode: str, outcomes: list[Outcome]) -> dict[str, float]:
    print(f"\n== {mode}: {len(outcomes)} runs ==")
    for n, o in enumerate(outcomes, 1):
        print(f"run {n} ({o.seconds:.0f} s): score {o.score:.4g} FLOPS, best accuracy {o.best_accuracy:.4f}, "
              f"{o.total_ops:.4g} operations")
        for (worker, h, batch, kernel, state), acc in zip(o.sequence, o.accuracies):
            print(f"  worker {worker}  {h[:16]}  batch {batch:4d} kernel {kernel}  {state:9s} accuracy {acc:.4f}")
    identical = all(o.sequence == outcomes[0].sequence for o in outcomes)
    same_acc = all(o.accuracies == outcomes[0].accuracies for o in outcomes)
    out = {"identical": float(identical), "accuracies_identical": float(same_acc),
           "score_cv": cv([o.score for o in outcomes]), "best_accuracy_cv": cv([o.best_accuracy for o in outcomes]),
           "ops_cv": cv([o.total_ops for o in outcomes])}
    print(f"{mode}: child sequences identical: {bool(identical)}; accuracies identical: {bool(same_acc)}; "
          f"CV score {out['score_cv']:.4f}, best accuracy {out['best_accuracy_cv']:.4f}, "
          f"operations {out['ops_cv']:.4f}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3, help="rounds per run (the worker's limit)")
    parser.add_argument("--epochs", type=int, default=1, help="epochs per round (cap)")
    parser.add_argument("--warmup", type=int, default=2, help="warm-up rounds (TPE after)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--duration", type=float, default=3600.0, help="run length in s (rounds end it first)")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds a worker may take")
    parser.add_argument("--modes", default="deterministic,normal")
    parser.add_argument("--dir", type=Path, default=None, help="keep the runs' databases and logs here")
    args = parser.parse_args()
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not modes or set(modes) - {"deterministic", "normal"} or args.repeats < 1 or args.rounds < 1:
        parser.error("--modes takes deterministic and/or normal; --repeats and --rounds must be >= 1")
    root = args.dir or Path(tempfile.mkdtemp(prefix="aiperf-repeatability-"))
    print(f"smoke profile, seed {args.seed}, {args.rounds} rounds of at most {args.epochs} epoch(s), "
          f"warm-up {args.warmup}, {args.repeats} runs per mode; files in {root}")
    results = {}
    for mode in modes:
        outcomes = [one_run(args, mode == "deterministic", root / f"{mode}-{n}") for n in range(args.repeats)]
        results[mode] = report(mode, outcomes)
    fields = []
    for mode, r in results.items():
        fields += [f"{mode}_identical={int(r['identical'])}", f"score_cv_{mode}={r['score_cv']:.4f}",
                   f"best_accuracy_cv_{mode}={r['best_accuracy_cv']:.4f}"]
    print("\nRESULT " + " ".join(fields))
    if "deterministic" in results:
        print(f"RESULT deterministic_identical={int(results['deterministic']['identical'])} "
              f"score_cv={results.get('normal', results['deterministic'])['score_cv']:.4f}")


if __name__ == "__main__":
    main()
