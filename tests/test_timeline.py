"""FLOPS(t), error(t) and resource means over a run (aiperf.timeline), on hand-computed data."""

from __future__ import annotations

import math

import pytest

from aiperf.scoring import Point
from aiperf.timeline import CurvePoint, Sample, ScorePoint, error_curve, flops_curve, resource_curve, score_curve

T0 = 1000.0


def test_curve_is_cumulative_operations_over_elapsed_time():
    points = [Point(T0 + 20, 600), Point(T0 + 10, 100, accuracy=0.3), Point(T0 + 40, 200, accuracy=0.2),
              Point(T0 + 50, 100, accuracy=0.6), Point(T0 + 90, 999)]  # out of order on purpose
    curve = flops_curve(T0, points, end=T0 + 60)
    assert curve == [
        CurvePoint(10, 100, 10.0, 0.3),
        CurvePoint(20, 700, 35.0, 0.3),
        CurvePoint(40, 900, 22.5, 0.3),   # a worse accuracy does not lower the best
        CurvePoint(50, 1000, 20.0, 0.6),
    ]  # the report after `end` is left out
    assert error_curve(curve) == [(10, pytest.approx(0.7)), (20, pytest.approx(0.7)), (40, pytest.approx(0.7)),
                                  (50, pytest.approx(0.4))]


def test_reports_at_the_start_count_but_have_no_rate():
    curve = flops_curve(T0, [Point(T0, 50), Point(T0 + 5, 50)])
    assert curve == [CurvePoint(5, 100, 20.0, None)]


def test_downsampling_keeps_exact_points_of_the_curve():
    points = [Point(T0 + t, 10) for t in range(1, 101)]
    curve = flops_curve(T0, points, max_points=10)
    assert len(curve) == 10
    # the last point of each 10 s bucket, with its exact cumulative value
    assert [c.elapsed_s for c in curve] == [9, 19, 29, 39, 49, 59, 69, 79, 89, 100]
    assert all(c.ops == 10 * c.elapsed_s and c.flops == pytest.approx(10.0) for c in curve)


def test_resources_are_averaged_per_bucket_accelerators_and_host_apart():
    samples = [
        Sample(T0 + 1, 0, accelerator_util=0.5, accelerator_memory_used=100),
        Sample(T0 + 2, 1, accelerator_util=1.0, accelerator_memory_used=300),
        Sample(T0 + 3, -1, cpu_util=0.25, memory_used=1000),
        Sample(T0 + 15, -1, cpu_util=0.75, memory_used=3000),
        Sample(T0 + 50, 0, accelerator_util=0.9),  # after the end: left out
    ]
    out = resource_curve(T0, samples, end=T0 + 20, buckets=2)
    assert len(out) == 2
    first, second = out
    assert (first.elapsed_s, first.accelerator_util, first.accelerator_memory_used) == (10, 0.75, 200)
    assert (first.cpu_util, first.memory_used) == (0.25, 1000)
    assert (second.elapsed_s, second.accelerator_util, second.cpu_util, second.memory_used) == (20, None, 0.75, 3000)
    assert resource_curve(T0, samples, end=T0) == []


def test_score_curve_is_the_papers_fig_4_series():
    # FLOPS(t), -ln(Error(t))·FLOPS(t) and FLOPS(t)·(acc(t)/target)^5 at each report
    points = [Point(T0 + 10, 100), Point(T0 + 20, 700, accuracy=0.5), Point(T0 + 40, 200, accuracy=0.9)]
    series = score_curve(flops_curve(T0, points), target_accuracy=0.9)
    assert series == [
        ScorePoint(10, 10.0, 0.0, 0.0),  # no accuracy yet: error 1, nothing regulated or valid
        ScorePoint(20, 40.0, pytest.approx(math.log(2) * 40.0), pytest.approx(40.0 * (0.5 / 0.9) ** 5)),
        ScorePoint(40, 25.0, pytest.approx(math.log(10) * 25.0), pytest.approx(25.0)),
    ]
    assert score_curve([], 0.763) == []
