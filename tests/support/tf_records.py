"""Small real image files for the input pipelines' tests, written with TensorFlow: TFRecord
shards and class folders whose classes are recognisable from the pixels."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

# A class is recognisable from its image: every pixel is near 40 * (class + 1).
STEP = 40


def class_image(rng: np.random.Generator, cls: int, height: int = 20, width: int = 24) -> np.ndarray:
    base = STEP * (cls + 1)
    noise = rng.integers(-12, 13, size=(height, width, 3))
    return np.clip(base + noise, 0, 255).astype(np.uint8)


def jpeg(image: np.ndarray) -> bytes:
    return tf.io.encode_jpeg(tf.constant(image), quality=95).numpy()


def png(image: np.ndarray) -> bytes:
    return tf.io.encode_png(tf.constant(image)).numpy()


def example(encoded: bytes | None, label: int | None) -> bytes:
    feature = {}
    if encoded is not None:
        feature["image/encoded"] = tf.train.Feature(bytes_list=tf.train.BytesList(value=[encoded]))
        feature["image/format"] = tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"JPEG"]))
    if label is not None:
        feature["image/class/label"] = tf.train.Feature(int64_list=tf.train.Int64List(value=[label]))
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def write_shards(directory: Path, split: str, shards: list[list[bytes]]) -> None:
    for i, records in enumerate(shards):
        with tf.io.TFRecordWriter(str(directory / f"{split}-{i:05d}-of-{len(shards):05d}")) as writer:
            for record in records:
                writer.write(record)


def make_tfrecord_dir(
    root: Path, *, first_label: int = 1, train_shards: int = 3, per_shard: int = 4, num_classes: int = 5
) -> tuple[Path, list[int], list[int]]:
    """Train: `train_shards` x `per_shard` records; validation: 2 shards x 3 records."""
    rng = np.random.default_rng(0)
    root.mkdir(parents=True, exist_ok=True)
    train_labels: list[int] = []
    shards = []
    for s in range(train_shards):
        records = []
        for r in range(per_shard):
            cls = (s * per_shard + r) % num_classes
            train_labels.append(cls)
            records.append(example(jpeg(class_image(rng, cls)), cls + first_label))
        shards.append(records)
    write_shards(root, "train", shards)
    val_labels = [0, 1, 2, 3, 4, 4]
    write_shards(
        root,
        "validation",
        [[example(jpeg(class_image(rng, c)), c + first_label) for c in val_labels[i * 3 : i * 3 + 3]] for i in range(2)],
    )
    return root, train_labels, val_labels


def make_folder_tree(root: Path, val_name: str = "val") -> Path:
    """Classes named out of order so that sorting matters: a_cls=0, b_cls=1, c_cls=2."""
    rng = np.random.default_rng(3)
    for split, per_class in (("train", 3), (val_name, 2)):
        for name, cls in (("c_cls", 2), ("a_cls", 0), ("b_cls", 1)):
            folder = root / split / name
            folder.mkdir(parents=True)
            for i in range(per_class):
                data = png(class_image(rng, cls)) if i == 1 else jpeg(class_image(rng, cls))
                (folder / f"img_{i}.{'png' if i == 1 else 'JPEG'}").write_bytes(data)
    (root / "train" / "a_cls" / "notes.txt").write_text("not an image")
    return root
