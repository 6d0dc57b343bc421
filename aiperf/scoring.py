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
- Valid when every rule of the checklist VALIDITY_RULES is passed or not
  applicable (`run_checks`, `audit_check`, `throughput_check`, `with_checks`):
  each rule's state (passed, failed, pending while the run may still meet it,
  not applicable), the figure it judged and its limit. The minimum running
  time, the maximum error (0.30), precision FP16 or wider (`aiperf.precision`),
  the workers' own FLOP count within 1% of the master's over the scored reports
  (sums compared, `flops_agree`), the score not above the sum of the accepted
  peaks nor of the datasheet peaks (more work than the hardware can do), and
  the two audits the master adds.

The best models of a run are listed in one order, `model_rank_key`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Callable, Iterable, Iterator, Sequence

from aiperf import audit, units
from aiperf.precision import is_official
from aiperf.profiles import MAX_ERROR, Profile
from aiperf.profiles import PROFILES as _PROFILES
from aiperf.states import CheckState

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
    checks: tuple["Check", ...] = ()     # the validity checklist, VALIDITY_RULES' order (`with_checks`)

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
    (None while running; the deadline while it runs towards it). Points after
    `end` are ignored; the run is over once `now` reaches `end`. `peaks`: the
    accepted measured peaks, `datasheet_peaks`: the datasheet's, one per
    accelerator (0: unknown). A score above either sum (plus the clock slack its
    reports were allowed, `peak_slack_s`, over the minimum running time) makes
    the run invalid: more work than the hardware does. `bounds`: what bounds each
    accelerator where its peak is unknown (the fastest chip of its kind); when the
    accepted peaks leave no ratio, the score over their sum is checked the same
    way, so an unknown peak never lifts the rule.
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
    measured = efficiency(best.flops.value, peaks)
    eff = efficiency(best.flops.value, datasheet_peaks)
    allowed = 1.0 + peak_slack_s / max(rules.min_running_time_s, 1.0)
    bounded = efficiency(best.flops.value, bounds) if measured is None else None
    figures = Figures(elapsed=elapsed, error=err, precision=precision, master_ops=total, worker_ops=worker_total,
                      reports=len(scored), over=end is not None and now >= end,
                      measured_ratio=measured if measured is not None else bounded,
                      datasheet_ratio=eff, allowed_ratio=allowed, measured_is_bound=measured is None)
    result = ScoreResult(
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
        valid=True,
        regulated_score_time_s=max(0.0, best.regulated.t - t0),
        valid_flops_time_s=max(0.0, best.valid.t - t0),
        efficiency_vs_measured=measured,
    )
    return with_checks(result, run_checks(figures, rules))


# ---------------------------------------------------------------- the validity checklist
@dataclass(frozen=True)
class Rule:
    """One rule a valid run meets: `key` names it in JSON, `title` in tables, `text` says it."""

    key: str
    title: str
    text: str


# The one list of validity rules: the scoreboard, status, the report and the exports show
# each with its state; README.md and docs/deploy.md quote `rules_markdown()` (a test keeps
# them equal).
VALIDITY_RULES: tuple[Rule, ...] = (
    Rule("running_time", "Running time",
         "the run lasted at least its profile's minimum running time ("
         + ", ".join(f"{name} {units.duration(p.min_running_time_s)}" for name, p in _PROFILES.items())
         + "); pending until then"),
    Rule("error", "Error", "Error = 1 - the best validation top-1 accuracy is at most the profile's maximum "
                           f"({MAX_ERROR:.0%}); pending while the run can still reach it"),
    Rule("precision", "Precision", "training precision FP16 or wider (fp8 and int8 are not)"),
    Rule("flop_count", "FLOP count", f"the workers' own count of operations agrees with the master's within "
                                     f"{FLOPS_TOLERANCE:.0%} over the scored reports"),
    Rule("measured_peak", "Measured peak", "the score is not above the sum of the workers' accepted measured GEMM "
                                           "peaks (an accelerator without one counted at the fastest datasheet "
                                           "entry for the precision)"),
    Rule("datasheet_peak", "Datasheet peak", "the score is not above the sum of the accelerators' datasheet peaks "
                                             "at the run's precision (not applicable when one is unknown)"),
    Rule("audit", "Audit", "official runs: the model behind the regulated score passed `aiperf audit` (its "
                           f"stored weights give its claimed accuracy on the validation split within "
                           f"{audit.ACCURACY_TOLERANCE * 100:g} points plus one image, and are exactly its "
                           "recorded network; its first epoch, re-trained from the seed the master gave it, "
                           f"reaches its reported first-epoch accuracy within {audit.RETRAIN_TOLERANCE * 100:g} "
                           "points plus three standard errors of the split); pending until it is audited"),
    Rule("throughput_audit", "Throughput audit", "no audit found a worker's claimed throughput more than "
                                                 f"{audit.THROUGHPUT_TOLERANCE:.0%} above the model's training "
                                                 "steps timed on the same hardware (too fast)"),
    Rule("node_audits", "Node audits", "official runs: every worker's node audit passed (the model the master "
                                       "drew for it timed on its own node within the throughput tolerance, and "
                                       "the node's inventory matching what it registered); pending until each "
                                       "worker's node is audited"),
)
RULE_TITLES: dict[str, str] = {r.key: r.title for r in VALIDITY_RULES}
BLOCKING = (CheckState.FAILED, CheckState.PENDING)  # a run with a check in these states is not valid


