"""Training of one round: a graph, its hyperparameters, a dataset -> a `TrainResult`.

Keras 3 on the process's backend (TensorFlow or JAX: `worker.backend`, which
passes to the backend's round module), following SPEC section 3:

- Data parallelism: synchronous all-reduce over all local GPUs (TensorFlow's
  MirroredStrategy, a JAX device mesh); without a GPU the same code runs on the
  CPU, so one path is used and tested everywhere. The hyperparameter ``batch_size`` is per accelerator: the global batch is
  ``batch_size × replicas``.
- SGD with momentum (profile, 0.9), learning rate from the profile (0.1) on the
  profile's schedule (`lr_decay`), categorical cross-entropy with the profile's label
  smoothing, weight decay on the conv and dense kernels (`worker.rounds`).
- Precision: a run's precision name (``fp32``, ``mixed_fp16``, ``mixed_bf16``, ...;
  `aiperf.precision`), which names the Keras dtype policy. The policy is set while
  the model is built and restored afterwards; Keras wraps the optimizer in a
  loss-scale optimizer for ``mixed_float16``.
- Optional XLA (``jit_compile``) on TensorFlow; JAX always compiles with XLA.

A round has two halves. `prepare_round` checks the settings and builds, traces
and warms up the model and its steps (the backend's `compile_round`); it touches no state
outside the round, so it may run on another thread while the previous round
trains (`worker.lookahead`). `run_round` trains the prepared round: a loop of
single-step calls (one iterator for the whole round, no Keras callbacks), so
the time between steps is a few Python lines. `train_model` does both.

Progress: the images of every step are counted as the step reports them (its
batch dimension, summed over replicas; a partial last batch counts what it
holds), and ``on_progress`` is called at least every ``progress_interval_s``
seconds, at each epoch end, and once more at the end if anything is left, with
the images trained and validated *since the previous report* and the worker's
own FLOP figure for them. Summing the reports gives exactly the images
processed. With ``phase_reports`` there are also reports after the round's
first training step and at the end of every epoch's training steps, so the
receiver can tell the time spent in training steps from the rest: an interval
between two reports of the same round is training time when the later report
carries trained images and no validated ones (benchmarks/idle_bench.py).
``on_progress`` and ``should_stop`` run on the training thread between steps:
keep them quick (queue, don't block on I/O). A step's figures are read after
the next step has been launched, so an accelerator is not left waiting for the
host between steps.

Stopping: early stopping with the profile's patience min(6+2r, 20) on the
profile's `early_stop_monitor` (state ``done``): validation loss (the mean
label-smoothed cross-entropy of the validation images) that has not fallen by
more than `early_stop_min_delta` below its best for `patience` epochs, as Keras's
EarlyStopping the original used; or validation accuracy that has not risen. The
weights kept are the best validation accuracy's, whichever is watched.
``should_stop()`` turning true stops the round within a step (training or
validation; state ``stopped``; a partly
validated epoch is not recorded as an epoch). Out of memory for the batch size
(while preparing or training) gives state ``failed`` with the reason; a loss
that becomes NaN too. The caller goes on with its next round either way.
Every round drops its model and functions at its end; Keras's session is not
cleared (that would reset the state of a round being prepared on another
thread): the objects go with the garbage collector (`worker.lookahead` runs it
off the training thread).
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping

from aiperf.flops import FlopCount, count_flops
from aiperf.graph import Graph, with_inserted_kernel
from aiperf.hyperparameters import Hyperparameters
from aiperf.learning_curve import predict_final_accuracy
from aiperf.precision import get_precision
from aiperf.profiles import Profile
from aiperf.states import RoundOutcome
from aiperf.weight_digest import weights_digest
from worker.backend import compile_round, is_out_of_memory, local_distribution
from worker.rounds import OOM_REASON_PREFIX, CompiledRound, DataEnded, StepSettings

log = logging.getLogger(__name__)


DONE, FAILED, STOPPED = RoundOutcome.DONE, RoundOutcome.FAILED, RoundOutcome.STOPPED


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
    weights_sha256: str = ""     # epoch_end: aiperf.weight_digest of the weights then (the master stamps it)


@dataclass(frozen=True)
class TrainResult:
    """Outcome of one round."""

    state: RoundOutcome
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
    hyperparameters: Hyperparameters | None = None  # the round's; None only in a result built by hand
    # seconds: preparation phases (build, data, trace_train, trace_eval, warm), then "train"
    # (in training steps) and "validation"; duration_s runs from the first step to the end
    timings: Mapping[str, float] = field(default_factory=dict)
    val_losses: tuple[float, ...] = ()       # per completed epoch: mean validation loss (recipe_loss)
    batch_size_that_fits: int | None = None  # out of memory: per accelerator, a memory plan's estimate


def train_model(graph: Graph, hyper: Hyperparameters, dataset: Any, profile: Profile,
                round_index: int, *, on_progress: Callable[[Progress], None],
                should_stop: Callable[[], bool] = lambda: False, precision: str = "fp32",
                xla: bool = False, progress_interval_s: float = 30.0, seed: int = 0,
                strategy: Any = None, epochs: int | None = None, phase_reports: bool = False,
                initial_weights: Mapping[str, Any] | None = None,
                on_weights: Callable[[dict[str, Any]], None] | None = None) -> TrainResult:
    """Train `graph` for round `round_index` (1-based) of `profile`: `prepare_round`, then `run_round`.

    `initial_weights` ({layer id: arrays}, e.g. from `aiperf.weight_transfer`) replace the
    He initialisation; `on_weights` receives the weights of the round's best validated epoch (those
    its best accuracy was measured on) when the round ends with at least one validated epoch and
    not failed (the worker stores them as the model's checkpoint, which `aiperf audit` re-evaluates).

    `hyper` is a `Hyperparameters` (or its dict form; batch size per accelerator);
    `dataset` offers ``train(batch_size, seed=)``, ``validation(batch_size)``,
    ``train_steps(batch_size)``, ``num_classes``, ``image_size`` and the split sizes
    (`worker.data.Dataset`). `strategy` defaults to the backend's `local_distribution()`.
    `epochs` overrides the profile's epochs for this round (a run's cap on round
    length); the learning rate decays to 0 over the epochs actually planned.
    ``should_stop`` is asked once before anything is built, then after every step.
    """
    plan = _plan_round(graph, hyper, dataset, profile, round_index, precision=precision, epochs=epochs,
                       strategy=strategy)
    if should_stop():  # nothing to do: skip building and tracing the model
        tracker = _Tracker(plan.flop_count, on_progress, should_stop, _stopping(profile, round_index),
                           progress_interval_s)
        return _result(plan, tracker, profile, STOPPED, "stop requested", duration_s=0.0)
    prepared = _prepare(plan, dataset, profile, round_index, xla=xla, seed=seed, initial_weights=initial_weights)
    return _run(prepared, on_progress, should_stop, progress_interval_s=progress_interval_s,
                phase_reports=phase_reports, on_weights=on_weights)


@dataclass
class PreparedRound:
    """A round ready to train (`prepare_round`); `run_round` trains it, once."""

    plan: "_RoundPlan"
    dataset: Any
    profile: Profile
    round_index: int
    compiled: CompiledRound | None  # None when the preparation ran out of memory
    failure: str = ""               # why, then
    timings: dict[str, float] = field(default_factory=dict)
    inherited: set[str] = field(default_factory=set)  # layer ids whose weights were inherited
    batch_size_that_fits: int | None = None  # out of memory: a memory plan's estimate, if any

    def start_from_seed(self, init_seed: int) -> None:
        """Every layer not inherited starts from the master's seed (`worker.weight_seed`)."""
        from worker.weight_seed import start_from_seed

        start_from_seed(self.compiled, self.plan.graph, init_seed, self.inherited)

    @property
    def graph(self) -> Graph:
        return self.plan.graph

    def release(self) -> None:
        """Drop the model and its functions (also when the round is never run)."""
        if self.compiled is not None:
            self.compiled.release()
            self.compiled = None


