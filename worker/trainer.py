"""Training of one round: a graph, its hyperparameters, a dataset -> a `TrainResult`.

Keras 3 on TensorFlow, following SPEC section 3:

- Data parallelism: `tf.distribute.MirroredStrategy` over all local GPUs
  (synchronous all-reduce). Without a GPU the same strategy runs on the single
  device ``/cpu:0``, so one code path is used and tested everywhere.
  The hyperparameter ``batch_size`` is per accelerator: the global batch is
  ``batch_size × replicas``.
- SGD with momentum (profile, 0.9), learning rate from the profile (0.1) with
  linear decay to 0 over the round's steps, categorical cross-entropy.
- Precision: a run's precision name (``fp32``, ``mixed_fp16``, ``mixed_bf16``, ...;
  `aiperf.precision`), which names the Keras dtype policy. The policy is set while
  the model is built and restored afterwards; Keras wraps the optimizer in a
  loss-scale optimizer for ``mixed_float16``.
- Optional XLA (``jit_compile``).

Progress: a callback reads an image-count metric (the batch dimension of
every batch actually processed, so a partial last batch counts what it holds;
summed over replicas) and calls ``on_progress`` at least every
``progress_interval_s`` seconds, at each epoch end, and once more at the end
if anything is left, with the images trained and validated *since the previous
report* and the worker's own FLOP figure for them. Summing the reports gives
exactly the images processed. ``on_progress`` and ``should_stop`` run on the
training thread between batches: keep them quick (queue, don't block on I/O).

Stopping: early stopping with the profile's patience min(6+2r, 20) on
validation accuracy (state ``done``); ``should_stop()`` turning true stops the
round within a batch (training or validation; state ``stopped``; a partly
validated epoch is not recorded as an epoch). Out of memory for the batch size
gives state ``failed`` with the reason; a loss that becomes NaN too. The
caller goes on with its next round either way. Every round ends with
``keras.backend.clear_session()`` (the dtype policy is restored after it), so a
long-running worker does not accumulate models.
"""

from __future__ import annotations

import functools
import logging
import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from aiperf.flops import FlopCount, count_flops
from aiperf.graph import Graph, with_inserted_kernel
from aiperf.learning_curve import predict_final_accuracy
from aiperf.profiles import Profile
from aiperf.hyperparameters import Hyperparameters
from aiperf.precision import get_precision

log = logging.getLogger(__name__)


DONE, FAILED, STOPPED = "done", "failed", "stopped"


@dataclass(frozen=True)
class Progress:
    """One progress report; image counts and FLOPs are increments since the previous report."""

    images_trained: int
    images_validated: int
    worker_flops: int            # worker's own count: count_flops(graph with kernel).ops(trained, validated)
    epoch: int                   # 1-based epoch in progress (or just finished when epoch_end)
    val_accuracy: float | None   # validation accuracy of the last completed epoch
    epoch_end: bool              # this report closes `epoch` (after its validation)
    elapsed_s: float             # since the start of training


@dataclass(frozen=True)
class TrainResult:
    """Outcome of one round."""

    state: str                               # "done" | "failed" | "stopped"
    val_accuracies: tuple[float, ...]        # per completed epoch
    epochs: int                              # completed epochs (trained and validated)
    images_trained: int                      # totals, equal to the sums of the progress reports
    images_validated: int
    worker_flops: int                        # count_flops(graph with kernel).ops(totals)
    best_val_accuracy: float | None          # None when no epoch completed
    predicted_accuracy: float | None         # learning-curve prediction at the profile's final epoch
    early_stopped: bool = False
    reason: str = ""
    duration_s: float = 0.0
    replicas: int = 1
    global_batch_size: int = 0
    hyperparameters: Mapping[str, int] = field(default_factory=dict)


@functools.lru_cache(maxsize=1)
def local_strategy() -> Any:
    """MirroredStrategy over all local GPUs, or over ``/cpu:0`` when there is none.

    Created once per process and reused by every round.
    """
    import tensorflow as tf

    gpus = tf.config.list_logical_devices("GPU")
    devices = [d.name for d in gpus] if gpus else ["/cpu:0"]
    return tf.distribute.MirroredStrategy(devices=devices)


