"""Scores of a run (SPEC section 7), as pure functions of the master's time line.

Definitions, with t0 the run's start on the master clock and F(t) the
master-counted operations of every image trained or validated by time t:

- FLOPS(t) = F(t) / (t - t0).
- Score = max FLOPS(t) over the scored window t - t0 >= the profile's minimum
  running time (official 3600 s, smoke 120 s). F is a step function that only
  rises at report times and FLOPS falls between them, so the maximum is reached
  either at a report time or at the window's start t0 + minimum; both are
  candidates. Before the minimum is reached the score is the current FLOPS and
  is *provisional*.
- The time line ends when the run leaves RUNNING (deadline or stop request);
  reports that arrive later are kept in the database but are not scored.
- Error = 1 - best observed validation top-1 accuracy over the scored time line
  (real accuracies reported by workers, never a predicted accuracy). It is
  floored at ERROR_FLOOR so that a perfect accuracy does not give an infinite
  regulated score.
- Regulated score = -ln(Error) * Score.
- Valid FLOPS (HPC AI500) = Score * (accuracy / target)^5. Our choice of the
  target accuracy: 1 - the maximum allowed error, i.e. 0.70 top-1 for both
  profiles (the official rule's 30% maximum error, `aiperf.profiles.MAX_ERROR`).
- Efficiency = Score / peak, peak = sum of the measured GEMM peaks of the
  workers that took part; None when any peak is unknown.
- Valid when: ran at least the minimum running time, error <= the profile's
  maximum (0.30), precision FP16 or wider (`aiperf.precision`), and the
  workers' own FLOP count agrees with the master's within 1% over the scored
  reports (sums compared, see `flops_agree`).

The best models of a run are listed in one order, `model_rank_key`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from aiperf.precision import is_official
from aiperf.profiles import PROFILES as _PROFILES
from aiperf.profiles import Profile

ERROR_FLOOR = 1e-6
FLOPS_TOLERANCE = 0.01  # worker vs master relative disagreement allowed


@dataclass(frozen=True)
class ProfileRules:
    """The scoring rules of one profile."""

    name: str
    min_duration_s: float       # StartRun refuses a shorter duration
    min_running_time_s: float   # score only counts after this
    max_error: float
    target_accuracy: float
    official: bool

    @staticmethod
    def of(profile: Profile) -> "ProfileRules":
        return ProfileRules(profile.name, profile.min_duration_s, profile.min_running_time_s,
                            profile.max_error, profile.target_accuracy, profile.official)


# One source of truth: the profiles' own rules.
PROFILES: dict[str, ProfileRules] = {name: ProfileRules.of(p) for name, p in _PROFILES.items()}


@dataclass(frozen=True)
class Point:
    """One progress report on the master's time line.

    t: master time of receipt; ops: master-counted operations of the report;
    worker_ops: the worker's own figure; accuracy: observed validation accuracy
    or None.
    """

    t: float
    ops: int
    worker_ops: int = 0
    accuracy: float | None = None


@dataclass(frozen=True)
class ScoreResult:
    elapsed_s: float
    flops: float                 # FLOPS(now)
    score: float                 # max FLOPS(t) in the window (= flops while provisional)
    score_time_s: float          # t - t0 of the score
    provisional: bool
    best_accuracy: float | None
    error: float
    regulated_score: float
    valid_flops: float
    efficiency: float | None
    total_ops: int
    worker_ops: int
    reports: int
    valid: bool
    invalid_reasons: tuple[str, ...] = field(default_factory=tuple)

    @property
    def invalid_reason(self) -> str:
        return "; ".join(self.invalid_reasons)


def flops_at(t0: float, points: Sequence[Point], t: float) -> float:
    """FLOPS(t) = F(t) / (t - t0); 0 when t <= t0."""
    if t <= t0:
        return 0.0
    return sum(p.ops for p in points if p.t <= t) / (t - t0)


def peak_flops(t0: float, points: Sequence[Point], t_from: float, t_to: float) -> tuple[float, float]:
    """Max of FLOPS(t) for t in [t_from, t_to]; returns (value, t).

    Candidates are t_from and every report time inside the window (see module doc).
    """
    ordered = sorted(points, key=lambda p: p.t)
    best, best_t = 0.0, t_from
    cumulative = 0
    i = 0
    while i < len(ordered) and ordered[i].t <= t_from:
        cumulative += ordered[i].ops
        i += 1
    if t_from > t0:
        best = cumulative / (t_from - t0)
    while i < len(ordered) and ordered[i].t <= t_to:
        cumulative += ordered[i].ops
        t = ordered[i].t
        if t > t0:
            value = cumulative / (t - t0)
            if value > best:
                best, best_t = value, t
        i += 1
    return best, best_t


def error_of(best_accuracy: float | None) -> float:
    """1 - best accuracy, floored at ERROR_FLOOR; 1.0 with no accuracy."""
    if best_accuracy is None:
        return 1.0
    return max(ERROR_FLOOR, 1.0 - best_accuracy)


def regulated_score(flops: float, error: float) -> float:
    return -math.log(max(ERROR_FLOOR, min(1.0, error))) * flops + 0.0  # + 0.0: no -0.0


def valid_flops(flops: float, accuracy: float | None, target_accuracy: float) -> float:
    if accuracy is None:
        return 0.0
    return flops * (accuracy / target_accuracy) ** 5


def efficiency(score: float, peaks: Iterable[float]) -> float | None:
    values = list(peaks)
    if not values or any(v <= 0 for v in values):
        return None
    return score / sum(values)


def flops_agree(master_ops: int, worker_ops: int, tolerance: float = FLOPS_TOLERANCE) -> bool:
    """True when the workers' total is within `tolerance` of the master's."""
    if master_ops == 0:
        return worker_ops == 0
    return abs(worker_ops - master_ops) <= tolerance * master_ops


def score_run(
    t0: float,
    now: float,
    points: Sequence[Point],
    rules: ProfileRules,
    precision: str,
    end: float | None = None,
    peaks: Iterable[float] = (),
) -> ScoreResult:
    """Score a run from its time line.

    t0: start; now: the master's current time; end: when the run left RUNNING
    (None while running). Points after `end` are ignored.
    """
    stop = now if end is None else min(now, end)
    scored = [p for p in points if p.t <= stop]
    elapsed = max(0.0, stop - t0)
    total = sum(p.ops for p in scored)
    worker_total = sum(p.worker_ops for p in scored)
    current = total / elapsed if elapsed > 0 else 0.0
    provisional = elapsed < rules.min_running_time_s
    if provisional:
        score, score_t = current, elapsed
    else:
        score, t_best = peak_flops(t0, scored, t0 + rules.min_running_time_s, stop)
        score_t = t_best - t0
    accuracies = [p.accuracy for p in scored if p.accuracy is not None]
    best_acc = max(accuracies) if accuracies else None
    err = error_of(best_acc)
    reasons: list[str] = []
    if elapsed < rules.min_running_time_s:
        reasons.append(f"ran {elapsed:.0f} s < minimum {rules.min_running_time_s:.0f} s")
    if err > rules.max_error:
        reasons.append(f"error {err:.4f} > maximum {rules.max_error:.2f}")
    if not is_official(precision):
        reasons.append(f"precision {precision} is below fp16")
    if not flops_agree(total, worker_total):
        diff = abs(worker_total - total) / total if total else 1.0
        reasons.append(f"worker FLOPs differ from the master's count by {diff:.2%}")
    return ScoreResult(
        elapsed_s=elapsed,
        flops=current,
        score=score,
        score_time_s=score_t,
        provisional=provisional,
        best_accuracy=best_acc,
        error=err,
        regulated_score=regulated_score(score, err),
        valid_flops=valid_flops(score, best_acc, rules.target_accuracy),
        efficiency=efficiency(score, peaks),
        total_ops=total,
        worker_ops=worker_total,
        reports=len(scored),
        valid=not reasons,
        invalid_reasons=tuple(reasons),
    )


def model_rank_key(model_id: int, predicted_accuracy: float | None,
                   best_accuracy: float | None) -> tuple[float, float, int]:
    """Sort key of a run's finished models, best first: predicted final accuracy
    (the best observed one when there is no prediction), then the best observed
    accuracy, then the lower model id. A model without any accuracy comes last."""
    best = best_accuracy if best_accuracy is not None else -1.0
    predicted = predicted_accuracy if predicted_accuracy is not None else best
    return (-predicted, -best, model_id)
