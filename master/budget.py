"""The physical bound of progress reports: no model's reports claim more
operations than its worker's accelerators can do in the time they cover.

A report's operations (the master's count: images × the model's FLOPs per
image) must fit, at the worker's ceiling rate, between the model's previous
report (or its submission) and now, plus `CLOCK_SLACK_S` for transport and
batching. The ceiling is `MAX_OPS_PER_S_PER_ACCELERATOR` × the worker's
registered accelerators (at least one), from aiperf/api/bounds.py;
`OpsCeilings` is where a worker's checked peak will replace that constant.
Used by master/master.py.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Callable

from aiperf.api import bounds
from master.store import InvalidArgument


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

    def claim(self, ops: int, now: float, rate: float) -> None:
        """InvalidArgument unless `ops` fit at `rate` between busy_until and now
        (+ CLOCK_SLACK_S); reserves that time when they do."""
        with _CLAIM_LOCK:
            start = self.busy_until
            need_s = ops / rate
            if need_s > now + bounds.CLOCK_SLACK_S - start:
                raise InvalidArgument(
                    f"images_trained/images_validated: {ops:.3g} operations in {max(0.0, now - start):.3g} s "
                    f"exceed the physical ceiling of {rate:.3g} operations/s of the worker's accelerators")
            self.busy_until = max(now, start + need_s)


class OpsCeilings:
    """Each worker's ceiling rate (operations/s), cached; `accelerators(worker_id)`
    reads a worker's registered accelerator count on a miss (NotFound when unknown)."""

    def __init__(self, accelerators: Callable[[int], int]) -> None:
        self._accelerators = accelerators
        self._lock = threading.Lock()
        self._rates: dict[int, float] = {}

    def registered(self, worker_id: int, accelerators: int) -> None:
        with self._lock:
            self._rates[worker_id] = bounds.report_ops_ceiling(accelerators)

    def get(self, worker_id: int) -> float:
        with self._lock:
            rate = self._rates.get(worker_id)
        if rate is None:
            rate = bounds.report_ops_ceiling(self._accelerators(worker_id))
            with self._lock:
                self._rates[worker_id] = rate
        return rate