def train_model(graph: Graph, hyper: Hyperparameters | Mapping[str, int], dataset: Any, profile: Profile,
                round_index: int, *, on_progress: Callable[[Progress], None],
                should_stop: Callable[[], bool] = lambda: False, precision: str = "fp32",
                xla: bool = False, progress_interval_s: float = 30.0, seed: int = 0,
                strategy: Any = None, epochs: int | None = None) -> TrainResult:
    """Train `graph` for round `round_index` (1-based) of `profile`.

    `hyper` is a `Hyperparameters` (or its dict form; batch size per accelerator);
    `dataset` offers ``train(batch_size, seed=)``, ``validation(batch_size)``,
    ``train_steps(batch_size)``, ``num_classes`` and ``image_size``
    (`worker.data.Dataset`). `strategy` defaults to `local_strategy()`.
    `epochs` overrides the profile's epochs for this round (a run's cap on round
    length); the learning rate decays to 0 over the epochs actually planned.
    """
    plan = _plan_round(graph, hyper, dataset, profile, round_index, precision=precision, epochs=epochs,
                       strategy=strategy)
    tracker = _Tracker(plan.flop_count, on_progress, should_stop, profile.patience(round_index),
                       progress_interval_s)
    if should_stop():  # nothing to do: skip building and tracing the model
        return _result(plan, tracker, profile, STOPPED, "stop requested", duration_s=0.0)
    start = time.monotonic()
    state, reason = _fit(plan, dataset, profile, tracker, round_index, xla=xla, seed=seed)
    return _result(plan, tracker, profile, state, reason, duration_s=time.monotonic() - start)


@dataclass(frozen=True)
class _RoundPlan:
    """A round's checked settings, worked out before any model is built."""

    graph: Graph                 # with the kernel size inserted
    flop_count: FlopCount
    batch_size: int              # per accelerator
    precision: str
    epochs: int
    strategy: Any
    replicas: int
    global_batch: int
    steps_per_epoch: int
    hyperparameters: Hyperparameters


def _plan_round(graph: Graph, hyper: Hyperparameters | Mapping[str, int], dataset: Any, profile: Profile, round_index: int, *,
                precision: str, epochs: int | None, strategy: Any) -> _RoundPlan:
    """Check the round's settings against the dataset; ValueError names the first bad one."""
    get_precision(precision)  # ValueError naming the known ones
    if not isinstance(hyper, Hyperparameters):
        hyper = Hyperparameters.from_dict(hyper)  # HyperparameterError is a ValueError
    batch_size = hyper.batch_size
    graph = with_inserted_kernel(graph, hyper.kernel_size)
    if tuple(graph.input_shape) != (dataset.image_size, dataset.image_size, graph.input_shape[2]) \
            or graph.num_classes != dataset.num_classes:
        raise ValueError(f"graph input {graph.input_shape}/{graph.num_classes} classes does not match the "
                         f"dataset's {dataset.image_size}x{dataset.image_size}/{dataset.num_classes} classes")
    flop_count = count_flops(graph)
    epochs = int(epochs) if epochs is not None else profile.epochs_for_round(round_index)
    if epochs < 1:
        raise ValueError(f"epochs must be >= 1, got {epochs}")
    strategy = strategy or local_strategy()
    replicas = int(strategy.num_replicas_in_sync)
    global_batch = batch_size * replicas
    return _RoundPlan(graph=graph, flop_count=flop_count, batch_size=batch_size, precision=precision,
                      epochs=epochs, strategy=strategy, replicas=replicas, global_batch=global_batch,
                      steps_per_epoch=_train_steps(dataset, global_batch),
                      hyperparameters=hyper)


def _fit(plan: _RoundPlan, dataset: Any, profile: Profile, tracker: _Tracker, round_index: int, *,
         xla: bool, seed: int) -> tuple[str, str]:
    """Build and train the model; returns the round's state and reason.

    Out of memory is a failed round, any other error propagates. The Keras
    session is cleared and the dtype policy restored either way.
    """
    import keras
    import tensorflow as tf

    previous_policy = keras.config.dtype_policy()
    try:
        model = _compiled_model(plan, profile, xla=xla, seed=seed)
        model.fit(dataset.train(plan.global_batch, seed=seed),
                  validation_data=dataset.validation(plan.global_batch),
                  epochs=plan.epochs, callbacks=[tracker.callback()], verbose=0,
                  shuffle=False)  # the dataset shuffles itself
        return tracker.outcome()
    except Exception as exc:  # noqa: BLE001 - only out-of-memory is handled, the rest re-raised
        if not _is_out_of_memory(exc, tf):
            raise
        reason = (f"out of memory at batch size {plan.batch_size} per accelerator "
                  f"(global {plan.global_batch}, {plan.precision}): {_first_line(exc)}")
        log.warning("round %d: %s", round_index, reason)
        return FAILED, reason
    finally:
        tracker.flush(epoch_end=False)
        keras.backend.clear_session(free_memory=True)
        keras.config.set_dtype_policy(previous_policy)  # clear_session resets it


