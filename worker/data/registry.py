"""Opening a dataset: one opener per kind, `load_dataset` and the CLI's `validate`."""

from __future__ import annotations

import logging
from typing import Any, Callable

from worker.data.arrays import open_cifar10, open_digits
from worker.data.base import Dataset
from worker.data.folder import ImageFolder
from worker.data.spec import KINDS, DatasetSpec, normalise
from worker.data.tfrecord import ImageNetTFRecords

log = logging.getLogger(__name__)

# One entry per kind: a new kind is a new opener here (and its name in KINDS).
OPENERS: dict[str, Callable[[DatasetSpec], Dataset]] = {
    "imagenet-tfrecord": ImageNetTFRecords,
    "imagenet-folder": ImageFolder,
    "cifar10": open_cifar10,
    "digits": open_digits,
}
assert set(OPENERS) == set(KINDS), "every dataset kind needs an opener"


def load_dataset(spec: DatasetSpec | str, path: str | None = None, **options: Any) -> Dataset:
    """Open and validate a dataset; raises ``DatasetError`` naming the problem.

    Either ``load_dataset(DatasetSpec(...))`` or
    ``load_dataset("cifar10", "/data/cifar", image_size=32, ...)`` where the
    keyword options are ``DatasetSpec`` fields.
    """
    if isinstance(spec, str):
        spec = DatasetSpec(kind=spec, path=path, **options)
    elif path is not None or options:
        raise TypeError("pass either a DatasetSpec or kind, path and options")
    spec = normalise(spec)
    dataset = OPENERS[spec.kind](spec)
    log.info("dataset opened: %r", dataset)
    return dataset


def validate(kind: str, path: str | None = None, **options: Any) -> Dataset:
    """Startup check for the worker CLI: open the dataset or raise ``DatasetError``.

    Returns the opened dataset so the caller can log or reuse it.
    """
    return load_dataset(kind, path, **options)
