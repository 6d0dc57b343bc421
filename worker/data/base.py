"""The opened dataset every source returns, and the pipeline steps they share.

Two pipelines yield the same batches (``(images, one-hot labels)``, float32):

* `Dataset.train` and `Dataset.validation` build the tf.data pipeline: a source
  lists the elements of a split (records, file paths or pixels) and says how
  one element becomes an ``(image, one-hot label)`` pair, plain or augmented;
  the base adds the per-element augmentation seeds, the parallel map, batching
  and prefetching.
* `Dataset.numpy_train` and `Dataset.numpy_validation` build the pipeline
  without TensorFlow (`worker.data.numpy_pipeline`): a source gives the
  elements of a split in an epoch's order and how a slice of them becomes
  images (OpenCV and numpy, `worker.data.opencv_images`); the base adds the
  thread pool, batching and prefetching.

Unaugmented training is the plain preparation of the shuffled training
elements. Opening a dataset never imports TensorFlow (a dataset at a URL
aside, read through ``tf.io.gfile``).
"""

from __future__ import annotations

import math
import os
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Iterator

import numpy as np

from worker.data.numpy_pipeline import Fill, NumpyBatches, Split
from worker.data.spec import DatasetError, DatasetSpec

if TYPE_CHECKING:  # pragma: no cover - typing only
    import tensorflow as tf


def tensorflow() -> Any:
    """The `tensorflow` module, imported on first use so that importing the package stays cheap."""
    import tensorflow as tf

    return tf


