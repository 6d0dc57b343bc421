"""Predicted final accuracy from a partial validation curve."""

import numpy as np
import pytest

from aiperf.learning_curve import predict_final_accuracy


def saturating(epochs, a=0.8, b=0.6, c=0.25):
    e = np.arange(1, epochs + 1)
    return a - b * np.exp(-c * (e - 1))


def test_extrapolates_a_clean_saturating_curve():
    truth = saturating(15)
    pred = predict_final_accuracy(truth[:5], 15)
    assert pred > truth[4] + 0.1           # it really extrapolates
    assert pred == pytest.approx(truth[-1], abs=0.01)


def test_noisy_curve_beats_the_best_observed_as_an_estimate():
    rng = np.random.default_rng(0)
    truth = saturating(30, a=0.75, b=0.65, c=0.15)
    pred_errors, naive_errors = [], []
    for _ in range(20):
        noisy = np.clip(truth + rng.normal(0, 0.02, truth.size), 0, 1)
        pred_errors.append(predict_final_accuracy(noisy[:8], 30) - truth[-1])
        naive_errors.append(noisy[:8].max() - truth[-1])
    assert abs(np.median(pred_errors)) < 0.06
    assert np.mean(np.abs(pred_errors)) < 0.6 * np.mean(np.abs(naive_errors))
    assert max(abs(e) for e in pred_errors) < 0.25


def test_never_below_best_observed():
    curve = [0.30, 0.62, 0.41, 0.45]          # a spike then lower values
    assert predict_final_accuracy(curve, 60) >= 0.62
    assert predict_final_accuracy([0.5, 0.45, 0.48, 0.46], 15) >= 0.5


def test_never_above_one():
    assert predict_final_accuracy([0.90, 0.97, 0.995], 60) <= 1.0
    assert predict_final_accuracy([0.5, 0.99], 60) <= 1.0
    assert predict_final_accuracy([0.2, 0.4, 0.6, 0.8], 100) <= 1.0


def test_one_point_is_the_observed_value():
    assert predict_final_accuracy([0.42], 60) == pytest.approx(0.42)


def test_two_points_rising_predict_more_but_bounded():
    pred = predict_final_accuracy([0.3, 0.5], 15)
    assert 0.5 < pred <= 0.7 + 1e-9           # damped: at most one more observed gain
    assert predict_final_accuracy([0.5, 0.3], 15) == pytest.approx(0.5)
    # A first epoch at chance then a jump (measured on the smoke profile): no leap to 1.
    assert 0.703 < predict_final_accuracy([0.108, 0.703], 4) <= 0.703 + 0.5 * (1 - 0.703) + 1e-9


def test_no_extrapolation_when_curve_is_complete():
    assert predict_final_accuracy([0.3, 0.6, 0.5], 3) == pytest.approx(0.6)


def test_empty_and_nan():
    assert predict_final_accuracy([], 10) == 0.0
    assert predict_final_accuracy([0.2, float("nan"), 0.4], 10) >= 0.4


def test_ranks_a_faster_learner_above_a_slow_one():
    fast = saturating(5, a=0.9, b=0.7, c=0.6)
    slow = saturating(5, a=0.6, b=0.3, c=0.6)
    assert predict_final_accuracy(fast, 60) > predict_final_accuracy(slow, 60)


def test_rejects_out_of_range():
    with pytest.raises(ValueError):
        predict_final_accuracy([0.2, 1.5], 10)
