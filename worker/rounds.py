"""What every backend's compiled round is made of: settings, the round, its release.

A backend module (`worker.steps` for TensorFlow, `worker.jax_steps` for JAX;
`worker.backend` picks one) turns `StepSettings` into a `CompiledRound`: the
Keras model built under the round's precision, one training and one evaluation
step, and the iterators over the round's data. Everything above the round
layer (trainer, look-ahead, audit, inheritance) sees only these types and the
functions of `worker.backend`.

One step per call: ``train_step(train_iterator)`` returns the step's loss (for
the NaN check; read it after the next step was launched, so the device is not
left waiting) and the images it trained (exact, summed over replicas; the
partial last batch counts what it holds); ``eval_step(validation_iterator)``
returns the correct top-1 predictions, the images and the sum of their losses
(the profile's label-smoothed cross-entropy, for early stopping on validation
loss). A training iterator that ends early raises `DataEnded`.

The training recipe both backends share (docs/spec.md, "The training recipe"):
`compiled_model`'s learning-rate schedule, `recipe_loss` (cross-entropy with the
profile's label smoothing) and `weight_penalty` ((wd/2)·Σ w² over the conv and
dense kernels, `decayed_kernels`: batch-norm scales and shifts and biases are not
decayed). The penalty is added to the loss before it is scaled, so its gradient
wd·w enters SGD's momentum as the original's (MindSpore's Momentum adds wd·w to
the gradient); Keras's own `weight_decay` is the decoupled form, a different
update, so it is not used.
"""

from __future__ import annotations

import atexit
import functools
import logging
import queue
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping, Sequence

from aiperf.graph import Graph
from aiperf.precision import get_precision
from aiperf.profiles import Profile

log = logging.getLogger(__name__)

# how a round that ran out of memory is reported (the agent lowers its batch sizes on it)
OOM_REASON_PREFIX = "out of memory at batch size"


def batch_sizes_after_out_of_memory(sizes: Sequence[int], failed: int,
                                    fits: int | None = None) -> tuple[int, ...] | None:
    """The batch sizes left to try on an accelerator on which `failed` (per accelerator) ran out of
    memory: those at most 9/10 of it (memory grows about linearly with the batch, so the next size
    down a fine-grained list would fail too) and, when a memory plan estimated one, at most `fits`;
    or the smallest size below `failed` when none is that small. None when no size is below it."""
    below = sorted(b for b in sizes if b < failed)
    if not below:
        return None
    return tuple(b for b in below if b * 10 <= failed * 9 and (fits is None or b <= fits)) or (below[0],)


def profile_after_out_of_memory(profile: Profile, failed: int, fits: int | None = None) -> Profile:
    """The profile a worker's later rounds choose from once a round ran out of memory at batch size
    `failed` (`batch_sizes_after_out_of_memory`, `fits` the plan's estimate if any); unchanged, and
    said, when no size is smaller. The default becomes the largest size kept when it was larger,
    and is kept otherwise: a smaller size's running out of memory says nothing about it."""
    kept = batch_sizes_after_out_of_memory(profile.batch_sizes, failed, fits)
    if kept is None:
        log.error("event=no_batch_size_fits failed_batch=%d: each batch size runs out of memory", failed)
        return profile
    default = min(profile.batch_size, kept[-1])
    log.warning("event=batch_sizes_lowered failed_batch=%d batch_size=%d largest=%d smallest=%d", failed, default,
                kept[-1], kept[0])
    return replace(profile, batch_sizes=kept, batch_size=default)


class DataEnded(Exception):
    """The round's training data ended before the steps the round planned."""


@dataclass(frozen=True)
class StepSettings:
    """What a backend's `compile_round` needs to know about the round."""

    graph: Graph              # with the kernel size inserted
    precision: str
    strategy: Any             # the backend's distribution over local devices (`worker.backend.local_distribution`)
    global_batch: int
    epochs: int
    steps_per_epoch: int
    xla: bool = False
    seed: int = 0
    # {layer id: arrays in get_weights() order} to start from (weight inheritance); None: He init
    initial_weights: Mapping[str, Sequence[Any]] | None = None


