"""The benchmark end to end on the machine it runs on: master, worker, audit, scoreboard, report.

On a GPU node (NVIDIA H100/H200 with JAX and no TensorFlow, the machines we can
borrow): a synthetic ImageNet-shaped dataset is written there (JPEGs in the
worker's ``imagenet-folder`` layout, --classes folders); a master on SQLite
(`aiperf master serve`) and one worker using every local accelerator (`aiperf
worker --backend jax`) run an official-shape run (--profile official: the
ResNet-50 seed at 224 px, mixed precision with XLA, the profile's batch sizes
for the accelerator's memory, its morphisms and TPE) shortened by explicit
overrides (--rounds rounds of at most --epochs epochs, --warmup-rounds warm-up
rounds, then stopped), which the master lists as reasons the run is
unofficial. Then `aiperf audit --top 1` times the best model's steps and
re-evaluates its weights on the same accelerator, `aiperf scoreboard --json`
and `aiperf report`; last, `benchmarks/gpu_bench.py` measures
keras.applications' ResNet-50 at the seed round's batch and precision in the
same call, the baseline of the worker's own rate.

Figures, from the master's own records (progress reports with phase reports,
so the intervals in training steps are known; NVML samples the worker sent):

    RESULT gpu_train_images_per_s=<the seed round's images/s in its training steps>
           gpu_train_images_per_s_all=<every round's> gpu_vs_bench_ratio=<seed round / keras.applications>
           gpu_util_training_mean=<% NVML busy during training steps> gpu_handover_gap_s=<median>
           audit_verdict=<...> peak_verdict=<...> efficiency_datasheet=<score / datasheet peak>

Goals (docs/benchmarks.md "GPU figures"): ratio >= 0.9, utilisation >= 90,
peak_verdict checked on an H100/H200. Each figure is appended to
<out>/figures.jsonl as soon as it is known and the RESULT line is printed and
written (<out>/result.txt) at the end, so a run cut short keeps what it
measured; no phase starts after its share of --budget-s.

Without an NVIDIA accelerator it prints SKIP and exits 2, unless --allow-cpu
(the suite's rehearsal: tests/test_gpu_e2e.py, the smoke profile at a tiny shape).

Usage: python -m benchmarks.gpu_e2e --out DIR [--work DIR] [--data DIR] [--backend jax] [--budget-s 480]
       [--train-images 16000] [--val-images 2000] [--classes 1000] [--image-px 256]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sqlite3
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.idle_bench import handover_gaps, training_spans
from benchmarks.synthetic_imagenet import write_dataset

ROOT = Path(__file__).resolve().parents[1]


class Recorder:
    """Figures appended to <out>/figures.jsonl as they are known; the RESULT pairs kept in order."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.results: dict[str, str] = {}
        self.started = time.monotonic()

    def note(self, what: str, **figures: Any) -> None:
        entry = {"t_s": round(time.monotonic() - self.started, 1), "what": what, **figures}
        with (self.out / "figures.jsonl").open("a") as f:
            f.write(json.dumps(entry) + "\n")
        print(f"[{entry['t_s']:7.1f} s] {what} {json.dumps(figures)}", flush=True)

    def result(self, key: str, value: Any) -> None:
        self.results[key] = f"{value:.4g}" if isinstance(value, float) else str(value).replace(" ", "_")
        self.note("result", **{key: self.results[key]})

    def finish(self) -> None:
        line = "RESULT " + " ".join(f"{k}={v}" for k, v in self.results.items())
        (self.out / "result.txt").write_text(line + "\n")
        print(line, flush=True)


