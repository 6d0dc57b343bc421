"""Datasets: the input pipelines a worker trains and validates on.

Four kinds (SPEC section 3), each a source module:

* ``imagenet-tfrecord`` (`tfrecord`): the standard ImageNet TFRecord shards.
* ``imagenet-folder`` (`folder`): a class-per-folder image tree.
* ``cifar10`` and ``digits`` (`arrays`): held in memory; ``digits`` is the
  built-in smoke dataset (scikit-learn's handwritten digits).

Every pipeline yields ``(images, labels)`` batches: images float32
``[B, H, W, 3]`` normalised per channel, labels one-hot float32
``[B, num_classes]`` (the trainer uses categorical cross-entropy).

A missing or corrupt dataset raises ``DatasetError`` (one message naming the
path and the problem) from ``load_dataset``/``validate``, before any training:
the directory layout is checked, and the first record or file of each split is
read and its image decoded eagerly.

The rest of the package: `spec` (``DatasetSpec``, its checks, ``DatasetError``),
`base` (``Dataset``: the pipeline tail the sources share), `images` (decode,
crop, normalise), `records` (TFRecord framing and the count cache) and
`registry` (the opener of each kind, ``load_dataset``, ``validate``).

TensorFlow is imported lazily, so importing this package (for ``DatasetSpec``,
``KINDS``, ``DatasetError``) stays cheap.
"""

from worker.data.arrays import digits_split
from worker.data.base import Dataset
from worker.data.images import CIFAR10_MEAN, CIFAR10_STD, IMAGENET_MEAN, IMAGENET_STD
from worker.data.registry import load_dataset, validate
from worker.data.spec import DEFAULT_IMAGE_SIZE, KINDS, DatasetError, DatasetSpec

__all__ = [
    "CIFAR10_MEAN",
    "CIFAR10_STD",
    "DEFAULT_IMAGE_SIZE",
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "KINDS",
    "Dataset",
    "DatasetError",
    "DatasetSpec",
    "digits_split",
    "load_dataset",
    "validate",
]
