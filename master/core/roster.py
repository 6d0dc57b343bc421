"""The listings of the control API: every run, and every registered worker as the
master sees it now (`aiperf runs`, `aiperf workers`, `aiperf status`).

A worker's state and last heartbeat come from the Master's memory: the
database's copy of a heartbeat is written lazily (master/core/heartbeats.py) and
would lag by up to a flush period.
"""

from __future__ import annotations

from typing import Callable, Protocol

from aiperf.limits import MAX_PAGE
from aiperf.states import WorkerState
from master.core.replies import RunPage, WorkerEntry, WorkerPage
from master.store.errors import InvalidArgument
from master.store.protocol import RunStore, RunWorkerStore, WorkerStore
from master.store.records import WorkerRecord

RUNS_LIMIT_DEFAULT = 100
WORKERS_LIMIT_DEFAULT = 1000


class ListedStore(RunStore, WorkerStore, RunWorkerStore, Protocol):
    """What the listings read: runs, workers, and who took part in a run."""


class Roster:
    """The runs and workers as listed; the Master builds one over its store and heartbeats."""

    def __init__(self, store: ListedStore, live_worker: Callable[[WorkerRecord], WorkerRecord],
                 clock: Callable[[], float]) -> None:
        self._store, self._live_worker, self._clock = store, live_worker, clock

    def runs(self, limit: int = 0, offset: int = 0) -> RunPage:
        """A page of runs, newest first (limit 0: RUNS_LIMIT_DEFAULT; at most MAX_PAGE)."""
        runs, total = self._store.list_runs(min(limit or RUNS_LIMIT_DEFAULT, MAX_PAGE), offset)
        return RunPage(runs, total, self._clock())

    def workers(self, state: str | None = None, run_id: int = 0, limit: int = 0, offset: int = 0) -> WorkerPage:
        """A page of workers, ascending id: all, or (run_id) those that took part in that run;
        `state` (a WorkerState) keeps only those (limit 0: WORKERS_LIMIT_DEFAULT)."""
        if state is not None and state not in set(WorkerState):
            raise InvalidArgument(f"unknown worker state {state}")
        if run_id:
            workers = [rw.worker for rw in self._store.run_workers(self._store.get_run(run_id).id)]  # NotFound
        else:
            workers = self._store.list_workers()
        live = [self._live_worker(w) for w in sorted(workers, key=lambda w: w.id)]
        if state is not None:
            live = [w for w in live if w.state == state]
        page = live[offset:offset + min(limit or WORKERS_LIMIT_DEFAULT, MAX_PAGE)]
        current = self._store.open_models_by_worker() if page else {}
        entries = [WorkerEntry(w, *current.get(w.id, (None, None))) for w in page]
        return WorkerPage(entries, len(live), self._clock())
