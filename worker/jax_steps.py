"""The JAX backend of the round layer (`worker.backend` picks it or `worker.steps`).

The same contract as the TensorFlow round (`worker.rounds`), on Keras 3's JAX
backend. `compile_round`:

- builds the Keras model under the round's dtype policy and compiles it for
  SGD with momentum and the same learning-rate schedule (`worker.rounds.compiled_model`;
  Keras wraps the optimizer in a loss-scale optimizer for ``mixed_float16``);
- takes the model's state out of Keras as arrays (trainable, non-trainable and
  optimizer variables), replicated on every local device;
- compiles, ahead of time and so off the critical path (the look-ahead prepares
  the next round on its own thread), a training step and an evaluation step
  that are pure functions of that state (`stateless_call`, the optimizer's
  `stateless_apply`, which also unscales the gradients and adjusts the loss
  scale): ``jax.jit(...).lower(...).compile()``. JAX always compiles with XLA.

Data parallelism: a one-axis device mesh over every local device; each global
batch is split along it (one slice per device), the state is replicated, and
XLA inserts the all-reduce of the gradients. Batch-norm statistics are over the
global batch (the same arithmetic as one device; TensorFlow's MirroredStrategy
normalises per replica).

The partial last batch. Training: one more step compiled for the epoch's
remainder (its size is known from the split's size), on a thread of its own
once the full batch's step is compiled: the round is ready without waiting for
it, and the remainder's step waits only if the epoch's last batch comes before
its compilation ends (XLA compiles a ResNet step in tens of seconds). Padding
it to the global batch would not do: in training mode batch norm normalises
every image with statistics over the whole batch, so padding images would
change the real images' outputs and the moving statistics. A remainder that
does not divide among the devices runs replicated (each device the whole
remainder: the same result, once an epoch). Evaluation runs in inference mode,
where images do not interact: the last batch is padded to the global batch and
masked, so one step serves every batch. A batch of a size not planned (a
dataset whose epochs vary) is compiled when it first comes, and logged.

Each step's device memory is known once it is compiled (XLA assigns every
buffer ahead of time): a step that needs more than a device holds fails the
round while it is prepared, with both figures (`worker.jax_memory`).

Batches are put on the devices two steps ahead (`jax.device_put` returns at
once), so the copy overlaps the step before.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import functools
import logging
import os
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np

from aiperf.profiles import Profile
from worker import jax_data, jax_memory
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

AXIS = "batch"
PREFETCH = 2  # batches on the devices ahead of the step that takes them


@dataclass(frozen=True)
class Devices:
    """The local devices a round runs on, as one mesh: the JAX counterpart of a MirroredStrategy."""

    devices: tuple[Any, ...]

    @functools.cached_property
    def mesh(self) -> Any:
        from jax.sharding import Mesh

        return Mesh(np.array(self.devices), (AXIS,))

    @property
    def num_replicas_in_sync(self) -> int:
        return len(self.devices)

    def scope(self) -> Any:
        """Where the model is built: anywhere (its state is put on the devices afterwards)."""
        return contextlib.nullcontext()

    def replicated(self) -> Any:
        from jax.sharding import NamedSharding, PartitionSpec

        return NamedSharding(self.mesh, PartitionSpec())

    def batch_sharding(self, images: int) -> Any:
        """A batch of `images` split across the devices, or replicated where it does not divide."""
        from jax.sharding import NamedSharding, PartitionSpec

        if images % len(self.devices):
            return self.replicated()
        return NamedSharding(self.mesh, PartitionSpec(AXIS))


@functools.lru_cache(maxsize=1)
def local_distribution() -> Devices:
    """Every local device of JAX's default platform (the GPUs; the CPU's devices without one)."""
    import jax

    return Devices(tuple(jax.local_devices()))


def one_device() -> tuple[str, Devices]:
    """The device an audit times on (the first of the default platform) and a mesh of it alone."""
    import jax

    device = jax.local_devices()[0]
    return f"/{device.platform.upper()}:{device.id}", Devices((device,))


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether `exc` is XLA running out of device memory (RESOURCE_EXHAUSTED), or a step whose
    buffers were found too large for the device when it was compiled (`worker.jax_memory`)."""
    import jax

    text = str(exc)
    return isinstance(exc, jax_memory.PlannedOutOfMemory) or isinstance(exc, jax.errors.JaxRuntimeError) and (
        "RESOURCE_EXHAUSTED" in text or "out of memory" in text.lower())


