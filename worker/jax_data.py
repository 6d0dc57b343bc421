"""Where the JAX round's batches come from: numpy arrays, one epoch per iteration.

`train_batches` and `validation_batches` choose the source, in this order:

1. the dataset's own numpy pipeline (``numpy_train`` / ``numpy_validation``:
   parallel decode and augmentation, prefetch, no TensorFlow);
2. its tf.data pipeline read as numpy, where TensorFlow is installed (with
   TensorFlow kept off the accelerators, which JAX owns);
3. without either, for the in-memory kinds (``digits``, ``cifar10``): their
   arrays prepared here (`ArrayBatches`), with the tf.data path's resize,
   normalisation and augmentation (pad-and-crop translation, flip).

Each element is ``(images float32 [B, H, W, 3], one-hot labels float32 [B, classes])``;
the partial last batch of a split is included.
"""

from __future__ import annotations

import importlib.util
import logging
from typing import Any, Iterable, Iterator

import numpy as np

log = logging.getLogger(__name__)

Batch = tuple[np.ndarray, np.ndarray]


def train_batches(dataset: Any, batch_size: int, seed: int = 0) -> Iterable[Batch]:
    """Shuffled (augmented where the dataset augments) training batches; each iteration one epoch."""
    if hasattr(dataset, "numpy_train"):
        own: Iterable[Batch] = dataset.numpy_train(batch_size, seed=seed)
        return own
    if _tensorflow_installed() and hasattr(dataset, "train"):
        return _TfEpochs(lambda: dataset.train(batch_size, seed=seed))
    return ArrayBatches(dataset).train(batch_size, seed)


def validation_batches(dataset: Any, batch_size: int) -> Iterable[Batch]:
    """Validation batches in a fixed order, the same on every iteration."""
    if hasattr(dataset, "numpy_validation"):
        own: Iterable[Batch] = dataset.numpy_validation(batch_size)
        return own
    if _tensorflow_installed() and hasattr(dataset, "validation"):
        return _TfEpochs(lambda: dataset.validation(batch_size))
    return ArrayBatches(dataset).validation(batch_size)


def _tensorflow_installed() -> bool:
    try:
        return importlib.util.find_spec("tensorflow") is not None
    except (ImportError, ValueError):  # a blocked or half-present package
        return False


class _TfEpochs:
    """A tf.data pipeline as numpy batches: each iteration one pass. TensorFlow is told to leave
    the GPUs alone first: it would otherwise take most of their memory when it starts."""

    def __init__(self, make: Any) -> None:
        import tensorflow as tf

        try:
            tf.config.set_visible_devices([], "GPU")
        except RuntimeError:  # TensorFlow already started: its devices are set
            pass
        self._data = make()

    def __iter__(self) -> Iterator[Batch]:
        batches: Iterator[Batch] = self._data.as_numpy_iterator()
        return batches


class ArrayBatches:
    """An in-memory dataset's arrays (`worker.data.arrays.ArrayDataset`) as numpy batches,
    prepared as its tf.data pipeline prepares them; a dataset of another kind: TypeError."""

    def __init__(self, dataset: Any) -> None:
        needed = ("_train", "_validation", "_mean", "_std", "_flip", "augment", "image_size", "num_classes")
        if not all(hasattr(dataset, name) for name in needed):
            raise TypeError(f"{dataset!r} has no numpy pipeline and TensorFlow is not installed: "
                            "only the in-memory kinds (digits, cifar10) can be read without it")
        self.dataset = dataset

    def train(self, batch_size: int, seed: int = 0) -> Iterable[Batch]:
        return _Epochs(self, batch_size, seed, training=True)

    def validation(self, batch_size: int) -> Iterable[Batch]:
        return _Epochs(self, batch_size, 0, training=False)

    def prepared(self, images: np.ndarray) -> np.ndarray:
        """Resized (bilinear, half-pixel centres: tf.image.resize's), grey to RGB, normalised."""
        d = self.dataset
        images = np.asarray(images, np.float32)
        if images.shape[1] != d.image_size or images.shape[2] != d.image_size:
            images = resize_bilinear(images, d.image_size)
        if images.shape[-1] == 1:
            images = np.repeat(images, 3, axis=-1)
        mean, std = np.asarray(d._mean, np.float32), np.asarray(d._std, np.float32)
        normalised: np.ndarray = (images - mean) / std
        return normalised

    def labels(self, labels: np.ndarray) -> np.ndarray:
        one_hot: np.ndarray = np.eye(self.dataset.num_classes, dtype=np.float32)[np.asarray(labels)]
        return one_hot

    def augmented(self, images: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Pad by 1/8 of the side with zeros and crop back at a random offset; flip where the kind flips."""
        size = self.dataset.image_size
        pad = max(size // 8, 1)
        padded = np.pad(images, ((0, 0), (pad, pad), (pad, pad), (0, 0)))
        out = np.empty_like(images)
        offsets = rng.integers(0, 2 * pad + 1, size=(len(images), 2))
        flips = rng.random(len(images)) < 0.5 if self.dataset._flip else np.zeros(len(images), bool)
        for i, (dy, dx) in enumerate(offsets):
            crop = padded[i, dy:dy + size, dx:dx + size]
            out[i] = crop[:, ::-1] if flips[i] else crop
        return out


class _Epochs:
    """One split's batches; each iteration one epoch (training: reshuffled, re-augmented)."""

    def __init__(self, source: ArrayBatches, batch_size: int, seed: int, training: bool) -> None:
        self.source, self.batch_size, self.training = source, batch_size, training
        self.rng = np.random.default_rng(seed)

    def __iter__(self) -> Iterator[Batch]:
        d = self.source.dataset
        images, labels = d._train if self.training else d._validation
        order = self.rng.permutation(len(labels)) if self.training else np.arange(len(labels))
        for start in range(0, len(order), self.batch_size):
            chosen = order[start:start + self.batch_size]
            x = self.source.prepared(images[chosen])
            if self.training and d.augment:
                x = self.source.augmented(x, self.rng)
            yield x, self.source.labels(labels[chosen])


def resize_bilinear(images: np.ndarray, size: int) -> np.ndarray:
    """[N, h, w, c] -> [N, size, size, c], bilinear with half-pixel centres and no antialiasing
    (what tf.image.resize does by default)."""

    def axis(n_in: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        src = (np.arange(size) + 0.5) * (n_in / size) - 0.5
        low = np.clip(np.floor(src).astype(int), 0, n_in - 1)
        high = np.clip(low + 1, 0, n_in - 1)
        return low, high, (np.clip(src, 0, n_in - 1) - low).astype(np.float32)

    y0, y1, wy = axis(images.shape[1])
    x0, x1, wx = axis(images.shape[2])
    rows = images[:, y0] * (1 - wy)[None, :, None, None] + images[:, y1] * wy[None, :, None, None]
    resized: np.ndarray = rows[:, :, x0] * (1 - wx)[None, None, :, None] + rows[:, :, x1] * wx[None, None, :, None]
    return resized
