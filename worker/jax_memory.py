"""Device memory a compiled JAX step needs, checked before the step first runs.

XLA assigns every buffer of a compiled program ahead of time, so the memory one
execution needs on each device is known once it is compiled: its arguments,
outputs and temporaries, less the outputs that reuse donated arguments
(`Compiled.memory_analysis()`). A round whose training step needs more than a
device can hold would fail at its first step anyway, after the data pipeline
started and the look-ahead spent its time; failing it while it is prepared
says why in numbers (the planned bytes against the device's limit), and the
agent lowers its batch sizes as for any out-of-memory round
(`worker.rounds.profile_after_out_of_memory`). Where the platform reports no
memory limit (the CPU) nothing is checked; the figure is logged either way,
so a GPU run records what each batch size needs.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)

GIB = 2**30


class PlannedOutOfMemory(RuntimeError):
    """A compiled step's buffers do not fit in a device's memory: it would run out of memory.
    `batch_size_that_fits`: per device, the batch the plan's figures say fits (see `check_fits`)."""

    def __init__(self, message: str, batch_size_that_fits: int) -> None:
        super().__init__(message)
        self.batch_size_that_fits = batch_size_that_fits


def planned_bytes(compiled: Any) -> int | None:
    """What one execution of `compiled` needs on each device (XLA's buffer assignment), or None
    where the platform does not say."""
    return _needed(compiled.memory_analysis())


def _needed(stats: Any) -> int | None:
    if stats is None:
        return None
    needed = (stats.argument_size_in_bytes + stats.output_size_in_bytes + stats.temp_size_in_bytes
              - stats.alias_size_in_bytes)
    return int(needed) if needed > 0 else None


def device_limit(devices: Any) -> int | None:
    """The smallest memory limit among `devices` (the allocator's bytes_limit), None when a device
    reports none (the CPU)."""
    limits = []
    for device in devices:
        stats = device.memory_stats()
        if not stats or not stats.get("bytes_limit"):
            return None
        limits.append(int(stats["bytes_limit"]))
    return min(limits) if limits else None


def check_fits(compiled: Any, devices: Any, images: int, what: str) -> None:
    """Log the memory `compiled` (the `what` step at `images` images) needs per device, and raise
    PlannedOutOfMemory when that is more than a device's limit, with the batch per device that
    would fit: the arguments (weights, optimizer state, the batch itself) taken as the fixed part
    and the rest as growing with the batch, an estimate the agent uses only below its own rule."""
    stats = compiled.memory_analysis()
    needed, limit = _needed(stats), device_limit(devices)
    log.info("event=step_memory step=%s images=%d planned_bytes=%s limit_bytes=%s",
             what, images, needed, limit)
    if needed is not None and limit is not None and needed > limit:
        fixed = int(stats.argument_size_in_bytes)
        growing = needed - fixed  # bytes for `images` images
        fits = (limit - fixed) * images // growing if growing > 0 and limit > fixed else 0
        raise PlannedOutOfMemory(f"XLA's plan for the {what} at {images} images needs {needed / GIB:.1f} GiB "
                                 f"per device, the device has {limit / GIB:.1f} GiB",
                                 max(0, fits) // max(1, len(devices)))