class Cluster:
    """A master (`aiperf master serve`) and one worker (`aiperf worker`) as child processes."""

    def __init__(self, args: argparse.Namespace, out: Path) -> None:
        self.args, self.out = args, out
        self.master_dir = out / "master"
        self.env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=os.pathsep.join(
            p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p))
        self.procs: list[subprocess.Popen[Any]] = []
        self.address = ""

    def cli(self, *argv: str, timeout: float, log: str = "cli.log") -> subprocess.CompletedProcess[str]:
        """One `aiperf` command against the master; its output appended to <out>/<log>."""
        env = dict(self.env, AIPERF_MASTER=self.address,
                   AIPERF_ADMIN_TOKEN_FILE=str(self.master_dir / "admin.token"))
        done = subprocess.run([sys.executable, "-m", "aiperf_cli", *argv], env=env, text=True,
                              capture_output=True, timeout=timeout)
        with (self.out / log).open("a") as f:
            f.write(f"$ aiperf {' '.join(argv)}  -> exit {done.returncode}\n{done.stdout}{done.stderr}\n")
        return done

    def start_master(self) -> None:
        port = _free_port()
        self.address = f"127.0.0.1:{port}"
        self._spawn("master.log", "master", "serve", "--data-dir", str(self.master_dir), "--host", "127.0.0.1",
                    "--port", str(port), "--heartbeat-interval", "2", "--stop-grace", "60")
        deadline = time.monotonic() + 60
        while not (self.master_dir / "admin.token").exists() or not _listening(port):
            if time.monotonic() > deadline or self.procs[-1].poll() is not None:
                raise RuntimeError(f"the master did not start; see {self.out / 'master.log'}")
            time.sleep(0.2)

    def start_worker(self, data: Path) -> subprocess.Popen[Any]:
        a = self.args
        return self._spawn("worker.log", "worker", "--master", self.address, "--token-file",
                           str(self.master_dir / "worker.token"), "--name", "gpu-e2e", "--backend", a.backend,
                           "--dataset", str(data), "--dataset-format", "imagenet-folder", "--exit-when-done",
                           "--phase-reports", "--input-pipeline-cpus", str(a.input_cpus),
                           "--state-dir", str(a.work / "worker-state"),
                           "--checkpoints", str(a.work / "checkpoints"))

    def _spawn(self, log: str, *argv: str) -> subprocess.Popen[Any]:
        with (self.out / log).open("w") as f:
            proc = subprocess.Popen([sys.executable, "-m", "aiperf_cli", *argv], env=self.env, stdout=f,
                                    stderr=subprocess.STDOUT)
        self.procs.append(proc)
        return proc

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def run_benchmark(args: argparse.Namespace, cluster: Cluster, rec: Recorder) -> int | None:
    """Start the shortened run, watch it until its rounds are done or its share of the budget is
    spent, then stop it; its id (None: it never started)."""
    from aiperf.api import aiperf_pb2 as pb
    from aiperf.api.client import ControlClient

    token = (cluster.master_dir / "admin.token").read_text().strip()
    with ControlClient(cluster.address, token) as control:
        run = control.start_run(duration_s=args.duration_s, profile=args.profile, seed=args.seed,
                                max_rounds_per_worker=args.rounds, max_epochs_per_round=args.epochs,
                                warmup_rounds=args.warmup_rounds, min_workers=1,
                                report_interval_s=1.0, resource_interval_s=1.0)
        run_id = run.config.run_id
        rec.note("run_started", run_id=run_id, profile=args.profile)
        worker = cluster.start_worker(args.data)
        deadline = rec.started + args.budget_s * args.run_share
        with (cluster.out / "progress.jsonl").open("a") as progress:
            while True:
                sb = control.scoreboard(run_id)
                progress.write(json.dumps({"t_s": round(time.monotonic() - rec.started, 1),
                                           "state": pb.RunState.Name(sb.run.state), "models_done": sb.models_done,
                                           "images_trained": sb.images_trained, "flops": sb.flops}) + "\n")
                progress.flush()
                if sb.run.state in (pb.RUN_FINISHED, pb.RUN_ABORTED):
                    break
                finished = sum(c.count for c in sb.models if c.state not in (pb.MODEL_QUEUED, pb.MODEL_TRAINING))
                why = ("rounds done" if finished >= args.rounds else
                       "worker exited" if worker.poll() is not None else
                       "budget" if time.monotonic() > deadline else "")
                if why and sb.run.state == pb.RUN_RUNNING:
                    rec.note("stopping", reason=why, models_finished=finished)
                    control.stop_run(run_id, reason=f"gpu_e2e: {why}")
                time.sleep(2.0)
        try:
            worker.wait(timeout=90)  # --exit-when-done: it leaves once the run is over
        except subprocess.TimeoutExpired:
            worker.terminate()
            worker.wait(timeout=60)
        rec.note("worker_exited", code=worker.returncode)
    return run_id