@dataclass
class CompiledRound:
    """A built model with its compiled steps and iterators; `release` drops them.

    `weights` and `load_weights` read and replace the trained weights by layer id (the form
    weight transfer and checkpoints use); a backend that keeps the model's state outside the
    Keras variables overrides them."""

    model: Any
    strategy: Any
    train_step: Callable[[Any], tuple[Any, Any]]  # (iterator) -> (loss, images)
    eval_step: Callable[[Any], tuple[Any, Any, Any]] | None  # (iterator) -> (correct, images, loss sum)
    train_iterator: Any                           # every training epoch of the round, in order
    validation_iterator: Any                      # one validation pass per epoch, in order (None: no evaluation)
    timings: dict[str, float] = field(default_factory=dict)  # seconds per preparation phase

    def weights(self) -> dict[str, list[Any]]:
        """{layer id: arrays} of the model as trained so far."""
        return layer_weights(self.model)

    def load_weights(self, weights: Mapping[str, Sequence[Any]]) -> None:
        """Start from `weights` instead (before the first step; ValueError: unknown layer, shape mismatch)."""
        set_layer_weights(self.model, weights)

    def release(self) -> None:
        """Drop the model and functions (the memory goes with the next garbage collection) and hand
        the iterators to the reaper, which deletes them on a thread of its own."""
        self.model = self.train_step = self.eval_step = None  # type: ignore[assignment]
        iterators = [it for it in (self.train_iterator, self.validation_iterator) if it is not None]
        self.train_iterator = self.validation_iterator = None
        if iterators:
            _reaper.drop(iterators)


def set_layer_weights(model: Any, weights: Mapping[str, Sequence[Any]]) -> None:
    """Give each layer named in `weights` its arrays (ValueError: an unknown layer or a shape mismatch)."""
    for layer_id, arrays in weights.items():
        model.get_layer(layer_id).set_weights(list(arrays))


def layer_weights(model: Any) -> dict[str, list[Any]]:
    """{layer id: its arrays} of every layer that has weights (the form weight transfer reads)."""
    return {layer.name: layer.get_weights() for layer in model.layers if layer.weights}


def learning_rate_schedule(profile: Profile, epochs: int, steps_per_epoch: int) -> Any:
    """The round's learning rate per optimizer step (`Profile.learning_rate_at`): "round" falls
    linearly to 0 over the round's steps; "max_epochs" is constant within an epoch e and is
    lr·(1 − e/final_epochs), as a Keras LearningRateScheduler set it at each epoch's start."""
    import keras

    if profile.lr_decay == "round":
        return keras.optimizers.schedules.PolynomialDecay(
            profile.learning_rate, decay_steps=max(1, epochs * steps_per_epoch), end_learning_rate=0.0, power=1.0)
    return _epochwise_linear_class()(profile.learning_rate, max(1, steps_per_epoch), profile.final_epochs)


@functools.lru_cache(maxsize=1)
def _epochwise_linear_class() -> type:
    import keras

    class EpochwiseLinear(keras.optimizers.schedules.LearningRateSchedule):  # type: ignore[misc]  # Keras: untyped
        """lr·max(0, 1 − ⌊step/steps_per_epoch⌋/final_epochs)."""

        def __init__(self, learning_rate: float, steps_per_epoch: int, final_epochs: int) -> None:
            self.learning_rate, self.steps_per_epoch, self.final_epochs = learning_rate, steps_per_epoch, final_epochs

        def __call__(self, step: Any) -> Any:
            ops = keras.ops
            epoch = ops.floor(ops.divide(ops.cast(step, "float32"), float(self.steps_per_epoch)))
            return self.learning_rate * ops.maximum(0.0, 1.0 - epoch / float(self.final_epochs))

        def get_config(self) -> dict[str, Any]:
            return {"learning_rate": self.learning_rate, "steps_per_epoch": self.steps_per_epoch,
                    "final_epochs": self.final_epochs}

    return EpochwiseLinear


def recipe_loss(profile: Profile) -> Callable[[Any, Any], Any]:
    """(one-hot labels, predicted probabilities) -> each image's cross-entropy with the profile's
    label smoothing (Keras's: the labels become y·(1 − s) + s/classes), in float32."""
    import keras

    smoothing = float(profile.label_smoothing)

    def loss(y: Any, predicted: Any) -> Any:
        return keras.losses.categorical_crossentropy(
            keras.ops.cast(y, "float32"), keras.ops.cast(predicted, "float32"), label_smoothing=smoothing)

    return loss


