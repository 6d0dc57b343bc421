"""One table of every benchmark's figures: value, baseline, ratio and goal, from their RESULT lines.

Each benchmark ends with lines ``RESULT key=value [key=value ...]``. This script
either reads benchmark outputs already written (files, or stdin with ``-``) or,
with --run, runs every benchmarks/*_bench.py itself (with its short options,
unless --full), keeping each output in --logs, and prints the table at the end.
A figure with a known goal (GOALS, docs/benchmarks.md) is checked
against it; its baseline is another key of the same output (the same process's
reference run) where there is one. docs/benchmarks.md lists the benchmarks and
their keys.

    python -m benchmarks.summary --run [--full] [--only idle,data] [--logs DIR]
    python -m benchmarks.summary out1.txt out2.txt

Exit status: 0 when every benchmark ran (exit 0) and printed a RESULT line
(or a line ``SKIP reason``: it cannot run here, e.g. an optional package is
missing), 1 otherwise. A missed goal is shown in the table, not an error: the figures of
a shared machine are what they are.
"""

from __future__ import annotations

import argparse
import math
import operator
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

HERE = Path(__file__).resolve().parent
RESULT_LINE = re.compile(r"^RESULT\s+(.*)$")
SKIP_LINE = re.compile(r"^SKIP\s+(.*)$", re.M)  # a benchmark that cannot run here says why
XLA_SUFFIX = re.compile(r"_(no)?xla$")
PAIR = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=(\S+)")

# Options that keep `make bench` short (minutes, not hours); --full drops them.
SHORT_OPTIONS: dict[str, list[str]] = {
    "idle_bench": ["--minutes", "2"],
    "data_bench": ["--short"],
    "fuzz_bench": ["--quick"],
    "fault_bench": ["--outages", "45"],
    "master_bench": ["--steps", "250,1000", "--window", "4"],
    "optuna_bench": ["--window", "5"],
    "repeatability_bench": ["--repeats", "2", "--rounds", "2", "--modes", "deterministic"],
    "validation_bench": ["--calls", "2000"],
    "recipe_bench": ["1"],
}

_OPS: dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge, "<=": operator.le, "==": operator.eq, ">": operator.gt, "<": operator.lt}


@dataclass(frozen=True)
class Goal:
    """A figure's goal (``op`` ``target``) and the key of its baseline in the same output, if any."""

    op: str          # "" : no goal, only a baseline
    target: float = 0.0
    baseline: str = ""
    note: str = ""

    def met(self, value: float) -> bool | None:
        return _OPS[self.op](value, self.target) if self.op else None

    def text(self) -> str:
        if not self.op:
            return self.note
        return f"{self.op} {self.target:g}" + (f" ({self.note})" if self.note else "")


GOALS: dict[str, Goal] = {
    "training_share": Goal(">=", 0.70, "training_share_without_lookahead", "5-min demo"),
    "data_ratio_vs_plain": Goal(">=", 0.97, "", "vs plain tf.data"),
    "images_per_cpu_second": Goal(">=", 250, "plain_images_per_cpu_second"),
    "data_ratio_nontf_vs_tfdata": Goal(">=", 0.9, "", "numpy pipeline vs the worker's tf.data"),
    "nontf_images_per_cpu_second": Goal(">=", 250),
    "production_workers_held_sqlite": Goal(">=", 10_000),
    "production_workers_held_postgres": Goal(">=", 10_000),
    "optuna_ratio_20": Goal(">=", 10.0, "", "writes/s vs Optuna's gRPC proxy"),
    "optuna_ratio_100": Goal(">=", 10.0, "", "writes/s vs Optuna's gRPC proxy"),
    "path_ratio_mixed_bf16": Goal(">=", 0.95, "", "vs keras.applications"),
    "path_ratio_mixed_fp16": Goal(">=", 0.95, "", "vs keras.applications"),
    "path_ratio_fp32": Goal(">=", 0.95, "", "vs keras.applications"),
    "gpu_util_mean": Goal(">=", 90.0, "", "NVML, % during training steps"),
    "worker_vs_keras_applications_mixed_bf16": Goal(">=", 0.95, "", "the worker's own round"),
    "worker_vs_keras_applications_mixed_fp16": Goal(">=", 0.95, "", "the worker's own round"),
    "worker_vs_keras_applications_fp32": Goal(">=", 0.95, "", "the worker's own round"),
    "efficiency_mixed_fp16": Goal(">=", 0.30, "", "of the measured fp16 GEMM rate"),
    "unknown": Goal("==", 0, "", "UNKNOWN statuses"),
    "master_deaths": Goal("==", 0),
    "models_abandoned_after_restart": Goal("==", 0, "", "master SIGKILLed, down 45 s and 90 s"),
    "acked_lost": Goal("==", 0, "", "acknowledged reports missing"),
    "internal_during_db_outage": Goal("==", 0, "", "PostgreSQL stopped; bounds at their maximum"),
    "cli_exit_during_db_outage": Goal("==", 3, "", "unavailable: try again"),
    "stolen_credential_accepted": Goal("==", 0, "", "a copy while its owner is alive, and after it restarted"),
    "max_valid_forgery_ratio": Goal("<=", 1.0, "", "no lie gains"),
    "max_covered_forgery_ratio": Goal("<=", 1.0),
    "deterministic_identical": Goal("==", 1),
    "count_flops_ms": Goal("<", 5.0, "profiler_ms"),
    "select_child_warm_s_1000": Goal("<", 2.0),
    "smoke_round3_s": Goal("", baseline="plain_fit_round3_s", note="plain model.fit"),
    "retention_ms_10000": Goal("", baseline="retention_baseline_ms_10000", note="reading the whole history"),
    "smoke_mean_best": Goal("", baseline="smoke_top1_target", note="the target's measurement"),
}