def _compiled_model(plan: _RoundPlan, profile: Profile, *, xla: bool, seed: int) -> Any:
    """The Keras model of `plan.graph`, built under the round's precision and compiled for SGD."""
    import keras

    from aiperf.keras_builder import build_model

    previous_policy = keras.config.dtype_policy()
    try:
        keras.config.set_dtype_policy(get_precision(plan.precision).keras_policy)
        with plan.strategy.scope():
            model = build_model(plan.graph, seed=seed)
            if profile.bn_momentum is not None:
                for layer in model.layers:
                    if isinstance(layer, keras.layers.BatchNormalization):
                        layer.momentum = profile.bn_momentum
            schedule = keras.optimizers.schedules.PolynomialDecay(
                profile.learning_rate, decay_steps=max(1, plan.epochs * plan.steps_per_epoch),
                end_learning_rate=0.0, power=1.0)
            model.compile(
                optimizer=keras.optimizers.SGD(schedule, momentum=profile.momentum),
                loss="categorical_crossentropy",
                metrics=[keras.metrics.CategoricalAccuracy(name="accuracy"),
                         _image_count_metric()(name="images")],
                jit_compile=bool(xla))
    finally:
        keras.config.set_dtype_policy(previous_policy)
    return model


def _result(plan: _RoundPlan, tracker: _Tracker, profile: Profile, state: str, reason: str, *,
            duration_s: float) -> TrainResult:
    accs = tuple(tracker.val_accuracies)
    best = max(accs) if accs else None
    predicted = None
    if accs:
        predicted = best if tracker.early_stopped else predict_final_accuracy(accs, profile.final_epochs)
    trained, validated = tracker.trained.total, tracker.validated.total
    return TrainResult(
        state=state, val_accuracies=accs, epochs=len(accs),
        images_trained=trained, images_validated=validated,
        worker_flops=plan.flop_count.ops(trained, validated),
        best_val_accuracy=best, predicted_accuracy=predicted, early_stopped=tracker.early_stopped,
        reason=reason, duration_s=duration_s, replicas=plan.replicas,
        global_batch_size=plan.global_batch, hyperparameters=plan.hyperparameters.to_dict())