class Dataset(ABC):
    """An opened, validated dataset: sizes, classes and tf.data pipelines."""

    # True where `_plain_example` works on a batch as well as on one element
    # (images of one size held in memory): plain batches are then prepared
    # whole, one resize per batch instead of one per image.
    prepare_whole_batches: ClassVar[bool] = False

    def __init__(self, spec: DatasetSpec, num_classes: int, *, augment_by_default: bool) -> None:
        assert spec.image_size is not None  # set by spec.normalise
        self.spec = spec
        self.image_size = spec.image_size
        self.num_classes = num_classes
        self.augment = augment_by_default if spec.augment is None else spec.augment

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

    def train(self, batch_size: int, *, seed: int = 0, drop_remainder: bool = False) -> tf.data.Dataset:
        """Shuffled, augmented training batches; each iteration is one epoch.

        The same seed gives the same sequence of epochs (order and
        augmentation) when the spec is deterministic (the default); otherwise
        the same elements with the same augmentation, in the order the parallel
        steps finish them. Each new iteration reshuffles and re-augments.
        """
        check_batch_size(batch_size)
        elements = self._train_elements(seed)
        if not self.augment:
            return self._plain_batches(elements, batch_size, drop_remainder)
        tf = tensorflow()
        # seed (and seed + 1) order the elements; seed + 2 drives the augmentation
        examples = tf.data.Dataset.zip((elements, element_seeds(seed + 2)))
        examples = examples.map(self._augmented_example, num_parallel_calls=tf.data.AUTOTUNE,
                                deterministic=self.spec.deterministic)
        return self._tuned(batch_and_prefetch(examples, batch_size, drop_remainder))

    def validation(self, batch_size: int) -> tf.data.Dataset:
        """Validation batches in a fixed order, identical on every iteration."""
        check_batch_size(batch_size)
        return self._plain_batches(self._validation_elements(), batch_size, False)

    def numpy_train(self, batch_size: int, *, seed: int = 0, drop_remainder: bool = False) -> NumpyBatches:
        """`train` without TensorFlow: numpy batches, one epoch per iteration.

        The same batch format, sizes, augmentation rules and normalisation as
        `train`. The same seed gives the same sequence of epochs (order and
        augmentation) whatever the spec's `deterministic`; it is not the tf.data
        pipeline's sequence (numpy draws the random numbers, not TensorFlow).
        """
        check_batch_size(batch_size)
        return NumpyBatches(self._numpy_split(train=True, augment=self.augment), batch_size, seed=seed,
                            drop_remainder=drop_remainder, ram_budget_bytes=self._ram_budget())

    def numpy_validation(self, batch_size: int) -> NumpyBatches:
        """`validation` without TensorFlow: the same batches in the same order on every iteration."""
        check_batch_size(batch_size)
        return NumpyBatches(self._numpy_split(train=False, augment=False), batch_size, seed=None,
                            drop_remainder=False, ram_budget_bytes=self._ram_budget())

    def train_steps(self, batch_size: int, *, drop_remainder: bool = False) -> int:
        """Batches in one training epoch."""
        check_batch_size(batch_size)
        if drop_remainder:
            return self.train_size // batch_size
        return math.ceil(self.train_size / batch_size)

    def validation_steps(self, batch_size: int) -> int:
        check_batch_size(batch_size)
        return math.ceil(self.validation_size / batch_size)

    def __repr__(self) -> str:
        where = f" at {self.spec.path}" if self.spec.path else ""
        return (
            f"<{type(self).__name__} {self.kind}{where}: {self.num_classes} classes, "
            f"{self.image_size}x{self.image_size}, augment={self.augment}, shard={self.spec.shard}>"
        )

    # -- what each source provides -------------------------------------------
    @abstractmethod
    def _train_elements(self, seed: int) -> tf.data.Dataset:
        """This worker's training elements, reshuffled on each iteration (the order follows `seed`)."""

    @abstractmethod
    def _validation_elements(self) -> tf.data.Dataset:
        """The validation elements in a fixed order."""

    @abstractmethod
    def _plain_example(self, *element: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """One element -> (image, one-hot label) without augmentation.

        tf.data passes the parts of a tuple element as separate arguments.
        """

    @abstractmethod
    def _augmented_example(self, element: Any, seed: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """One training element and its stateless seed (shape [2]) -> (augmented image, one-hot label)."""

    @abstractmethod
    def _numpy_split(self, *, train: bool, augment: bool) -> Split:
        """The training or validation split for the pipeline without TensorFlow."""

    # -- helpers for the sources --------------------------------------------
    def _ram_budget(self) -> int:
        return self.spec.ram_budget_bytes or default_ram_budget()

    def _one_hot(self, label: tf.Tensor) -> tf.Tensor:
        tf = tensorflow()
        return tf.one_hot(label, self.num_classes, dtype=tf.float32)

    def _plain_batches(self, elements: tf.data.Dataset, batch_size: int, drop_remainder: bool) -> tf.data.Dataset:
        tf = tensorflow()
        if self.prepare_whole_batches:
            batches = elements.batch(batch_size, drop_remainder=drop_remainder)
            batches = batches.map(self._plain_example, num_parallel_calls=tf.data.AUTOTUNE,
                                  deterministic=self.spec.deterministic)
            return self._tuned(batches.prefetch(tf.data.AUTOTUNE))
        examples = elements.map(self._plain_example, num_parallel_calls=tf.data.AUTOTUNE,
                                deterministic=self.spec.deterministic)
        return self._tuned(batch_and_prefetch(examples, batch_size, drop_remainder))

    def _tuned(self, batches: tf.data.Dataset) -> tf.data.Dataset:
        """The pipeline's options: autotuned parallelism and prefetch within the RAM budget, the order."""
        tf = tensorflow()
        options = tf.data.Options()
        options.deterministic = self.spec.deterministic
        options.autotune.enabled = True
        options.autotune.ram_budget = self._ram_budget()
        return batches.with_options(options)


class ListedDataset(Dataset):
    """A dataset whose splits are held in memory as ``(inputs, labels)`` arrays.

    The inputs are image paths (``imagenet-folder``) or pixels (``cifar10``,
    ``digits``). Sharding keeps every ``count``-th training item; the whole
    training split is shuffled each epoch.
    """

    def __init__(self, spec: DatasetSpec, num_classes: int, *, augment_by_default: bool,
                 train: tuple[np.ndarray, np.ndarray], validation: tuple[np.ndarray, np.ndarray],
                 where: str) -> None:
        super().__init__(spec, num_classes, augment_by_default=augment_by_default)
        inputs, labels = train
        if spec.shard is not None:
            index, count = spec.shard
            inputs, labels = inputs[index::count], labels[index::count]
            if labels.size == 0:
                raise DatasetError(f"{where}: shard {spec.shard} holds no images")
        self._train = (inputs, labels.astype(np.int32))
        self._validation = (validation[0], validation[1].astype(np.int32))

    @property
    def train_size(self) -> int:
        return int(self._train[1].size)

    @property
    def validation_size(self) -> int:
        return int(self._validation[1].size)

    def _train_elements(self, seed: int) -> tf.data.Dataset:
        tf = tensorflow()
        elements = tf.data.Dataset.from_tensor_slices(self._train)
        return elements.shuffle(self.train_size, seed=seed, reshuffle_each_iteration=True)

    def _validation_elements(self) -> tf.data.Dataset:
        return tensorflow().data.Dataset.from_tensor_slices(self._validation)

    # Uniform floats one element's augmentation uses in the pipeline without TensorFlow.
    numpy_draws: ClassVar[int] = 0

    def _numpy_split(self, *, train: bool, augment: bool) -> Split:
        inputs, labels = self._train if train else self._validation
        return Split(elements=_listed_elements(labels), fill=self._numpy_fill(inputs, augment),
                     draws=self.numpy_draws if augment else 0, image_size=self.image_size,
                     num_classes=self.num_classes)

    @abstractmethod
    def _numpy_fill(self, inputs: np.ndarray, augment: bool) -> Fill:
        """How a slice of `inputs` indices becomes prepared images (augmented or plain)."""


def _listed_elements(labels: np.ndarray) -> Callable[..., Iterator[tuple[int, int]]]:
    """Indices into a split held in memory, with their labels: shuffled by `rng`, or in order."""

    def elements(rng: np.random.Generator | None, stopped: Callable[[], bool]) -> Iterator[tuple[int, int]]:
        order = rng.permutation(labels.size) if rng is not None else np.arange(labels.size)
        yield from zip(order.tolist(), labels[order].tolist())

    return elements


def check_batch_size(batch_size: int) -> None:
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch size must be a positive integer, got {batch_size!r}")


def element_seeds(seed: int) -> tf.data.Dataset:
    """One stateless seed (shape [2]) per element; new values every epoch, same run to run."""
    tf = tensorflow()
    return tf.data.Dataset.random(seed=seed, rerandomize_each_iteration=True).batch(2)


def default_ram_budget() -> int:
    """A quarter of the node's memory: tf.data's buffers next to the model, TensorFlow and the generator."""
    try:
        return max(1 << 28, os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 4)
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not POSIX
        return 4 << 30


def batch_and_prefetch(examples: tf.data.Dataset, batch_size: int, drop_remainder: bool) -> tf.data.Dataset:
    """Batches, prefetched. One thread copies the batches, as the textbook pipeline does: at
    3,000 images/s of 224x224 (about 2 GB/s) the copy is far from the bottleneck, and a
    parallel batch used more CPU per image in most runs of benchmarks/data_bench.py (CPU the
    decoding needs)."""
    tf = tensorflow()
    return examples.batch(batch_size, drop_remainder=drop_remainder).prefetch(tf.data.AUTOTUNE)


def require_dir(path: str) -> None:
    """Raise ``DatasetError`` unless `path` is a directory (local, or a URL TensorFlow can read)."""
    # Local paths are checked without TensorFlow, so a mistyped path fails
    # fast with one line (TensorFlow's start-up logs would come first).
    if "://" not in path:
        isdir, exists = os.path.isdir, os.path.exists
    else:
        gfile = url_file_system(path)
        isdir, exists = gfile.isdir, gfile.exists
    if not isdir(path):
        if exists(path):
            raise DatasetError(f"{path}: not a directory")
        raise DatasetError(f"{path}: no such directory")


def url_file_system(path: str) -> Any:
    """`tf.io.gfile`, the reader of dataset URLs; a ``DatasetError`` where TensorFlow is not installed."""
    try:
        return tensorflow().io.gfile
    except ImportError:
        raise DatasetError(f"{path}: reading a dataset from a URL needs TensorFlow (tf.io.gfile); "
                           "copy the dataset to a local directory") from None


def first_line(exc: BaseException) -> str:
    """The first line of an error's message, for a one-line ``DatasetError``."""
    text = getattr(exc, "message", None) or str(exc)
    return text.strip().splitlines()[0] if text.strip() else type(exc).__name__
