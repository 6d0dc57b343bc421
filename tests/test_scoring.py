"""Scores of SPEC section 7 on a scripted time line; expected numbers by hand."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aiperf.precision import GEMM_DTYPES, PRECISIONS, get_precision, is_official
from aiperf.profiles import MAX_ERROR
from aiperf.scoring import PROFILES, Point, efficiency, error_of, flops_agree, flops_at, model_rank_key, score_run

T0 = 1000.0
OFFICIAL = PROFILES["official"]

# Operations per report, master count == worker count; accuracies observed.
TIMELINE = [
    Point(T0 + 1800, ops=3_600_000_000_000_000, worker_ops=3_600_000_000_000_000),
    Point(T0 + 3000, ops=3_600_000_000_000_000, worker_ops=3_600_000_000_000_000, accuracy=0.60),
    Point(T0 + 4000, ops=2_000_000_000_000_000, worker_ops=2_000_000_000_000_000),
    Point(T0 + 4500, ops=4_500_000_000_000_000, worker_ops=4_500_000_000_000_000),
    Point(T0 + 5400, ops=0, worker_ops=0, accuracy=0.75),
]


def test_flops_at_is_cumulative_ops_over_elapsed_time():
    # F(3000) = 3.6e15 + 3.6e15 = 7.2e15 over 3000 s
    assert flops_at(T0, TIMELINE, T0 + 3000) == pytest.approx(2.4e12)
    # between reports F stays, time grows: F(3500) = 7.2e15 over 3500 s
    assert flops_at(T0, TIMELINE, T0 + 3500) == pytest.approx(7.2e15 / 3500)
    assert flops_at(T0, TIMELINE, T0) == 0.0


def test_official_score_is_the_maximum_after_the_first_hour():
    r = score_run(T0, T0 + 7200, TIMELINE, OFFICIAL, "fp32")
    # FLOPS(t) for t >= 3600 s: t=3600: 7.2e15/3600 = 2.0e12; t=4000: 9.2e15/4000 = 2.3e12;
    # t=4500: 13.7e15/4500 = 3.0444e12; t=5400: 13.7e15/5400 = 2.537e12.
    # The 2.4e12 at t=3000 s is before the hour and does not count.
    assert not r.provisional
    assert r.score == pytest.approx(13.7e15 / 4500)
    assert r.score_time_s == pytest.approx(4500)
    assert r.flops == pytest.approx(13.7e15 / 7200)  # FLOPS(now)
    assert r.best_accuracy == pytest.approx(0.75)
    assert r.error == pytest.approx(0.25)
    # R(t) = -ln(Error(t))·FLOPS(t): t=4500: -ln(0.40)·3.0444e12 = 2.790e12;
    # t=5400: -ln(0.25)·2.537e12 = 3.517e12 (the 0.75 arrived at 5400 s).
    assert r.regulated_score == pytest.approx(-math.log(0.25) * 13.7e15 / 5400)
    assert r.regulated_score_time_s == pytest.approx(5400)
    # V(t) = FLOPS(t)·(acc(t)/0.763)^5: t=4500: 3.0444e12·0.3004; t=5400: 2.537e12·0.9177.
    assert r.valid_flops == pytest.approx(13.7e15 / 5400 * (0.75 / 0.763) ** 5)
    assert r.valid_flops_time_s == pytest.approx(5400)
    assert r.total_ops == 13_700_000_000_000_000
    assert r.valid and r.invalid_reason == ""


def test_score_can_sit_at_the_start_of_the_window():
    # One big report at 3500 s, nothing after: FLOPS falls from there, so the
    # best value in the window is F(3600)/3600 = 7.2e15/3600.
    pts = [Point(T0 + 3500, ops=7_200_000_000_000_000, worker_ops=7_200_000_000_000_000, accuracy=0.8)]
    r = score_run(T0, T0 + 5000, pts, OFFICIAL, "mixed_fp16")
    assert r.score == pytest.approx(2.0e12)
    assert r.score_time_s == pytest.approx(3600)


def test_before_the_minimum_time_the_score_is_the_current_value_and_provisional():
    r = score_run(T0, T0 + 2000, TIMELINE, OFFICIAL, "fp32")
    assert r.provisional
    assert r.score == pytest.approx(3.6e15 / 2000) == r.flops
    assert not r.valid
    assert "ran 2000 s < minimum 3600 s" in r.invalid_reason


def test_reports_after_the_run_left_running_are_not_scored():
    r = score_run(T0, T0 + 7200, TIMELINE, OFFICIAL, "fp32", end=T0 + 4200)
    # scored: 1800, 3000, 4000; window candidates 3600 (2.0e12) and 4000 (2.3e12)
    assert r.score == pytest.approx(2.3e12)
    assert r.elapsed_s == pytest.approx(4200)
    assert r.flops == pytest.approx(9.2e15 / 4200)
    assert r.best_accuracy == pytest.approx(0.60)  # the 0.75 came later
    assert r.error == pytest.approx(0.40)
    assert not r.valid and "error 0.4000 > maximum 0.30" in r.invalid_reason


def test_precision_below_fp16_is_invalid():
    r = score_run(T0, T0 + 7200, TIMELINE, OFFICIAL, "fp8")
    assert not r.valid and "precision fp8 is below fp16" in r.invalid_reason
    assert score_run(T0, T0 + 7200, TIMELINE, OFFICIAL, "bf16").valid
    assert not score_run(T0, T0 + 7200, TIMELINE, OFFICIAL, "fp4").valid  # unknown: not allowed


def test_precision_table():
    # The API's names, in its enum order; FP16 and wider are official, nothing below.
    assert list(PRECISIONS) == ["fp32", "mixed_fp16", "mixed_bf16", "fp16", "bf16", "fp8", "int8"]
    assert [n for n in PRECISIONS if is_official(n)] == ["fp32", "mixed_fp16", "mixed_bf16", "fp16", "bf16"]
    assert not is_official("fp4")
    assert get_precision("mixed_fp16").keras_policy == "mixed_float16"
    assert get_precision("bf16").keras_policy == "mixed_bfloat16"
    assert get_precision("fp8").keras_policy == "float32" and get_precision("int8").gemm_dtype is None
    # Every official precision has a measured GEMM peak; every peak is one a worker measures.
    assert all(p.gemm_dtype in GEMM_DTYPES for p in PRECISIONS.values() if p.official)
    with pytest.raises(ValueError, match="unknown precision 'fp4'.*fp32"):
        get_precision("fp4")


def test_maximum_error_is_30_percent_and_the_target_is_hpc_ai500s_top1():
    assert MAX_ERROR == 0.30 and OFFICIAL.max_error == MAX_ERROR
    # HPC AI500's image-classification target: 76.3% top-1 (ResNet-50 on ImageNet).
    assert OFFICIAL.target_accuracy == 0.763


def test_model_ranking():
    # (model id, predicted, best): predicted first, best observed when no prediction,
    # then best observed, then the lower id; no accuracy at all comes last.
    models = [(1, None, None), (2, 0.8, 0.5), (3, None, 0.8), (4, 0.8, 0.6), (5, 0.0, 0.9), (6, 0.8, 0.6)]
    ranked = sorted(models, key=lambda m: model_rank_key(*m))
    assert [m[0] for m in ranked] == [3, 4, 6, 2, 5, 1]


def test_worker_flops_disagreeing_with_the_master_count_is_invalid():
    pts = [Point(p.t, p.ops, int(p.worker_ops * 1.02), p.accuracy) for p in TIMELINE]
    r = score_run(T0, T0 + 7200, pts, OFFICIAL, "fp32")
    assert not r.valid and "worker FLOPs differ from the master's count by 2.00%" in r.invalid_reason
    # within 1%: fine
    pts = [Point(p.t, p.ops, int(p.worker_ops * 1.009), p.accuracy) for p in TIMELINE]
    assert score_run(T0, T0 + 7200, pts, OFFICIAL, "fp32").valid
    assert flops_agree(100, 101) and not flops_agree(100, 102) and not flops_agree(0, 5)


def test_no_accuracy_means_error_one_and_zero_regulated_and_valid_flops():
    pts = [Point(T0 + 4000, ops=10**15, worker_ops=10**15)]
    r = score_run(T0, T0 + 4000, pts, OFFICIAL, "fp32")
    assert r.error == 1.0
    assert r.regulated_score == 0.0 and math.copysign(1.0, r.regulated_score) == 1.0
    assert r.valid_flops == 0.0


def test_perfect_accuracy_gives_a_finite_regulated_score():
    assert error_of(1.0) == pytest.approx(1e-6)
    pts = [Point(T0 + 4000, ops=4 * 10**15, worker_ops=4 * 10**15, accuracy=1.0)]
    r = score_run(T0, T0 + 4000, pts, OFFICIAL, "fp32")
    assert r.regulated_score == pytest.approx(-math.log(1e-6) * 1e12)


def test_efficiency_needs_every_peak():
    assert efficiency(3.0e12, [1.0e12, 5.0e12]) == pytest.approx(0.5)
    assert efficiency(3.0e12, [1.0e12, 0.0]) is None
    assert efficiency(3.0e12, []) is None
    r = score_run(T0, T0 + 7200, TIMELINE, OFFICIAL, "fp32", peaks=[1e13, 1e13], datasheet_peaks=[2e13, 2e13])
    assert r.efficiency_vs_measured == pytest.approx(13.7e15 / 4500 / 2e13)
    assert r.efficiency == pytest.approx(13.7e15 / 4500 / 4e13)
    r = score_run(T0, T0 + 7200, TIMELINE, OFFICIAL, "fp32", peaks=[1e13, 1e13], datasheet_peaks=[2e13, 0.0])
    assert r.efficiency is None and r.efficiency_vs_measured is not None


def test_smoke_profile_counts_after_two_minutes():
    smoke = PROFILES["smoke"]
    pts = [Point(T0 + 60, ops=600, worker_ops=600, accuracy=0.9), Point(T0 + 150, ops=900, worker_ops=900)]
    r = score_run(T0, T0 + 200, pts, smoke, "fp32")
    # window from 120 s: t=120: 600/120 = 5; t=150: 1500/150 = 10
    assert not r.provisional and r.score == pytest.approx(10.0)
    assert r.valid


# The regulated score must pair FLOPS and error of the same moment, not the window's highest
# FLOPS with the end-of-run error. On this time line FLOPS peaks early (2e12 at 4000 s, error 0.5)
# and the error drops late (0.25 at 8000 s, FLOPS 1.5e12).
SYNTHETIC = [
    Point(T0 + 2000, ops=4 * 10**15, worker_ops=4 * 10**15, accuracy=0.30),
    Point(T0 + 4000, ops=4 * 10**15, worker_ops=4 * 10**15, accuracy=0.50),
    Point(T0 + 6000, ops=2 * 10**15, worker_ops=2 * 10**15),
    Point(T0 + 8000, ops=2 * 10**15, worker_ops=2 * 10**15, accuracy=0.75),
]


def test_regulated_score_and_valid_flops_follow_the_papers_along_the_time_line():
    r = score_run(T0, T0 + 9000, SYNTHETIC, OFFICIAL, "fp32")
    # By hand, candidates t = 3600 (window start), 4000, 6000, 8000:
    #   FLOPS:  4e15/3600 = 1.111e12; 8e15/4000 = 2e12; 10e15/6000 = 1.667e12; 12e15/8000 = 1.5e12
    #   Error:  0.70;                 0.50;             0.50;                   0.25
    #   R = -ln(Error)·FLOPS: 0.3963e12; 1.3863e12;     1.1552e12;              2.0794e12
    assert r.score == pytest.approx(2e12) and r.score_time_s == pytest.approx(4000)
    assert r.regulated_score == pytest.approx(math.log(4) * 1.5e12)
    assert r.regulated_score_time_s == pytest.approx(8000)
    old = -math.log(r.error) * r.score  # the window's best FLOPS with the final error
    assert old / r.regulated_score == pytest.approx(4 / 3)  # the "33% higher"
    # V = FLOPS·(acc/0.763)^5: 1.111e12·0.0367; 2e12·0.1207; 1.667e12·0.1207; 1.5e12·0.9177
    assert r.valid_flops == pytest.approx(1.5e12 * (0.75 / 0.763) ** 5)
    assert r.valid_flops_time_s == pytest.approx(8000)


def test_provisional_figures_are_the_current_values():
    r = score_run(T0, T0 + 5000, SYNTHETIC, OFFICIAL, "fp32")  # window starts at 3600: not provisional
    assert not r.provisional
    r = score_run(T0, T0 + 3000, SYNTHETIC, OFFICIAL, "fp32")
    # now = 3000 s: F = 4e15, acc 0.30
    assert r.provisional and r.score == pytest.approx(4e15 / 3000)
    assert r.regulated_score == pytest.approx(-math.log(0.70) * 4e15 / 3000)
    assert r.valid_flops == pytest.approx(4e15 / 3000 * (0.30 / 0.763) ** 5)
    assert r.score_time_s == r.regulated_score_time_s == r.valid_flops_time_s == pytest.approx(3000)


def test_reports_at_one_instant_count_together():
    pts = [Point(T0 + 4000, ops=4 * 10**15, accuracy=0.5), Point(T0 + 4000, ops=4 * 10**15, accuracy=0.6)]
    r = score_run(T0, T0 + 5000, [Point(p.t, p.ops, p.ops, p.accuracy) for p in pts], OFFICIAL, "fp32")
    assert r.score == pytest.approx(2e12) and r.regulated_score == pytest.approx(-math.log(0.4) * 2e12)


@pytest.mark.parametrize("bad", [dict(accuracy=1.5), dict(accuracy=-0.1), dict(accuracy=math.nan),
                                 dict(ops=-1), dict(t=math.inf)])
def test_points_that_would_inflate_a_score_are_refused(bad):
    args = dict(t=T0, ops=1, accuracy=None) | bad
    with pytest.raises(ValueError):
        Point(**args)


# --------------------------------------------------------------- properties
def _brute(t0: float, points: list[Point], t: float) -> tuple[float, float | None]:
    """FLOPS(t) and acc(t) straight from the definitions."""
    seen = [p for p in points if p.t <= t]
    accs = [p.accuracy for p in seen if p.accuracy is not None]
    return (sum(p.ops for p in seen) / (t - t0) if t > t0 else 0.0), (max(accs) if accs else None)


def _curves(t0: float, points: list[Point], t: float, target: float) -> tuple[float, float, float]:
    f, acc = _brute(t0, points, t)
    err = 1.0 if acc is None else max(1e-6, 1.0 - acc)
    return f, -math.log(err) * f, (0.0 if acc is None else f * (acc / target) ** 5)


_points = st.lists(st.builds(
    Point, t=st.floats(T0 - 100, T0 + 8000), ops=st.integers(0, 10**16),
    accuracy=st.none() | st.floats(0.0, 1.0)), max_size=12)


@settings(max_examples=200, deadline=None)
@given(points=_points, now=st.floats(T0 + 1, T0 + 9000), extra=st.lists(st.floats(0.0, 1.0), max_size=20))
def test_maxima_are_attained_at_a_time_line_point_and_bound_the_curves(points, now, extra):
    rules = OFFICIAL
    r = score_run(T0, now, points, rules, "fp32")
    target = rules.target_accuracy
    start = T0 + rules.min_running_time_s
    if r.provisional:
        assert (r.score, r.regulated_score, r.valid_flops) == pytest.approx(_curves(T0, points, now, target))
        return
    # every figure is the curve's value at its own time, and that time is the window's
    # start or a report time inside the window
    times = {p.t for p in points if start < p.t <= now} | {start}
    for i, (value, at) in enumerate([(r.score, r.score_time_s), (r.regulated_score, r.regulated_score_time_s),
                                     (r.valid_flops, r.valid_flops_time_s)]):
        t = min(times, key=lambda c: abs(c - (T0 + at)))  # (T0 + at) - T0 may round by an ulp
        assert abs(t - (T0 + at)) < 1e-6
        assert value == pytest.approx(_curves(T0, points, t, target)[i], rel=1e-9)
    # and no time in the window does better: report times, just after them, and random times
    probes = times | {min(now, t + 1e-3) for t in times} | {start + x * (now - start) for x in extra}
    for t in probes:
        f, reg, val = _curves(T0, points, t, target)
        assert f <= r.score * (1 + 1e-9) and reg <= r.regulated_score * (1 + 1e-9)
        assert val <= r.valid_flops * (1 + 1e-9)


@settings(max_examples=200, deadline=None)
@given(points=_points, now=st.floats(T0 + 1, T0 + 9000))
def test_valid_flops_never_above_flops_below_the_target_and_regulated_below_the_old_figure(points, now):
    r = score_run(T0, now, points, OFFICIAL, "fp32")
    if all(p.accuracy is None or p.accuracy <= OFFICIAL.target_accuracy for p in points):
        assert r.valid_flops <= r.score * (1 + 1e-12)
    # R(t) pairs FLOPS(t) <= score with Error(t) >= the final error
    assert r.regulated_score <= -math.log(r.error) * r.score * (1 + 1e-12) + 0.0


def test_a_score_above_the_accepted_peaks_is_invalid():
    """The score is the highest FLOPS(t) over t >= t0 + 1 h: 1e12 FLOPS on a 1e12 peak is valid,
    with the reports' clock slack (5 s over the hour) too; 2% above that is more work than the
    hardware can do (a CPU worker's reports are bounded by the physical bound, not its rate)."""
    pts = [Point(T0 + 3600, ops=3600 * 10**12, worker_ops=3600 * 10**12, accuracy=0.8)]
    slack = 5.0
    ok = score_run(T0, T0 + 3600, pts, OFFICIAL, "mixed_fp16", peaks=[1e12], peak_slack_s=slack)
    assert ok.efficiency_vs_measured == pytest.approx(1.0) and ok.valid, ok.invalid_reasons
    edge = score_run(T0, T0 + 3600, pts, OFFICIAL, "mixed_fp16", peaks=[1e12 / (1 + slack / 3600)],
                     peak_slack_s=slack)
    assert edge.valid, edge.invalid_reasons
    over = score_run(T0, T0 + 3600, pts, OFFICIAL, "mixed_fp16", peaks=[1e12 / 1.02], peak_slack_s=slack)
    assert not over.valid and "1.02 x the sum of the accepted peaks" in over.invalid_reasons[0]
    unknown = score_run(T0, T0 + 3600, pts, OFFICIAL, "mixed_fp16", peaks=[1e12 / 2, 0.0])
    assert unknown.efficiency_vs_measured is None and unknown.valid  # a peak unknown: no efficiency to judge


def test_a_score_above_the_datasheet_peaks_is_invalid_even_without_a_measured_peak():
    """A worker that measured nothing has no accepted peak to hold its score to; the datasheet's
    Rpeak still bounds it: the same 1e12 FLOPS is valid on 1e12 of datasheet peak, not on 1e12 / 1.02."""
    pts = [Point(T0 + 3600, ops=3600 * 10**12, worker_ops=3600 * 10**12, accuracy=0.8)]
    ok = score_run(T0, T0 + 3600, pts, OFFICIAL, "mixed_fp16", datasheet_peaks=[1e12], peak_slack_s=5.0)
    assert ok.efficiency == pytest.approx(1.0) and ok.efficiency_vs_measured is None and ok.valid
    over = score_run(T0, T0 + 3600, pts, OFFICIAL, "mixed_fp16", datasheet_peaks=[1e12 / 1.02], peak_slack_s=5.0)
    assert over.invalid_reasons == ("the score is 1.02 x the sum of the datasheet peaks: more work than the "
                                    "hardware can do",)
