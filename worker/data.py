"""Datasets: the input pipelines a worker trains and validates on.

Four kinds (SPEC section 3):

* ``imagenet-tfrecord``: the standard ImageNet TFRecord layout, shards
  ``train-*-of-*`` and ``validation-*-of-*`` in one directory, each record a
  ``tf.train.Example`` with ``image/encoded`` (JPEG bytes) and
  ``image/class/label`` (int64).
* ``imagenet-folder``: a class-per-folder image tree, ``root/train/<class>/*``
  and ``root/val/<class>/*`` (or ``root/validation/<class>/*``); classes are the
  train folder names sorted, the label of a class is its index in that order.
* ``cifar10``: the CIFAR-10 binary version, ``data_batch_1.bin`` ..
  ``data_batch_5.bin`` and ``test_batch.bin`` (records of 1 label byte and 3,072
  pixel bytes in channel-major order).
* ``digits``: the built-in smoke dataset, scikit-learn's handwritten digits (real
  8x8 grey images shipped inside scikit-learn), resized to the profile's input
  size with a fixed stratified split of 1,437 train and 360 validation images.

Every pipeline yields ``(images, labels)`` batches: images float32
``[B, H, W, 3]`` normalised per channel, labels one-hot float32
``[B, num_classes]`` (the trainer uses categorical cross-entropy).

Label offset of ``imagenet-tfrecord`` (the rule, also in ``DatasetSpec``): the
stored label minus the offset is the class index. The standard ImageNet
TFRecords (``build_imagenet_data.py``, ``imagenet_to_gcs.py``) store 1..1000,
i.e. offset 1. The labels of the whole validation split are scanned once (the
result is cached per shard): with ``label_offset=None`` (auto) the offset is 1
if the smallest validation label is 1, otherwise 0; with either offset,
validation labels that fall outside ``[0, num_classes)`` are an error at load
time, and training labels outside it stop the pipeline with an assertion.

A missing or corrupt dataset raises ``DatasetError`` (one message naming the
path and the problem) from ``load_dataset``/``validate``, before any training:
the directory layout is checked, and the first record or file of each split is
read and its image decoded eagerly.

TensorFlow is imported lazily, so importing this module (for ``DatasetSpec``,
``KINDS``, ``DatasetError``) stays cheap.
"""

from __future__ import annotations

import json
import logging
import math
import os
import struct
import tempfile
from abc import ABC, abstractmethod
from dataclasses import dataclass, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from aiperf.profiles import DATASET_KINDS

if TYPE_CHECKING:  # pragma: no cover - typing only
    import tensorflow as tf

log = logging.getLogger(__name__)

KINDS: tuple[str, ...] = DATASET_KINDS  # one list, kept with the run profiles

# Per-kind defaults: input size of the network and number of classes.
DEFAULT_IMAGE_SIZE: dict[str, int] = {
    "imagenet-tfrecord": 224,
    "imagenet-folder": 224,
    "cifar10": 32,
    "digits": 32,
}

# Per-channel normalisation on the 0..255 scale.
IMAGENET_MEAN = (0.485 * 255, 0.456 * 255, 0.406 * 255)
IMAGENET_STD = (0.229 * 255, 0.224 * 255, 0.225 * 255)
CIFAR10_MEAN = (0.4914 * 255, 0.4822 * 255, 0.4465 * 255)
CIFAR10_STD = (0.2470 * 255, 0.2435 * 255, 0.2616 * 255)

# Validation keeps the central 87.5% of the shorter side (224 out of 256).
CENTRAL_FRACTION = 0.875
# Training crops: Inception-style random-sized crop.
CROP_AREA_RANGE = (0.08, 1.0)
CROP_ASPECT_RANGE = (3 / 4, 4 / 3)

IMAGE_EXTENSIONS = (".jpeg", ".jpg", ".png", ".bmp", ".gif")

CIFAR_RECORD_BYTES = 1 + 32 * 32 * 3
CIFAR_TRAIN_FILES = tuple(f"data_batch_{i}.bin" for i in range(1, 6))
CIFAR_TEST_FILE = "test_batch.bin"
CIFAR_DIR = "cifar-10-batches-bin"

DIGITS_VALIDATION_PER_CLASS = 36  # 10 x 36 = 360 validation, 1,437 train
DIGITS_SPLIT_SEED = 0  # the split is a property of the dataset, not of a run

TFRECORD_FEATURE_IMAGE = "image/encoded"
TFRECORD_FEATURE_LABEL = "image/class/label"


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