def training_figures(db: Path, run_id: int, rec: Recorder) -> tuple[int, str]:
    """Images/s in training steps, NVML busy during them and hand-over gaps, from the master's
    database; (the seed round's batch, the run's precision) for the baseline."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as con:
        rows = con.execute("SELECT model_id, worker_id, t, images_trained, images_validated FROM progress "
                           "WHERE run_id = ? ORDER BY model_id, seq", (run_id,)).fetchall()
        models = con.execute("SELECT id, round, batch_size, state, epochs, parent_id, inherited_from, reason FROM models "
                             "WHERE run_id = ? ORDER BY id", (run_id,)).fetchall()
        samples = con.execute("SELECT t, accelerator_util FROM resource_samples WHERE run_id = ? AND "
                              "accelerator_index >= 0", (run_id,)).fetchall()
        (precision,) = con.execute("SELECT precision FROM runs WHERE id = ?", (run_id,)).fetchone()
    rec.note("models", models=[dict(zip(("id", "round", "batch", "state", "epochs", "parent", "inherited_from",
                                         "reason"), m)) for m in models])
    spans = training_spans(rows)  # the rule of benchmarks/idle_bench.py's shares
    images: dict[int, int] = {}
    for model, _start, _end, trained in spans:
        images[model] = images.get(model, 0) + trained
    seed_model = next((m[0] for m in models if m[1] == 1), None)
    per_model = {m: (images[m], sum(b - a for mm, a, b, _ in spans if mm == m)) for m in images}
    if seed_model in per_model and per_model[seed_model][1] > 0:
        rec.result("gpu_train_images_per_s", per_model[seed_model][0] / per_model[seed_model][1])
    total_s = sum(s for _, s in per_model.values())
    if total_s > 0:
        rec.result("gpu_train_images_per_s_all", sum(i for i, _ in per_model.values()) / total_s)
    busy = [u * 100 for t, u in samples if any(a <= t <= b for _, a, b, _ in spans)]
    if busy:
        rec.result("gpu_util_training_mean", statistics.fmean(busy))
    gaps = handover_gaps(sorted(rows, key=lambda r: (r[2], r[0])))
    if gaps:
        rec.note("handover_gaps_s", gaps=[round(g, 2) for g in gaps])
        rec.result("gpu_handover_gap_s", statistics.median(gaps))
    seed_batch = next((m[2] for m in models if m[1] == 1), 0)
    return seed_batch, precision


def board_figures(cluster: Cluster, rec: Recorder) -> None:
    """`aiperf scoreboard --json` (kept as scoreboard.json): the peak check and datasheet efficiency."""
    done = cluster.cli("scoreboard", "--json", timeout=120)
    if done.returncode != 0:
        rec.note("scoreboard_failed", code=done.returncode)
        return
    board = json.loads(done.stdout)
    (cluster.out / "scoreboard.json").write_text(json.dumps(board, indent=1))
    rec.note("scoreboard", score=board.get("score"), valid=board.get("valid"),
             unofficial_reasons=board.get("unofficial_reasons"), invalid_reason=board.get("invalid_reason"))
    rec.result("peak_verdict", board.get("peak_verdict") or "none")
    eff = board.get("efficiency")
    rec.result("efficiency_datasheet", float(eff) if eff is not None else "none")


def audit_figures(args: argparse.Namespace, cluster: Cluster, rec: Recorder) -> None:
    """`aiperf audit --top 1` on this machine's accelerator: timed steps and the weights' accuracy."""
    done = cluster.cli("audit", "--top", "1", "--backend", args.backend, "--dataset", str(args.data),
                       "--dataset-format", "imagenet-folder", "--scratch", str(args.work / "scratch"), "--json",
                       timeout=args.budget_s * 0.25, log="audit.log")
    if done.returncode != 0:
        rec.note("audit_failed", code=done.returncode, stderr=done.stderr[-400:])
        rec.result("audit_verdict", f"failed_exit_{done.returncode}")
        return
    rows = json.loads(done.stdout)["audits"]
    (cluster.out / "audit.json").write_text(json.dumps(rows, indent=1))
    for row in rows:
        rec.note("audit", model=row["model_id"], verdict=row["verdict"], throughput=row["throughput"],
                 claimed=row["claimed_images_per_second"], audited=row["audited_images_per_second"])
    rec.result("audit_verdict", rows[0]["verdict"] if rows else "no_model")
    if rows and rows[0]["throughput"]:
        rec.result("audit_throughput", rows[0]["throughput"])


def baseline_figures(args: argparse.Namespace, cluster: Cluster, rec: Recorder, batch: int, precision: str) -> None:
    """benchmarks/gpu_bench.py's keras.applications ResNet-50 at the seed round's batch and precision."""
    out = cluster.out / "gpu_bench.jsonl"
    argv = [sys.executable, "-m", "benchmarks.gpu_bench", "--paths", "keras", "--precisions", precision,
            "--batch", str(batch), "--size", str(args.bench_size), "--classes", str(args.bench_classes),
            "--gemm-types", "", "--xla", "on", "--seconds", str(args.bench_seconds), "--windows", "2",
            "--out", str(out)] + (["--allow-cpu"] if args.allow_cpu else [])
    with (cluster.out / "gpu_bench.log").open("w") as log:
        try:
            subprocess.run(argv, env=cluster.env, stdout=log, stderr=subprocess.STDOUT, timeout=args.budget_s * 0.25)
        except subprocess.TimeoutExpired:  # what it measured is in its --out already
            rec.note("baseline_timeout", seconds=args.budget_s * 0.25)
    rates = [e["images_per_s"] for e in map(json.loads, out.read_text().splitlines()) if e.get("train") == "keras"] \
        if out.exists() else []
    if not rates:
        rec.note("baseline_failed")
        return
    rec.note("baseline", keras_applications_images_per_s=rates[0], batch=batch, precision=precision)
    seed = rec.results.get("gpu_train_images_per_s")
    if seed is not None:
        rec.result("gpu_vs_bench_ratio", float(seed) / rates[0])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True, help="where every file and figure goes")
    p.add_argument("--work", type=Path, help="where the bulky files go: the dataset, checkpoints, the audit's "
                   "scratch (default: --out)")
    p.add_argument("--data", type=Path, help="where the synthetic dataset is written (default: <work>/data)")
    p.add_argument("--backend", choices=("jax", "tensorflow"), default="jax")
    p.add_argument("--profile", choices=("official", "smoke"), default="official")
    p.add_argument("--rounds", type=int, default=3, help="rounds of the worker (>= 2: one child inherits)")
    p.add_argument("--epochs", type=int, default=3, help="epochs per round at most")
    p.add_argument("--warmup-rounds", type=int, default=2, help="so that the rounds after use TPE")
    p.add_argument("--duration-s", type=float, default=3600.0, help="the run's length; it is stopped earlier")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--train-images", type=int, default=16000, help="on a GPU: rounded to whole seed batches")
    p.add_argument("--val-images", type=int, default=2000, help="on a GPU: rounded to whole seed batches")
    p.add_argument("--classes", type=int, default=1000)
    p.add_argument("--image-px", type=int, default=256, help="side of the JPEGs (cropped to the profile's input)")
    p.add_argument("--input-cpus", type=int, default=max(1, (os.cpu_count() or 2) * 3 // 4),
                   help="the worker's input-pipeline CPUs")
    p.add_argument("--bench-size", type=int, default=224, help="gpu_bench's input side (the profile's)")
    p.add_argument("--bench-classes", type=int, default=1000)
    p.add_argument("--bench-seconds", type=float, default=2.0)
    p.add_argument("--budget-s", type=float, default=480.0, help="the whole script's wall time")
    p.add_argument("--run-share", type=float, default=0.6, help="share of the budget for the run itself")
    p.add_argument("--allow-cpu", action="store_true", help="run without an NVIDIA accelerator (rehearsal)")
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    args.work = args.work or args.out
    args.data = args.data or args.work / "data"
    rec = Recorder(args.out)
    accelerators = _accelerators()
    if not accelerators and not args.allow_cpu:
        print("SKIP no NVIDIA accelerator visible through NVML (--allow-cpu rehearses on the CPU)")
        return 2
    rec.note("machine", accelerators=accelerators, cpus=os.cpu_count(), backend=args.backend)
    if accelerators:
        _align_to_seed_batch(args, accelerators)
    made = write_dataset(args.data, args.classes, args.train_images, args.val_images, args.image_px)
    rec.note("dataset", **made)
    cluster = Cluster(args, args.out)
    try:
        cluster.start_master()
        run_id = run_benchmark(args, cluster, rec)
        batch, precision = training_figures(cluster.master_dir / "master.db", run_id, rec)
        board_figures(cluster, rec)
        audit_figures(args, cluster, rec)
        board_figures(cluster, rec)  # with the audit's verdict
        cluster.cli("report", "--out", str(args.out / "report.html"), timeout=120)
        if batch and time.monotonic() - rec.started < args.budget_s * 0.85:
            baseline_figures(args, cluster, rec, batch, precision)
    finally:
        cluster.stop()
        rec.finish()
    return 0


def _align_to_seed_batch(args: argparse.Namespace, accelerators: list[tuple[str, int]]) -> None:
    """Splits of whole global batches of the seed round. A partial last batch is another shape, whose
    step JAX compiles while the epoch runs (worker/jax_steps.py): harmless in an ImageNet epoch of
    minutes, but on a split of a few seconds the epoch would wait for that compilation."""
    from aiperf.profiles import get_profile

    per_device = get_profile(args.profile).for_accelerator_memory(min(m for _, m in accelerators)).batch_size
    batch = per_device * len(accelerators)
    args.train_images = max(1, round(args.train_images / batch)) * batch
    args.val_images = max(1, round(args.val_images / batch)) * batch


def _accelerators() -> list[tuple[str, int]]:
    """The NVIDIA accelerators NVML sees, (name, memory bytes) each (none: an empty list)."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # no library, no driver: no NVIDIA accelerator here
        return []
    try:
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        return [(str(pynvml.nvmlDeviceGetName(h)), int(pynvml.nvmlDeviceGetMemoryInfo(h).total)) for h in handles]
    finally:
        pynvml.nvmlShutdown()


if __name__ == "__main__":
    sys.exit(main())
