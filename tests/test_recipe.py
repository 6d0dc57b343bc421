"""The training recipe (docs/spec.md, "The training recipe") on TensorFlow, with the same checks as
the JAX backend's (tests/support/recipe_checks.py; tests/test_jax_backend.py runs them there): label smoothing,
weight decay on kernels only, the learning-rate schedules, early stopping on validation loss, and the
official profile's values, each the original AIPerf's."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aiperf.hyperparameters import Hyperparameters
from aiperf.profiles import OFFICIAL, SMOKE
from tests.support.recipe_checks import (
    KERNELS,
    LEARNING_RATE,
    first_step,
    kernel_squares,
    recipe,
    schedule_rates,
    smoothed_cross_entropy,
    validation_loss,
)


def test_the_official_recipe_is_the_originals():
    # imagenet_train.py (TensorFlow): CategoricalCrossentropy(label_smoothing=0.1), EarlyStopping(min_delta=0.001)
    # on Keras's default monitor val_loss, maxTPEsearchNum 2; the Ascend trainer: weight_decay 1e-4 on
    # the parameters but beta, gamma and bias, learning rate linear to 0 over the round's epochs
    assert (OFFICIAL.label_smoothing, OFFICIAL.weight_decay, OFFICIAL.early_stop_monitor,
            OFFICIAL.early_stop_min_delta, OFFICIAL.trials_per_architecture, OFFICIAL.lr_decay) == (
        0.1, 1e-4, "val_loss", 0.001, 2, "round")
    assert OFFICIAL.learning_rate == 0.1 and OFFICIAL.momentum == 0.9 and OFFICIAL.max_error == 0.30


def test_smokes_early_stopping_cannot_fire_so_its_monitor_changes_nothing():
    # patience min(6 + 2r, 20) is at least 8 epochs; no smoke round is longer than 4
    assert min(SMOKE.patience(r) for r in range(1, 30)) > max(SMOKE.epochs_per_round)


@pytest.fixture(scope="module")
def plain():
    return first_step(recipe())


def test_the_step_loss_is_the_cross_entropy_of_the_models_predictions(plain):
    assert plain["loss"] == pytest.approx(smoothed_cross_entropy(plain["labels"], plain["predicted"], 0.0), rel=1e-6)


def test_label_smoothing_changes_the_loss_by_the_expected_amount(plain):
    smoothed = first_step(recipe(label_smoothing=0.1))
    expected = smoothed_cross_entropy(smoothed["labels"], smoothed["predicted"], 0.1)
    assert smoothed["loss"] == pytest.approx(expected, rel=1e-6)
    # same seed, same weights: the difference is 0.1·mean(log p_true − mean_c log p_c), not noise
    p = np.asarray(plain["predicted"])
    y = np.asarray(plain["labels"])
    shift = 0.1 * np.mean((y * np.log(p)).sum(-1) - np.log(p).mean(-1))
    assert smoothed["loss"] - plain["loss"] == pytest.approx(shift, rel=1e-4) and abs(shift) > 1e-3


def test_weight_decay_applies_to_conv_and_dense_kernels_only(plain):
    wd = 0.01
    decayed = first_step(recipe(weight_decay=wd))
    assert decayed["decayed"] == ["c1/kernel", "fc/kernel", "ins/kernel"]
    assert not {p for p in decayed["not_decayed"] if p.endswith("kernel")}
    assert {p.rsplit("/", 1)[1] for p in decayed["not_decayed"]} == {"gamma", "beta", "bias"}
    # the loss carries (wd/2)·Σ kernel², not the batch-norm scales (which are 1: they would add wd/2 each)
    assert decayed["loss"] - plain["loss"] == pytest.approx(0.5 * wd * kernel_squares(plain["before"]), rel=1e-5)
    # the first SGD update differs by −lr·wd·w on each kernel and not at all elsewhere
    for name in KERNELS:
        w0 = np.asarray(plain["before"][name][0])
        np.testing.assert_allclose(np.asarray(decayed["after"][name][0]) - np.asarray(plain["after"][name][0]),
                                   -LEARNING_RATE * wd * w0, atol=1e-6)
    for name in ("b1", "b2"):
        for a, b in zip(decayed["after"][name][:2], plain["after"][name][:2]):  # gamma, beta
            np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(decayed["after"]["fc"][1], plain["after"]["fc"][1])  # the dense bias


def test_the_learning_rate_schedules_step_by_step():
    per_round = recipe(epochs_per_round=(2, 4))
    rates = schedule_rates(per_round, epochs=2, steps_per_epoch=3)
    np.testing.assert_allclose(rates, [LEARNING_RATE * (1 - s / 6) for s in range(6)], rtol=1e-6)
    # the paper's "0.1 with decay=0.1/60": constant within an epoch, lr·(1 − e/final_epochs) whatever the round
    paper = recipe(epochs_per_round=(2, 4), lr_decay="max_epochs")
    rates = schedule_rates(paper, epochs=2, steps_per_epoch=3)
    np.testing.assert_allclose(rates, [LEARNING_RATE] * 3 + [LEARNING_RATE * 0.75] * 3, rtol=1e-6)
    assert [paper.learning_rate_at(e, 2) for e in (0, 1)] == [LEARNING_RATE, LEARNING_RATE * 0.75]
    assert OFFICIAL.final_epochs == 60 and dataclasses.replace(OFFICIAL, lr_decay="max_epochs").learning_rate_at(
        59, 60) == pytest.approx(0.1 / 60)  # the last epoch of a full-length round


def test_the_validation_loss_is_the_smoothed_cross_entropy_of_the_trained_weights():
    from tests.support.training import TinyDataset

    data = TinyDataset(n_train=64, n_val=24)
    figures = validation_loss(recipe(label_smoothing=0.1), data, (data._x[64:], data._y[64:]))
    assert figures["state"] == "done" and len(figures["val_losses"]) == 1
    expected = smoothed_cross_entropy(np.asarray(figures["labels"]), np.asarray(figures["predicted"]), 0.1)
    assert figures["val_losses"][0] == pytest.approx(expected, rel=1e-5)


def test_early_stopping_on_validation_loss_ignores_accuracy_and_small_improvements():
    from aiperf.flops import count_flops
    from tests.support.graphs import tiny_graph
    from worker.trainer import EarlyStopping, _Tracker

    def run(monitor: str, epochs: list[tuple[float, float]]) -> int:
        t = _Tracker(count_flops(tiny_graph()), lambda p: None, lambda: False,
                     EarlyStopping(patience=2, monitor=monitor, min_delta=0.001), interval_s=30)
        for n, (acc, loss) in enumerate(epochs, 1):
            t.epoch = n
            t._end_epoch(acc, loss)
            if t.early_stopped:
                return n
        return 0

    # accuracy keeps rising while the loss flattens (falls by less than min_delta): stops on val_loss
    flat = [(0.1, 2.0), (0.2, 1.5), (0.3, 1.4995), (0.4, 1.4991)]
    assert run("val_loss", flat) == 4 and run("val_accuracy", flat) == 0
    # a fall larger than min_delta resets the count; NaN never improves
    assert run("val_loss", [(0.1, 2.0), (0.1, 2.0), (0.1, 1.99), (0.1, math.nan), (0.1, 1.995)]) == 5


def test_the_run_record_the_scoreboard_and_the_report_show_the_recipe():
    from aiperf.api import aiperf_pb2 as pb
    from aiperf.api.views import run_info_to_dict
    from aiperf_cli.tables import recipe_text

    official = run_info_to_dict(pb.RunInfo(config=pb.RunConfig(profile=pb.PROFILE_OFFICIAL)))
    assert official["recipe"] == {"learning_rate": 0.1, "lr_decay": "round", "momentum": 0.9,
                                  "label_smoothing": 0.1, "weight_decay": 1e-4, "early_stop_monitor": "val_loss",
                                  "early_stop_min_delta": 0.001, "trials_per_architecture": 2, "warmup_rounds": 5}
    assert recipe_text(official) == (
        "SGD lr 0.1 (linear to 0 over each round), momentum 0.9, label smoothing 0.1, weight decay 0.0001 "
        "(kernels); early stop on val_loss (min delta 0.001); 5 warm-up rounds, then trials: 2 per architecture "
        "(the parent's, then TPE's)")
    smoke = run_info_to_dict(pb.RunInfo(config=pb.RunConfig(profile=pb.PROFILE_SMOKE, warmup_rounds=2)))
    assert smoke["recipe"]["warmup_rounds"] == 2 and smoke["recipe"]["trials_per_architecture"] == 1
    assert "1 per architecture (TPE's)" in recipe_text(smoke)
    assert recipe_text({"recipe": None}).startswith("unknown")


def test_a_round_stops_early_once_the_validation_loss_is_flat_not_the_accuracy():
    from tests.support.graphs import tiny_graph
    from tests.support.training import TinyDataset
    from worker.trainer import train_model

    def run(**changes):
        profile = recipe(epochs_per_round=(4,), learning_rate=0.0, patience_base=0, patience_step=1,
                         patience_max=1, early_stop_min_delta=0.0, **changes)
        return train_model(tiny_graph(), Hyperparameters(32, 3), TinyDataset(n_train=32, n_val=32),
                           profile, 1, on_progress=lambda p: None)

    # lr 0: the weights stay, the accuracy is flat, but the batch-norm moving statistics move, and the loss with them
    moving = run(bn_momentum=None, early_stop_monitor="val_loss")
    assert len(set(moving.val_accuracies)) == 1 and all(a > b for a, b in zip(moving.val_losses, moving.val_losses[1:]))
    assert not moving.early_stopped and moving.epochs == 4
    assert run(bn_momentum=None, early_stop_monitor="val_accuracy").epochs == 2  # the accuracy alone stops it
    # batch-norm momentum 1 too: nothing changes, the loss is flat, the round stops after patience 1
    flat = run(bn_momentum=1.0, early_stop_monitor="val_loss")
    assert flat.early_stopped and flat.epochs == 2 and "early stop" in flat.reason
    assert flat.val_losses[0] == pytest.approx(flat.val_losses[1], rel=1e-6)


@settings(max_examples=150, deadline=None)
@given(losses=st.lists(st.integers(0, 500).map(lambda n: n / 100), min_size=1, max_size=25),
       patience=st.integers(1, 6), min_delta=st.sampled_from([0.0, 0.001, 0.005, 0.025]))
def test_early_stopping_on_validation_loss_stops_where_keras_does(losses, patience, min_delta):
    """The original's rule is Keras's EarlyStopping(min_delta, patience) on val_loss: the same epochs.
    Losses on a 0.01 grid: Keras compares in float32, so values apart by less than its precision
    (1e-104 against 0) would compare otherwise than in Python's float64."""
    import keras

    from aiperf.flops import count_flops
    from tests.support.graphs import tiny_graph
    from worker.trainer import EarlyStopping, _Tracker

    class Model:
        stop_training = False

    oracle = keras.callbacks.EarlyStopping(monitor="val_loss", min_delta=min_delta, patience=patience)
    oracle.set_model(Model())
    oracle.on_train_begin()
    keras_epochs = len(losses)
    for epoch, loss in enumerate(losses):
        oracle.on_epoch_end(epoch, {"val_loss": loss})
        if oracle.model.stop_training:
            keras_epochs = epoch + 1
            break
    t = _Tracker(count_flops(tiny_graph()), lambda p: None, lambda: False,
                 EarlyStopping(patience, "val_loss", min_delta), interval_s=30)
    ours = len(losses)
    for epoch, loss in enumerate(losses, 1):
        t.epoch = epoch
        t._end_epoch(0.5, loss)
        if t.early_stopped:
            ours = epoch
            break
    assert ours == keras_epochs
