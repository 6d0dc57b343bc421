"""Timing a model's training steps on one device: `aiperf audit`'s throughput check.

The master bounds a worker's reports by its accepted peak, which a worker can
claim up to its accelerator's datasheet figure while it trains far slower
(docs/spec.md, "Audit"). The auditor therefore measures what one device of its
own hardware does with the model: the recorded graph at its kernel size, the
model's batch size, the run's precision and XLA setting, compiled and stepped
exactly as the worker does (`worker.steps.compile_round`, SGD, a
MirroredStrategy over the one device), on one real batch of the dataset held in
memory so that no input pipeline slows it. The tracing and one untimed step
come first (XLA compiles there); then the best of `WINDOWS` windows of at least
`WINDOW_S` seconds and `WINDOW_STEPS` steps. The result is an upper bound of a
worker's rate per device, which also reads data, validates, checkpoints and
reports; the master compares the worker's claims with it
(`aiperf.audit.throughput_verdict`).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from aiperf import audit as rule
from aiperf.graph import Graph, with_inserted_kernel
from aiperf.profiles import Profile

log = logging.getLogger(__name__)

WINDOWS = 3        # timed windows; the best counts (a passing load spike lowers no rate)
WINDOW_S = 1.0     # at least this long each
WINDOW_STEPS = 3   # and at least this many steps


class InMemory:
    """A dataset of one batch held in memory, repeated, with the real dataset's shapes and dtypes
    (what `compile_round` asks of a dataset without evaluation)."""

    def __init__(self, dataset: Any, batch_size: int) -> None:
        import tensorflow as tf

        x, y = next(iter(dataset.train(batch_size, seed=0)))
        if int(x.shape[0]) < batch_size:  # a split smaller than the batch: its images, repeated
            times = -(-batch_size // int(x.shape[0]))
            x, y = tf.concat([x] * times, 0)[:batch_size], tf.concat([y] * times, 0)[:batch_size]
        self.batch = (x, y)

    def train(self, batch_size: int, seed: int = 0) -> Any:
        import tensorflow as tf

        # batched from slices, so the batch dimension is unknown as the real data's (no retracing)
        return tf.data.Dataset.from_tensor_slices(self.batch).batch(batch_size).cache().repeat().prefetch(2)



def one_device() -> tuple[str, Any]:
    """The device the audit times on (the first GPU, else the CPU) and a MirroredStrategy over it."""
    import tensorflow as tf

    gpus = tf.config.list_logical_devices("GPU")
    device = gpus[0].name if gpus else "/cpu:0"
    return device, tf.distribute.MirroredStrategy(devices=[device])


def auditor_hardware(device: str) -> str:
    """`aiperf.audit.hardware_name` of the one device the audit times on."""
    from worker.inventory import inventory

    inv = inventory()
    if "GPU" in device.upper() and inv.accelerators:
        return rule.hardware_name([inv.accelerators[0].model], "", inv.cpus)[0]
    return rule.hardware_name([], inv.cpu_model, inv.cpus)[0]


def training_rate(graph: Graph, kernel_size: int, batch_size: int, precision: str, xla: bool, dataset: Any,
                  profile: Profile, strategy: Any = None) -> float:
    """Images per second of the model's training steps on one device, the best window (see the
    module docstring). `graph` has no kernel size inserted yet; `strategy` defaults to `one_device`'s."""
    from worker.steps import StepSettings, compile_round

    if batch_size < 1:
        raise ValueError(f"batch size must be >= 1, got {batch_size}")
    strategy = strategy if strategy is not None else one_device()[1]
    settings = StepSettings(graph=with_inserted_kernel(graph, kernel_size), precision=precision, strategy=strategy,
                            global_batch=batch_size, epochs=1, steps_per_epoch=1_000_000, xla=xla)
    compiled = compile_round(settings, InMemory(dataset, batch_size), profile, warm=False, evaluate=False)
    try:
        _, images = compiled.train_step(compiled.train_iterator)  # graph optimisation, XLA compilation
        int(images)
        best = max(_window(compiled) for _ in range(WINDOWS))
    finally:
        compiled.release()
    log.info("event=training_rate kernel=%d batch=%d precision=%s xla=%s images_per_s=%.4g",
             kernel_size, batch_size, precision, xla, best)
    return best


def _window(compiled: Any) -> float:
    """Images per second over one window of steps."""
    steps = images = 0
    start = time.perf_counter()
    while True:
        _, n = compiled.train_step(compiled.train_iterator)
        steps, images = steps + 1, images + int(n)  # int() waits for the step: the clock sees the device
        elapsed = time.perf_counter() - start
        if steps >= WINDOW_STEPS and elapsed >= WINDOW_S:
            return images / elapsed
