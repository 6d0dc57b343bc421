"""Scores of SPEC section 7 on a scripted time line; expected numbers by hand."""

from __future__ import annotations

import math

import pytest

from aiperf.precision import GEMM_DTYPES, PRECISIONS, get_precision, is_official
from aiperf.profiles import MAX_ERROR
from aiperf.scoring import (PROFILES, Point, efficiency, error_of, flops_agree, flops_at, model_rank_key,
                            score_run)

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
    assert r.regulated_score == pytest.approx(-math.log(0.25) * 13.7e15 / 4500)
    assert r.valid_flops == pytest.approx(13.7e15 / 4500 * (0.75 / 0.70) ** 5)
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


def test_maximum_error_is_30_percent_and_sets_the_target():
    assert MAX_ERROR == 0.30 and OFFICIAL.max_error == MAX_ERROR
    assert OFFICIAL.target_accuracy == 1.0 - MAX_ERROR


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
    r = score_run(T0, T0 + 7200, TIMELINE, OFFICIAL, "fp32", peaks=[1e13, 1e13])
    assert r.efficiency == pytest.approx(13.7e15 / 4500 / 2e13)


def test_smoke_profile_counts_after_two_minutes():
    smoke = PROFILES["smoke"]
    pts = [Point(T0 + 60, ops=600, worker_ops=600, accuracy=0.9), Point(T0 + 150, ops=900, worker_ops=900)]
    r = score_run(T0, T0 + 200, pts, smoke, "fp32")
    # window from 120 s: t=120: 600/120 = 5; t=150: 1500/150 = 10
    assert not r.provisional and r.score == pytest.approx(10.0)
    assert r.valid