@dataclass(frozen=True)
class Row:
    benchmark: str
    key: str
    value: str
    baseline: str = ""
    ratio: str = ""
    goal: str = ""
    verdict: str = ""


def parse_results(text: str) -> dict[str, str]:
    """The ``key=value`` pairs of every RESULT line, in order (a later key wins)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        m = RESULT_LINE.match(line.strip())
        if m:
            out.update(PAIR.findall(m.group(1)))
    return out


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def goal_of(key: str) -> Goal | None:
    """A figure's goal; gpu_bench's figures measured with XLA on and off share their precision's goal."""
    return GOALS.get(key) or GOALS.get(XLA_SUFFIX.sub("", key))


def rows_for(benchmark: str, results: dict[str, str]) -> list[Row]:
    """A table row per figure; a key that is only some figure's baseline gets no row of its own."""
    baselines = {g.baseline for k, g in GOALS.items() if k in results and g.baseline}
    rows = []
    for key, value in results.items():
        if key in baselines:
            continue
        goal = goal_of(key)
        number = _number(value)
        baseline = ratio = verdict = ""
        if goal is not None and goal.baseline and goal.baseline in results:
            baseline = results[goal.baseline]
            base = _number(baseline)
            if number is not None and base:
                ratio = f"{number / base:.3g}x"
        met = goal.met(number) if goal is not None and number is not None else None
        if met is not None:
            verdict = "met" if met else "MISSED"
        rows.append(Row(benchmark, key, value, baseline, ratio, goal.text() if goal else "", verdict))
    return rows


def format_table(rows: Iterable[Row], failures: dict[str, str] | None = None) -> str:
    """A plain-text table (benchmark, figure, value, baseline, ratio, goal, verdict)."""
    header = ("benchmark", "figure", "value", "baseline", "ratio", "goal", "")
    lines = [header] + [(r.benchmark, r.key, r.value, r.baseline, r.ratio, r.goal, r.verdict) for r in rows]
    lines += [(name, "(failed)", why, "", "", "", "FAILED") for name, why in (failures or {}).items()]
    widths = [max(len(str(line[i])) for line in lines) for i in range(len(header))]
    out = []
    for n, line in enumerate(lines):
        out.append("  ".join(str(c).ljust(w) for c, w in zip(line, widths)).rstrip())
        if n == 0:
            out.append("  ".join("-" * w for w in widths).rstrip())
    return "\n".join(out)


def run_benchmarks(directory: Path, logs: Path, *, full: bool, only: set[str] | None,
                   python: str = sys.executable) -> tuple[list[Row], dict[str, str]]:
    """Run each ``*_bench.py`` of the package `directory` (streaming its output), keep it in `logs`; rows and failures."""
    logs.mkdir(parents=True, exist_ok=True)
    rows: list[Row] = []
    failures: dict[str, str] = {}
    for script in sorted(directory.glob("*_bench.py")):
        name = script.stem
        if only and name not in only and name.removesuffix("_bench") not in only:
            continue
        args = [] if full else SHORT_OPTIONS.get(name, [])
        print(f"== {name} {' '.join(args)}".rstrip(), flush=True)
        begin = time.monotonic()
        # as a module of the package `directory` is: the benchmarks import each other as benchmarks.x
        with subprocess.Popen([python, "-m", f"{directory.name}.{name}", *args], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, cwd=directory.parent) as proc:
            assert proc.stdout is not None
            captured = []
            for line in proc.stdout:
                sys.stdout.write(line)
                captured.append(line)
        text = "".join(captured)
        (logs / f"{name}.txt").write_text(text, encoding="utf-8")
        print(f"== {name}: exit {proc.returncode} in {time.monotonic() - begin:.0f} s", flush=True)
        results = parse_results(text)
        skipped = SKIP_LINE.search(text)
        if skipped and not results:
            rows.append(Row(name, "(skipped)", skipped.group(1).strip()))
        elif proc.returncode != 0:
            failures[name] = f"exit {proc.returncode}"
        elif not results:
            failures[name] = "no RESULT line"
        rows += rows_for(name, results)
    return rows, failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outputs", nargs="*", help="benchmark outputs to read ('-': stdin)")
    parser.add_argument("--run", action="store_true", help="run every benchmarks/*_bench.py first")
    parser.add_argument("--full", action="store_true", help="with --run: the benchmarks' own defaults")
    parser.add_argument("--only", default="", help="with --run: comma-separated names (idle or idle_bench)")
    parser.add_argument("--dir", type=Path, default=HERE, help="where the benchmarks are (default: here)")
    parser.add_argument("--logs", type=Path, default=Path("bench-logs"), help="with --run: where outputs go")
    args = parser.parse_args(argv)
    if args.run == bool(args.outputs):
        parser.error("give either --run or benchmark outputs")
    if args.run:
        only = {n for n in args.only.split(",") if n} or None
        rows, failures = run_benchmarks(args.dir, args.logs, full=args.full, only=only)
    else:
        rows, failures = [], {}
        for name in args.outputs:
            text = sys.stdin.read() if name == "-" else Path(name).read_text(encoding="utf-8")
            label = "stdin" if name == "-" else Path(name).stem
            results = parse_results(text)
            if not results:
                failures[label] = "no RESULT line"
            rows += rows_for(label, results)
    print()
    print(format_table(rows, failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