def decayed_kernels(model: Any) -> list[bool]:
    """For each of `model.trainable_variables`: whether weight decay applies to it (the kernel of
    a conv or dense layer; not a batch-norm scale or shift, not a bias)."""
    import keras

    kernels = {id(layer.kernel) for layer in model.layers
               if isinstance(layer, (keras.layers.Conv2D, keras.layers.Dense))}
    return [id(v) in kernels for v in model.trainable_variables]


def weight_penalty(profile: Profile, mask: Sequence[bool], values: Sequence[Any]) -> Any:
    """(wd/2)·Σ w² over the values `mask` marks (the trainable variables' values, in order);
    0.0 without weight decay."""
    import keras

    if not profile.weight_decay:
        return 0.0
    squares = [keras.ops.sum(keras.ops.square(keras.ops.cast(v, "float32"))) for v, m in zip(values, mask) if m]
    return 0.5 * float(profile.weight_decay) * keras.ops.sum(keras.ops.stack(squares)) if squares else 0.0


def compiled_model(settings: StepSettings, profile: Profile) -> Any:
    """The Keras model of the graph, built under the round's precision and compiled for SGD with
    momentum and the profile's learning-rate schedule (`learning_rate_schedule`; Keras wraps the
    optimizer in a loss-scale optimizer for ``mixed_float16``); the optimizer's variables built."""
    import keras

    from aiperf.keras_builder import build_model

    previous_policy = keras.config.dtype_policy()
    try:
        keras.config.set_dtype_policy(get_precision(settings.precision).keras_policy)
        with settings.strategy.scope():
            model = build_model(settings.graph, seed=settings.seed)
            if settings.initial_weights is not None:
                set_layer_weights(model, settings.initial_weights)
            if profile.bn_momentum is not None:
                for layer in model.layers:
                    if isinstance(layer, keras.layers.BatchNormalization):
                        layer.momentum = profile.bn_momentum
            schedule = learning_rate_schedule(profile, settings.epochs, settings.steps_per_epoch)
            model.compile(optimizer=keras.optimizers.SGD(schedule, momentum=profile.momentum),
                          loss="categorical_crossentropy", jit_compile=bool(settings.xla))
            model.optimizer.build(model.trainable_variables)
    finally:
        keras.config.set_dtype_policy(previous_policy)
    return model


class _Reaper:
    """Deletes objects on a thread of its own, in the order given.

    Deleting a tf.data iterator whose pipeline autotunes waits for the pipeline's autotuning
    thread to end, and that thread was seen to end only at its next wake-up: up to its
    optimisation period, which doubles while the iterator lives (about 4 s after a 10-second
    smoke round; 14 s once in a 5-minute demo, holding up that hand-over). The wait does not
    hold the interpreter, so on this thread it costs the rounds nothing."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[list[Any] | threading.Event] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def drop(self, objects: list[Any]) -> None:
        """Delete `objects` (their last references, as the list's owner gives it up) on the reaper thread."""
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="iterator-reaper", daemon=True)
                self._thread.start()
                # a deletion still under way when the interpreter shuts down could end the
                # daemon thread inside a framework's C++ frames: let it finish, within bounds
                atexit.register(self.drain, EXIT_WAIT_S)
        self._queue.put(objects)

    def drain(self, timeout_s: float) -> bool:
        """Wait until what was dropped so far is deleted; False when `timeout_s` passed first."""
        with self._lock:
            if self._thread is None:
                return True
        reached = threading.Event()
        self._queue.put(reached)
        return reached.wait(timeout_s)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if isinstance(item, threading.Event):
                item.set()
                continue
            item.clear()  # the deletions happen here
            del item


EXIT_WAIT_S = 20.0  # at most, at interpreter exit, for deletions under way
_reaper = _Reaper()


def wait_for_released(timeout_s: float) -> bool:
    """Wait until the iterators of the rounds released so far are deleted; False after `timeout_s`."""
    return _reaper.drain(timeout_s)


class Clock:
    """Seconds between laps, recorded under the lap's name."""

    def __init__(self, timings: dict[str, float]) -> None:
        self.timings = timings
        self.last = time.perf_counter()

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.timings[name] = self.timings.get(name, 0.0) + now - self.last
        self.last = now