def prepare_round(graph: Graph, hyper: Hyperparameters, dataset: Any, profile: Profile,
                  round_index: int, *, precision: str = "fp32", xla: bool = False, seed: int = 0,
                  strategy: Any = None, epochs: int | None = None,
                  initial_weights: Mapping[str, Any] | None = None) -> PreparedRound:
    """Check the round's settings (ValueError names the first bad one), then build, trace and
    warm up its model and steps. Out of memory is not raised: the round is prepared as failed."""
    plan = _plan_round(graph, hyper, dataset, profile, round_index, precision=precision, epochs=epochs,
                       strategy=strategy)
    return _prepare(plan, dataset, profile, round_index, xla=xla, seed=seed, initial_weights=initial_weights)


def run_round(prepared: PreparedRound, *, on_progress: Callable[[Progress], None],
              should_stop: Callable[[], bool] = lambda: False, progress_interval_s: float = 30.0,
              phase_reports: bool = False, release: bool = True,
              on_weights: Callable[[dict[str, Any]], None] | None = None) -> TrainResult:
    """Train a prepared round (see `train_model` for the arguments); its model is released at the end
    unless `release` is false: then the caller releases it (`worker.lookahead` does so on its own
    thread: freeing a model's functions while another thread traces waits on TensorFlow's locks).

    ``should_stop`` is asked before the first step (the round may have waited), then after every step.
    """
    if should_stop():
        if release:
            prepared.release()
        tracker = _Tracker(prepared.plan.flop_count, on_progress, should_stop,
                           _stopping(prepared.profile, prepared.round_index), progress_interval_s)
        return _result(prepared.plan, tracker, prepared.profile, STOPPED, "stop requested", duration_s=0.0,
                       timings=prepared.timings)
    return _run(prepared, on_progress, should_stop, progress_interval_s=progress_interval_s,
                phase_reports=phase_reports, release=release, on_weights=on_weights)


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
    validation_steps: int
    hyperparameters: Hyperparameters


