"""The in-memory kinds, held as pixel arrays: ``cifar10`` and ``digits``.

* ``cifar10``: the CIFAR-10 binary version, ``data_batch_1.bin`` ..
  ``data_batch_5.bin`` and ``test_batch.bin`` (records of 1 label byte and
  3,072 pixel bytes in channel-major order).
* ``digits``: the built-in smoke dataset, scikit-learn's handwritten digits
  (real 8x8 grey images shipped inside scikit-learn), resized to the profile's
  input size with a fixed stratified split of 1,437 train and 360 validation
  images.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from worker.data.base import Dataset, ListedDataset, require_dir, tensorflow
from worker.data.crops import translation_pad
from worker.data.images import CIFAR10_MEAN, CIFAR10_STD, normalise_image
from worker.data.numpy_pipeline import Fill
from worker.data.opencv_images import ARRAY_DRAWS, prepare_arrays_into, translate_into
from worker.data.spec import DatasetError, DatasetSpec

if TYPE_CHECKING:  # pragma: no cover - typing only
    import tensorflow as tf

CIFAR_RECORD_BYTES = 1 + 32 * 32 * 3
CIFAR_TRAIN_FILES = tuple(f"data_batch_{i}.bin" for i in range(1, 6))
CIFAR_TEST_FILE = "test_batch.bin"
CIFAR_DIR = "cifar-10-batches-bin"

DIGITS_VALIDATION_PER_CLASS = 36  # 10 x 36 = 360 validation, 1,437 train
DIGITS_SPLIT_SEED = 0  # the split is a property of the dataset, not of a run


class ArrayDataset(ListedDataset):
    """Images held as uint8/float arrays [N, h, w, c] with int labels.

    Training augmentation pads by 1/8 of the side and crops back (a random
    translation), and flips horizontally where `flip`.
    """

    prepare_whole_batches = True  # `_plain_example` works on batches too
    numpy_draws = ARRAY_DRAWS

    def __init__(self, spec: DatasetSpec, *, augment_by_default: bool,
                 train: tuple[np.ndarray, np.ndarray], validation: tuple[np.ndarray, np.ndarray],
                 mean: tuple[float, ...], std: tuple[float, ...], flip: bool) -> None:
        super().__init__(spec, 10, augment_by_default=augment_by_default, train=train, validation=validation,
                         where=spec.path or spec.kind)
        self._mean, self._std, self._flip = mean, std, flip

    def _prepare(self, image: tf.Tensor) -> tf.Tensor:
        """Resize (if needed) and normalise; works on one image or a batch."""
        tf = tensorflow()
        image = tf.cast(image, tf.float32)
        if image.shape[-3] != self.image_size or image.shape[-2] != self.image_size:
            image = tf.image.resize(image, [self.image_size, self.image_size], method="bilinear")
        if image.shape[-1] == 1:
            image = tf.image.grayscale_to_rgb(image)
        return normalise_image(image, self._mean, self._std)

    def _plain_example(self, image: tf.Tensor, label: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        return self._prepare(image), self._one_hot(label)

    def _augmented_example(self, element: Any, seed: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        tf = tensorflow()
        image, label = element
        size = self.image_size
        pad = translation_pad(size)
        seeds = tf.random.experimental.stateless_split(seed, 2)
        image = self._prepare(image)
        # Pad-and-crop: random translation by up to 1/8 of the side.
        image = tf.image.pad_to_bounding_box(image, pad, pad, size + 2 * pad, size + 2 * pad)
        image = tf.image.stateless_random_crop(image, [size, size, 3], seed=seeds[0])
        if self._flip:
            image = tf.image.stateless_random_flip_left_right(image, seeds[1])
        return image, self._one_hot(label)

    def _numpy_fill(self, inputs: np.ndarray, augment: bool) -> Fill:
        size, mean, std, flip = self.image_size, self._mean, self._std, self._flip

        def fill(indices: Sequence[int], draws: np.ndarray | None, out: np.ndarray) -> None:
            images = inputs[indices]
            if draws is None:
                prepare_arrays_into(images, size, mean, std, out)
                return
            prepared = np.empty_like(out)
            prepare_arrays_into(images, size, mean, std, prepared)
            for image, numbers, target in zip(prepared, draws, out):
                translate_into(image, numbers, flip, target)

        return fill


def open_cifar10(spec: DatasetSpec) -> Dataset:
    assert spec.path is not None
    require_dir(spec.path)
    directory = spec.path
    nested = os.path.join(directory, CIFAR_DIR)
    if not os.path.exists(os.path.join(directory, CIFAR_TEST_FILE)) and os.path.isdir(nested):
        directory = nested  # accept the extraction root as well
    parts = []
    for name in CIFAR_TRAIN_FILES + (CIFAR_TEST_FILE,):
        file = os.path.join(directory, name)
        if not os.path.isfile(file):
            raise DatasetError(f"{directory}: missing {name} (expected the CIFAR-10 binary version)")
        parts.append(_read_cifar_file(file))
    train = (np.concatenate([p[0] for p in parts[:-1]]), np.concatenate([p[1] for p in parts[:-1]]))
    num_classes = spec.num_classes or 10
    if num_classes != 10:
        raise DatasetError(f"{spec.path}: CIFAR-10 has 10 classes, num_classes is {num_classes}")
    return ArrayDataset(spec, augment_by_default=True, train=train, validation=parts[-1],
                        mean=CIFAR10_MEAN, std=CIFAR10_STD, flip=True)


def _read_cifar_file(path: str) -> tuple[np.ndarray, np.ndarray]:
    size = os.path.getsize(path)
    if size == 0 or size % CIFAR_RECORD_BYTES:
        raise DatasetError(
            f"{path}: size {size} bytes is not a positive multiple of {CIFAR_RECORD_BYTES} "
            "(a CIFAR-10 record is 1 label byte + 3072 pixel bytes)"
        )
    raw = np.fromfile(path, dtype=np.uint8).reshape(-1, CIFAR_RECORD_BYTES)
    labels = raw[:, 0].astype(np.int32)
    if labels.max() > 9:
        bad = int(np.argmax(labels > 9))
        raise DatasetError(f"{path}: record {bad} has label {labels[bad]}, CIFAR-10 labels are 0..9")
    images = raw[:, 1:].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)  # CHW on disk -> HWC
    return np.ascontiguousarray(images), labels


def digits_split() -> tuple[np.ndarray, np.ndarray]:
    """Indices of the fixed train/validation split of scikit-learn's digits.

    Stratified: 36 validation images per class (360 in all), the rest (1,437)
    for training, chosen by a permutation with a fixed seed.
    """
    from sklearn.datasets import load_digits

    target = load_digits().target
    rng = np.random.default_rng(DIGITS_SPLIT_SEED)
    validation = []
    for label in range(10):
        members = np.flatnonzero(target == label)
        validation.append(rng.permutation(members)[:DIGITS_VALIDATION_PER_CLASS])
    val_idx = np.sort(np.concatenate(validation))
    train_idx = np.setdiff1d(np.arange(target.size), val_idx)
    return train_idx, val_idx


def open_digits(spec: DatasetSpec) -> Dataset:
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = (digits.images.astype(np.float32) * (255.0 / 16.0))[..., None]  # 0..16 -> 0..255
    labels = digits.target.astype(np.int32)
    train_idx, val_idx = digits_split()
    num_classes = spec.num_classes or 10
    if num_classes != 10:
        raise DatasetError(f"digits has 10 classes, num_classes is {num_classes}")
    train_images = images[train_idx]
    mean = float(train_images.mean())
    std = float(train_images.std())
    return ArrayDataset(
        spec,
        augment_by_default=False,
        train=(train_images, labels[train_idx]),
        validation=(images[val_idx], labels[val_idx]),
        mean=(mean,) * 3,
        std=(std,) * 3,
        flip=False,  # a mirrored digit is not the same digit
    )
