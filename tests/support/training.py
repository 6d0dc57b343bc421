"""Tiny in-memory training data and the profile the trainer's tests train with (TensorFlow)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from aiperf.profiles import SMOKE

PROFILE = dataclasses.replace(SMOKE, epochs_per_round=(2, 6), learning_rate=0.05)


class TinyDataset:
    """In-memory stand-in for worker.data.Dataset: random 32x32 images, one-hot labels."""

    def __init__(self, n_train: int = 100, n_val: int = 40, size: int = 32, classes: int = 10) -> None:
        rng = np.random.default_rng(0)
        self.image_size, self.num_classes = size, classes
        self.train_size, self.validation_size = n_train, n_val
        self._x = rng.normal(size=(n_train + n_val, size, size, 3)).astype(np.float32)
        self._y = np.eye(classes, dtype=np.float32)[rng.integers(0, classes, n_train + n_val)]

    def train(self, batch_size: int, *, seed: int = 0) -> Any:
        import tensorflow as tf

        ds = tf.data.Dataset.from_tensor_slices((self._x[:self.train_size], self._y[:self.train_size]))
        return ds.shuffle(self.train_size, seed=seed).batch(batch_size)

    def validation(self, batch_size: int) -> Any:
        import tensorflow as tf

        ds = tf.data.Dataset.from_tensor_slices((self._x[self.train_size:], self._y[self.train_size:]))
        return ds.batch(batch_size)

    def train_steps(self, batch_size: int) -> int:
        return math.ceil(self.train_size / batch_size)