def host_scope() -> Any:
    """Where scratch models (checkpoints in and out) are built: the CPU, off the accelerator.
    Nothing to do where the CPU is the default device: naming it anyway compiles every
    initialiser again for the placement (48 s for the smoke profile's network on 2 cores)."""
    import jax

    if jax.default_backend() == "cpu":
        return contextlib.nullcontext()
    return jax.default_device(jax.devices("cpu")[0])


def set_determinism(on: bool) -> None:
    """XLA on the CPU is deterministic; on a GPU only with a flag read when JAX starts, so a
    deterministic run on a worker started without it is said, not fixed, here."""
    import jax

    flag = "--xla_gpu_deterministic_ops=true"
    if on and jax.default_backend() == "gpu" and flag not in os.environ.get("XLA_FLAGS", ""):
        log.warning("event=not_deterministic: start the worker with XLA_FLAGS=%s for a deterministic run", flag)


def count_correct(model: Any, batches: Iterable[tuple[Any, Any]]) -> tuple[int, int]:
    """(correct top-1 predictions, images) of `model` in inference mode over `batches`."""
    import jax
    import jax.numpy as jnp

    trainable = [v.value for v in model.trainable_variables]
    non_trainable = [v.value for v in model.non_trainable_variables]

    @jax.jit
    def step(x: Any, y: Any) -> Any:
        predicted, _ = model.stateless_call(trainable, non_trainable, x, training=False)
        return jnp.sum(jnp.argmax(predicted, -1) == jnp.argmax(y, -1))

    correct = images = 0
    for x, y in batches:
        correct, images = correct + int(step(x, y)), images + int(x.shape[0])
    return correct, images


def validation_batches(dataset: Any, batch_size: int) -> Iterable[tuple[Any, Any]]:
    """The dataset's validation split in numpy batches (`worker.jax_data`)."""
    return jax_data.validation_batches(dataset, batch_size)


def in_memory_batches(batch: tuple[Any, Any]) -> Any:
    """One (images, labels) batch repeated without end, as the dataset `compile_round` takes
    (an audit's timed steps)."""
    x, y = (np.asarray(a) for a in batch)

    class _Batches:
        def numpy_train(self, batch_size: int, seed: int = 0) -> Iterator[tuple[np.ndarray, np.ndarray]]:
            while True:
                yield x, y

    return _Batches()


class JaxRound(CompiledRound):
    """A compiled round whose state lives in arrays outside the Keras variables."""

    state: list[list[Any]]        # trainable, non-trainable, optimizer variables
    slots: dict[int, tuple[int, int]]  # id(Keras variable) -> (list, index) in `state`

    def weights(self) -> dict[str, list[Any]]:
        return {layer.name: [np.asarray(self._value(v)) for v in layer.weights]
                for layer in self.model.layers if layer.weights}

    def load_weights(self, weights: Mapping[str, Sequence[Any]]) -> None:
        import jax

        replicated = self.strategy.replicated()
        for layer_id, arrays in weights.items():
            variables = self.model.get_layer(layer_id).weights
            if len(arrays) != len(variables):
                raise ValueError(f"layer {layer_id}: {len(arrays)} arrays for {len(variables)} variables")
            for variable, array in zip(variables, arrays):
                array = np.asarray(array)
                if tuple(array.shape) != tuple(variable.shape):
                    raise ValueError(f"layer {layer_id}: shape {array.shape} for {variable.path} {variable.shape}")
                part, index = self.slots[id(variable)]
                self.state[part][index] = jax.device_put(array.astype(variable.dtype), replicated)

    def release(self) -> None:
        self.state = []
        super().release()

    def _value(self, variable: Any) -> Any:
        part, index = self.slots[id(variable)]
        return self.state[part][index]


