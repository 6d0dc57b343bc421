"""The rules a run is scored and checked by, read from its records: pure functions.

The Master (master/core/master.py) calls these; they take plain records and
return plain values, so they are tested without a server.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Protocol

from aiperf import limits, scoring
from aiperf import peaks as peak_checks
from aiperf.graph import Graph, GraphError
from aiperf.morphism import Limits
from aiperf.precision import GEMM_DTYPES, PRECISIONS
from aiperf.profiles import PROFILES as PROFILES_BY_NAME
from master.core.budget import Ceiling, ceiling_of
from master.store.errors import InvalidArgument
from master.store.protocol import RunStore, RunWorkerStore, WorkerStore
from master.store.records import RunRecord, RunWorker, WorkerInput


def _run_dtype(run: RunRecord) -> str | None:
    return PRECISIONS[run.precision].gemm_dtype if run.precision in PRECISIONS else None


def _check_of(a: dict[str, Any], dtype: str | None) -> dict[str, Any] | None:
    """The recorded check of an accelerator's rate of `dtype`; one made now for a
    record from before checks were recorded; None when no rate was measured."""
    if dtype is None:
        return None
    recorded: dict[str, Any] | None = a.get("peak_checks", {}).get(dtype)
    if recorded is not None:
        return recorded
    return next((c for d, c in checked_rates(a).items() if d == dtype), None)


def checked_rates(a: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every measured rate of an accelerator checked against its datasheet
    (aiperf/peaks.py): compute type -> the PeakCheck as a dict. The single
    `peak_flops` of an older worker stands for every compute type it did not measure."""
    rates = dict(a.get("peak_flops_by_dtype", {}))
    if a.get("peak_flops", 0.0) > 0:
        rates = {dtype: a["peak_flops"] for dtype in GEMM_DTYPES} | rates
    model = str(a.get("model", ""))[:limits.MAX_MODEL_NAME_CHARS]
    return {dtype: peak_checks.check_peak(model, dtype, rate).to_dict()
            for dtype, rate in sorted(rates.items()) if rate > 0}


def checked_cpu_rates(cpus: int, rates: dict[str, float]) -> dict[str, dict[str, Any]]:
    """A CPU's measured rates checked against the physical bound of `cpus` logical
    CPUs (aiperf/peaks.py check_cpu_peak): compute type -> the PeakCheck as a dict."""
    return {dtype: peak_checks.check_cpu_peak(min(max(1, cpus), limits.MAX_CPUS), dtype, rate).to_dict()
            for dtype, rate in sorted(rates.items()) if rate > 0}


def with_checked_peaks(info: WorkerInput) -> WorkerInput:
    """The worker with every accelerator's measured rates checked and the checks
    recorded in its inventory ("peak_checks"): efficiency and the sum of peaks use
    the accepted rates, never the claimed ones. A worker without accelerators keeps
    its CPU's rates, checked the same way; a worker with accelerators has no CPU peak."""
    cpu_rates = dict(info.cpu.get("peak_flops_by_dtype", {})) if not info.accelerators else {}
    cpu = {"peak_flops_by_dtype": cpu_rates, "peak_checks": checked_cpu_rates(info.cpus, cpu_rates)} if cpu_rates else {}
    if info.cpu.get("model") and not info.accelerators:  # the hardware an audit must time on
        cpu["model"] = info.cpu["model"]
    return replace(info, accelerators=[{**a, "peak_checks": checked_rates(a)} for a in info.accelerators], cpu=cpu)


def _cpu_check(cpu: dict[str, Any], dtype: str | None) -> dict[str, Any] | None:
    return cpu.get("peak_checks", {}).get(dtype) if dtype is not None else None


def _worker_checks(accelerators: list[dict[str, Any]], cpu: dict[str, Any], dtype: str | None) -> list[dict[str, Any] | None]:
    """The check behind each peak of one worker: one per accelerator, or its CPU's when it has none."""
    if accelerators:
        return [_check_of(a, dtype) for a in accelerators]
    return [_cpu_check(cpu, dtype)] if "peak_checks" in cpu else []


def accelerator_peaks(run: RunRecord, joined: list[RunWorker]) -> list[float]:
    """The accepted GEMM peak of every accelerator that took part (a worker without
    accelerators: its CPU), for the run's precision (0: unknown): the measured rate,
    capped at its datasheet (or physical) bound."""
    dtype = _run_dtype(run)
    return [float(c["accepted_flops"]) if c is not None else 0.0 for rw in joined
            for c in _worker_checks(rw.inventory.get("accelerators", []), rw.inventory.get("cpu", {}), dtype)]


@dataclass(frozen=True)
class DatasheetPeaks:
    """The datasheet peaks (Rpeak) of a run's accelerators at its compute type: the
    efficiency's denominator, known only when every accelerator has an entry."""

    figures: tuple[float | None, ...]  # one per accelerator (a worker without one: its CPU); None: no entry
    unknown_reason: str  # why there is no total ("no datasheet entry for ..."); "" when there is

    @property
    def total(self) -> float | None:
        return None if self.unknown_reason else sum(f for f in self.figures if f is not None)

    def for_scoring(self) -> list[float]:
        """The figures as `scoring.score_run` takes them (0: unknown, which leaves no efficiency)."""
        return [f or 0.0 for f in self.figures]


