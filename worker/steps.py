"""The compiled steps of one round: a model, its train and eval functions, its data iterators.

`compile_round` does everything a round needs before its first training step,
so that it can run on another thread while the previous round trains
(`worker.lookahead`) and the accelerator waits only for the hand-over:

- build the Keras model under the round's dtype policy and distribution
  strategy, and compile it for SGD with momentum (Keras wraps the optimizer in
  a loss-scale optimizer for ``mixed_float16``); build the optimizer's
  variables, so the functions create none (a function that creates variables
  while tracing is traced twice);
- one training function and one evaluation function per round, each taking
  the round's distributed iterator: the iterator's element spec has an
  unknown batch dimension, so the partial last batch of an epoch runs the same
  graph (no retracing);
- trace both (the training step in `released_custom_gradients`, which drops
  what TensorFlow would keep of it for good), then run each once on a dummy
  batch of one image per replica, which makes TensorFlow instantiate and
  optimise the graphs (as costly as the tracing); the training step's effect
  on the variables (weights, batch-norm statistics, optimizer slots and step
  counter, loss scale) is undone by restoring them from a snapshot. With XLA
  the dummy batch is skipped: XLA compiles per batch shape and the dummy shape
  never recurs;
- one iterator over all the round's training epochs and one over its
  validation passes (no per-epoch iterator set-up).

One step per call: the caller checks stop requests and the report interval
between steps. A step returns its loss (for the NaN check) and the number of
images it processed (summed over replicas), so image counts are exact.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping, Sequence

from aiperf.graph import Graph
from aiperf.precision import get_precision
from aiperf.profiles import Profile

log = logging.getLogger(__name__)


@dataclass
class CompiledRound:
    """A built model with its traced functions and iterators; `release` drops them."""

    model: Any
    strategy: Any
    train_step: Callable[[Any], tuple[Any, Any]]  # (iterator) -> (loss, images)
    eval_step: Callable[[Any], tuple[Any, Any]] | None  # (iterator) -> (correct predictions, images)
    train_iterator: Any                           # every training epoch of the round, in order
    validation_iterator: Any                      # one validation pass per epoch, in order (None: no evaluation)
    timings: dict[str, float] = field(default_factory=dict)  # seconds per preparation phase

    def release(self) -> None:
        """Drop the model and functions (the memory goes with the next garbage collection) and hand
        the iterators to `_reaper`, which deletes them on a thread of its own."""
        self.model = self.train_step = self.eval_step = None  # type: ignore[assignment]
        iterators = [it for it in (self.train_iterator, self.validation_iterator) if it is not None]
        self.train_iterator = self.validation_iterator = None
        if iterators:
            _reaper.drop(iterators)


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
                # daemon thread inside TensorFlow's C++ frames: let it finish, within bounds
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


@dataclass(frozen=True)
class StepSettings:
    """What `compile_round` needs to know about the round."""

    graph: Graph              # with the kernel size inserted
    precision: str
    strategy: Any
    global_batch: int
    epochs: int
    steps_per_epoch: int
    xla: bool = False
    seed: int = 0
    # {layer id: arrays in get_weights() order} to start from (weight inheritance); None: He init
    initial_weights: Mapping[str, Sequence[Any]] | None = None


def compile_round(settings: StepSettings, dataset: Any, profile: Profile, *, warm: bool = True,
                  evaluate: bool = True) -> CompiledRound:
    """Build, compile, trace and warm up the round's model and steps (see the module docstring).
    `evaluate` False: no evaluation function or validation iterator (an audit's timed steps)."""
    timings: dict[str, float] = {}
    clock = _Clock(timings)
    model = _compiled_model(settings, profile)
    clock.lap("build")
    strategy = settings.strategy
    train_data = dataset.train(settings.global_batch, seed=settings.seed)
    train_iterator = iter(strategy.experimental_distribute_dataset(train_data.repeat(settings.epochs)))
    validation_iterator = None
    if evaluate:
        validation_data = dataset.validation(settings.global_batch)
        validation_iterator = iter(strategy.experimental_distribute_dataset(validation_data.repeat(settings.epochs)))
    clock.lap("data")
    train_step = _train_function(model, strategy, settings.xla)
    eval_step = _eval_function(model, strategy, settings.xla) if evaluate else None
    dummy = _dummy_iterator(train_data.element_spec, strategy)
    with released_custom_gradients():
        train_step.get_concrete_function(dummy)
    clock.lap("trace_train")
    if eval_step is not None:
        eval_step.get_concrete_function(dummy)
        clock.lap("trace_eval")
    if warm and evaluate and not settings.xla:
        _warm_up(model, train_step, eval_step, lambda: _dummy_iterator(train_data.element_spec, strategy))
        clock.lap("warm")
    return CompiledRound(model=model, strategy=strategy, train_step=train_step, eval_step=eval_step,
                         train_iterator=train_iterator, validation_iterator=validation_iterator, timings=timings)


def _compiled_model(settings: StepSettings, profile: Profile) -> Any:
    """The Keras model of the graph, built under the round's precision and compiled for SGD."""
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
            schedule = keras.optimizers.schedules.PolynomialDecay(
                profile.learning_rate, decay_steps=max(1, settings.epochs * settings.steps_per_epoch),
                end_learning_rate=0.0, power=1.0)
            model.compile(optimizer=keras.optimizers.SGD(schedule, momentum=profile.momentum),
                          loss="categorical_crossentropy", jit_compile=bool(settings.xla))
            model.optimizer.build(model.trainable_variables)
    finally:
        keras.config.set_dtype_policy(previous_policy)
    return model


def set_layer_weights(model: Any, weights: Mapping[str, Sequence[Any]]) -> None:
    """Give each layer named in `weights` its arrays (ValueError: an unknown layer or a shape mismatch)."""
    for layer_id, arrays in weights.items():
        model.get_layer(layer_id).set_weights(list(arrays))


def layer_weights(model: Any) -> dict[str, list[Any]]:
    """{layer id: its arrays} of every layer that has weights (the form weight transfer reads)."""
    return {layer.name: layer.get_weights() for layer in model.layers if layer.weights}


def _train_function(model: Any, strategy: Any, xla: bool) -> Any:
    """One SGD step on the iterator's next batch: Keras's own train step, without its metrics."""
    import keras
    import tensorflow as tf

    loss_fn = keras.losses.CategoricalCrossentropy()  # mean over the replica's batch / replicas
    optimizer = model.optimizer
    variables = model.trainable_variables

    def step(x: Any, y: Any) -> tuple[Any, Any]:
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
            scaled = optimizer.scale_loss(loss)
        optimizer.apply_gradients(zip(tape.gradient(scaled, variables), variables))
        return loss, tf.shape(x)[0]

    if xla:  # XLA compiles the step; the iterator stays outside it
        step = tf.function(step, jit_compile=True, autograph=False)

    def train(iterator: Any) -> tuple[Any, Any]:
        x, y = iterator.get_next()
        loss, images = strategy.run(step, args=(x, y))
        return strategy.reduce("SUM", loss, axis=None), _summed(strategy, images)

    return tf.function(train, autograph=False)


def _eval_function(model: Any, strategy: Any, xla: bool) -> Any:
    """Correct top-1 predictions and images of the iterator's next batch."""
    import tensorflow as tf

    def step(x: Any, y: Any) -> tuple[Any, Any]:
        predicted = model(x, training=False)
        correct = tf.reduce_sum(tf.cast(tf.equal(tf.argmax(y, -1), tf.argmax(predicted, -1)), tf.int32))
        return correct, tf.shape(x)[0]

    if xla:
        step = tf.function(step, jit_compile=True, autograph=False)

    def evaluate(iterator: Any) -> tuple[Any, Any]:
        x, y = iterator.get_next()
        correct, images = strategy.run(step, args=(x, y))
        return _summed(strategy, correct), _summed(strategy, images)

    return tf.function(evaluate, autograph=False)


def _summed(strategy: Any, per_replica: Any) -> Any:
    """An integer per replica, summed (integers are not all-reduced: added where they are)."""
    import tensorflow as tf

    return tf.add_n(list(strategy.experimental_local_results(per_replica)))


def _dummy_iterator(element_spec: Any, strategy: Any) -> Any:
    """An iterator with the same element spec as the round's data: one batch, one image per replica."""
    import tensorflow as tf

    images = int(strategy.num_replicas_in_sync)
    zeros = tuple(tf.zeros([images, *spec.shape[1:]], spec.dtype) for spec in element_spec)
    batch = tf.data.Dataset.from_tensor_slices(zeros).batch(images)  # unknown batch dimension, as the data's
    return iter(strategy.experimental_distribute_dataset(batch))


def _warm_up(model: Any, train_step: Any, eval_step: Any, dummy: Callable[[], Any]) -> None:
    """Run each function once on a dummy batch; the training step's effect on the variables is undone."""
    variables = list(model.variables) + list(model.optimizer.variables)
    saved = [v.value.read_value() for v in variables]  # Keras variable -> tf.Variable -> a copy
    train_step(dummy())
    for variable, value in zip(variables, saved):
        variable.assign(value)
    eval_step(dummy())


# TensorFlow registers a gradient function for each tf.custom_gradient traced in graph
# mode and never unregisters it (tensorflow/tensorflow#97697, open in 2.21). The
# all-reduce of the gradients under MirroredStrategy is one, so every traced training
# step stayed alive with its whole graph: on the smoke profile 64,500 Python objects a
# round, every full garbage collection slower than the last, memory growing for the run.
# The registry is read only by symbolic gradients of the traced graph (tf.gradients over
# it, differentiating the concrete function from outside, saving it as a SavedModel);
# nothing does that to a training step, whose own gradient is taken while tracing it
# (the tape holds that function directly). So the entries are dropped once the trace is
# done. One trace at a time: another thread's trace must keep its entries until it ends.
_trace_lock = threading.Lock()
_CUSTOM_GRADIENT_PREFIX = "CustomGradient-"


@contextlib.contextmanager
def released_custom_gradients() -> Iterator[None]:
    """Trace inside this block: the custom-gradient functions registered meanwhile are dropped after it."""
    registry = _gradient_registry()
    with _trace_lock:
        before = set(registry) if registry is not None else set()
        try:
            yield
        finally:
            if registry is not None:
                for name in set(registry) - before:
                    if name.startswith(_CUSTOM_GRADIENT_PREFIX):
                        del registry[name]


def _gradient_registry() -> dict[str, Any] | None:
    """TensorFlow's registry of gradient functions (a private dict; None, with a warning, if it moved)."""
    from tensorflow.python.framework import ops

    registry = getattr(getattr(ops, "_gradient_registry", None), "_registry", None)
    if not isinstance(registry, dict):
        log.warning("TensorFlow's gradient registry was not found: each traced training step stays in memory")
        return None
    return registry


class _Clock:
    """Seconds between laps, recorded under the lap's name."""

    def __init__(self, timings: dict[str, float]) -> None:
        self.timings = timings
        self.last = time.perf_counter()

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.timings[name] = self.timings.get(name, 0.0) + now - self.last
        self.last = now