# ---------------------------------------------------------------------------
class _Tracker:
    """State shared by the Keras callback: image counts, reports, stopping."""

    def __init__(self, flop_count: FlopCount, on_progress: Callable[[Progress], None],
                 should_stop: Callable[[], bool], patience: int, interval_s: float) -> None:
        self.flop_count = flop_count
        self.on_progress = on_progress
        self.should_stop = should_stop
        self.patience = patience
        self.interval_s = interval_s
        self.start = time.monotonic()
        self.last_report = self.start
        self.epoch = 0
        self.val_accuracies: list[float] = []
        self.best = -math.inf
        self.since_best = 0
        self.early_stopped = False
        self.stopped = False
        self.nan_epoch = 0
        self.trained = _ImageCount()
        self.validated = _ImageCount()

    @property
    def epochs_run(self) -> int:
        return len(self.val_accuracies)

    def outcome(self) -> tuple[str, str]:
        """State and reason of a round whose training ran to its end or was cut."""
        if self.stopped:
            return STOPPED, "stop requested"
        if self.nan_epoch:
            return FAILED, f"loss became NaN in epoch {self.nan_epoch}"
        if self.early_stopped:
            return DONE, f"early stop after {self.epochs_run} epochs (patience {self.patience})"
        return DONE, ""

    def callback(self) -> Any:
        import keras

        tracker = self

        class ProgressCallback(keras.callbacks.Callback):
            def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
                tracker.epoch = epoch + 1
                tracker.trained.restart()

            def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
                tracker.trained.update(logs)
                if tracker._check_stop():
                    self.model.stop_training = True
                if logs and math.isnan(float(logs.get("loss", 0.0))):
                    tracker.nan_epoch = tracker.epoch
                    self.model.stop_training = True
                tracker._maybe_report()

            def on_test_begin(self, logs: Any = None) -> None:
                tracker.validated.restart()

            def on_test_batch_end(self, batch: int, logs: Any = None) -> None:
                tracker.validated.update(logs)
                if tracker._check_stop():
                    self.model.stop_evaluating = True
                tracker._maybe_report()

            def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
                if tracker.stopped or tracker.nan_epoch:
                    return  # a partial epoch: nothing recorded, the final flush reports its images
                acc = float((logs or {}).get("val_accuracy", float("nan")))
                tracker._end_epoch(acc)
                if tracker.early_stopped:
                    self.model.stop_training = True

        return ProgressCallback()

    def _check_stop(self) -> bool:
        if not self.stopped and self.should_stop():
            log.info("stop requested in epoch %d", self.epoch)
            self.stopped = True
        return self.stopped

    def _end_epoch(self, acc: float) -> None:
        if math.isnan(acc):
            acc = 0.0
        self.val_accuracies.append(acc)
        if acc > self.best:
            self.best, self.since_best = acc, 0
        else:
            self.since_best += 1
            if self.since_best >= self.patience:
                self.early_stopped = True
                log.info("early stop in epoch %d: no better val accuracy for %d epochs",
                         self.epoch, self.patience)
        self.flush(epoch_end=True)

    def _maybe_report(self) -> None:
        if time.monotonic() - self.last_report >= self.interval_s:
            self.flush(epoch_end=False)

    def flush(self, epoch_end: bool) -> None:
        if not epoch_end and not (self.trained.pending or self.validated.pending):
            return
        now = time.monotonic()
        trained, validated = self.trained.take_pending(), self.validated.take_pending()
        report = Progress(
            images_trained=trained, images_validated=validated,
            worker_flops=self.flop_count.ops(trained, validated),
            epoch=max(self.epoch, 1), val_accuracy=self.val_accuracies[-1] if self.val_accuracies else None,
            epoch_end=epoch_end, elapsed_s=now - self.start)
        self.last_report = now
        self.on_progress(report)


class _ImageCount:
    """Images of one split (training or validation) counted from the image-count metric."""

    def __init__(self) -> None:
        self.total = 0    # over the round
        self.pending = 0  # since the last progress report
        self._seen = 0    # the metric's value, which restarts every epoch (training) or evaluation

    def restart(self) -> None:
        self._seen = 0

    def update(self, logs: Any) -> None:
        seen = int(round(float((logs or {}).get("images", self._seen))))
        self.pending += seen - self._seen
        self.total += seen - self._seen
        self._seen = seen

    def take_pending(self) -> int:
        pending, self.pending = self.pending, 0
        return pending


@functools.lru_cache(maxsize=1)
def _image_count_metric() -> type:
    """A Keras metric counting the images (batch rows) it has seen, summed over replicas."""
    import keras

    class ImageCount(keras.metrics.Metric):
        def __init__(self, name: str = "images", **kwargs: Any) -> None:
            super().__init__(name=name, dtype="float32", **kwargs)
            # Exact in float32 up to 2^24 = 16.7M images per epoch (ImageNet: 1.28M).
            self.count = self.add_variable(shape=(), initializer="zeros", name="count")

        def update_state(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> None:
            self.count.assign(self.count + keras.ops.cast(keras.ops.shape(y_true)[0], "float32"))

        def result(self) -> Any:
            return self.count

        def reset_state(self) -> None:
            self.count.assign(0.0)

    return ImageCount


def _train_steps(dataset: Any, global_batch: int) -> int:
    if hasattr(dataset, "train_steps"):
        return int(dataset.train_steps(global_batch))
    return math.ceil(int(dataset.train_size) / global_batch)


def _is_out_of_memory(exc: BaseException, tf: Any) -> bool:
    if isinstance(exc, tf.errors.ResourceExhaustedError):
        return True
    text = str(exc)
    # XLA and some allocators report OOM through other error types.
    return isinstance(exc, (tf.errors.InternalError, tf.errors.UnknownError)) and (
        "RESOURCE_EXHAUSTED" in text or "out of memory" in text.lower())


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:300]