def compile_round(settings: StepSettings, dataset: Any, profile: Profile, *, warm: bool = True,
                  evaluate: bool = True) -> JaxRound:
    """Build the round's model and compile its steps (see the module docstring); `warm` is
    TensorFlow's (nothing to warm here: the steps are compiled). `evaluate` False: no evaluation
    step or validation iterator (an audit's timed steps)."""
    timings: dict[str, float] = {}
    clock = Clock(timings)
    devices: Devices = settings.strategy
    model = compiled_model(settings, profile)
    state, slots = _initial_state(model, devices)
    clock.lap("build")
    batch = settings.global_batch
    train_iterator = _on_devices(_epochs(jax_data.train_batches(dataset, batch, seed=settings.seed), settings.epochs),
                                 devices, pad_to=None)
    validation_iterator = None
    if evaluate:
        validation_iterator = _on_devices(_epochs(jax_data.validation_batches(dataset, batch), settings.epochs),
                                          devices, pad_to=batch)
    clock.lap("data")
    steps = _TrainSteps(model, devices, state, profile)
    full, *remainder = _planned_sizes(dataset, batch)
    steps.compiled(full)
    for images in remainder:
        steps.compile_later(images)
    clock.lap("compile_train")
    # the steps read and replace the round's state, so they are bound to the round once it exists
    round_ = JaxRound(model=model, strategy=devices, train_step=None, eval_step=None,  # type: ignore[arg-type]
                      train_iterator=train_iterator, validation_iterator=validation_iterator, timings=timings)
    round_.state, round_.slots = state, slots
    round_.train_step = functools.partial(_train, round_, steps)
    if evaluate:
        round_.eval_step = functools.partial(_evaluate, round_, _eval_step(model, devices, state, batch, profile))
        clock.lap("compile_eval")
    return round_


def planned_step_bytes(settings: StepSettings, profile: Profile, sizes: Sequence[int]) -> list[int | None]:
    """The memory per device XLA plans for one training step of the round at each of `sizes` images,
    compiled as `compile_round` compiles it (`worker.jax_memory.planned_bytes`); nothing runs."""
    model = compiled_model(settings, profile)
    state, _ = _initial_state(model, settings.strategy)
    steps = _TrainSteps(model, settings.strategy, state, profile)
    return [jax_memory.planned_bytes(steps.unchecked(images)) for images in sizes]


def _initial_state(model: Any, devices: Devices) -> tuple[list[list[Any]], dict[int, tuple[int, int]]]:
    """The model's variables as arrays replicated on the devices, and where each variable is."""
    import jax

    parts = (model.trainable_variables, model.non_trainable_variables, model.optimizer.variables)
    slots = {id(v): (p, i) for p, variables in enumerate(parts[:2]) for i, v in enumerate(variables)}
    state = [[v.value for v in variables] for variables in parts]
    return jax.device_put(state, devices.replicated()), slots


def _planned_sizes(dataset: Any, global_batch: int) -> list[int]:
    """The batch sizes an epoch of the split has: the global batch, and its remainder if any."""
    sizes = [global_batch]
    train_size = getattr(dataset, "train_size", None)
    if isinstance(train_size, int) and train_size % global_batch:
        sizes.append(train_size % global_batch)
    return sizes