class Dataset(ABC):
    """An opened, validated dataset: sizes, classes and tf.data pipelines."""

    def __init__(self, spec: DatasetSpec, image_size: int, num_classes: int, augment: bool) -> None:
        self.spec = spec
        self.image_size = image_size
        self.num_classes = num_classes
        self.augment = augment

    @property
    def kind(self) -> str:
        return self.spec.kind

    @property
    @abstractmethod
    def train_size(self) -> int:
        """Images in one epoch of this worker's training split (its shard)."""

    @property
    @abstractmethod
    def validation_size(self) -> int:
        """Images in the validation split."""

    @abstractmethod
    def train(self, batch_size: int, *, seed: int = 0, drop_remainder: bool = False) -> tf.data.Dataset:
        """Shuffled, augmented training batches; each iteration is one epoch.

        The same seed gives the same sequence of epochs (order and
        augmentation); each new iteration reshuffles and re-augments.
        """

    @abstractmethod
    def validation(self, batch_size: int) -> tf.data.Dataset:
        """Validation batches in a fixed order, identical on every iteration."""

    def train_steps(self, batch_size: int, *, drop_remainder: bool = False) -> int:
        """Batches in one training epoch."""
        _check_batch_size(batch_size)
        if drop_remainder:
            return self.train_size // batch_size
        return math.ceil(self.train_size / batch_size)

    def validation_steps(self, batch_size: int) -> int:
        _check_batch_size(batch_size)
        return math.ceil(self.validation_size / batch_size)

    def __repr__(self) -> str:
        where = f" at {self.spec.path}" if self.spec.path else ""
        return (
            f"<{type(self).__name__} {self.kind}{where}: {self.num_classes} classes, "
            f"{self.image_size}x{self.image_size}, augment={self.augment}, shard={self.spec.shard}>"
        )


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
    spec = _normalise(spec)
    opener = _OPENERS[spec.kind]
    dataset = opener(spec)
    log.info("dataset opened: %r", dataset)
    return dataset


def validate(kind: str, path: str | None = None, **options: Any) -> Dataset:
    """Startup check for the worker CLI: open the dataset or raise ``DatasetError``.

    Returns the opened dataset so the caller can log or reuse it.
    """
    return load_dataset(kind, path, **options)


# --------------------------------------------------------------------------- #
# spec checks


def _normalise(spec: DatasetSpec) -> DatasetSpec:
    if spec.kind not in KINDS:
        raise DatasetError(f"unknown dataset kind {spec.kind!r} (choose from {', '.join(KINDS)})")
    path = spec.path or None
    if spec.kind == "digits":
        if path is not None:
            raise DatasetError(f"dataset kind 'digits' is built in and takes no path (got {path})")
    elif path is None:
        raise DatasetError(f"dataset kind {spec.kind!r} needs a path")
    else:
        path = os.path.expanduser(path)
    image_size = spec.image_size if spec.image_size is not None else DEFAULT_IMAGE_SIZE[spec.kind]
    if not isinstance(image_size, int) or image_size < 8:
        raise DatasetError(f"image size must be an integer >= 8, got {image_size!r}")
    if spec.num_classes is not None and (not isinstance(spec.num_classes, int) or spec.num_classes < 2):
        raise DatasetError(f"num_classes must be an integer >= 2, got {spec.num_classes!r}")
    if spec.label_offset is not None and spec.kind != "imagenet-tfrecord":
        raise DatasetError("label_offset applies only to imagenet-tfrecord")
    if spec.shard is not None:
        if len(spec.shard) != 2:
            raise DatasetError(f"shard must be (index, count), got {spec.shard!r}")
        index, count = spec.shard
        if not (isinstance(index, int) and isinstance(count, int) and count >= 1 and 0 <= index < count):
            raise DatasetError(f"shard must be (index, count) with 0 <= index < count, got {spec.shard!r}")
        shard: tuple[int, int] | None = (index, count) if count > 1 else None
    else:
        shard = None
    if spec.shuffle_buffer < 1:
        raise DatasetError(f"shuffle_buffer must be >= 1, got {spec.shuffle_buffer}")
    return replace(spec, path=path, image_size=image_size, shard=shard)


def _check_batch_size(batch_size: int) -> None:
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch size must be a positive integer, got {batch_size!r}")


def _require_dir(path: str) -> None:
    # Local paths are checked without TensorFlow, so a mistyped path fails
    # fast with one line (TensorFlow's start-up logs would come first).
    if "://" not in path:
        isdir, exists = os.path.isdir, os.path.exists
    else:
        tf = _tf()
        isdir, exists = tf.io.gfile.isdir, tf.io.gfile.exists
    if not isdir(path):
        if exists(path):
            raise DatasetError(f"{path}: not a directory")
        raise DatasetError(f"{path}: no such directory")


