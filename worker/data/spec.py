"""What to read and how: `DatasetSpec`, its checks, and `DatasetError`."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Any

from aiperf.profiles import DATASET_KINDS

KINDS: tuple[str, ...] = DATASET_KINDS  # one list, kept with the run profiles

# Per-kind default side of the square network input.
DEFAULT_IMAGE_SIZE: dict[str, int] = {
    "imagenet-tfrecord": 224,
    "imagenet-folder": 224,
    "cifar10": 32,
    "digits": 32,
}


class DatasetError(ValueError):
    """A dataset path that is missing, malformed or corrupt (message names it)."""


@dataclass(frozen=True)
class DatasetSpec:
    """What to read and how: the dataset part of a run's configuration.

    kind: one of ``KINDS``.
    path: the dataset directory (``None`` for ``digits``, which is built in).
    image_size: side of the square network input; ``None`` = the kind's default.
    num_classes: ``None`` = 1000 for ``imagenet-tfrecord``, the number of class
        folders for ``imagenet-folder``, 10 for ``cifar10`` and ``digits``.
    label_offset: ``imagenet-tfrecord`` only: class index = stored label - offset;
        ``None`` = auto (1 if the smallest validation label is 1, else 0).
    augment: training augmentation; ``None`` = on for ImageNet and CIFAR-10
        (random crop and horizontal flip), off for digits (a flipped digit is
        another digit). Validation is never augmented.
    shard: ``(index, count)``: this worker reads only its part of the training
        split (whole files where there are at least ``count`` files, otherwise
        every ``count``-th record). Validation is always complete, so
        accuracies stay comparable across workers.
    shuffle_buffer: records held for shuffling when streaming TFRecords (the
        in-memory and folder kinds shuffle their whole training split).
    cache_dir: where the TFRecord record counts are cached; ``None`` =
        ``$AIPERF_CACHE_DIR`` or ``~/.cache/aiperf``. Never the dataset directory.
    deterministic: a fixed element order (the same seed, the same sequence of
        batches); False lets the parallel steps hand elements on as they finish
        (faster; every element still once per epoch, with the same augmentation).
        The worker sets it from the run's --deterministic.
    ram_budget_bytes: the memory tf.data's autotuner may use for its buffers
        (prefetch, parallel steps); ``None`` = a quarter of the node's memory.
    """

    kind: str
    path: str | None = None
    image_size: int | None = None
    num_classes: int | None = None
    label_offset: int | None = None
    augment: bool | None = None
    shard: tuple[int, int] | None = None
    shuffle_buffer: int = 10_000
    cache_dir: str | None = None
    deterministic: bool = True
    ram_budget_bytes: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly dict (for the run's recorded configuration)."""
        out = {k: getattr(self, k) for k in self.__dataclass_fields__}
        if self.shard is not None:
            out["shard"] = list(self.shard)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DatasetSpec:
        unknown = set(data) - set(cls.__dataclass_fields__)
        if unknown:
            raise DatasetError(f"unknown dataset settings: {', '.join(sorted(unknown))}")
        data = dict(data)
        if data.get("shard") is not None:
            data["shard"] = tuple(data["shard"])
        return cls(**data)


def normalise(spec: DatasetSpec) -> DatasetSpec:
    """Check `spec` and fill in the defaults (path expanded, image size, shard).

    Raises ``DatasetError`` naming the first bad setting.
    """
    if spec.kind not in KINDS:
        raise DatasetError(f"unknown dataset kind {spec.kind!r} (choose from {', '.join(KINDS)})")
    path = _checked_path(spec)
    image_size = spec.image_size if spec.image_size is not None else DEFAULT_IMAGE_SIZE[spec.kind]
    if not isinstance(image_size, int) or image_size < 8:
        raise DatasetError(f"image size must be an integer >= 8, got {image_size!r}")
    if spec.num_classes is not None and (not isinstance(spec.num_classes, int) or spec.num_classes < 2):
        raise DatasetError(f"num_classes must be an integer >= 2, got {spec.num_classes!r}")
    if spec.label_offset is not None and spec.kind != "imagenet-tfrecord":
        raise DatasetError("label_offset applies only to imagenet-tfrecord")
    shard = _checked_shard(spec.shard)
    if spec.shuffle_buffer < 1:
        raise DatasetError(f"shuffle_buffer must be >= 1, got {spec.shuffle_buffer}")
    if spec.ram_budget_bytes is not None and (not isinstance(spec.ram_budget_bytes, int)
                                              or spec.ram_budget_bytes < 1 << 20):
        raise DatasetError(f"ram_budget_bytes must be an integer >= 1 MiB, got {spec.ram_budget_bytes!r}")
    return replace(spec, path=path, image_size=image_size, shard=shard)


def _checked_path(spec: DatasetSpec) -> str | None:
    path = spec.path or None
    if spec.kind == "digits":
        if path is not None:
            raise DatasetError(f"dataset kind 'digits' is built in and takes no path (got {path})")
        return None
    if path is None:
        raise DatasetError(f"dataset kind {spec.kind!r} needs a path")
    return os.path.expanduser(path)


def _checked_shard(shard: tuple[int, int] | None) -> tuple[int, int] | None:
    """The shard, or ``None`` when there is none or it is the whole split (count 1)."""
    if shard is None:
        return None
    if len(shard) != 2:
        raise DatasetError(f"shard must be (index, count), got {shard!r}")
    index, count = shard
    if not (isinstance(index, int) and isinstance(count, int) and count >= 1 and 0 <= index < count):
        raise DatasetError(f"shard must be (index, count) with 0 <= index < count, got {shard!r}")
    return (index, count) if count > 1 else None