class _TrainSteps:
    """The training step compiled per batch size (see the module docstring)."""

    def __init__(self, model: Any, devices: Devices, state: list[list[Any]], profile: Profile) -> None:
        import jax

        self.devices = devices
        self.function = jax.jit(_train_function(model, profile), donate_argnums=_donated(devices))
        self.state_spec = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=a.sharding), state)
        self.input_shape = tuple(model.input_shape[1:])
        self.classes = int(model.output_shape[-1])
        self.by_size: dict[int, Future[Any]] = {}
        self._lock = threading.Lock()

    def compiled(self, images: int) -> Any:
        """The step for batches of `images` (compiled now unless it is or was being compiled)."""
        with self._lock:
            future = self.by_size.get(images)
            if future is None:
                future = self.by_size[images] = Future()
                future.set_running_or_notify_cancel()
                mine = True
            else:
                mine = False
        if mine:
            try:
                future.set_result(self._compile(images))
            except BaseException as exc:  # the caller sees it; a later call too
                future.set_exception(exc)
        return future.result()

    def compile_later(self, images: int) -> None:
        """Compile the step for `images` on a thread of its own (`compiled` waits for it)."""
        thread = threading.Thread(target=self._quietly, args=(images,), name="jax-compile", daemon=True)
        global _exit_hook
        with _compiling_lock:
            if not _exit_hook:
                _exit_hook = bool(atexit.register(_finish_compiles))
            _compiling.add(thread)
        thread.start()

    def _quietly(self, images: int) -> None:
        try:
            self.compiled(images)
        except BaseException:  # noqa: BLE001 - raised again to the step that needs it
            pass
        finally:
            with _compiling_lock:
                _compiling.discard(threading.current_thread())

    def _compile(self, images: int) -> Any:
        compiled = self.unchecked(images)
        jax_memory.check_fits(compiled, self.devices.devices, images, "training step")
        return compiled

    def unchecked(self, images: int) -> Any:
        """The step for batches of `images`, compiled whether or not it fits the devices."""
        import jax
        import jax.numpy as jnp

        sharding = self.devices.batch_sharding(images)
        x = jax.ShapeDtypeStruct((images, *self.input_shape), jnp.float32, sharding=sharding)
        y = jax.ShapeDtypeStruct((images, self.classes), jnp.float32, sharding=sharding)
        return self.function.lower(self.state_spec, x, y).compile()


_compiling: set[threading.Thread] = set()  # compile_later's threads still running
_compiling_lock = threading.Lock()
_exit_hook = False
EXIT_WAIT_S = 120.0  # at most, at interpreter exit, for compilations under way


def _finish_compiles() -> None:
    """Let compilations under way end before the interpreter does: XLA aborts the process
    (std::terminate) when it exits under a compiling thread."""
    with _compiling_lock:
        threads = list(_compiling)
    deadline = time.monotonic() + EXIT_WAIT_S
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))


def _donated(devices: Devices) -> tuple[int, ...]:
    """The state's buffers are reused for the new state, where the platform can (not the CPU)."""
    return () if devices.devices[0].platform == "cpu" else (0,)


def _train_function(model: Any, profile: Profile) -> Callable[..., Any]:
    """(state, images, labels) -> (new state, loss): one SGD step, as Keras's own JAX train step
    (loss scaled and the gradients unscaled by a loss-scale optimizer), without its metrics, on the
    profile's loss (label smoothing) and weight penalty (`worker.rounds`); the loss is the objective."""
    import jax
    import jax.numpy as jnp
    import keras

    optimizer = model.optimizer
    per_image = recipe_loss(profile)
    mask = decayed_kernels(model)

    def loss_and_updates(trainable: Any, non_trainable: Any, optimizer_values: Any, x: Any, y: Any) -> Any:
        predicted, non_trainable = model.stateless_call(trainable, non_trainable, x, training=True)
        loss = jnp.mean(per_image(y, predicted)) + weight_penalty(profile, mask, trainable)
        with keras.StatelessScope(state_mapping=list(zip(optimizer.variables, optimizer_values))):
            scaled = optimizer.scale_loss(loss)
        return scaled, (loss, non_trainable)

    gradient = jax.value_and_grad(loss_and_updates, has_aux=True)

    def train(state: Any, x: Any, y: Any) -> Any:
        trainable, non_trainable, optimizer_values = state
        (_, (loss, non_trainable)), grads = gradient(trainable, non_trainable, optimizer_values, x, y)
        trainable, optimizer_values = optimizer.stateless_apply(optimizer_values, grads, trainable)
        return [list(trainable), list(non_trainable), list(optimizer_values)], loss

    return train


