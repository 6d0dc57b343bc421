"""Scores of a run (SPEC section 7), as pure functions of the master's time line.

Definitions, with t0 the run's start on the master clock, F(t) the
master-counted operations of every image trained or validated by time t and
acc(t) the best validation top-1 accuracy observed by time t (real accuracies
reported by workers, never a predicted accuracy):

- FLOPS(t) = F(t) / (t - t0).
- Error(t) = 1 - acc(t), floored at ERROR_FLOOR so that a perfect accuracy
  does not give an infinite regulated score; 1 before any accuracy.
- Regulated score R(t) = -ln(Error(t)) * FLOPS(t) (AIPerf paper, Eq. 3 and
  Fig. 4: plotted over time, its highest point reported).
- Valid FLOPS V(t) = FLOPS(t) * (acc(t) / target)^5 (HPC AI500 v3, Eqs. 7-8,
  n = 5 for image classification; target per profile, official 0.763 top-1).
- Score, regulated score and valid FLOPS are each the highest value of their
  curve over the scored window t - t0 >= the profile's minimum running time
  (official 3600 s), reported with the time it occurred. F and acc are step
  functions that only rise at report times, and between reports all three
  curves fall (1/(t - t0)), so each maximum is reached either at a report
  time or at the window's start t0 + minimum: those are the candidates.
  Before the minimum is reached each figure is its current value and is
  *provisional*.
- The time line ends when the run leaves RUNNING (deadline or stop request);
  reports that arrive later are kept in the database but are not scored.
- Error (the field) = 1 - the best accuracy over the whole scored time line:
  the validity rule's error.
- Efficiency = Score / Rpeak, Rpeak = sum of the datasheet peaks of the
  accelerators that took part at the run's compute type (HPL's Rmax/Rpeak,
  `aiperf.peaks.datasheet_peak`); None unless every one has a datasheet entry.
- Efficiency vs measured = Score / the sum of the accepted measured GEMM peaks
  of the workers that took part (`aiperf.peaks`); None when any peak is unknown.
- Valid when: ran at least the minimum running time, error <= the profile's
  maximum (0.30), precision FP16 or wider (`aiperf.precision`), the
  workers' own FLOP count agrees with the master's within 1% over the scored
  reports (sums compared, see `flops_agree`), and the score is not above the sum
  of the accepted peaks, nor of the datasheet peaks (more work than the hardware
  can do; see `score_run`).

The best models of a run are listed in one order, `model_rank_key`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator, Sequence

from aiperf.precision import is_official
from aiperf.profiles import PROFILES as _PROFILES
from aiperf.profiles import Profile

ERROR_FLOOR = 1e-6
FLOPS_TOLERANCE = 0.01  # worker vs master relative disagreement allowed
VALID_FLOPS_EXPONENT = 5  # HPC AI500 v3: n = 5 for image classification


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
    or None. An accuracy outside [0, 1] or negative operations would inflate a
    score: ValueError.
    """

    t: float
    ops: int
    worker_ops: int = 0
    accuracy: float | None = None

    def __post_init__(self) -> None:
        if not math.isfinite(self.t):
            raise ValueError(f"report time must be finite, got {self.t!r}")
        if self.ops < 0:
            raise ValueError(f"operations must be >= 0, got {self.ops!r}")
        if self.accuracy is not None and not 0.0 <= self.accuracy <= 1.0:
            raise ValueError(f"accuracy must be in [0, 1], got {self.accuracy!r}")


@dataclass(frozen=True)
class ScoreResult:
    elapsed_s: float
    flops: float                 # FLOPS(now)
    score: float                 # max FLOPS(t) in the window (= flops while provisional)
    score_time_s: float          # t - t0 of the score
    provisional: bool
    best_accuracy: float | None
    error: float                 # 1 - best accuracy of the whole scored time line
    regulated_score: float       # max R(t) in the window (R(now) while provisional)
    valid_flops: float           # max V(t) in the window (V(now) while provisional)
    efficiency: float | None     # score / the sum of the datasheet peaks (None: not every one known)
    total_ops: int
    worker_ops: int
    reports: int
    valid: bool
    invalid_reasons: tuple[str, ...] = field(default_factory=tuple)
    regulated_score_time_s: float = 0.0  # t - t0 of the regulated score
    valid_flops_time_s: float = 0.0      # t - t0 of the valid FLOPS
    efficiency_vs_measured: float | None = None  # score / the sum of the accepted measured peaks

    @property
    def invalid_reason(self) -> str:
        return "; ".join(self.invalid_reasons)


@dataclass(frozen=True)
class State:
    """The time line's state at time t: F(t) and acc(t)."""

    t: float
    ops: int
    best_accuracy: float | None


