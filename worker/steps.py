"""The TensorFlow backend of the round layer (`worker.backend` picks it or `worker.jax_steps`).

The compiled steps of one round: a model, its train and eval functions, its data
iterators (`worker.rounds`). Data parallelism is a `tf.distribute.MirroredStrategy`
over the local GPUs (``/cpu:0`` without one): synchronous all-reduce, each
replica its share of the global batch, batch norm per replica.

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

import contextlib
import functools
import logging
import threading
from typing import Any, Callable, Iterable, Iterator

from aiperf.profiles import Profile
from worker.rounds import (
    Clock,
    CompiledRound,
    DataEnded,
    StepSettings,
    compiled_model,
    decayed_kernels,
    recipe_loss,
    weight_penalty,
)

log = logging.getLogger(__name__)


@functools.lru_cache(maxsize=1)
def local_distribution() -> Any:
    """MirroredStrategy over all local GPUs, or over ``/cpu:0`` when there is none (one per process)."""
    import tensorflow as tf

    gpus = tf.config.list_logical_devices("GPU")
    devices = [d.name for d in gpus] if gpus else ["/cpu:0"]
    return tf.distribute.MirroredStrategy(devices=devices)


def one_device() -> tuple[str, Any]:
    """The device an audit times on (the first GPU, else the CPU) and a MirroredStrategy over it."""
    import tensorflow as tf

    gpus = tf.config.list_logical_devices("GPU")
    device = gpus[0].name if gpus else "/cpu:0"
    return device, tf.distribute.MirroredStrategy(devices=[device])


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether `exc` is TensorFlow (or XLA inside it) running out of device memory."""
    import tensorflow as tf

    if isinstance(exc, tf.errors.ResourceExhaustedError):
        return True
    text = str(exc)
    # XLA and some allocators report OOM through other error types.
    return isinstance(exc, (tf.errors.InternalError, tf.errors.UnknownError)) and (
        "RESOURCE_EXHAUSTED" in text or "out of memory" in text.lower())


def host_scope() -> Any:
    """Where scratch models (checkpoints in and out) are built: the CPU, off the accelerator."""
    import tensorflow as tf

    return tf.device("/cpu:0")


def set_determinism(on: bool) -> None:
    """TensorFlow op determinism for a deterministic run (slower), off otherwise."""
    import tensorflow as tf

    if on:
        tf.config.experimental.enable_op_determinism()
        return
    try:  # not in the public API; a worker that served a deterministic run turns it off
        from tensorflow.python.framework.config import disable_op_determinism, is_op_determinism_enabled
    except ImportError:  # pragma: no cover - another TensorFlow version
        return
    if is_op_determinism_enabled():
        disable_op_determinism()


def count_correct(model: Any, batches: Iterable[tuple[Any, Any]]) -> tuple[int, int]:
    """(correct top-1 predictions, images) of `model` in inference mode over `batches` of
    (images, one-hot labels)."""
    import tensorflow as tf

    @tf.function(autograph=False, reduce_retracing=True)  # type: ignore[untyped-decorator]  # TF: untyped
    def step(x: Any, y: Any) -> tuple[Any, Any]:
        predicted = model(x, training=False)
        hits = tf.equal(tf.argmax(y, -1), tf.argmax(predicted, -1))
        return tf.reduce_sum(tf.cast(hits, tf.int64)), tf.shape(x, out_type=tf.int64)[0]

    correct = images = 0
    for x, y in batches:
        c, n = step(x, y)
        correct, images = correct + int(c), images + int(n)
    return correct, images


def validation_batches(dataset: Any, batch_size: int) -> Iterable[tuple[Any, Any]]:
    """The dataset's validation split in batches, as this backend's steps take them."""
    batches: Iterable[tuple[Any, Any]] = dataset.validation(batch_size)
    return batches