def _eval_step(model: Any, devices: Devices, state: list[list[Any]], global_batch: int, profile: Profile) -> Any:
    """(trainable, non-trainable, images, labels, real images) -> (correct top-1 predictions, sum of
    the losses) among the first `real images` of a batch padded to the global batch; compiled now."""
    import jax
    import jax.numpy as jnp

    per_image = recipe_loss(profile)

    def evaluate(trainable: Any, non_trainable: Any, x: Any, y: Any, real: Any) -> Any:
        predicted, _ = model.stateless_call(trainable, non_trainable, x, training=False)
        real_images = jnp.arange(x.shape[0]) < real
        hits = (jnp.argmax(predicted, -1) == jnp.argmax(y, -1)) & real_images
        return jnp.sum(hits.astype(jnp.int32)), jnp.sum(jnp.where(real_images, per_image(y, predicted), 0.0))

    spec = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=a.sharding), state[:2])
    sharding = devices.batch_sharding(global_batch)
    x = jax.ShapeDtypeStruct((global_batch, *model.input_shape[1:]), jnp.float32, sharding=sharding)
    y = jax.ShapeDtypeStruct((global_batch, int(model.output_shape[-1])), jnp.float32, sharding=sharding)
    real = jax.ShapeDtypeStruct((), jnp.int32, sharding=devices.replicated())
    compiled = jax.jit(evaluate).lower(*spec, x, y, real).compile()
    jax_memory.check_fits(compiled, devices.devices, global_batch, "evaluation step")
    return compiled


def _train(round_: JaxRound, steps: _TrainSteps, iterator: Iterator[Any]) -> tuple[Any, int]:
    try:
        x, y, images = next(iterator)
    except StopIteration:
        raise DataEnded("the training batches ended") from None
    if images not in steps.by_size:
        log.info("event=batch_size_compiled images=%d: a batch size the round did not plan", images)
    round_.state, loss = steps.compiled(images)(round_.state, x, y)
    return loss, images


def _evaluate(round_: JaxRound, step: Any, iterator: Iterator[Any]) -> tuple[Any, int, Any]:
    x, y, images = next(iterator)
    correct, loss = step(round_.state[0], round_.state[1], x, y, np.int32(images))
    return correct, images, loss


def _epochs(source: Iterable[Any], epochs: int) -> Iterator[Any]:
    for _ in range(epochs):
        yield from source


def _on_devices(batches: Iterator[tuple[Any, Any]], devices: Devices, pad_to: int | None) -> Iterator[Any]:
    """(images, labels, real images) on the devices, `PREFETCH` batches ahead of the consumer;
    `pad_to`: batches padded with zeros to that many images."""
    import jax

    ahead: collections.deque[Any] = collections.deque()
    for x, y in batches:
        images = int(x.shape[0])
        if pad_to is not None and images < pad_to:
            x, y = (np.concatenate([a, np.zeros((pad_to - images, *a.shape[1:]), a.dtype)]) for a in (x, y))
        sharding = devices.batch_sharding(int(x.shape[0]))
        ahead.append((jax.device_put(np.asarray(x, np.float32), sharding),
                      jax.device_put(np.asarray(y, np.float32), sharding), images))
        if len(ahead) > PREFETCH:
            yield ahead.popleft()
    while ahead:
        yield ahead.popleft()