def datasheet_peaks(run: RunRecord, joined: list[RunWorker]) -> DatasheetPeaks:
    """Every accelerator that took part, by its recorded model name, looked up in the
    datasheet table (aiperf/peaks.py) at the run's compute type. A worker without
    accelerators stands for its CPU, which has no datasheet entry. A run mixing
    accelerators with and without an entry has no total: a sum over part of the
    hardware would rate all the work against part of it."""
    dtype = _run_dtype(run)
    if dtype is None:
        return DatasheetPeaks((), f"precision {run.precision} has no GEMM compute type to look up")
    figures: list[float | None] = []
    missing: set[str] = set()
    for rw in joined:
        accelerators = rw.inventory.get("accelerators", [])
        if not accelerators:
            cpu_model = str(rw.inventory.get("cpu", {}).get("model", ""))[:limits.MAX_MODEL_NAME_CHARS]
            missing.add(f"CPU ({cpu_model})" if cpu_model else "CPU")
            figures.append(None)
        for a in accelerators:
            model = str(a.get("model", ""))[:limits.MAX_MODEL_NAME_CHARS]
            figure = peak_checks.datasheet_peak(model, dtype)
            if figure is None:
                missing.add(model or "an unnamed accelerator")
            figures.append(figure)
    if missing:
        named = sorted(missing)[:limits.MAX_NAMED_WITHOUT_DATASHEET]
        more = len(missing) - len(named)
        return DatasheetPeaks(tuple(figures), "no datasheet entry for " + ", ".join(named)
                              + (f" and {more} more" if more else ""))
    return DatasheetPeaks(tuple(figures), "" if figures else "no accelerator took part")


def worker_peak(run: RunRecord, accelerators: list[dict[str, Any]], cpu: dict[str, Any] | None = None) -> float:
    """The sum of a worker's accepted peaks for the run's precision (0: none known)."""
    checks = _worker_checks(accelerators, cpu or {}, _run_dtype(run))
    return sum(float(c["accepted_flops"]) for c in checks if c is not None)


def worker_ceiling(run: RunRecord, worker: WorkerInput) -> Ceiling:
    """A worker's ceiling rate in a run: the sum of its accelerators' bounds for the run's
    precision (`accelerator_bounds`: the accepted peak, or the datasheet table's fastest
    entry where none is known), from its registered inventory (what it joins the run with; a
    re-registration clears the cached ceiling). A worker without accelerators is bounded by its CPUs' physical bound, not by
    its measured rate: the rate is unverified (a liar names any rate up to that
    bound), and a CPU shared with other jobs may measure low at start and train
    faster later, so bounding by it would only refuse honest reports."""
    dtype = _run_dtype(run)
    if not worker.accelerators:
        return ceiling_of(cpu_bound(worker.cpus), 0)
    return ceiling_of(sum(accelerator_bounds(worker.accelerators, dtype)), len(worker.accelerators))


def accelerator_bounds(accelerators: list[dict[str, Any]], dtype: str | None) -> list[float]:
    """Each accelerator's bound at `dtype`: its accepted peak, never above the datasheet table's
    fastest entry for the compute type, which also bounds one without a measured rate (0 for
    all when the run has no GEMM compute type: the constant ceiling applies)."""
    if dtype is None:
        return [0.0 for _ in accelerators]
    top = peak_checks.largest_bound(dtype)
    return [min(float(c["accepted_flops"]), top) if c is not None else top
            for c in (_check_of(a, dtype) for a in accelerators)]


def peak_bounds(run: RunRecord, joined: list[RunWorker]) -> list[float]:
    """What bounds the work of every accelerator that took part (a worker without one: its CPU's
    physical bound): the score-over-peak rule holds even where a peak is unknown."""
    dtype = _run_dtype(run)
    out: list[float] = []
    for rw in joined:
        accelerators = rw.inventory.get("accelerators", [])
        if accelerators:
            out += accelerator_bounds(accelerators, dtype)
        else:
            out.append(cpu_bound(int(rw.inventory.get("cpus", 0))))
    return out


def cpu_bound(cpus: int) -> float:
    """The physical bound of a worker without accelerators: its logical CPUs (at least one, at
    most MAX_CPUS) at the fastest rate a CPU core reaches (aiperf/peaks.py)."""
    return min(max(1, cpus), limits.MAX_CPUS) * peak_checks.CPU_MAX_FLOPS_PER_CPU


class _BudgetStore(RunStore, WorkerStore, RunWorkerStore, Protocol):
    """What worker_budget reads: the run, the worker and its operations in the run."""