def rules_markdown() -> str:
    """The rules as the Markdown list the docs quote, one line per rule."""
    return "\n".join(f"- **{r.title}**: {r.text}." for r in VALIDITY_RULES)


@dataclass(frozen=True)
class Check:
    """One rule's state for a run: the figure it judged and the limit, both written for a person;
    `detail` says why when it is failed or pending."""

    rule: str
    state: CheckState
    figure: str
    limit: str
    detail: str = ""

    @property
    def title(self) -> str:
        return RULE_TITLES.get(self.rule, self.rule)


@dataclass(frozen=True)
class Figures:
    """What the score-time rules judge (`run_checks`). over: the run can no longer change them."""

    elapsed: float
    error: float
    precision: str
    master_ops: int
    worker_ops: int
    reports: int
    over: bool
    measured_ratio: float | None
    datasheet_ratio: float | None
    allowed_ratio: float
    measured_is_bound: bool = False  # measured_ratio is over the bounding peaks (an accepted one unknown)


def _open(ok: bool, over: bool) -> CheckState:
    """A rule the run can still meet: passed, else failed once over, else pending."""
    return CheckState.PASSED if ok else CheckState.FAILED if over else CheckState.PENDING


def run_checks(f: Figures, rules: ProfileRules) -> tuple[Check, ...]:
    """The checks of the rules judged at score time (all but the audits: `audit_check`,
    `throughput_check`), in VALIDITY_RULES' order."""
    minimum = rules.min_running_time_s
    ran = _open(f.elapsed >= minimum, f.over)
    err = _open(f.error <= rules.max_error, f.over)
    diff = abs(f.worker_ops - f.master_ops) / f.master_ops if f.master_ops else (1.0 if f.worker_ops else 0.0)
    count = (CheckState.PASSED if flops_agree(f.master_ops, f.worker_ops) else CheckState.FAILED) if f.reports \
        else CheckState.PENDING if not f.over else CheckState.NOT_APPLICABLE
    return (
        Check("running_time", ran, units.duration(f.elapsed), f">= {units.duration(minimum)}",
              "" if ran == CheckState.PASSED else f"ran {f.elapsed:.0f} s < minimum {minimum:.0f} s"),
        Check("error", err, f"{f.error:.4f}", f"<= {rules.max_error:.2f}",
              "" if err == CheckState.PASSED else f"error {f.error:.4f} > maximum {rules.max_error:.2f}"),
        Check("precision", CheckState.PASSED if is_official(f.precision) else CheckState.FAILED, f.precision,
              "fp16 or wider", "" if is_official(f.precision) else f"precision {f.precision} is below fp16"),
        Check("flop_count", count, f"{units.percent(diff)} apart" if f.reports else "no report yet",
              f"<= {units.percent(FLOPS_TOLERANCE)}",
              f"worker FLOPs differ from the master's count by {diff:.2%}" if count == CheckState.FAILED else
              "no progress report yet" if count == CheckState.PENDING else ""),
        _peak_check("measured_peak", "bounding" if f.measured_is_bound else "accepted", f.measured_ratio,
                    f.allowed_ratio),
        _peak_check("datasheet_peak", "datasheet", f.datasheet_ratio, f.allowed_ratio),
    )


