"""The input pipeline without TensorFlow: numpy batches prepared by a thread pool, a bounded number ahead.

A `NumpyBatches` is what ``Dataset.numpy_train``/``numpy_validation`` return:
each iteration is one epoch of ``(images, labels)`` batches, images float32
``[B, size, size, 3]`` normalised, labels one-hot float32 ``[B, classes]``,
the partial last batch included unless ``drop_remainder``.

How an epoch runs: a feeder thread walks the split's elements in the epoch's
order (`Split.elements`: indices, paths or records, with their labels), draws
each element's augmentation numbers, allocates each batch and hands slices of
it to a pool of worker threads (`Split.fill` decodes and prepares the images
of a slice, writing into the batch). The consumer takes the batches in order.
At most `depth` batches exist ahead of the consumer: the accelerator need not
wait while the CPUs keep up, and memory stays bounded (the spec's RAM budget).

Determinism: a batch's content depends only on the seed and the epoch's number
(the order and every augmentation number are drawn by the feeder, in order,
from generators seeded with ``(seed, epoch)``), never on which thread
finishes first.

Shutdown: dropping or closing an iterator mid-epoch stops its feeder, cancels
the slices not started and joins every thread it started; a finished epoch
does the same. Nothing outlives the iterator.

Batch arrays are reused (`BatchArrays`) once nothing refers to them any more: a
fresh array of 38 MB (64 images of 224 x 224) costs the kernel's zeroing of
every page as it is first written, about 60 us an image on the development
machine, 4% of an image's preparation.
"""

from __future__ import annotations

import math
import os
import queue
import sys
import threading
import weakref
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import numpy as np

# Elements of a split in epoch order: (payload, class index). `rng` orders them (None: the fixed
# order); a source that reads much before its first element stops early once `stopped()`.
Elements = Callable[[np.random.Generator | None, Callable[[], bool]], Iterator[tuple[Any, int]]]
# Prepares the images of some elements into `out` [n, size, size, 3]; draws: [n, k] uniform floats or None.
Fill = Callable[[Sequence[Any], np.ndarray | None, np.ndarray], None]

MIN_DEPTH = 2      # batches ahead, at the least (one being consumed, one being made)
MAX_DEPTH = 8      # and at the most, memory allowing
_POLL_S = 0.05     # how often a blocked feeder looks for a stop
_END = object()    # the feeder's last item


@dataclass(frozen=True)
class Split:
    """What the pipeline reads of one split of a dataset, and how."""

    elements: Elements
    fill: Fill
    draws: int            # uniform floats per element for its augmentation (0: none)
    image_size: int
    num_classes: int