def worker_budget(store: _BudgetStore, worker_id: int, run_id: int) -> tuple[Ceiling, float, int]:
    """What a worker's budget in a run starts from: its ceiling, when it could start
    working, max(its registration, the run's start), and the operations of its
    reports in the run so far. One worker's row, not the run's list of workers: every
    worker's first heartbeat in a run reads it (10,000 at a run's start)."""
    run = store.get_run(run_id)
    worker = store.get_worker(worker_id)
    started = run.started_at if run.started_at is not None else run.created_at
    return (worker_ceiling(run, worker), max(worker.registered_at, started),
            store.worker_run_ops(run_id, worker_id))


UNVERIFIED_PEAK = "unverified peak"


def peak_verdict(run: RunRecord, joined: list[RunWorker]) -> str:
    """What the scoreboard says of the peaks behind the efficiency: "unverified
    peak" when any accelerator is not in the datasheet table, "capped" when any
    claimed more than its datasheet allows, "checked" when all were checked, ""
    when no peak is known."""
    dtype = _run_dtype(run)
    verdicts = {c["verdict"] for rw in joined
                for c in _worker_checks(rw.inventory.get("accelerators", []), rw.inventory.get("cpu", {}), dtype)
                if c is not None}
    if not verdicts:
        return ""
    if verdicts & {peak_checks.UNVERIFIED, peak_checks.UNVERIFIED_CPU}:
        return UNVERIFIED_PEAK
    if peak_checks.CAPPED in verdicts:
        return peak_checks.CAPPED
    return peak_checks.CHECKED


def rules_of(run: RunRecord) -> scoring.ProfileRules:
    """The run's scoring rules: those recorded with the run win over today's defaults."""
    base = scoring.PROFILES[run.profile]
    c = run.config
    return scoring.ProfileRules(
        name=base.name,
        min_duration_s=base.min_duration_s,
        min_running_time_s=float(c.get("min_running_time_s", base.min_running_time_s)),
        max_error=float(c.get("max_error", base.max_error)),
        target_accuracy=float(c.get("target_accuracy", base.target_accuracy)),
        official=bool(c.get("official", base.official)),
    )


def check_accelerators(info: WorkerInput) -> None:
    """InvalidArgument unless every peak is a finite rate >= 0 of a known compute type."""
    for a in info.accelerators:
        peak = a.get("peak_flops", 0.0)
        if not math.isfinite(peak) or peak < 0:
            raise InvalidArgument("accelerator peak_flops must be >= 0")
        for dtype, value in a.get("peak_flops_by_dtype", {}).items():
            if dtype not in GEMM_DTYPES:
                raise InvalidArgument(f"accelerator peak_flops_by_dtype: unknown compute type {dtype!r} "
                                      f"(expected one of {', '.join(GEMM_DTYPES)})")
            if not math.isfinite(value) or value < 0:
                raise InvalidArgument(f"accelerator peak_flops_by_dtype[{dtype!r}] must be >= 0")
    for dtype, value in info.cpu.get("peak_flops_by_dtype", {}).items():
        if dtype not in GEMM_DTYPES or not math.isfinite(value) or value < 0:
            raise InvalidArgument(f"cpu_peak_flops_by_dtype[{dtype!r}]: a known compute type "
                                  f"({', '.join(GEMM_DTYPES)}) with a rate >= 0")


def check_graph_fits(run: RunRecord, graph: Graph, kernel_size: int) -> None:
    """InvalidArgument unless a submitted graph is a child the run's profile can
    train: the profile's input shape and classes (the FLOPs per image, hence the
    score, follow from them: a 512x512 graph in a 32x32 run would count 256x the
    operations of the images actually trained), a kernel size of the profile, and
    the parameter limit at the kernel actually trained."""
    profile = PROFILES_BY_NAME[run.profile]
    shape = (profile.input_size, profile.input_size, profile.channels)
    if tuple(graph.input_shape) != shape or graph.num_classes != profile.num_classes:
        raise InvalidArgument(
            f"graph input {'x'.join(map(str, graph.input_shape))} with {graph.num_classes} classes does not match "
            f"the {run.profile} profile's {'x'.join(map(str, shape))} with {profile.num_classes} classes")
    if kernel_size not in profile.kernel_sizes:
        raise InvalidArgument(f"kernel_size {kernel_size} is not one of the {run.profile} profile's "
                              f"{', '.join(map(str, profile.kernel_sizes))}")
    reason = Limits(kernel_size=kernel_size).violation(graph)
    if reason is not None:
        raise InvalidArgument(f"graph: {reason}")


def parse_graph(graph_json: str) -> Graph:
    """The submitted graph; InvalidArgument when it does not parse or has too many layers."""
    try:
        graph = Graph.from_json(graph_json)
    except (GraphError, ValueError, RecursionError) as exc:  # ValueError: json.JSONDecodeError and friends
        raise InvalidArgument(f"malformed graph JSON: {exc}") from None
    if len(graph.layers) > limits.MAX_GRAPH_LAYERS:
        raise InvalidArgument(f"graph_json: {len(graph.layers)} layers exceed the bound of {limits.MAX_GRAPH_LAYERS}")
    return graph