@dataclass(frozen=True)
class Maximum:
    """The highest value of one curve over a window, and where it occurred."""

    value: float
    t: float


def flops_at(t0: float, points: Sequence[Point], t: float) -> float:
    """FLOPS(t) = F(t) / (t - t0); 0 when t <= t0."""
    if t <= t0:
        return 0.0
    return sum(p.ops for p in points if p.t <= t) / (t - t0)


def state_at(points: Sequence[Point], t: float) -> State:
    """F(t) and acc(t): every report received by t counts."""
    accuracies = [p.accuracy for p in points if p.t <= t and p.accuracy is not None]
    return State(t, sum(p.ops for p in points if p.t <= t), max(accuracies) if accuracies else None)


def candidates(points: Sequence[Point], t_from: float, t_to: float) -> Iterator[State]:
    """The time line's state at t_from and at every distinct report time in
    (t_from, t_to]: the only places a maximum of FLOPS, R or V can be (module doc)."""
    ordered = sorted(points, key=lambda p: p.t)
    ops, best = 0, None
    i = 0
    while i < len(ordered) and ordered[i].t <= t_from:
        ops, best = _add(ops, best, ordered[i])
        i += 1
    yield State(t_from, ops, best)
    while i < len(ordered) and ordered[i].t <= t_to:
        t = ordered[i].t
        while i < len(ordered) and ordered[i].t == t:  # reports at one instant count together
            ops, best = _add(ops, best, ordered[i])
            i += 1
        yield State(t, ops, best)


def _add(ops: int, best: float | None, p: Point) -> tuple[int, float | None]:
    if p.accuracy is not None and (best is None or p.accuracy > best):
        best = p.accuracy
    return ops + p.ops, best


def flops_of(t0: float, s: State) -> float:
    """FLOPS at state `s`; 0 at or before t0."""
    return s.ops / (s.t - t0) if s.t > t0 else 0.0


def regulated_of(t0: float, s: State) -> float:
    """R(t) = -ln(Error(t)) * FLOPS(t) at state `s`."""
    return regulated_score(flops_of(t0, s), error_of(s.best_accuracy))


def valid_flops_of(t0: float, s: State, target_accuracy: float) -> float:
    """V(t) = FLOPS(t) * (acc(t) / target)^5 at state `s`."""
    return valid_flops(flops_of(t0, s), s.best_accuracy, target_accuracy)


def maximum(t0: float, points: Sequence[Point], t_from: float, t_to: float,
            value: Callable[[float, State], float]) -> Maximum:
    """Max of `value(t0, state)` for t in [t_from, t_to]; the earliest on a tie."""
    states = candidates(points, t_from, t_to)
    first = next(states)  # the window's start is always a candidate
    best = Maximum(value(t0, first), first.t)
    for s in states:
        v = value(t0, s)
        if v > best.value:
            best = Maximum(v, s.t)
    return best


def peak_flops(t0: float, points: Sequence[Point], t_from: float, t_to: float) -> tuple[float, float]:
    """Max of FLOPS(t) for t in [t_from, t_to]; returns (value, t)."""
    m = maximum(t0, points, t_from, t_to, flops_of)
    return m.value, m.t


def error_of(best_accuracy: float | None) -> float:
    """1 - best accuracy, floored at ERROR_FLOOR; 1.0 with no accuracy."""
    if best_accuracy is None:
        return 1.0
    return max(ERROR_FLOOR, 1.0 - best_accuracy)


def regulated_score(flops: float, error: float) -> float:
    """-ln(Error) * FLOPS (AIPerf paper, Eq. 3)."""
    return -math.log(max(ERROR_FLOOR, min(1.0, error))) * flops + 0.0  # + 0.0: no -0.0


def valid_flops(flops: float, accuracy: float | None, target_accuracy: float) -> float:
    """FLOPS * (accuracy / target)^5 (HPC AI500 v3, Eqs. 7-8, n = 5); 0 without an accuracy."""
    if accuracy is None:
        return 0.0
    return flops * (accuracy / target_accuracy) ** VALID_FLOPS_EXPONENT


def efficiency(score: float, peaks: Iterable[float]) -> float | None:
    """score / the sum of `peaks`; None when there is none or any is unknown (<= 0)."""
    values = list(peaks)
    if not values or any(v <= 0 for v in values):
        return None
    return score / sum(values)


def flops_agree(master_ops: int, worker_ops: int, tolerance: float = FLOPS_TOLERANCE) -> bool:
    """True when the workers' total is within `tolerance` of the master's."""
    if master_ops == 0:
        return worker_ops == 0
    return abs(worker_ops - master_ops) <= tolerance * master_ops


