"""The physical bound of progress reports: no worker's reports claim more
operations than its accelerators can do in the time they cover.

One budget per worker and run: all of a worker's reports in the run, over all
its models, must fit at its ceiling rate into the time since it could start
working, max(its registration, the run's start), plus `CLOCK_SLACK_S` for
transport and batching; a report's operations (the master's count: images ×
the model's FLOPs per image) must moreover fit after its model's submission.
The time claimed is reserved when a report is accepted, so reports that come
close together (or on several models at once) share one interval. After a
master restart, a worker's budget is rebuilt from the stored reports: its
operations so far occupy it from its start on.

The ceiling is the worker's accepted peak for the run's precision (the sum
over its accelerators of the measured GEMM rates, each capped at its
datasheet; a worker without accelerators: its CPU's rate, capped at a physical
bound: master/run_rules.worker_peak): no training step multiplies faster
than the same chip's dense GEMM. A report over it is refused with
FailedPrecondition (`ImplausibleReport`) and counted per run and worker
(`WorkerBudgets.refused`, stored by the master in batches in
run_workers.implausible_reports). A worker with no
accepted peak at all is bounded by `MAX_OPS_PER_S_PER_ACCELERATOR` × its
registered accelerators (at least one), from aiperf/api/bounds.py, which is
also the upper bound of any peak (InvalidArgument above it).
Used by master/core/master.py.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Callable

from aiperf.api import bounds
from aiperf.limits import CLOCK_SLACK_S
from master.store.errors import FailedPrecondition, InvalidArgument

_CLAIM_LOCK = threading.Lock()  # a claim reads and moves busy_until at once


@dataclass(frozen=True)
class ModelFlops:
    """What the master needs to count a model's reports: its run, its worker,
    its per-image totals and when it was submitted (no work on it before)."""

    run_id: int
    worker_id: int
    train: int  # operations per trained image
    eval: int   # operations per validated image
    created_at: float

    def ops(self, images_trained: int, images_validated: int) -> int:
        return self.train * images_trained + self.eval * images_validated


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


@dataclass
class WorkerBudget:
    """One worker's budget in one run: its ceiling, and the end of all the work it
    reported so far done at that rate (never before it could start)."""

    worker_id: int
    ceiling: Ceiling
    busy_until: float

    def claim(self, ops: int, now: float, since: float) -> None:
        """Unless `ops` fit at the ceiling's rate between max(busy_until, since) and
        now (+ CLOCK_SLACK_S): ImplausibleReport over an accepted peak,
        InvalidArgument over the constant. Reserves that time when they fit."""
        with _CLAIM_LOCK:
            start = max(self.busy_until, since)
            rate = self.ceiling.rate
            need_s = ops / rate
            if need_s <= now + CLOCK_SLACK_S - start:
                self.busy_until = max(now, start + need_s)
                return
        interval = max(0.0, now - start)
        if self.ceiling.from_peak:
            if interval < 0.05:  # its accepted reports already fill the time up to now
                raise ImplausibleReport(
                    f"worker {self.worker_id} claims {ops:.2g} ops with no time left (its reports so far fill "
                    f"the time up to now), above its accepted peak {rate:.2g} ops/s")
            raise ImplausibleReport(
                f"worker {self.worker_id} claims {ops / interval:.2g} ops/s over {interval:.1f} s, "
                f"above its accepted peak {rate:.2g} ops/s")
        raise InvalidArgument(
            f"images_trained/images_validated: {ops:.3g} operations in {interval:.3g} s "
            f"exceed the physical ceiling of {rate:.3g} operations/s of the worker's accelerators")


class WorkerBudgets:
    """Each worker's budget in each run, cached. On a miss, `load(worker_id, run_id)`
    gives its ceiling, the time it could start and the operations it already
    reported (NotFound when unknown)."""

    def __init__(self, load: Callable[[int, int], tuple[Ceiling, float, int]]) -> None:
        self._load = load
        self._lock = threading.Lock()
        # worker id -> run id -> budget: a registration forgets one worker's without scanning them all
        self._budgets: dict[int, dict[int, WorkerBudget]] = {}
        self._refused: dict[tuple[int, int], int] = {}  # (run, worker) -> refusals not stored yet

    def refused(self, worker_id: int, run_id: int, n: int = 1) -> None:
        """Count a refused report, in memory: the master stores the counts in batches
        (`take_refused`), so that a flood of refused reports costs no database write each."""
        with self._lock:
            key = (run_id, worker_id)
            self._refused[key] = self._refused.get(key, 0) + n

    def take_refused(self) -> dict[tuple[int, int], int]:
        """The refusals counted since the last call, {(run, worker): n}, forgotten here."""
        with self._lock:
            taken, self._refused = self._refused, {}
        return taken

    def registered(self, worker_id: int) -> None:
        """Forget a (re-)registered worker's budgets: its peaks may have changed (the
        work it reported is rebuilt from the store, so nothing is forgiven)."""
        with self._lock:
            self._budgets.pop(worker_id, None)

    def cached(self, worker_id: int, run_id: int) -> bool:
        """True when get(worker_id, run_id) will not touch the store."""
        with self._lock:
            return run_id in self._budgets.get(worker_id, ())

    def get(self, worker_id: int, run_id: int) -> WorkerBudget:
        with self._lock:
            hit = self._budgets.get(worker_id, {}).get(run_id)
        if hit is None:
            ceiling, since, done = self._load(worker_id, run_id)
            fresh = WorkerBudget(worker_id, ceiling, since + done / ceiling.rate)
            with self._lock:
                hit = self._budgets.setdefault(worker_id, {}).setdefault(run_id, fresh)
        return hit