def _peak_check(rule: str, which: str, ratio: float | None, allowed: float) -> Check:
    limit = f"<= {units.percent(allowed)} of the {which} peaks"
    if ratio is None:
        return Check(rule, CheckState.NOT_APPLICABLE, "a peak unknown", limit)
    if ratio > allowed:
        return Check(rule, CheckState.FAILED, units.percent(ratio), limit,
                     f"the score is {ratio:.3g} x the sum of the {which} peaks: more work than the hardware can do")
    return Check(rule, CheckState.PASSED, units.percent(ratio), limit)


def audit_check(official: bool, model_id: int | None, passed: bool, verdict: str | None) -> Check:
    """The audit rule: official runs need the model behind the regulated score (`model_id`; None
    before any accuracy) to have passed; `verdict`: its latest audit's (None: not audited)."""
    limit = "passed (official runs)"
    if not official:
        return Check("audit", CheckState.NOT_APPLICABLE, verdict or "not audited", limit)
    if model_id is None:
        return Check("audit", CheckState.PENDING, "no accuracy reported yet", limit,
                     "no model has reported an accuracy yet")
    if passed:
        return Check("audit", CheckState.PASSED, f"model {model_id} passed", limit)
    if verdict is None:
        return Check("audit", CheckState.PENDING, f"model {model_id} not audited", limit,
                     f"the model behind the regulated score (model {model_id}) is not audited")
    return Check("audit", CheckState.FAILED, f"model {model_id}: {verdict}", limit,
                 f"the model behind the regulated score (model {model_id}) failed its audit: {verdict}")


def throughput_check(timed: int, caught: Sequence[str]) -> Check:
    """The throughput rule: `caught` says, per model whose worker an audit found too fast, why;
    `timed`: the audits that timed a model at all."""
    limit = "no worker too fast"
    if caught:
        return Check("throughput_audit", CheckState.FAILED, f"{units.plural(len(caught), 'model')} too fast", limit,
                     "throughput audit: " + "; ".join(caught[:3]))  # three say enough
    if not timed:
        return Check("throughput_audit", CheckState.NOT_APPLICABLE, "no audit timed a model", limit)
    return Check("throughput_audit", CheckState.PASSED, f"{units.plural(timed, 'audit')} in bounds", limit)


def node_audits_check(official: bool, workers: int, missing: Sequence[str], failed: Sequence[str]) -> Check:
    """The node-audit rule: `workers` with a drawn model; `missing`, `failed`: why some are not passed
    (no node audit yet; an audit too slow, not timed or with another inventory)."""
    limit = "every worker's node passed (official runs)"
    if not official:
        return Check("node_audits", CheckState.NOT_APPLICABLE, "not an official run", limit)
    if failed:
        return Check("node_audits", CheckState.FAILED, f"{units.plural(len(failed), 'worker')} failed", limit,
                     "node audits: " + "; ".join(failed[:3]))  # three say enough
    if missing or not workers:
        return Check("node_audits", CheckState.PENDING, f"{units.plural(len(missing), 'worker')} not audited", limit,
                     "node audits: " + ("; ".join(missing[:3]) or "no worker has a drawn model yet"))
    return Check("node_audits", CheckState.PASSED, f"{units.plural(workers, 'worker')} passed", limit)


def with_checks(result: ScoreResult, checks: Iterable[Check]) -> ScoreResult:
    """`result` with `checks` set (a rule already checked is replaced), in VALIDITY_RULES' order;
    valid when none is failed or pending, the invalid reasons those checks' details."""
    by_rule = {c.rule: c for c in result.checks}
    by_rule.update({c.rule: c for c in checks})
    order = {r.key: i for i, r in enumerate(VALIDITY_RULES)}
    merged = tuple(sorted(by_rule.values(), key=lambda c: order.get(c.rule, len(order))))
    blocking = [c for c in merged if c.state in BLOCKING]
    return replace(result, checks=merged, valid=not blocking,
                   invalid_reasons=tuple(c.detail or f"{c.title}: {c.state}" for c in blocking))


def model_rank_key(model_id: int, predicted_accuracy: float | None,
                   best_accuracy: float | None) -> tuple[float, float, int]:
    """Sort key of a run's finished models, best first: predicted final accuracy
    (the best observed one when there is no prediction), then the best observed
    accuracy, then the lower model id. A model without any accuracy comes last."""
    best = best_accuracy if best_accuracy is not None else -1.0
    predicted = predicted_accuracy if predicted_accuracy is not None else best
    return (-predicted, -best, model_id)