@dataclass(frozen=True)
class Maxima:
    """Score, regulated score and valid FLOPS of a scored time line."""

    flops: Maximum
    regulated: Maximum
    valid: Maximum


def maxima(t0: float, stop: float, points: Sequence[Point], rules: ProfileRules) -> Maxima:
    """The three figures over the window [t0 + minimum, stop]; before the minimum
    is reached, their current values at `stop` (provisional)."""
    t_from = t0 + rules.min_running_time_s
    if stop < t_from:
        now = state_at(points, stop)
        return Maxima(Maximum(flops_of(t0, now), stop), Maximum(regulated_of(t0, now), stop),
                      Maximum(valid_flops_of(t0, now, rules.target_accuracy), stop))

    def valid(start: float, s: State) -> float:
        return valid_flops_of(start, s, rules.target_accuracy)

    return Maxima(maximum(t0, points, t_from, stop, flops_of),
                  maximum(t0, points, t_from, stop, regulated_of),
                  maximum(t0, points, t_from, stop, valid))


def score_run(
    t0: float,
    now: float,
    points: Sequence[Point],
    rules: ProfileRules,
    precision: str,
    end: float | None = None,
    peaks: Iterable[float] = (),
    peak_slack_s: float = 0.0,
    datasheet_peaks: Iterable[float] = (),
    bounds: Iterable[float] = (),
) -> ScoreResult:
    """Score a run from its time line.

    t0: start; now: the master's current time; end: when the run left RUNNING
    (None while running). Points after `end` are ignored. `peaks`: the accepted
    measured peaks, `datasheet_peaks`: the datasheet's, one per accelerator (0:
    unknown). A score above either sum (plus the clock slack its reports were
    allowed, `peak_slack_s`, over the minimum running time) makes the run
    invalid: more work than the hardware does. `bounds`: what bounds each accelerator
    where its peak is unknown (the fastest chip of its kind); when the accepted peaks leave
    no ratio, the score over their sum is checked the same way, so an unknown peak never
    lifts the rule.
    """
    stop = now if end is None else min(now, end)
    scored = [p for p in points if p.t <= stop]
    elapsed = max(0.0, stop - t0)
    total = sum(p.ops for p in scored)
    worker_total = sum(p.worker_ops for p in scored)
    best = maxima(t0, max(stop, t0), scored, rules)
    accuracies = [p.accuracy for p in scored if p.accuracy is not None]
    best_acc = max(accuracies) if accuracies else None
    err = error_of(best_acc)
    reasons = _invalid_reasons(elapsed, err, precision, total, worker_total, rules)
    measured = efficiency(best.flops.value, peaks)
    eff = efficiency(best.flops.value, datasheet_peaks)
    allowed = 1.0 + peak_slack_s / max(rules.min_running_time_s, 1.0)
    bounded = efficiency(best.flops.value, bounds) if measured is None else None
    for ratio, which in ((measured, "accepted"), (eff, "datasheet"), (bounded, "bounding")):
        if ratio is not None and ratio > allowed:
            reasons += (f"the score is {ratio:.3g} x the sum of the {which} peaks: more work than the "
                        f"hardware can do",)
    return ScoreResult(
        elapsed_s=elapsed,
        flops=total / elapsed if elapsed > 0 else 0.0,
        score=best.flops.value,
        score_time_s=max(0.0, best.flops.t - t0),
        provisional=elapsed < rules.min_running_time_s,
        best_accuracy=best_acc,
        error=err,
        regulated_score=best.regulated.value,
        valid_flops=best.valid.value,
        efficiency=eff,
        total_ops=total,
        worker_ops=worker_total,
        reports=len(scored),
        valid=not reasons,
        invalid_reasons=reasons,
        regulated_score_time_s=max(0.0, best.regulated.t - t0),
        valid_flops_time_s=max(0.0, best.valid.t - t0),
        efficiency_vs_measured=measured,
    )


def _invalid_reasons(elapsed: float, err: float, precision: str, total: int, worker_total: int,
                     rules: ProfileRules) -> tuple[str, ...]:
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
    return tuple(reasons)


def model_rank_key(model_id: int, predicted_accuracy: float | None,
                   best_accuracy: float | None) -> tuple[float, float, int]:
    """Sort key of a run's finished models, best first: predicted final accuracy
    (the best observed one when there is no prediction), then the best observed
    accuracy, then the lower model id. A model without any accuracy comes last."""
    best = best_accuracy if best_accuracy is not None else -1.0
    predicted = predicted_accuracy if predicted_accuracy is not None else best
    return (-predicted, -best, model_id)
