"""The rules a run is scored and checked by, read from its records: pure functions.

The Master (master/master.py) calls these; they take plain records and
return plain values, so they are tested without a server.
"""

from __future__ import annotations

import math

from aiperf import scoring
from aiperf.api import bounds
from aiperf.graph import Graph, GraphError
from aiperf.precision import GEMM_DTYPES, PRECISIONS
from master.store import InvalidArgument, RunRecord, RunWorker, WorkerInput


def accelerator_peaks(run: RunRecord, joined: list[RunWorker]) -> list[float]:
    """The GEMM peak of every accelerator that took part, for the run's precision (0: unknown)."""
    dtype = PRECISIONS[run.precision].gemm_dtype if run.precision in PRECISIONS else None
    return [float(a.get("peak_flops_by_dtype", {}).get(dtype) or a.get("peak_flops", 0.0))
            for rw in joined for a in rw.inventory.get("accelerators", [])]


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


def parse_graph(graph_json: str) -> Graph:
    """The submitted graph; InvalidArgument when it does not parse or has too many layers."""
    try:
        graph = Graph.from_json(graph_json)
    except (GraphError, ValueError, RecursionError) as exc:  # ValueError: json.JSONDecodeError and friends
        raise InvalidArgument(f"malformed graph JSON: {exc}") from None
    if len(graph.layers) > bounds.MAX_GRAPH_LAYERS:
        raise InvalidArgument(f"graph_json: {len(graph.layers)} layers exceed the bound of {bounds.MAX_GRAPH_LAYERS}")
    return graph
