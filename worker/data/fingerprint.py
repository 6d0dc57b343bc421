"""What a worker reports about its dataset at the start of a run: kind, split
sizes, classes, input size and a fingerprint (SPEC section 3, "Official runs").

The fingerprint is SHA-256 over a version line, those figures, and a listing
that is cheap to take but changes with the data:

- ``imagenet-tfrecord``: each shard's file name and size in bytes (1,024 + 128
  files for the standard layout: one stat each; the record counts come from
  the dataset's cached index, which the training needs anyway);
- ``imagenet-folder``: each image's path relative to the dataset root (the
  listing the dataset already holds; no stat of 1.33 million files);
- ``cifar10``, ``digits``: the bytes of the arrays held in memory (hashing
  180 MB of CIFAR-10 takes about 0.3 s).

Two workers with the same fingerprint read the same files (by name and size),
so a reader can tell whether all workers of a run trained on one dataset.
"""

from __future__ import annotations

import hashlib
import logging
import os
from typing import Any, Iterator

import numpy as np

from aiperf import official
from aiperf.profiles import Profile
from worker.data.base import Dataset, ListedDataset
from worker.data.records import file_stamp

log = logging.getLogger(__name__)

VERSION = "aiperf-dataset-fingerprint-v1"


def dataset_info(dataset: Dataset) -> dict[str, Any]:
    """The dataset as reported to the master (DatasetInfo's fields)."""
    train, validation = split_sizes(dataset)
    info: dict[str, Any] = {"kind": dataset.kind, "train_images": train, "validation_images": validation,
                            "num_classes": int(dataset.num_classes), "image_size": int(dataset.image_size)}
    digest = hashlib.sha256()
    digest.update(f"{VERSION}\n{info['kind']}\n{train}\n{validation}\n{info['num_classes']}\n"
                  f"{info['image_size']}\n".encode())
    for part in _listing(dataset):
        digest.update(part)
    info["fingerprint"] = digest.hexdigest()
    return info


def split_sizes(dataset: Dataset) -> tuple[int, int]:
    """Images of the whole training split (not this worker's shard) and of the validation split."""
    counts = getattr(dataset, "_counts", None)
    if counts is not None and hasattr(dataset, "train_files"):  # imagenet-tfrecord: every shard, cached
        return int(sum(counts(dataset.train_files))), int(dataset.validation_size)
    return int(dataset.train_size), int(dataset.validation_size)


def _listing(dataset: Dataset) -> Iterator[bytes]:
    if hasattr(dataset, "train_files") and hasattr(dataset, "validation_files"):  # imagenet-tfrecord
        for split, files in (("train", dataset.train_files), ("validation", dataset.validation_files)):
            for f in files:
                yield f"{split} {os.path.basename(f)} {file_stamp(f)[0]}\n".encode()
        return
    if not isinstance(dataset, ListedDataset):
        return
    train, validation = dataset._train[0], dataset._validation[0]
    if train.dtype.kind in "US":  # image paths (imagenet-folder)
        prefix = os.path.join(dataset.spec.path or "", "")  # the listing's paths start with it
        for split, paths in (("train", train), ("validation", validation)):
            for p in map(str, paths):
                yield f"{split} {p[len(prefix):] if p.startswith(prefix) else p}\n".encode()
        return
    for split, arrays in (("train", dataset._train), ("validation", dataset._validation)):
        for a in arrays:
            yield split.encode() + np.ascontiguousarray(a).tobytes()


def checked_dataset(profile: Profile, dataset: Dataset) -> dict[str, Any]:
    """The worker's check at the start of a run: its dataset's report, with a warning
    naming each problem when the run's profile is official and the dataset is not
    ImageNet-1k with its published split sizes (the run then becomes unofficial)."""
    info = dataset_info(dataset)
    problems = official.dataset_reasons(profile, info)
    if problems:
        log.warning("event=dataset_not_official profile=%s problems=%s: this run will be unofficial",
                    profile.name, "; ".join(problems))
    log.info("event=dataset kind=%s train_images=%d validation_images=%d classes=%d image_size=%d fingerprint=%s",
             info["kind"], info["train_images"], info["validation_images"], info["num_classes"],
             info["image_size"], info["fingerprint"][:16])
    return info
