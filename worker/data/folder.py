"""``imagenet-folder``: a class-per-folder image tree.

``root/train/<class>/*`` and ``root/val/<class>/*`` (or
``root/validation/<class>/*``); classes are the train folder names sorted, the
label of a class is its index in that order. The file lists are held in memory
and the images read and decoded as the pipeline runs.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from worker.data.base import ListedDataset, require_dir, tensorflow
from worker.data.images import imagenet_eval_image, imagenet_train_image
from worker.data.numpy_pipeline import Fill
from worker.data.opencv_images import IMAGENET_DRAWS, check_decodes, imagenet_eval_into, imagenet_train_into
from worker.data.spec import DatasetError, DatasetSpec

if TYPE_CHECKING:  # pragma: no cover - typing only
    import tensorflow as tf

IMAGE_EXTENSIONS = (".jpeg", ".jpg", ".png", ".bmp", ".gif")


class ImageFolder(ListedDataset):
    numpy_draws = IMAGENET_DRAWS

    def __init__(self, spec: DatasetSpec) -> None:
        assert spec.path is not None
        root = spec.path
        require_dir(root)
        train_dir, val_dir = _split_dirs(root)
        self.classes = _class_folders(train_dir)
        if not self.classes:
            raise DatasetError(f"{train_dir}: no class folders (expected train/<class>/*.JPEG)")
        num_classes = spec.num_classes or len(self.classes)
        if num_classes < len(self.classes):
            raise DatasetError(
                f"{train_dir}: {len(self.classes)} class folders but num_classes is {num_classes}"
            )
        label_of = {name: i for i, name in enumerate(self.classes)}
        train_files, train_labels = _list_split(train_dir, self.classes, label_of, classes_may_be_empty=False)
        val_classes = _class_folders(val_dir)
        if not val_classes:
            raise DatasetError(
                f"{val_dir}: no class folders (validation images must be sorted into val/<class>/)"
            )
        unknown = sorted(set(val_classes) - set(label_of))
        if unknown:
            raise DatasetError(f"{val_dir}: class folders not in train/: {', '.join(unknown[:5])}")
        val_files, val_labels = _list_split(val_dir, val_classes, label_of, classes_may_be_empty=True)
        if not val_files:
            raise DatasetError(f"{val_dir}: no images in the class folders")
        for first in (train_files[0], val_files[0]):
            with open(first, "rb") as fh:
                check_decodes(fh.read(), first)
        super().__init__(
            spec, num_classes, augment_by_default=True,
            train=(np.asarray(train_files), np.asarray(train_labels, np.int32)),
            validation=(np.asarray(val_files), np.asarray(val_labels, np.int32)),
            where=train_dir,
        )

    def _plain_example(self, path: tf.Tensor, label: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        image = imagenet_eval_image(tensorflow().io.read_file(path), self.image_size)
        return image, self._one_hot(label)

    def _augmented_example(self, element: Any, seed: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        path, label = element
        image = imagenet_train_image(tensorflow().io.read_file(path), seed, self.image_size)
        return image, self._one_hot(label)

    def _numpy_fill(self, inputs: np.ndarray, augment: bool) -> Fill:
        size = self.image_size

        def fill(indices: Sequence[int], draws: np.ndarray | None, out: np.ndarray) -> None:
            for n, index in enumerate(indices):
                path = str(inputs[index])
                encoded = read_file(path)
                if draws is None:
                    imagenet_eval_into(encoded, size, out[n], path)
                else:
                    imagenet_train_into(encoded, draws[n], size, out[n], path)

        return fill


def read_file(path: str) -> bytes:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError as exc:
        raise DatasetError(f"{path}: cannot be read ({exc.strerror or exc})") from None


def _split_dirs(root: str) -> tuple[str, str]:
    """The train and validation directories under `root`."""
    train_dir = os.path.join(root, "train")
    if not os.path.isdir(train_dir):
        raise DatasetError(f"{root}: no train/ directory (expected train/<class>/*.JPEG)")
    for name in ("val", "validation"):
        val_dir = os.path.join(root, name)
        if os.path.isdir(val_dir):
            return train_dir, val_dir
    raise DatasetError(f"{root}: no val/ or validation/ directory (expected val/<class>/*.JPEG)")


def _list_split(directory: str, classes: list[str], label_of: dict[str, int], *,
                classes_may_be_empty: bool) -> tuple[list[str], list[int]]:
    """The image files of `classes` under `directory` and their labels, class by class."""
    files: list[str] = []
    labels: list[int] = []
    for name in classes:
        images = _list_images(os.path.join(directory, name))
        if not images and not classes_may_be_empty:
            raise DatasetError(f"{os.path.join(directory, name)}: class folder without images")
        files += images
        labels += [label_of[name]] * len(images)
    return files, labels


def _list_images(directory: str) -> list[str]:
    with os.scandir(directory) as entries:
        return sorted(
            e.path for e in entries if e.is_file() and e.name.lower().endswith(IMAGE_EXTENSIONS)
        )


def _class_folders(directory: str) -> list[str]:
    with os.scandir(directory) as entries:
        return sorted(e.name for e in entries if e.is_dir() and not e.name.startswith("."))