def _tf() -> Any:
    import tensorflow as tf

    return tf


# --------------------------------------------------------------------------- #
# image preprocessing shared by the ImageNet kinds (graph functions)


def _normalise_image(image: tf.Tensor, mean: tuple[float, ...], std: tuple[float, ...]) -> tf.Tensor:
    tf = _tf()
    return (tf.cast(image, tf.float32) - tf.constant(mean, tf.float32)) / tf.constant(std, tf.float32)


def _decode_random_crop(encoded: tf.Tensor, seed: tf.Tensor) -> tf.Tensor:
    """Decode with an Inception-style random-sized crop (JPEGs decode only the crop)."""
    tf = _tf()

    def window(shape: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        begin, size, _ = tf.image.stateless_sample_distorted_bounding_box(
            shape,
            bounding_boxes=tf.zeros([1, 0, 4], tf.float32),
            seed=seed,
            min_object_covered=0.1,
            aspect_ratio_range=CROP_ASPECT_RANGE,
            area_range=CROP_AREA_RANGE,
            max_attempts=10,
            use_image_if_no_bounding_boxes=True,
        )
        return begin, size

    def jpeg() -> tf.Tensor:
        begin, size = window(tf.image.extract_jpeg_shape(encoded))
        crop = tf.stack([begin[0], begin[1], size[0], size[1]])
        return tf.image.decode_and_crop_jpeg(encoded, crop, channels=3)

    def other() -> tf.Tensor:
        image = tf.io.decode_image(encoded, channels=3, expand_animations=False)
        begin, size = window(tf.shape(image))
        return tf.slice(image, begin, size)

    return tf.cond(tf.io.is_jpeg(encoded), jpeg, other)


def _decode_central_crop(encoded: tf.Tensor) -> tf.Tensor:
    """Decode the central CENTRAL_FRACTION square of the shorter side."""
    tf = _tf()

    def window(shape: tf.Tensor) -> tf.Tensor:
        height, width = shape[0], shape[1]
        side = tf.maximum(
            tf.cast(tf.cast(tf.minimum(height, width), tf.float32) * CENTRAL_FRACTION, tf.int32), 1
        )
        return tf.stack([(height - side) // 2, (width - side) // 2, side, side])

    def jpeg() -> tf.Tensor:
        crop = window(tf.image.extract_jpeg_shape(encoded))
        return tf.image.decode_and_crop_jpeg(encoded, crop, channels=3)

    def other() -> tf.Tensor:
        image = tf.io.decode_image(encoded, channels=3, expand_animations=False)
        crop = window(tf.shape(image))
        return tf.image.crop_to_bounding_box(image, crop[0], crop[1], crop[2], crop[3])

    return tf.cond(tf.io.is_jpeg(encoded), jpeg, other)


def _imagenet_train_image(encoded: tf.Tensor, seed: tf.Tensor, size: int, augment: bool) -> tf.Tensor:
    tf = _tf()
    if not augment:
        return _imagenet_eval_image(encoded, size)
    seeds = tf.random.experimental.stateless_split(seed, 2)
    image = _decode_random_crop(encoded, seeds[0])
    image = tf.image.resize(image, [size, size], method="bilinear")
    image = tf.image.stateless_random_flip_left_right(image, seeds[1])
    image = _normalise_image(image, IMAGENET_MEAN, IMAGENET_STD)
    return tf.ensure_shape(image, [size, size, 3])


def _imagenet_eval_image(encoded: tf.Tensor, size: int) -> tf.Tensor:
    tf = _tf()
    image = _decode_central_crop(encoded)
    image = tf.image.resize(image, [size, size], method="bilinear")
    image = _normalise_image(image, IMAGENET_MEAN, IMAGENET_STD)
    return tf.ensure_shape(image, [size, size, 3])


def _element_seeds(seed: int) -> tf.data.Dataset:
    """One stateless seed (shape [2]) per element; new values every epoch, same run to run."""
    tf = _tf()
    return tf.data.Dataset.random(seed=seed, rerandomize_each_iteration=True).batch(2)


def _check_decodes(encoded: bytes, where: str) -> None:
    tf = _tf()
    try:
        image = tf.io.decode_image(encoded, channels=3, expand_animations=False)
    except (tf.errors.InvalidArgumentError, tf.errors.UnknownError) as exc:
        raise DatasetError(f"{where}: image fails to decode ({_first_line(exc)})") from None
    if int(image.shape[0]) < 1 or int(image.shape[1]) < 1:
        raise DatasetError(f"{where}: image is empty")


def _first_line(exc: BaseException) -> str:
    text = getattr(exc, "message", None) or str(exc)
    return text.strip().splitlines()[0] if text.strip() else type(exc).__name__


# --------------------------------------------------------------------------- #
# imagenet-tfrecord


class _RecordIndex:
    """Per-file record counts (and label ranges) cached outside the dataset directory.

    Keyed by the file's path, size and modification time, so a changed shard is
    counted again.
    """

    def __init__(self, cache_dir: str | None) -> None:
        base = cache_dir or os.environ.get("AIPERF_CACHE_DIR") or os.path.join(
            os.path.expanduser("~"), ".cache", "aiperf"
        )
        self.path = os.path.join(base, "tfrecord-index.json")
        self._entries: dict[str, dict[str, int]] | None = None

    def _load(self) -> dict[str, dict[str, int]]:
        if self._entries is None:
            try:
                with open(self.path, encoding="utf-8") as fh:
                    data = json.load(fh)
                self._entries = data if isinstance(data, dict) else {}
            except (OSError, ValueError):
                self._entries = {}
        return self._entries

    def get(self, key: str, stamp: tuple[int, int]) -> dict[str, int] | None:
        entry = self._load().get(key)
        if entry and entry.get("size") == stamp[0] and entry.get("mtime_ns") == stamp[1]:
            return entry
        return None

    def put(self, key: str, stamp: tuple[int, int], **values: int) -> None:
        entries = self._load()
        entry = dict(entries.get(key) or {})
        if entry.get("size") != stamp[0] or entry.get("mtime_ns") != stamp[1]:
            entry = {}
        entry.update(values, size=stamp[0], mtime_ns=stamp[1])
        entries[key] = entry

    def save(self) -> None:
        if self._entries is None:
            return
        try:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".tfrecord-index.", dir=os.path.dirname(self.path))
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(self._entries, fh, sort_keys=True)
            os.replace(tmp, self.path)  # atomic: concurrent workers never see half a file
        except OSError as exc:
            log.warning("cannot write the TFRecord count cache %s: %s", self.path, exc)


def _crc32c_table() -> list[int]:
    table = []
    for n in range(256):
        crc = n
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_CRC32C = _crc32c_table()


def _masked_crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _CRC32C[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    crc ^= 0xFFFFFFFF
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _open_binary(path: str) -> Any:
    if "://" in path:
        return _tf().io.gfile.GFile(path, "rb")
    return open(path, "rb")


def _stamp(path: str) -> tuple[int, int]:
    if "://" in path:
        stat = _tf().io.gfile.stat(path)
        return int(stat.length), int(stat.mtime_nsec)
    stat = os.stat(path)
    return int(stat.st_size), int(stat.st_mtime_ns)


def _check_tfrecord_header(path: str) -> None:
    """The first record's framing (length and its CRC) must be valid."""
    with _open_binary(path) as fh:
        header = fh.read(12)
    if not header:
        raise DatasetError(f"{path}: not a valid TFRecord file (empty)")
    if len(header) < 12:
        raise DatasetError(f"{path}: not a valid TFRecord file (truncated header)")
    (length_crc,) = struct.unpack("<I", header[8:12])
    if _masked_crc32c(header[:8]) != length_crc:
        raise DatasetError(f"{path}: not a valid TFRecord file (bad length checksum)")


def _count_tfrecords(path: str, size: int) -> int:
    """Count records by walking the framing only (no payload is read)."""
    count = 0
    pos = 0
    with _open_binary(path) as fh:
        while pos < size:
            header = fh.read(8)
            if len(header) < 8:
                raise DatasetError(f"{path}: not a valid TFRecord file (truncated at byte {pos})")
            (length,) = struct.unpack("<Q", header)
            pos += 8 + 4 + length + 4
            if pos > size:
                raise DatasetError(f"{path}: not a valid TFRecord file (truncated record at #{count})")
            fh.seek(pos)
            count += 1
    return count


class _TFRecordDataset(Dataset):
    def __init__(self, spec: DatasetSpec) -> None:
        assert spec.path is not None and spec.image_size is not None
        _require_dir(spec.path)
        self.train_files = self._shards(spec.path, "train")
        self.validation_files = self._shards(spec.path, "validation")
        for shard in self.train_files + self.validation_files:
            _check_tfrecord_header(shard)
        num_classes = spec.num_classes or 1000
        super().__init__(spec, spec.image_size, num_classes, True if spec.augment is None else spec.augment)
        self._index = _RecordIndex(spec.cache_dir)
        for shard in (self.train_files[0], self.validation_files[0]):
            self._check_first_record(shard)
        # The validation labels are scanned once (cached) in either case: they
        # decide the auto offset and catch labels that do not fit the classes.
        low, high = self._validation_label_range()
        if spec.label_offset is not None:
            self.label_offset = spec.label_offset
        else:
            self.label_offset = 1 if low == 1 else 0
        where = f"{spec.path} (validation-* shards)"
        if low - self.label_offset < 0 or high - self.label_offset >= num_classes:
            raise DatasetError(
                f"{where}: labels {low}..{high} with label offset {self.label_offset} fall outside "
                f"0..{num_classes - 1} (set num_classes or label_offset)"
            )
        index, count = spec.shard or (0, 1)
        # Whole files per worker when there are enough of them; otherwise records.
        self._file_sharded = count > 1 and len(self.train_files) >= count
        self._shard_files = self.train_files[index::count] if self._file_sharded else self.train_files

    @staticmethod
    def _shards(path: str, split: str) -> list[str]:
        tf = _tf()
        files = sorted(tf.io.gfile.glob(os.path.join(path, f"{split}-*")))
        files = [f for f in files if not f.endswith((".json", ".txt", ".tmp"))]
        if not files:
            raise DatasetError(f"{path}: no {split}-* shards found")
        return files

    def _check_first_record(self, shard: str) -> None:
        """Read, parse and decode the first record of a shard."""
        tf = _tf()
        try:
            records = list(tf.data.TFRecordDataset(shard).take(1).as_numpy_iterator())
        except tf.errors.OpError as exc:
            raise DatasetError(f"{shard}: not a valid TFRecord file ({_first_line(exc)})") from None
        if not records:
            raise DatasetError(f"{shard}: not a valid TFRecord file (no records)")
        try:
            example = tf.train.Example.FromString(records[0])
        except Exception as exc:  # protobuf's DecodeError
            raise DatasetError(f"{shard}: first record is not a tf.train.Example ({exc})") from None
        feature = example.features.feature
        if TFRECORD_FEATURE_IMAGE not in feature or not feature[TFRECORD_FEATURE_IMAGE].bytes_list.value:
            raise DatasetError(f"{shard}: first record lacks {TFRECORD_FEATURE_IMAGE}")
        if TFRECORD_FEATURE_LABEL not in feature or not feature[TFRECORD_FEATURE_LABEL].int64_list.value:
            raise DatasetError(f"{shard}: first record lacks {TFRECORD_FEATURE_LABEL} (int64)")
        _check_decodes(feature[TFRECORD_FEATURE_IMAGE].bytes_list.value[0], f"{shard}: first record")

    def _validation_label_range(self) -> tuple[int, int]:
        """Smallest and largest label over the validation split (cached per file)."""
        tf = _tf()
        lows: list[int] = []
        highs: list[int] = []
        dirty = False
        for shard in self.validation_files:
            stamp = _stamp(shard)
            entry = self._index.get(shard, stamp)
            if entry is None or "min_label" not in entry:
                labels = self._scan_labels(shard)
                if labels.size == 0:
                    raise DatasetError(f"{shard}: not a valid TFRecord file (no records)")
                entry = {"records": int(labels.size), "min_label": int(labels.min()), "max_label": int(labels.max())}
                self._index.put(shard, stamp, **entry)
                dirty = True
            lows.append(entry["min_label"])
            highs.append(entry["max_label"])
        if dirty:
            self._index.save()
        return min(lows), max(highs)

    @staticmethod
    def _scan_labels(shard: str) -> np.ndarray:
        tf = _tf()
        records = tf.data.TFRecordDataset(shard, buffer_size=8 << 20)
        batches = records.map(_parse_label, num_parallel_calls=tf.data.AUTOTUNE).batch(65536)
        try:
            parts = [np.asarray(batch) for batch in batches.as_numpy_iterator()]
        except tf.errors.OpError as exc:
            raise DatasetError(f"{shard}: corrupt TFRecord shard ({_first_line(exc)})") from None
        return np.concatenate(parts) if parts else np.zeros([0], np.int64)

    def _counts(self, files: list[str]) -> list[int]:
        counts = []
        dirty = False
        for shard in files:
            stamp = _stamp(shard)
            entry = self._index.get(shard, stamp)
            if entry is None or "records" not in entry:
                entry = {"records": _count_tfrecords(shard, stamp[0])}
                self._index.put(shard, stamp, **entry)
                dirty = True
            counts.append(entry["records"])
        if dirty:
            self._index.save()
        return counts

    @cached_property
    def train_size(self) -> int:  # type: ignore[override]
        if self.spec.shard is None or self._file_sharded:
            return sum(self._counts(self._shard_files))
        index, count = self.spec.shard
        total = sum(self._counts(self.train_files))
        return total // count + (1 if index < total % count else 0)

    @cached_property
    def validation_size(self) -> int:  # type: ignore[override]
        return sum(self._counts(self.validation_files))

    def _parse(self, record: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        tf = _tf()
        features = tf.io.parse_single_example(
            record,
            {
                TFRECORD_FEATURE_IMAGE: tf.io.FixedLenFeature([], tf.string),
                TFRECORD_FEATURE_LABEL: tf.io.FixedLenFeature([], tf.int64),
            },
        )
        label = tf.cast(features[TFRECORD_FEATURE_LABEL], tf.int32) - self.label_offset
        # A label outside the classes would silently become an all-zero target.
        checks = [
            tf.debugging.assert_non_negative(label, message="label below 0 after the label offset"),
            tf.debugging.assert_less(label, self.num_classes, message="label >= num_classes after the offset"),
        ]
        with tf.control_dependencies(checks):
            label = tf.identity(label)
        return features[TFRECORD_FEATURE_IMAGE], tf.one_hot(label, self.num_classes, dtype=tf.float32)

    def train(self, batch_size: int, *, seed: int = 0, drop_remainder: bool = False) -> tf.data.Dataset:
        _check_batch_size(batch_size)
        tf = _tf()
        size, augment = self.image_size, self.augment
        if self.spec.shard is not None and not self._file_sharded:
            index, count = self.spec.shard
            # Record-level sharding needs one fixed global order: read files in sequence.
            records = tf.data.TFRecordDataset(self.train_files, buffer_size=8 << 20).shard(count, index)
        else:
            files = tf.data.Dataset.from_tensor_slices(self._shard_files).shuffle(
                len(self._shard_files), seed=seed, reshuffle_each_iteration=True
            )
            records = files.interleave(
                lambda f: tf.data.TFRecordDataset(f, buffer_size=8 << 20),
                cycle_length=min(16, len(self._shard_files)),
                num_parallel_calls=tf.data.AUTOTUNE,
                deterministic=True,
            )
        records = records.shuffle(self.spec.shuffle_buffer, seed=seed + 1, reshuffle_each_iteration=True)

        def prepare(record: tf.Tensor, element_seed: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
            encoded, label = self._parse(record)
            return _imagenet_train_image(encoded, element_seed, size, augment), label

        ds = tf.data.Dataset.zip((records, _element_seeds(seed + 2)))
        ds = ds.map(prepare, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        return _finish(ds, batch_size, drop_remainder)

    def validation(self, batch_size: int) -> tf.data.Dataset:
        _check_batch_size(batch_size)
        tf = _tf()
        size = self.image_size

        def prepare(record: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
            encoded, label = self._parse(record)
            return _imagenet_eval_image(encoded, size), label

        files = tf.data.Dataset.from_tensor_slices(self.validation_files)
        records = files.interleave(
            lambda f: tf.data.TFRecordDataset(f, buffer_size=8 << 20),
            cycle_length=min(16, len(self.validation_files)),
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=True,
        )
        ds = records.map(prepare, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        return _finish(ds, batch_size, False)


def _parse_label(record: tf.Tensor) -> tf.Tensor:
    tf = _tf()
    features = tf.io.parse_single_example(
        record, {TFRECORD_FEATURE_LABEL: tf.io.FixedLenFeature([], tf.int64)}
    )
    return features[TFRECORD_FEATURE_LABEL]


def _finish(ds: tf.data.Dataset, batch_size: int, drop_remainder: bool) -> tf.data.Dataset:
    tf = _tf()
    ds = ds.batch(batch_size, drop_remainder=drop_remainder, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return ds.prefetch(tf.data.AUTOTUNE)


# --------------------------------------------------------------------------- #
# imagenet-folder


def _list_images(directory: str) -> list[str]:
    with os.scandir(directory) as entries:
        return sorted(
            e.path for e in entries if e.is_file() and e.name.lower().endswith(IMAGE_EXTENSIONS)
        )


def _class_folders(directory: str) -> list[str]:
    with os.scandir(directory) as entries:
        return sorted(e.name for e in entries if e.is_dir() and not e.name.startswith("."))


class _FolderDataset(Dataset):
    def __init__(self, spec: DatasetSpec) -> None:
        assert spec.path is not None and spec.image_size is not None
        root = spec.path
        _require_dir(root)
        train_dir = os.path.join(root, "train")
        if not os.path.isdir(train_dir):
            raise DatasetError(f"{root}: no train/ directory (expected train/<class>/*.JPEG)")
        for name in ("val", "validation"):
            val_dir = os.path.join(root, name)
            if os.path.isdir(val_dir):
                break
        else:
            raise DatasetError(f"{root}: no val/ or validation/ directory (expected val/<class>/*.JPEG)")
        self.classes = _class_folders(train_dir)
        if not self.classes:
            raise DatasetError(f"{train_dir}: no class folders (expected train/<class>/*.JPEG)")
        num_classes = spec.num_classes or len(self.classes)
        if num_classes < len(self.classes):
            raise DatasetError(
                f"{train_dir}: {len(self.classes)} class folders but num_classes is {num_classes}"
            )
        super().__init__(spec, spec.image_size, num_classes, True if spec.augment is None else spec.augment)
        label_of = {name: i for i, name in enumerate(self.classes)}
        train_files, train_labels = [], []
        for name in self.classes:
            images = _list_images(os.path.join(train_dir, name))
            if not images:
                raise DatasetError(f"{os.path.join(train_dir, name)}: class folder without images")
            train_files += images
            train_labels += [label_of[name]] * len(images)
        val_classes = _class_folders(val_dir)
        if not val_classes:
            raise DatasetError(
                f"{val_dir}: no class folders (validation images must be sorted into val/<class>/)"
            )
        unknown = sorted(set(val_classes) - set(label_of))
        if unknown:
            raise DatasetError(f"{val_dir}: class folders not in train/: {', '.join(unknown[:5])}")
        val_files, val_labels = [], []
        for name in val_classes:
            images = _list_images(os.path.join(val_dir, name))
            val_files += images
            val_labels += [label_of[name]] * len(images)
        if not val_files:
            raise DatasetError(f"{val_dir}: no images in the class folders")
        for first in (train_files[0], val_files[0]):
            with open(first, "rb") as fh:
                _check_decodes(fh.read(), first)
        files = np.asarray(train_files)
        labels = np.asarray(train_labels, np.int32)
        if spec.shard is not None:
            index, count = spec.shard
            files, labels = files[index::count], labels[index::count]
        if files.size == 0:
            raise DatasetError(f"{train_dir}: shard {spec.shard} holds no images")
        self._train = (files, labels)
        self._validation = (np.asarray(val_files), np.asarray(val_labels, np.int32))

    @property
    def train_size(self) -> int:
        return int(self._train[0].size)

    @property
    def validation_size(self) -> int:
        return int(self._validation[0].size)

    def train(self, batch_size: int, *, seed: int = 0, drop_remainder: bool = False) -> tf.data.Dataset:
        _check_batch_size(batch_size)
        tf = _tf()
        size, augment, classes = self.image_size, self.augment, self.num_classes

        def prepare(item: tuple[tf.Tensor, tf.Tensor], element_seed: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
            path, label = item
            image = _imagenet_train_image(tf.io.read_file(path), element_seed, size, augment)
            return image, tf.one_hot(label, classes, dtype=tf.float32)

        files = tf.data.Dataset.from_tensor_slices(self._train).shuffle(
            self.train_size, seed=seed, reshuffle_each_iteration=True
        )
        ds = tf.data.Dataset.zip((files, _element_seeds(seed + 2)))
        ds = ds.map(prepare, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        return _finish(ds, batch_size, drop_remainder)

    def validation(self, batch_size: int) -> tf.data.Dataset:
        _check_batch_size(batch_size)
        tf = _tf()
        size, classes = self.image_size, self.num_classes

        def prepare(path: tf.Tensor, label: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
            image = _imagenet_eval_image(tf.io.read_file(path), size)
            return image, tf.one_hot(label, classes, dtype=tf.float32)

        ds = tf.data.Dataset.from_tensor_slices(self._validation)
        ds = ds.map(prepare, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        return _finish(ds, batch_size, False)


# --------------------------------------------------------------------------- #
# in-memory kinds: cifar10 and digits


class _ArrayDataset(Dataset):
    """A dataset held in memory as uint8/float arrays [N, h, w, c] and int labels."""

    def __init__(
        self,
        spec: DatasetSpec,
        num_classes: int,
        augment: bool,
        train: tuple[np.ndarray, np.ndarray],
        validation: tuple[np.ndarray, np.ndarray],
        mean: tuple[float, ...],
        std: tuple[float, ...],
        flip: bool,
    ) -> None:
        assert spec.image_size is not None
        super().__init__(spec, spec.image_size, num_classes, augment)
        images, labels = train
        if spec.shard is not None:
            index, count = spec.shard
            images, labels = images[index::count], labels[index::count]
            if labels.size == 0:
                raise DatasetError(f"{spec.path or spec.kind}: shard {spec.shard} holds no images")
        self._train = (images, labels.astype(np.int32))
        self._validation = (validation[0], validation[1].astype(np.int32))
        self._mean, self._std, self._flip = mean, std, flip

    @property
    def train_size(self) -> int:
        return int(self._train[1].size)

    @property
    def validation_size(self) -> int:
        return int(self._validation[1].size)

    def _prepare(self, image: tf.Tensor) -> tf.Tensor:
        """Resize (if needed) and normalise; works on one image or a batch."""
        tf = _tf()
        image = tf.cast(image, tf.float32)
        if image.shape[-3] != self.image_size or image.shape[-2] != self.image_size:
            image = tf.image.resize(image, [self.image_size, self.image_size], method="bilinear")
        if image.shape[-1] == 1:
            image = tf.image.grayscale_to_rgb(image)
        return _normalise_image(image, self._mean, self._std)

    def train(self, batch_size: int, *, seed: int = 0, drop_remainder: bool = False) -> tf.data.Dataset:
        _check_batch_size(batch_size)
        tf = _tf()
        size, classes = self.image_size, self.num_classes
        pad = max(size // 8, 1)
        ds = tf.data.Dataset.from_tensor_slices(self._train).shuffle(
            self.train_size, seed=seed, reshuffle_each_iteration=True
        )
        if not self.augment:
            # Whole-batch preparation: one resize per batch instead of per image.
            ds = ds.batch(batch_size, drop_remainder=drop_remainder)
            ds = ds.map(
                lambda x, y: (self._prepare(x), tf.one_hot(y, classes, dtype=tf.float32)),
                num_parallel_calls=tf.data.AUTOTUNE,
                deterministic=True,
            )
            return ds.prefetch(tf.data.AUTOTUNE)

        flip = self._flip

        def prepare(item: tuple[tf.Tensor, tf.Tensor], element_seed: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
            image, label = item
            seeds = tf.random.experimental.stateless_split(element_seed, 2)
            image = self._prepare(image)
            # Pad-and-crop: random translation by up to 1/8 of the side.
            image = tf.image.pad_to_bounding_box(image, pad, pad, size + 2 * pad, size + 2 * pad)
            image = tf.image.stateless_random_crop(image, [size, size, 3], seed=seeds[0])
            if flip:
                image = tf.image.stateless_random_flip_left_right(image, seeds[1])
            return image, tf.one_hot(label, classes, dtype=tf.float32)

        ds = tf.data.Dataset.zip((ds, _element_seeds(seed + 2)))
        ds = ds.map(prepare, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        return _finish(ds, batch_size, drop_remainder)

    def validation(self, batch_size: int) -> tf.data.Dataset:
        _check_batch_size(batch_size)
        tf = _tf()
        classes = self.num_classes
        ds = tf.data.Dataset.from_tensor_slices(self._validation).batch(batch_size)
        ds = ds.map(
            lambda x, y: (self._prepare(x), tf.one_hot(y, classes, dtype=tf.float32)),
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=True,
        )
        return ds.prefetch(tf.data.AUTOTUNE)


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


def _open_cifar10(spec: DatasetSpec) -> Dataset:
    assert spec.path is not None
    _require_dir(spec.path)
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
    augment = True if spec.augment is None else spec.augment
    return _ArrayDataset(spec, 10, augment, train, parts[-1], CIFAR10_MEAN, CIFAR10_STD, flip=True)


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


def _open_digits(spec: DatasetSpec) -> Dataset:
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
    augment = False if spec.augment is None else spec.augment
    return _ArrayDataset(
        spec,
        10,
        augment,
        (train_images, labels[train_idx]),
        (images[val_idx], labels[val_idx]),
        (mean,) * 3,
        (std,) * 3,
        flip=False,  # a mirrored digit is not the same digit
    )


_OPENERS: dict[str, Callable[[DatasetSpec], Dataset]] = {
    "imagenet-tfrecord": _TFRecordDataset,
    "imagenet-folder": _FolderDataset,
    "cifar10": _open_cifar10,
    "digits": _open_digits,
}

__all__ = [
    "KINDS",
    "Dataset",
    "DatasetError",
    "DatasetSpec",
    "digits_split",
    "load_dataset",
    "validate",
]
