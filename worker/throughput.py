"""Timing a model's training steps on one device: `aiperf audit`'s throughput check.

The master bounds a worker's reports by its accepted peak, which a worker can
claim up to its accelerator's datasheet figure while it trains far slower
(docs/spec.md, "Audit"). The auditor therefore measures what one device of its
own hardware does with the model: the recorded graph at its kernel size, the
model's batch size, the run's precision and XLA setting, compiled and stepped
exactly as the worker does (the backend's `compile_round`, SGD, a distribution
over the one device: `worker.backend`), on one real batch of the dataset held in
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

import numpy as np

from aiperf import audit as rule
from aiperf.graph import Graph, with_inserted_kernel
from aiperf.profiles import Profile
from worker import backend

log = logging.getLogger(__name__)

WINDOWS = 3        # timed windows; the best counts (a passing load spike lowers no rate)
WINDOW_S = 1.0     # at least this long each
WINDOW_STEPS = 3   # and at least this many steps


def one_batch(dataset: Any, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
    """The first training batch of `batch_size` images (numpy): a split smaller than the batch
    gives its images, repeated."""
    x, y = (np.asarray(a) for a in next(iter(backend.validation_batches(dataset, batch_size))))
    if int(x.shape[0]) < batch_size:
        times = -(-batch_size // int(x.shape[0]))
        x, y = np.concatenate([x] * times)[:batch_size], np.concatenate([y] * times)[:batch_size]
    return x, y


def one_device() -> tuple[str, Any]:
    """The device the audit times on (the first GPU, else the CPU) and the backend's distribution over it."""
    return backend.one_device()


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
    from worker.rounds import StepSettings

    if batch_size < 1:
        raise ValueError(f"batch size must be >= 1, got {batch_size}")
    strategy = strategy if strategy is not None else one_device()[1]
    settings = StepSettings(graph=with_inserted_kernel(graph, kernel_size), precision=precision, strategy=strategy,
                            global_batch=batch_size, epochs=1, steps_per_epoch=1_000_000, xla=xla)
    data = backend.in_memory_batches(one_batch(dataset, batch_size))
    compiled = backend.compile_round(settings, data, profile, warm=False, evaluate=False)
    try:
        loss, _ = compiled.train_step(compiled.train_iterator)  # graph optimisation, XLA compilation
        float(loss)
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
        loss, n = compiled.train_step(compiled.train_iterator)
        float(loss)  # waits for the step (on JAX the call returns before it ran): the clock sees the device
        steps, images = steps + 1, images + int(n)
        elapsed = time.perf_counter() - start
        if steps >= WINDOW_STEPS and elapsed >= WINDOW_S:
            return images / elapsed
