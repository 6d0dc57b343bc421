"""``imagenet-tfrecord``: the standard ImageNet TFRecord layout, streamed from shards.

Shards ``train-*-of-*`` and ``validation-*-of-*`` in one directory, each record
a ``tf.train.Example`` with ``image/encoded`` (JPEG bytes) and
``image/class/label`` (int64).

Label offset (the rule, also in ``DatasetSpec``): the stored label minus the
offset is the class index. The standard ImageNet TFRecords
(``build_imagenet_data.py``, ``imagenet_to_gcs.py``) store 1..1000, i.e.
offset 1. The labels of the whole validation split are scanned once (the
result is cached per shard): with ``label_offset=None`` (auto) the offset is 1
if the smallest validation label is 1, otherwise 0; with either offset,
validation labels that fall outside ``[0, num_classes)`` are an error at load
time, and training labels outside it stop the pipeline with an assertion
(tf.data) or a ``DatasetError`` (the pipeline without TensorFlow).

Opening reads the shards without TensorFlow (`records`, `example`): the
framing, the first record of a split, and the validation labels.
"""

from __future__ import annotations

import glob
import os
from functools import cached_property
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Sequence

import numpy as np

from worker.data.base import Dataset, require_dir, tensorflow, url_file_system
from worker.data.example import FEATURE_IMAGE, FEATURE_LABEL, image_and_label, label
from worker.data.images import imagenet_eval_image, imagenet_train_image
from worker.data.numpy_pipeline import Split
from worker.data.opencv_images import IMAGENET_DRAWS, check_decodes, imagenet_eval_into, imagenet_train_into
from worker.data.records import RecordIndex, check_tfrecord_header, count_tfrecords, read_records
from worker.data.spec import DatasetError, DatasetSpec

if TYPE_CHECKING:  # pragma: no cover - typing only
    import tensorflow as tf

__all__ = ["FEATURE_IMAGE", "FEATURE_LABEL", "ImageNetTFRecords"]

Record = tuple[bytes, str, int]  # a record's payload, its shard and its number in the shard

# TFRecordDataset's read buffer is left to TensorFlow ("a sensible default for both local
# and remote file systems"): an 8 MiB buffer per file, as TensorFlow's own ImageNet example
# sets for cloud storage, cost 0.5-3.5% more CPU per image on local files in 3 paired
# comparisons (benchmarks/data_bench.py pipeline, docs/benchmarks.md).
_MAX_PARALLEL_FILES = 16


