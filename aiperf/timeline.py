"""A run over time, for the report: FLOPS(t), error(t), the regulated score
and valid FLOPS over time (the AIPerf paper's Fig. 4) from the progress
reports, and the resource samples averaged into the same time buckets.

Pure functions of their inputs. Times in the results are seconds since the
run's start (master clock).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

from aiperf.scoring import Point, error_of, regulated_score, valid_flops


@dataclass(frozen=True)
class CurvePoint:
    elapsed_s: float
    ops: int                      # F(t): operations of every image trained or validated by t
    flops: float                  # FLOPS(t) = F(t) / elapsed_s
    best_accuracy: float | None   # best validation accuracy observed by t


@dataclass(frozen=True)
class ScorePoint:
    """The three score curves at one time (SPEC section 7); their maxima over the
    scored window are the reported figures."""

    elapsed_s: float
    flops: float             # FLOPS(t)
    regulated_score: float   # -ln(Error(t)) * FLOPS(t)
    valid_flops: float       # FLOPS(t) * (acc(t) / target)^5; 0 before any accuracy


@dataclass(frozen=True)
class Sample:
    """One resource sample (see the worker's monitor): accelerator_index -1 is host-wide."""

    t: float
    accelerator_index: int
    accelerator_util: float = 0.0
    accelerator_memory_used: int = 0
    cpu_util: float = 0.0
    memory_used: int = 0


@dataclass(frozen=True)
class ResourcePoint:
    """Means over one time bucket, across all workers (None: no such sample in the bucket)."""

    elapsed_s: float               # end of the bucket
    accelerator_util: float | None
    accelerator_memory_used: float | None
    cpu_util: float | None
    memory_used: float | None


def flops_curve(t0: float, points: Iterable[Point], end: float | None = None, max_points: int = 0) -> list[CurvePoint]:
    """FLOPS(t) and the best accuracy at every report time after t0 (up to
    `end`). With max_points, the time span is cut into that many equal buckets
    and the last point of each is kept: F(t) is cumulative, so those are exact
    values of the curve, not averages."""
    curve: list[CurvePoint] = []
    ops = 0
    best: float | None = None
    for p in sorted(points, key=lambda p: p.t):
        if end is not None and p.t > end:
            break
        ops += p.ops
        if p.accuracy is not None and (best is None or p.accuracy > best):
            best = p.accuracy
        if p.t > t0:
            curve.append(CurvePoint(p.t - t0, ops, ops / (p.t - t0), best))
    if max_points and len(curve) > max_points:
        span = curve[-1].elapsed_s
        kept: dict[int, CurvePoint] = {}
        for c in curve:
            kept[min(max_points - 1, int(c.elapsed_s / span * max_points))] = c
        curve = [kept[k] for k in sorted(kept)]
    return curve


def resource_curve(t0: float, samples: Iterable[Sample], end: float, buckets: int = 200) -> list[ResourcePoint]:
    """Resource samples between t0 and end, averaged over all workers into
    `buckets` equal time buckets (empty buckets are left out)."""
    if end <= t0 or buckets < 1:
        return []
    width = (end - t0) / buckets
    sums: dict[int, list[float]] = {}  # bucket -> [acc util, acc mem, n acc, cpu, mem, n host]
    for s in samples:
        if not t0 <= s.t <= end:
            continue
        b = sums.setdefault(min(buckets - 1, int((s.t - t0) / width)), [0.0] * 6)
        if s.accelerator_index >= 0:
            b[0] += s.accelerator_util
            b[1] += s.accelerator_memory_used
            b[2] += 1
        else:
            b[3] += s.cpu_util
            b[4] += s.memory_used
            b[5] += 1
    out = []
    for k in sorted(sums):
        a_util, a_mem, n_acc, cpu, mem, n_host = sums[k]
        out.append(ResourcePoint(
            elapsed_s=(k + 1) * width,
            accelerator_util=a_util / n_acc if n_acc else None,
            accelerator_memory_used=a_mem / n_acc if n_acc else None,
            cpu_util=cpu / n_host if n_host else None,
            memory_used=mem / n_host if n_host else None,
        ))
    return out


def error_curve(curve: Sequence[CurvePoint]) -> list[tuple[float, float]]:
    """(elapsed_s, 1 - best accuracy) wherever an accuracy is known."""
    return [(c.elapsed_s, 1.0 - c.best_accuracy) for c in curve if c.best_accuracy is not None]


def score_curve(curve: Sequence[CurvePoint], target_accuracy: float) -> list[ScorePoint]:
    """FLOPS(t), the regulated score and valid FLOPS at every point of `curve`
    (a `flops_curve`, downsampled or not): the series of the paper's Fig. 4."""
    return [ScorePoint(c.elapsed_s, c.flops, regulated_score(c.flops, error_of(c.best_accuracy)),
                       valid_flops(c.flops, c.best_accuracy, target_accuracy)) for c in curve]