def _plan_round(graph: Graph, hyper: Hyperparameters, dataset: Any, profile: Profile,
                round_index: int, *, precision: str, epochs: int | None, strategy: Any) -> _RoundPlan:
    """Check the round's settings against the dataset; ValueError names the first bad one."""
    get_precision(precision)  # ValueError naming the known ones
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
    strategy = strategy or local_distribution()
    replicas = int(strategy.num_replicas_in_sync)
    global_batch = batch_size * replicas
    return _RoundPlan(graph=graph, flop_count=flop_count, batch_size=batch_size, precision=precision,
                      epochs=epochs, strategy=strategy, replicas=replicas, global_batch=global_batch,
                      steps_per_epoch=_train_steps(dataset, global_batch),
                      validation_steps=math.ceil(int(dataset.validation_size) / global_batch),
                      hyperparameters=hyper)


def _prepare(plan: _RoundPlan, dataset: Any, profile: Profile, round_index: int, *, xla: bool,
             seed: int, initial_weights: Mapping[str, Any] | None = None) -> PreparedRound:
    """Compile the round's steps; out of memory gives a round prepared as failed, other errors propagate."""
    settings = StepSettings(graph=plan.graph, precision=plan.precision, strategy=plan.strategy,
                            global_batch=plan.global_batch, epochs=plan.epochs,
                            steps_per_epoch=plan.steps_per_epoch, xla=xla, seed=seed,
                            initial_weights=initial_weights)
    start = time.perf_counter()
    try:
        compiled = compile_round(settings, dataset, profile)
    except Exception as exc:  # noqa: BLE001 - only out-of-memory is handled, the rest re-raised
        if not is_out_of_memory(exc):
            raise
        failure = _oom_reason(plan, exc)
        log.warning("round %d: %s (while preparing)", round_index, failure)
        return PreparedRound(plan, dataset, profile, round_index, None, failure,
                             {"prepare": time.perf_counter() - start},
                             batch_size_that_fits=getattr(exc, "batch_size_that_fits", None))
    timings = dict(compiled.timings, prepare=time.perf_counter() - start)
    return PreparedRound(plan, dataset, profile, round_index, compiled, timings=timings,
                         inherited=set(initial_weights or ()))


def _run(prepared: PreparedRound, on_progress: Callable[[Progress], None], should_stop: Callable[[], bool], *,
         progress_interval_s: float, phase_reports: bool, release: bool = True,
         on_weights: Callable[[dict[str, Any]], None] | None = None) -> TrainResult:
    """Train the prepared round to its end, its early stop or a stop request."""
    plan, profile = prepared.plan, prepared.profile
    tracker = _Tracker(plan.flop_count, on_progress, should_stop, _stopping(profile, prepared.round_index),
                       progress_interval_s)
    start = time.monotonic()
    fits = prepared.batch_size_that_fits
    try:
        if prepared.compiled is None:
            state, reason = FAILED, prepared.failure
        else:
            state, reason = _epochs(prepared.compiled, plan, tracker, phase_reports,
                                    keep_best=on_weights is not None)
            if on_weights is not None and state != FAILED and tracker.best_weights is not None:
                # the best epoch's weights: the ones its best_accuracy, the claim an audit checks, was measured on
                on_weights(tracker.best_weights)
    except Exception as exc:  # noqa: BLE001 - only out-of-memory is handled, the rest re-raised
        if not is_out_of_memory(exc):
            raise
        state, reason = FAILED, _oom_reason(plan, exc)
        fits = getattr(exc, "batch_size_that_fits", None)
        log.warning("round %d: %s", prepared.round_index, reason)
    finally:
        tracker.flush(epoch_end=False)
        if release:
            prepared.release()
    timings = dict(prepared.timings, train=tracker.train_s, validation=tracker.validation_s)
    result = _result(plan, tracker, profile, state, reason, duration_s=time.monotonic() - start, timings=timings)
    return replace(result, batch_size_that_fits=fits) if fits is not None else result