class ImageNetTFRecords(Dataset):
    """Streams the shards: records are shuffled through ``spec.shuffle_buffer``."""

    def __init__(self, spec: DatasetSpec) -> None:
        assert spec.path is not None
        require_dir(spec.path)
        self.train_files = self._shards(spec.path, "train")
        self.validation_files = self._shards(spec.path, "validation")
        for shard in self.train_files + self.validation_files:
            check_tfrecord_header(shard)
        super().__init__(spec, spec.num_classes or 1000, augment_by_default=True)
        self._index = RecordIndex(spec.cache_dir)
        for shard in (self.train_files[0], self.validation_files[0]):
            self._check_first_record(shard)
        self.label_offset = self._checked_label_offset()
        index, count = spec.shard or (0, 1)
        # Whole files per worker when there are enough of them; otherwise records.
        self._file_sharded = count > 1 and len(self.train_files) >= count
        self._shard_files = self.train_files[index::count] if self._file_sharded else self.train_files

    @cached_property
    def train_size(self) -> int:
        if self.spec.shard is None or self._file_sharded:
            return sum(self._counts(self._shard_files))
        index, count = self.spec.shard
        total = sum(self._counts(self.train_files))
        return total // count + (1 if index < total % count else 0)

    @cached_property
    def validation_size(self) -> int:
        return sum(self._counts(self.validation_files))

    # -- opening checks --------------------------------------------------------
    @staticmethod
    def _shards(path: str, split: str) -> list[str]:
        pattern = os.path.join(path, f"{split}-*")
        found = url_file_system(path).glob(pattern) if "://" in path else glob.glob(glob.escape(path) + f"/{split}-*")
        files = sorted(f for f in found if not f.endswith((".json", ".txt", ".tmp")))
        if not files:
            raise DatasetError(f"{path}: no {split}-* shards found")
        return files

    def _check_first_record(self, shard: str) -> None:
        """Read, parse and decode the first record of a shard."""
        try:
            record = next(iter(read_records(shard)), None)
        except DatasetError as exc:
            raise DatasetError(str(exc).replace("corrupt TFRecord shard", "not a valid TFRecord file")) from None
        if record is None:
            raise DatasetError(f"{shard}: not a valid TFRecord file (no records)")
        encoded, _ = image_and_label(record, f"{shard}: first record")
        check_decodes(encoded, f"{shard}: first record")

    def _checked_label_offset(self) -> int:
        """The spec's label offset, or the detected one; every validation label must fit the classes."""
        # The validation labels are scanned once (cached) in either case: they
        # decide the auto offset and catch labels that do not fit the classes.
        low, high = self._validation_label_range()
        if self.spec.label_offset is not None:
            offset = self.spec.label_offset
        else:
            offset = 1 if low == 1 else 0
        if low - offset < 0 or high - offset >= self.num_classes:
            raise DatasetError(
                f"{self.spec.path} (validation-* shards): labels {low}..{high} with label offset {offset} "
                f"fall outside 0..{self.num_classes - 1} (set num_classes or label_offset)"
            )
        return offset

    def _validation_label_range(self) -> tuple[int, int]:
        """Smallest and largest label over the validation split (cached per file)."""
        entries = self._index.entries(self.validation_files, "min_label", _label_summary)
        return min(e["min_label"] for e in entries), max(e["max_label"] for e in entries)

    def _counts(self, files: list[str]) -> list[int]:
        entries = self._index.entries(files, "records", lambda shard, size: {"records": count_tfrecords(shard, size)})
        return [e["records"] for e in entries]

    # -- the pipeline ------------------------------------------------------------
    def _train_elements(self, seed: int) -> tf.data.Dataset:
        tf = tensorflow()
        if self.spec.shard is not None and not self._file_sharded:
            index, count = self.spec.shard
            # Record-level sharding needs one fixed global order: read files in sequence.
            records = tf.data.TFRecordDataset(self.train_files).shard(count, index)
        else:
            files = tf.data.Dataset.from_tensor_slices(self._shard_files).shuffle(
                len(self._shard_files), seed=seed, reshuffle_each_iteration=True
            )
            records = _interleaved_records(files, len(self._shard_files), self.spec.deterministic)
        return records.shuffle(self.spec.shuffle_buffer, seed=seed + 1, reshuffle_each_iteration=True)

    def _validation_elements(self) -> tf.data.Dataset:
        files = tensorflow().data.Dataset.from_tensor_slices(self.validation_files)
        return _interleaved_records(files, len(self.validation_files), self.spec.deterministic)

    def _plain_example(self, record: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        encoded, label = self._parse(record)
        return imagenet_eval_image(encoded, self.image_size), label

    def _augmented_example(self, record: tf.Tensor, seed: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        encoded, label = self._parse(record)
        return imagenet_train_image(encoded, seed, self.image_size), label

    def _parse(self, record: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """A serialised example -> (encoded image, one-hot label)."""
        tf = tensorflow()
        features = tf.io.parse_single_example(
            record,
            {
                FEATURE_IMAGE: tf.io.FixedLenFeature([], tf.string),
                FEATURE_LABEL: tf.io.FixedLenFeature([], tf.int64),
            },
        )
        label = tf.cast(features[FEATURE_LABEL], tf.int32) - self.label_offset
        # A label outside the classes would silently become an all-zero target.
        checks = [
            tf.debugging.assert_non_negative(label, message="label below 0 after the label offset"),
            tf.debugging.assert_less(label, self.num_classes, message="label >= num_classes after the offset"),
        ]
        with tf.control_dependencies(checks):
            label = tf.identity(label)
        return features[FEATURE_IMAGE], self._one_hot(label)


    # -- the pipeline without TensorFlow ---------------------------------------------
    def _numpy_split(self, *, train: bool, augment: bool) -> Split:
        size = self.image_size

        def fill(records: Sequence[tuple[bytes, str]], draws: np.ndarray | None, out: np.ndarray) -> None:
            for n, (encoded, where) in enumerate(records):
                if draws is None:
                    imagenet_eval_into(encoded, size, out[n], where)
                else:
                    imagenet_train_into(encoded, draws[n], size, out[n], where)

        return Split(elements=self._numpy_train_elements if train else self._numpy_validation_elements,
                     fill=fill, draws=IMAGENET_DRAWS if augment else 0, image_size=size,
                     num_classes=self.num_classes)

    def _numpy_train_elements(self, rng: np.random.Generator | None,
                              stopped: Callable[[], bool]) -> Iterator[tuple[tuple[bytes, str], int]]:
        """As `_train_elements`: files in a shuffled order, interleaved, through the shuffle buffer."""
        assert rng is not None
        if self.spec.shard is not None and not self._file_sharded:
            index, count = self.spec.shard
            records: Iterable[Record] = (r for n, r in enumerate(_sequential(self.train_files)) if n % count == index)
        else:
            files = [self._shard_files[i] for i in rng.permutation(len(self._shard_files))]
            records = interleaved(files)
        return self._examples(shuffled(records, self.spec.shuffle_buffer, rng, stopped))

    def _numpy_validation_elements(self, rng: np.random.Generator | None,
                                   stopped: Callable[[], bool]) -> Iterator[tuple[tuple[bytes, str], int]]:
        return self._examples(interleaved(self.validation_files))

    def _examples(self, records: Iterable[Record]) -> Iterator[tuple[tuple[bytes, str], int]]:
        """Records -> ((encoded image, where), class index); a label outside the classes is an error."""
        offset, classes = self.label_offset, self.num_classes
        for record, shard, number in records:
            where = f"{shard}: record #{number}"
            encoded, stored = image_and_label(record, where)
            index = stored - offset
            if index < 0:
                raise DatasetError(f"{where}: label below 0 after the label offset ({stored} - {offset})")
            if index >= classes:
                raise DatasetError(f"{where}: label >= num_classes after the offset ({stored} - {offset}, "
                                   f"{classes} classes)")
            yield (encoded, where), index


def _numbered(shard: str) -> Iterator[Record]:
    return ((payload, shard, n) for n, payload in enumerate(read_records(shard)))


def _sequential(files: list[str]) -> Iterator[Record]:
    for shard in files:
        yield from _numbered(shard)


def interleaved(files: list[str], cycle: int = _MAX_PARALLEL_FILES) -> Iterator[Record]:
    """The records of `files`, one from each of up to `cycle` open files in turn: the order of
    tf.data's deterministic ``interleave`` (a finished file's place goes to the next file)."""
    pending = iter(files)
    slots: list[Iterator[Record] | None] = [None] * max(1, min(cycle, len(files)))
    position, open_files, more = 0, 0, True
    while more or open_files:
        current = slots[position]
        if current is None and more:
            shard = next(pending, None)
            if shard is None:
                more = False
            else:
                slots[position] = _numbered(shard)
                open_files += 1
            continue
        if current is not None:
            record = next(current, None)
            if record is not None:
                yield record
            else:
                slots[position] = None
                open_files -= 1
        position = (position + 1) % len(slots)


def shuffled(items: Iterable[Any], buffer_size: int, rng: np.random.Generator,
             stopped: Callable[[], bool]) -> Iterator[Any]:
    """tf.data's ``shuffle``: a buffer of `buffer_size` items, each output drawn from it at random and
    its place taken by the next input. Stops filling the buffer once `stopped()`."""
    buffer: list[Any] = []
    for item in items:
        if len(buffer) < buffer_size:
            buffer.append(item)
            if stopped():
                return
            continue
        pick = int(rng.random() * len(buffer))  # a scalar draw: a tenth of rng.integers' cost
        yield buffer[pick]
        buffer[pick] = item
    while buffer:
        pick = int(rng.random() * len(buffer))
        buffer[pick], buffer[-1] = buffer[-1], buffer[pick]
        yield buffer.pop()


def _interleaved_records(files: tf.data.Dataset, file_count: int, deterministic: bool = True) -> tf.data.Dataset:
    """The records of `files`, read from up to 16 files at a time in parallel (in a fixed order
    when `deterministic`)."""
    tf = tensorflow()
    return files.interleave(
        tf.data.TFRecordDataset,
        cycle_length=min(_MAX_PARALLEL_FILES, file_count),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=deterministic,
    )


def _label_summary(shard: str, size: int) -> dict[str, int]:
    """Record count and label range of a shard, for the record index."""
    labels = _scan_labels(shard)
    if labels.size == 0:
        raise DatasetError(f"{shard}: not a valid TFRecord file (no records)")
    return {"records": int(labels.size), "min_label": int(labels.min()), "max_label": int(labels.max())}


def _scan_labels(shard: str) -> np.ndarray:
    return np.fromiter((label(record, f"{shard}: record #{n}") for n, record in enumerate(read_records(shard))),
                       np.int64)