def worker_threads() -> int:
    """Threads that prepare images: the CPUs this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


class BatchArrays:
    """Batch arrays kept for reuse: one is handed out again only when nothing but this pool refers to it.

    Whoever uses a batch holds a reference to its array while it does, as every view of it
    does (a view refers to the array that owns the memory), and so do a memoryview, a DLPack
    capsule or JAX's transfer of the array to a device: the array's reference count tells
    when it is free. The count an idle array shows is measured, not assumed.
    """

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self._arrays: list[np.ndarray] = []
        self._lock = threading.Lock()
        self._idle = self._idle_count()

    def take(self, shape: tuple[int, ...]) -> np.ndarray:
        """A float32 array of `shape`: an idle kept one, or a new one (kept while there is room)."""
        with self._lock:
            for index in range(len(self._arrays)):
                if self._arrays[index].shape == shape and self._references(index) <= self._idle:
                    return self._arrays[index]
            array = np.empty(shape, np.float32)
            if len(self._arrays) < self.keep:
                self._arrays.append(array)
            return array

    def _references(self, index: int) -> int:
        return sys.getrefcount(self._arrays[index])

    def _idle_count(self) -> int:
        self._arrays.append(np.empty(0, np.float32))
        try:
            return self._references(len(self._arrays) - 1)
        finally:
            self._arrays.pop()


class NumpyBatches:
    """An iterable of epochs of numpy batches; each ``iter()`` is the next epoch (reshuffled, re-augmented)."""

    def __init__(self, split: Split, batch_size: int, *, seed: int | None, drop_remainder: bool,
                 ram_budget_bytes: int, threads: int | None = None) -> None:
        self.split = split
        self.batch_size = batch_size
        self.seed = seed  # None: the elements' fixed order, no augmentation numbers
        self.drop_remainder = drop_remainder
        self.threads = threads or worker_threads()
        batch_bytes = batch_size * split.image_size ** 2 * 3 * 4
        self.depth = max(MIN_DEPTH, min(MAX_DEPTH, self.threads + 1, ram_budget_bytes // max(batch_bytes, 1)))
        # those in the queue, one being filled, one with the consumer, one being let go: per epoch,
        # and two epochs may overlap (`repeat`)
        self.arrays = BatchArrays(keep=2 * (self.depth + 3))
        self._epoch = 0

    def __iter__(self) -> BatchIterator:
        epoch, self._epoch = self._epoch, self._epoch + 1
        return BatchIterator(self, epoch)

    def repeat(self, epochs: int | None = None) -> EpochChain:
        """The batches of `epochs` epochs (None: without end) as one iterator, as tf.data's ``repeat``;
        each epoch starts as soon as the one before has handed out all its work."""
        if epochs is not None and epochs < 0:
            raise ValueError(f"epochs must be >= 0 or None, got {epochs}")
        return EpochChain(self, epochs)


class BatchIterator:
    """One epoch's batches. `close()` (or dropping it) stops and joins its threads."""

    def __init__(self, batches: NumpyBatches, epoch: int) -> None:
        state = _State(batches.depth, batches.threads)
        self._state = state
        # The feeder holds the state, never this iterator, so dropping the iterator finalises it.
        self._finalizer = weakref.finalize(self, state.close)
        state.feeder = threading.Thread(target=_feed, args=(state, batches, epoch), daemon=True,
                                        name=f"aiperf-data-feeder-{epoch}")
        state.feeder.start()

    def __iter__(self) -> BatchIterator:
        return self

    def __next__(self) -> tuple[np.ndarray, np.ndarray]:
        state = self._state
        if state.stop.is_set():
            raise StopIteration
        item = state.queue.get()
        try:
            if item is _END:
                raise StopIteration
            if isinstance(item, BaseException):
                raise item
            images, labels, slices = item
            for part in slices:
                part.result()
            return images, labels
        except BaseException:
            self.close()
            raise

    @property
    def feeding(self) -> bool:
        """True while the feeder still hands out work (batches of this epoch are still to come)."""
        feeder = self._state.feeder
        return feeder is not None and feeder.is_alive()

    def close(self) -> None:
        """Stop the feeder, cancel the work not started, join every thread."""
        self._finalizer()

    def __enter__(self) -> BatchIterator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class EpochChain:
    """Epochs of a `NumpyBatches` one after the other; the next epoch's feeder starts once the current
    one's has handed out its last batch, so the epoch boundary costs no wait. `close()` stops both."""

    def __init__(self, batches: NumpyBatches, epochs: int | None) -> None:
        self._batches, self._left = batches, epochs
        self._current = self._open()
        self._next: BatchIterator | None = None

    def _open(self) -> BatchIterator | None:
        if self._left == 0:
            return None
        if self._left is not None:
            self._left -= 1
        return iter(self._batches)

    def __iter__(self) -> EpochChain:
        return self

    def __next__(self) -> tuple[np.ndarray, np.ndarray]:
        while self._current is not None:
            if self._next is None and not self._current.feeding:
                self._next = self._open()
            try:
                return next(self._current)
            except StopIteration:  # the next epoch, opened already unless this one ended too soon to tell
                self._current, self._next = self._next or self._open(), None
            except BaseException:
                self.close()
                raise
        raise StopIteration

    def close(self) -> None:
        for iterator in (self._current, self._next):
            if iterator is not None:
                iterator.close()
        self._current = self._next = None

    def __enter__(self) -> EpochChain:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _State:
    """What an iterator shares with its feeder thread."""

    def __init__(self, depth: int, threads: int) -> None:
        self.queue: queue.Queue[Any] = queue.Queue(maxsize=depth)
        self.stop = threading.Event()
        self.pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="aiperf-data")
        self.feeder: threading.Thread | None = None

    def put(self, item: Any) -> bool:
        """Queue `item`, waiting for room; False once stopped."""
        while not self.stop.is_set():
            try:
                self.queue.put(item, timeout=_POLL_S)
                return True
            except queue.Full:
                continue
        return False

    def close(self) -> None:
        self.stop.set()
        self.pool.shutdown(wait=False, cancel_futures=True)
        while True:  # let a feeder blocked on a full queue go
            try:
                self.queue.get_nowait()
            except queue.Empty:
                break
        if self.feeder is not None and self.feeder is not threading.current_thread():
            self.feeder.join()
        self.pool.shutdown(wait=True)


def _feed(state: _State, batches: NumpyBatches, epoch: int) -> None:
    """The feeder thread: the epoch's batches, each split into slices for the pool, queued in order."""
    split, size = batches.split, batches.batch_size
    order_rng = draw_rng = None
    if batches.seed is not None:
        order_seeds = np.random.SeedSequence([batches.seed, epoch]).spawn(2)
        order_rng, draw_rng = (np.random.default_rng(s) for s in order_seeds)
    slice_size = max(1, math.ceil(size / batches.threads))
    try:
        elements = split.elements(order_rng, state.stop.is_set)
        while not state.stop.is_set():
            chunk = _take(elements, size, state.stop)
            if not chunk or (batches.drop_remainder and len(chunk) < size):
                break
            payloads = [payload for payload, _ in chunk]
            labels = np.zeros((len(chunk), split.num_classes), np.float32)
            labels[np.arange(len(chunk)), [label for _, label in chunk]] = 1.0
            images = batches.arrays.take((len(chunk), split.image_size, split.image_size, 3))
            draws = draw_rng.random((len(chunk), split.draws)) if draw_rng is not None and split.draws else None
            slices: list[Future[None]] = []
            for begin in range(0, len(chunk), slice_size):
                end = begin + slice_size
                part = None if draws is None else draws[begin:end]
                slices.append(state.pool.submit(split.fill, payloads[begin:end], part, images[begin:end]))
            if not state.put((images, labels, slices)):
                return
        state.put(_END)
    except RuntimeError as exc:
        if not state.stop.is_set():  # not the pool refusing work after a close
            state.put(exc)
    except Exception as exc:  # noqa: BLE001 - handed to the consumer, which raises it
        state.put(exc)


def _take(elements: Iterator[tuple[Any, int]], count: int, stop: threading.Event) -> list[tuple[Any, int]]:
    chunk: list[tuple[Any, int]] = []
    for element in elements:
        chunk.append(element)
        if len(chunk) == count or stop.is_set():
            break
    return chunk