def _epochs(compiled: CompiledRound, plan: _RoundPlan, tracker: "_Tracker", phase_reports: bool,
            keep_best: bool = False) -> tuple[RoundOutcome, str]:
    """The round's epochs: training steps, then a validation pass; returns the state and reason.
    keep_best: after each epoch that validated best so far, its weights are kept in `tracker.best_weights`."""
    tracker.start = tracker.last_report = time.monotonic()
    for epoch in range(1, plan.epochs + 1):
        tracker.epoch = epoch
        _train_epoch(compiled, plan.steps_per_epoch, tracker, phase_reports)
        if tracker.stopped or tracker.nan_epoch:
            break  # a partial epoch: nothing recorded, the final flush reports its images
        if phase_reports:
            tracker.flush(epoch_end=False)  # the end of the epoch's training steps
        validated = _validate(compiled, plan.validation_steps, tracker)
        if validated is None:
            break
        weights = compiled.weights()
        tracker.weights_sha256 = weights_digest(weights)  # goes with the epoch's end report
        tracker._end_epoch(*validated)
        if keep_best and tracker.best_accuracy_epoch:  # the weights best_val_accuracy was measured on
            tracker.best_weights = weights
        if tracker.early_stopped:
            break
    return tracker.outcome()


def _train_epoch(compiled: CompiledRound, steps: int, tracker: "_Tracker", phase_reports: bool) -> None:
    """Up to `steps` training steps; each step's figures are taken after the next one is launched."""
    begin = time.monotonic()
    pending = None
    try:
        for _ in range(steps):
            try:
                launched = compiled.train_step(compiled.train_iterator)
            except DataEnded:
                log.warning("the training data ended before the %d steps of epoch %d", steps, tracker.epoch)
                break
            if pending is not None:
                tracker.add_training(*pending)
            pending = launched
            if phase_reports and tracker.trained.total == 0:
                tracker.add_training(*pending)  # the round's first step, reported at once
                pending = None
                tracker.flush(epoch_end=False)
            if tracker.nan_epoch or tracker._check_stop():
                break
            tracker._maybe_report()
    finally:
        if pending is not None:
            tracker.add_training(*pending)
        tracker.train_s += time.monotonic() - begin


def _validate(compiled: CompiledRound, steps: int, tracker: "_Tracker") -> tuple[float, float] | None:
    """One validation pass: its top-1 accuracy and mean loss, or None when a stop request cut it."""
    begin = time.monotonic()
    totals = [0, 0, 0.0]  # correct predictions, images, sum of losses

    def add(figures: tuple[Any, Any, Any]) -> None:
        correct, images = tracker.add_validation(*figures[:2])
        totals[0] += correct
        totals[1] += images
        totals[2] += float(figures[2])

    eval_step = compiled.eval_step
    if eval_step is None:
        raise ValueError("the round was compiled without evaluation: it cannot validate")
    pending = None
    try:
        for _ in range(steps):
            launched = eval_step(compiled.validation_iterator)
            if pending is not None:
                add(pending)
            pending = launched
            if tracker._check_stop():
                break
            tracker._maybe_report()
    finally:
        if pending is not None:
            add(pending)
        tracker.validation_s += time.monotonic() - begin
    if tracker.stopped:
        return None
    if not totals[1]:
        return 0.0, math.inf
    return totals[0] / totals[1], totals[2] / totals[1]


def _oom_reason(plan: _RoundPlan, exc: BaseException) -> str:
    return (f"{OOM_REASON_PREFIX} {plan.batch_size} per accelerator "
            f"(global {plan.global_batch}, {plan.precision}): {_first_line(exc)}")


def _result(plan: _RoundPlan, tracker: "_Tracker", profile: Profile, state: RoundOutcome, reason: str, *,
            duration_s: float, timings: Mapping[str, float] | None = None) -> TrainResult:
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
        global_batch_size=plan.global_batch, hyperparameters=plan.hyperparameters,
        timings=dict(timings or {}), val_losses=tuple(tracker.val_losses))


# ---------------------------------------------------------------------------
@dataclass(frozen=True)
class EarlyStopping:
    """When a round stops early: `patience` epochs in a row whose `monitor` did not improve on its
    best by more than `min_delta` (val_loss must fall, val_accuracy rise), as Keras's EarlyStopping."""

    patience: int
    monitor: str = "val_accuracy"
    min_delta: float = 0.0

    def sign(self) -> float:
        """+1 where larger is better, −1 where smaller is."""
        return -1.0 if self.monitor == "val_loss" else 1.0