def in_memory_batches(batch: tuple[Any, Any]) -> Any:
    """One (images, labels) batch repeated, as the dataset `compile_round` takes (an audit's timed
    steps): a tf.data pipeline whose batch dimension is unknown, as the real data's (no retracing)."""
    import tensorflow as tf

    size = int(batch[0].shape[0])

    class _Batches:
        def train(self, batch_size: int, seed: int = 0) -> Any:
            return tf.data.Dataset.from_tensor_slices(batch).batch(size).cache().repeat().prefetch(2)

    return _Batches()


def compile_round(settings: StepSettings, dataset: Any, profile: Profile, *, warm: bool = True,
                  evaluate: bool = True) -> CompiledRound:
    """Build, compile, trace and warm up the round's model and steps (see the module docstring).
    `evaluate` False: no evaluation function or validation iterator (an audit's timed steps)."""
    timings: dict[str, float] = {}
    clock = Clock(timings)
    model = compiled_model(settings, profile)
    clock.lap("build")
    strategy = settings.strategy
    train_data = dataset.train(settings.global_batch, seed=settings.seed)
    train_iterator = iter(strategy.experimental_distribute_dataset(train_data.repeat(settings.epochs)))
    validation_iterator = None
    if evaluate:
        validation_data = dataset.validation(settings.global_batch)
        validation_iterator = iter(strategy.experimental_distribute_dataset(validation_data.repeat(settings.epochs)))
    clock.lap("data")
    train_step = _train_function(model, strategy, settings.xla, profile)
    eval_step = _eval_function(model, strategy, settings.xla, profile) if evaluate else None
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
    return CompiledRound(model=model, strategy=strategy, train_step=_ended_as_data_ended(train_step),
                         eval_step=eval_step, train_iterator=train_iterator,
                         validation_iterator=validation_iterator, timings=timings)


def _ended_as_data_ended(train: Callable[[Any], tuple[Any, Any]]) -> Callable[[Any], tuple[Any, Any]]:
    """The training function, raising `DataEnded` where TensorFlow's iterator ends."""
    import tensorflow as tf

    def step(iterator: Any) -> tuple[Any, Any]:
        try:
            return train(iterator)
        except tf.errors.OutOfRangeError as exc:
            raise DataEnded(str(exc)) from None

    return step


def _train_function(model: Any, strategy: Any, xla: bool, profile: Profile) -> Any:
    """One SGD step on the iterator's next batch: Keras's own train step, without its metrics, on the
    profile's loss (label smoothing) and weight penalty (`worker.rounds`); returns the objective."""
    import tensorflow as tf

    per_image = recipe_loss(profile)
    optimizer = model.optimizer
    variables = model.trainable_variables
    mask = decayed_kernels(model)
    replicas = float(strategy.num_replicas_in_sync)

    def step(x: Any, y: Any) -> tuple[Any, Any]:
        with tf.GradientTape() as tape:
            # each replica's share of the mean: the gradients are summed over the replicas
            loss = tf.reduce_mean(per_image(y, model(x, training=True))) / replicas
            loss = loss + weight_penalty(profile, mask, variables) / replicas
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


def _eval_function(model: Any, strategy: Any, xla: bool, profile: Profile) -> Any:
    """Correct top-1 predictions, images and the sum of their losses (`recipe_loss`) of the
    iterator's next batch."""
    import tensorflow as tf

    per_image = recipe_loss(profile)

    def step(x: Any, y: Any) -> tuple[Any, Any, Any]:
        predicted = model(x, training=False)
        correct = tf.reduce_sum(tf.cast(tf.equal(tf.argmax(y, -1), tf.argmax(predicted, -1)), tf.int32))
        return correct, tf.shape(x)[0], tf.reduce_sum(per_image(y, predicted))

    if xla:
        step = tf.function(step, jit_compile=True, autograph=False)

    def evaluate(iterator: Any) -> tuple[Any, Any, Any]:
        x, y = iterator.get_next()
        correct, images, loss = strategy.run(step, args=(x, y))
        return _summed(strategy, correct), _summed(strategy, images), strategy.reduce("SUM", loss, axis=None)

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
