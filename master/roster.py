"""The listings of the control API: every run, and every registered worker as the
master sees it now (`aiperf runs`, `aiperf workers`, `aiperf status`).

A worker's state and last heartbeat come from the Master's memory: the
database's copy of a heartbeat is written lazily (master/heartbeats.py) and
would lag by up to a flush period.
"""

from __future__ import annotations

from master.domain import RunPage, WorkerEntry, WorkerPage
from master.master import LIST_LIMIT_MAX, Master
from master.store import InvalidArgument

RUNS_LIMIT_DEFAULT = 100
WORKERS_LIMIT_DEFAULT = 1000
WORKER_STATE_NAMES = ("alive", "lost")


def list_runs(m: Master, limit: int = 0, offset: int = 0) -> RunPage:
    """A page of runs, newest first (limit 0: RUNS_LIMIT_DEFAULT; at most LIST_LIMIT_MAX)."""
    runs, total = m.store.list_runs(min(limit or RUNS_LIMIT_DEFAULT, LIST_LIMIT_MAX), offset)
    return RunPage(runs, total, m.clock())


def list_workers(m: Master, state: str | None = None, run_id: int = 0, limit: int = 0, offset: int = 0
                 ) -> WorkerPage:
    """A page of workers, ascending id: all, or (run_id) those that took part in that run;
    `state` "alive" or "lost" keeps only those (limit 0: WORKERS_LIMIT_DEFAULT)."""
    if state is not None and state not in WORKER_STATE_NAMES:
        raise InvalidArgument(f"unknown worker state {state}")
    if run_id:
        workers = [rw.worker for rw in m.store.run_workers(m.store.get_run(run_id).id)]  # NotFound
    else:
        workers = m.store.list_workers()
    live = [m.live_worker(w) for w in sorted(workers, key=lambda w: w.id)]
    if state is not None:
        live = [w for w in live if w.state == state]
    page = live[offset:offset + min(limit or WORKERS_LIMIT_DEFAULT, LIST_LIMIT_MAX)]
    current = m.store.open_models_by_worker() if page else {}
    entries = [WorkerEntry(w, *current.get(w.id, (None, None))) for w in page]
    return WorkerPage(entries, len(live), m.clock())