def _stopping(profile: Profile, round_index: int) -> EarlyStopping:
    return EarlyStopping(profile.patience(round_index), profile.early_stop_monitor, profile.early_stop_min_delta)


class _Tracker:
    """A round's image counts, reports, stop requests and early stopping."""

    def __init__(self, flop_count: FlopCount, on_progress: Callable[[Progress], None],
                 should_stop: Callable[[], bool], stopping: EarlyStopping | int, interval_s: float) -> None:
        self.flop_count = flop_count
        self.on_progress = on_progress
        self.should_stop = should_stop
        self.stopping = stopping if isinstance(stopping, EarlyStopping) else EarlyStopping(stopping)
        self.patience = self.stopping.patience
        self.interval_s = interval_s
        self.start = time.monotonic()
        self.last_report = self.start
        self.epoch = 0
        self.val_accuracies: list[float] = []
        self.val_losses: list[float] = []
        self.best = -math.inf     # of the monitored figure, times its sign (larger is better)
        self.since_best = 0
        self.best_accuracy = -math.inf  # whose epoch's weights are kept (keep_best)
        self.best_accuracy_epoch = False
        self.early_stopped = False
        self.stopped = False
        self.nan_epoch = 0
        self.trained = _ImageCount()
        self.validated = _ImageCount()
        self.train_s = 0.0       # in training steps
        self.validation_s = 0.0  # in validation steps
        self.best_weights: dict[str, Any] | None = None  # {layer id: arrays} of the best epoch (keep_best)
        self.weights_sha256 = ""  # the digest of the weights at the end of the last validated epoch

    @property
    def epochs_run(self) -> int:
        return len(self.val_accuracies)

    def outcome(self) -> tuple[RoundOutcome, str]:
        """State and reason of a round whose training ran to its end or was cut."""
        if self.stopped:
            return STOPPED, "stop requested"
        if self.nan_epoch:
            return FAILED, f"loss became NaN in epoch {self.nan_epoch}"
        if self.early_stopped:
            return DONE, f"early stop after {self.epochs_run} epochs (patience {self.patience})"
        return DONE, ""

    def add_training(self, loss: Any, images: Any) -> None:
        """A training step's figures (tensors); a NaN loss ends the round. The loss is read first:
        it waits for the step (JAX returns before it ran), so a step that failed counts no image."""
        value = float(loss)
        self.trained.add(int(images))
        if math.isnan(value) and not self.nan_epoch:
            self.nan_epoch = max(self.epoch, 1)

    def add_validation(self, correct: Any, images: Any) -> tuple[int, int]:
        """A validation step's figures (tensors), as ints: correct predictions and images (the
        correct count first: it waits for the step)."""
        hits = int(correct)
        n = int(images)
        self.validated.add(n)
        return hits, n

    def _check_stop(self) -> bool:
        if not self.stopped and self.should_stop():
            log.info("stop requested in epoch %d", self.epoch)
            self.stopped = True
        return self.stopped

    def _end_epoch(self, acc: float, loss: float = math.nan) -> None:
        if math.isnan(acc):
            acc = 0.0
        if math.isnan(loss):
            loss = math.inf  # a NaN loss never improves
        self.val_accuracies.append(acc)
        self.val_losses.append(loss)
        self.best_accuracy_epoch = acc > self.best_accuracy
        self.best_accuracy = max(self.best_accuracy, acc)
        figure = self.stopping.sign() * (loss if self.stopping.monitor == "val_loss" else acc)
        if figure - self.stopping.min_delta > self.best:
            self.best, self.since_best = figure, 0
        else:
            self.since_best += 1
            if self.since_best >= self.patience:
                self.early_stopped = True
                log.info("early stop in epoch %d: no better %s for %d epochs",
                         self.epoch, self.stopping.monitor, self.patience)
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
            epoch_end=epoch_end, elapsed_s=now - self.start, weights_sha256=self.weights_sha256 if epoch_end else "")
        self.last_report = now
        self.on_progress(report)


class _ImageCount:
    """Images of one split (training or validation)."""

    def __init__(self) -> None:
        self.total = 0    # over the round
        self.pending = 0  # since the last progress report

    def add(self, n: int) -> None:
        self.total += n
        self.pending += n

    def take_pending(self) -> int:
        pending, self.pending = self.pending, 0
        return pending


def _train_steps(dataset: Any, global_batch: int) -> int:
    if hasattr(dataset, "train_steps"):
        return int(dataset.train_steps(global_batch))
    return math.ceil(int(dataset.train_size) / global_batch)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:300]
