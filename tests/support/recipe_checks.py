"""The training recipe measured on whichever backend this process runs (worker.backend): the same
code for TensorFlow (tests/test_recipe.py) and JAX (tests/support/jax_checks.py, a process of its own).

Figures only; the tests compare them with what the recipe's formulas give (docs/spec.md, "The
training recipe"): the first step's loss against the label-smoothed cross-entropy of the model's
own predictions plus (wd/2)·Σ kernel², the first update against SGD's with the penalty's gradient
wd·w on the kernels only, the learning rate per step against `Profile.learning_rate_at`, and the
validation loss against the cross-entropy of the trained weights on the validation images.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from aiperf.graph import with_inserted_kernel
from aiperf.hyperparameters import Hyperparameters
from aiperf.profiles import SMOKE, Profile
from tests.support.graphs import tiny_graph

LEARNING_RATE = 0.05
BATCH = 8


KERNELS = ("c1", "ins", "fc")  # the tiny graph's conv and dense layers


def kernel_squares(weights: Any) -> float:
    """Σ kernel² over the tiny graph's kernels (the weight decay's penalty is wd/2 of it)."""
    return sum(float(np.sum(np.square(np.asarray(weights[name][0], np.float64)))) for name in KERNELS)


def recipe(label_smoothing: float = 0.0, weight_decay: float = 0.0, **changes: Any) -> Profile:
    settings = dict(epochs_per_round=(1,), learning_rate=LEARNING_RATE, label_smoothing=label_smoothing,
                    weight_decay=weight_decay)
    return dataclasses.replace(SMOKE, **{**settings, **changes})


def batch() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    x = rng.normal(size=(BATCH, 32, 32, 3)).astype(np.float32)
    y = np.eye(10, dtype=np.float32)[rng.integers(0, 10, BATCH)]
    return x, y


def first_step(profile: Profile) -> dict[str, Any]:
    """One training step on a known batch: the model's predictions before it (training mode), its
    kernels, the step's loss and the weights after it."""
    from worker import backend
    from worker.rounds import StepSettings, decayed_kernels

    x, y = batch()
    settings = StepSettings(graph=with_inserted_kernel(tiny_graph(), 3), precision="fp32",
                            strategy=backend.local_distribution(), global_batch=BATCH, epochs=1,
                            steps_per_epoch=1, seed=3)
    compiled = backend.compile_round(settings, backend.in_memory_batches((x, y)), profile, evaluate=False)
    try:
        model = compiled.model
        mask = decayed_kernels(model)
        before = compiled.weights()
        predicted = np.asarray(model(x, training=True), np.float64)
        loss = float(compiled.train_step(compiled.train_iterator)[0])
        return {"predicted": predicted, "labels": y, "loss": loss, "before": before, "after": compiled.weights(),
                "decayed": sorted(v.path for v, m in zip(model.trainable_variables, mask) if m),
                "not_decayed": sorted(v.path for v, m in zip(model.trainable_variables, mask) if not m)}
    finally:
        compiled.release()


def schedule_rates(profile: Profile, epochs: int, steps_per_epoch: int) -> list[float]:
    """The learning rate of every step of a round, as the optimizer computes it."""
    from worker.rounds import learning_rate_schedule

    schedule = learning_rate_schedule(profile, epochs, steps_per_epoch)
    return [float(np.asarray(schedule(np.int64(step)))) for step in range(epochs * steps_per_epoch)]


def validation_loss(profile: Profile, dataset: Any, validation: tuple[np.ndarray, np.ndarray]) -> dict[str, Any]:
    """A one-epoch round's recorded validation loss, and the trained weights' predictions on the
    validation images (inference mode) to recompute it from."""
    from aiperf.keras_builder import build_model
    from worker import backend
    from worker.rounds import set_layer_weights
    from worker.trainer import train_model

    kept: list[Any] = []
    res = train_model(tiny_graph(), Hyperparameters(16, 3), dataset, profile, 1,
                      on_progress=lambda p: None, on_weights=kept.append)
    with backend.host_scope():
        model = build_model(with_inserted_kernel(tiny_graph(), 3))
        set_layer_weights(model, kept[-1])
        predicted = np.asarray(model(validation[0], training=False), np.float64)
    return {"state": res.state, "val_losses": list(res.val_losses), "predicted": predicted.tolist(),
            "labels": validation[1].tolist()}


def smoothed_cross_entropy(labels: np.ndarray, predicted: np.ndarray, smoothing: float) -> float:
    """Keras's categorical cross-entropy against y·(1 − s) + s/classes, averaged over the images."""
    labels, predicted = np.asarray(labels, np.float64), np.asarray(predicted, np.float64)
    target = labels * (1.0 - smoothing) + smoothing / labels.shape[-1]
    probabilities = predicted / predicted.sum(-1, keepdims=True)
    return float(np.mean(-(target * np.log(np.clip(probabilities, 1e-7, 1 - 1e-7))).sum(-1)))


def to_json(step: dict[str, Any]) -> dict[str, Any]:
    """`first_step`'s figures as JSON (from the JAX process)."""
    def arrays(weights: dict[str, list[Any]]) -> dict[str, list[Any]]:
        return {k: [np.asarray(a).tolist() for a in v] for k, v in weights.items()}

    return dict(step, predicted=step["predicted"].tolist(), labels=step["labels"].tolist(),
                before=arrays(step["before"]), after=arrays(step["after"]))
