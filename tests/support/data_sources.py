"""Small real datasets of every kind, written without TensorFlow (OpenCV encodes, our TFRecord writer).

The pipelines' tests open them with both pipelines; a subprocess in which
TensorFlow cannot be imported opens them too.
"""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np

from worker.data.example import serialised
from worker.data.records import write_records

CIFAR_FILES = tuple(f"data_batch_{i}.bin" for i in range(1, 6)) + ("test_batch.bin",)


def photo(rng: np.random.Generator, height: int, width: int, level: int | None = None) -> np.ndarray:
    """A smooth photo-like RGB image (a coarse random field, bicubic, some noise), uint8.
    With `level`, its brightness sits near `level` (a class readable from the pixels)."""
    coarse = rng.uniform(0, 255, size=(4, 5, 3)).astype(np.float32)
    image = cv2.resize(coarse, (width, height), interpolation=cv2.INTER_CUBIC)
    if level is not None:
        image = level + (image - image.mean()) * 0.1
    image = image + rng.normal(0, 3, size=image.shape).astype(np.float32)
    return np.clip(image, 0, 255).astype(np.uint8)


def jpeg(image: np.ndarray, quality: int = 92) -> bytes:
    ok, data = cv2.imencode(".jpg", image[..., ::-1], [cv2.IMWRITE_JPEG_QUALITY, quality])
    assert ok
    return data.tobytes()


def png(image: np.ndarray) -> bytes:
    ok, data = cv2.imencode(".png", image[..., ::-1])
    assert ok
    return data.tobytes()


def level_of(cls: int) -> int:
    return 40 * (cls + 1)


def tfrecord_dir(root: Path, shard_sizes: list[int], val_sizes: list[int], *, classes: int = 5,
                 first_label: int = 1, size: tuple[int, int] = (30, 40), seed: int = 0) -> tuple[Path, list[int]]:
    """Shards ``train-*`` and ``validation-*`` of JPEG Examples; the training labels in file order."""
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    train_labels: list[int] = []
    for split, sizes in (("train", shard_sizes), ("validation", val_sizes)):
        count = 0
        for s, records in enumerate(sizes):
            payloads = []
            for _ in range(records):
                cls = count % classes
                count += 1
                if split == "train":
                    train_labels.append(cls)
                payloads.append(serialised(jpeg(photo(rng, *size, level_of(cls))), cls + first_label))
            write_records(str(root / f"{split}-{s:05d}-of-{len(sizes):05d}"), payloads)
    return root, train_labels


def folder_tree(root: Path, per_class: tuple[int, int] = (3, 2), classes: int = 3,
                size: tuple[int, int] = (30, 40), seed: int = 0) -> Path:
    """``train/<class>/`` and ``val/<class>/``: JPEGs, and every second image a PNG."""
    rng = np.random.default_rng(seed)
    for split, count in zip(("train", "val"), per_class):
        for cls in range(classes):
            folder = root / split / f"class_{cls}"
            folder.mkdir(parents=True)
            for i in range(count):
                image = photo(rng, *size, level_of(cls))
                name, data = (f"{i}.png", png(image)) if i % 2 else (f"{i}.JPEG", jpeg(image))
                (folder / name).write_bytes(data)
    return root


def cifar_dir(root: Path, train: int, validation: int, seed: int = 0) -> Path:
    """The CIFAR-10 binary layout: `train` records spread over the five training files
    (some may be empty but one), `validation` in the test file; labels cycle through 0..9."""
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    counts = [train // 5 + (1 if i < train % 5 else 0) for i in range(5)] + [validation]
    label = 0
    for name, count in zip(CIFAR_FILES, counts):
        records = bytearray()
        for _ in range(count):
            records.append(label % 10)
            records += rng.integers(0, 256, size=3072, dtype=np.uint8).tobytes()
            label += 1
        if not records:  # the layout wants every file non-empty: one record more
            records.append(0)
            records += bytes(3072)
        (root / name).write_bytes(bytes(records))
    return root
