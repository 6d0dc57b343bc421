"""The physical bound of progress reports: no model's reports claim more
operations than its worker's accelerators can do in the time they cover.

A report's operations (the master's count: images × the model's FLOPs per
image) must fit, at the worker's ceiling rate, between the model's previous
report (or its submission) and now, plus `CLOCK_SLACK_S` for transport and
batching. The ceiling is the worker's accepted peak for the run's precision
(the sum over its accelerators of the measured GEMM rates, each capped at its
datasheet: master/run_rules.worker_peak): no training step multiplies faster
than the same chip's dense GEMM. A report over it is refused with
FailedPrecondition (`ImplausibleReport`) and counted per run. A worker with no
accepted peak at all is bounded by `MAX_OPS_PER_S_PER_ACCELERATOR` × its
registered accelerators (at least one), from aiperf/api/bounds.py, which is
also the upper bound of any peak (InvalidArgument above it).
Used by master/master.py.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Callable

from aiperf.api import bounds
from master.store import FailedPrecondition, InvalidArgument


_CLAIM_LOCK = threading.Lock()  # a claim reads and moves busy_until at once


@dataclass
class ModelFlops:
    """What the master needs to count and bound a model's reports: its run, its
    worker, its per-image totals and how long its reported work keeps the worker busy."""

    run_id: int
    worker_id: int
    train: int  # operations per trained image
    eval: int   # operations per validated image
    # the later of: the previous report's time, and the end of all work reported so
    # far done at the ceiling rate (reports that came close together share one interval)
    busy_until: float

    def ops(self, images_trained: int, images_validated: int) -> int:
        return self.train * images_trained + self.eval * images_validated

    def claim(self, ops: int, now: float, ceiling: Ceiling) -> None:
        """Unless `ops` fit at the ceiling's rate between busy_until and now
        (+ CLOCK_SLACK_S): ImplausibleReport over an accepted peak, InvalidArgument
        over the constant. Reserves that time when they fit."""
        with _CLAIM_LOCK:
            start = self.busy_until
            rate = ceiling.rate
            need_s = ops / rate
            if need_s <= now + bounds.CLOCK_SLACK_S - start:
                self.busy_until = max(now, start + need_s)
                return
        interval = max(0.0, now - start)
        if ceiling.from_peak:
            claimed = ops / max(interval, 1e-9)
            raise ImplausibleReport(
                f"worker {self.worker_id} claims {claimed:.2g} ops/s over {interval:.1f} s, "
                f"above its accepted peak {rate:.2g} ops/s")
        raise InvalidArgument(
            f"images_trained/images_validated: {ops:.3g} operations in {interval:.3g} s "
            f"exceed the physical ceiling of {rate:.3g} operations/s of the worker's accelerators")


class ImplausibleReport(FailedPrecondition):
    """A report claims more operations than the worker's accepted peak allows."""


@dataclass(frozen=True)
class Ceiling:
    """A worker's ceiling rate in one run; from_peak: its accepted peak (else the constant)."""

    rate: float
    from_peak: bool


def ceiling_of(peak: float, accelerators: int) -> Ceiling:
    """The accepted peak when there is one, never above the constant ceiling."""
    constant = bounds.report_ops_ceiling(accelerators)
    if peak > 0 and peak < constant:
        return Ceiling(peak, True)
    return Ceiling(constant, False)


class OpsCeilings:
    """Each worker's ceiling in each run, cached; `ceiling(worker_id, run_id)`
    computes one on a miss (NotFound when the worker or run is unknown).
    Counts the implausible reports refused per run (since this master started)."""

    def __init__(self, ceiling: Callable[[int, int], Ceiling]) -> None:
        self._ceiling = ceiling
        self._lock = threading.Lock()
        # worker id -> run id -> ceiling: a registration forgets one worker's without scanning them all
        self._ceilings: dict[int, dict[int, Ceiling]] = {}
        self._refused: dict[int, int] = {}

    def registered(self, worker_id: int) -> None:
        """Forget a (re-)registered worker's ceilings: its peaks may have changed."""
        with self._lock:
            self._ceilings.pop(worker_id, None)

    def cached(self, worker_id: int, run_id: int) -> bool:
        """True when get(worker_id, run_id) will not touch the store."""
        with self._lock:
            return run_id in self._ceilings.get(worker_id, ())

    def get(self, worker_id: int, run_id: int) -> Ceiling:
        with self._lock:
            hit = self._ceilings.get(worker_id, {}).get(run_id)
        if hit is None:
            hit = self._ceiling(worker_id, run_id)
            with self._lock:
                self._ceilings.setdefault(worker_id, {})[run_id] = hit
        return hit

    def refused(self, run_id: int) -> None:
        with self._lock:
            self._refused[run_id] = self._refused.get(run_id, 0) + 1

    def refused_count(self, run_id: int) -> int:
        with self._lock:
            return self._refused.get(run_id, 0)
