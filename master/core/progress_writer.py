"""The progress writer: group commit of progress reports.

Concurrent RPCs hand their reports to one thread, which records everything
waiting in one transaction (`Store.add_progress`). Each caller gets its own
results only after the commit. The master's event loop awaits them without
blocking (`write_async`).

Reports are validated before they are queued (the bounds, the Master's
checks), so a batch should not fail; if one does, its callers' reports are
recorded again one caller at a time, so that one bad report fails only its
own caller, never another worker's report that shared its transaction.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import queue
import threading
import time
from typing import Callable

from master.store.errors import FailedPrecondition, StorageFull, Unavailable
from master.store.protocol import ProgressStore
from master.store.records import ProgressInput, ProgressResult

log = logging.getLogger(__name__)

Callback = Callable[[list[ProgressResult] | None, BaseException | None], None]
OnCommit = Callable[[list[ProgressInput], list[ProgressResult]], None]


class ProgressWriter:
    """One thread that records queued reports in batches of at most `max_batch` reports: what
    queued while the previous batch was being committed, without waiting for more (`linger_s`,
    0 by default, would wait that long before each batch: fewer transactions when reports are
    sparse, but every report that much later, and in a closed loop the writes/s that much
    lower). `on_commit(items, results)` runs on
    the writer thread after each commit, before the callers hear of it, whether or not they are
    still waiting (a caller may be gone: what was recorded is still folded)."""

    def __init__(self, store: ProgressStore, max_batch: int = 1024, linger_s: float = 0.0,
                 on_commit: OnCommit | None = None) -> None:
        self._store = store
        self._on_commit = on_commit
        self._max_batch = max_batch
        self._linger_s = linger_s
        self._queue: queue.SimpleQueue[tuple[list[ProgressInput], Callback] | None] = queue.SimpleQueue()
        self._closed = False
        self._wakers: dict[asyncio.AbstractEventLoop, _LoopWaker] = {}
        self._thread = threading.Thread(target=self._loop, name="aiperf-progress-writer", daemon=True)
        self._thread.start()

    def submit(self, items: list[ProgressInput], done: Callback) -> None:
        """Queue items; `done(results, None)` or `done(None, error)` runs on the writer thread."""
        if self._closed:
            raise FailedPrecondition("the master is shutting down")
        self._queue.put((items, done))

    async def write_async(self, items: list[ProgressInput]) -> list[ProgressResult]:
        """Record items and return their results (one per item), awaiting the commit on the running loop."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[list[ProgressResult]] = loop.create_future()
        wake = self._wakers.get(loop)
        if wake is None:
            wake = self._wakers.setdefault(loop, _LoopWaker(loop))
        self.submit(items, functools.partial(wake.resolve, future))
        return await future

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._queue.put(None)
            self._thread.join(timeout=30)

    def _loop(self) -> None:
        stop = False
        while not stop:
            job = self._queue.get()
            if job is None:
                return
            jobs, stop = self._gather(job)
            items = [i for inputs, _ in jobs for i in inputs]
            try:
                results = self._store.add_progress(items)
            except Exception as exc:  # noqa: BLE001 - retried one caller at a time
                if len(jobs) == 1 or isinstance(exc, (Unavailable, StorageFull)):
                    for _inputs, done in jobs:  # the database's outage (logged by the store): every caller's
                        done(None, exc)
                else:
                    log.warning("event=progress_batch_failed reports=%d callers=%d error=%r; retrying one by one",
                                len(items), len(jobs), exc)
                    self._write_one_by_one(jobs)
                continue
            k = 0
            for inputs, done in jobs:
                self._deliver(inputs, results[k:k + len(inputs)], done)
                k += len(inputs)

    def _deliver(self, inputs: list[ProgressInput], results: list[ProgressResult], done: Callback) -> None:
        if self._on_commit is not None:
            try:
                self._on_commit(inputs, results)
            except Exception:  # noqa: BLE001 - the reports are recorded; their callers must hear so
                log.exception("event=on_commit_failed reports=%d", len(inputs))
        done(results, None)

    def _write_one_by_one(self, jobs: list[tuple[list[ProgressInput], Callback]]) -> None:
        """Each caller's reports in a transaction of their own; a failure is that caller's alone."""
        for inputs, done in jobs:
            try:
                results = self._store.add_progress(inputs)
            except Exception as exc:  # noqa: BLE001 - handed to this caller only
                done(None, exc)
            else:
                self._deliver(inputs, results, done)

    def _gather(self, job: tuple[list[ProgressInput], Callback]) -> tuple[list[tuple[list[ProgressInput], Callback]], bool]:
        """The first job and everything queued behind it (up to max_batch reports); True when told to stop."""
        jobs = [job]
        n = len(job[0])
        # Reports that arrive while a batch commits form the next one (group commit without a
        # timer). Measured (docs/benchmarks.md): a 2 ms linger halved the writes/s of 20
        # closed-loop clients and held 10,000 production-pattern workers no better.
        if self._linger_s > 0:
            time.sleep(self._linger_s)
        while n < self._max_batch:
            try:
                more = self._queue.get_nowait()
            except queue.Empty:
                break
            if more is None:
                return jobs, True
            jobs.append(more)
            n += len(more[0])
        return jobs, False


class _LoopWaker:
    """Hands the writer's results to an event loop with one wake-up per batch:
    call_soon_threadsafe per report costs a syscall each."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._lock = threading.Lock()
        self._ready: list[tuple[asyncio.Future[list[ProgressResult]], list[ProgressResult] | None, BaseException | None]] = []

    def resolve(self, future: asyncio.Future[list[ProgressResult]], results: list[ProgressResult] | None, exc: BaseException | None) -> None:
        with self._lock:
            self._ready.append((future, results, exc))
            first = len(self._ready) == 1
        if first:
            try:
                self._loop.call_soon_threadsafe(self._drain)
            except RuntimeError:  # the loop is closed: its callers are gone; the writer goes on
                with self._lock:
                    self._ready.clear()
                log.debug("event=progress_loop_closed")

    def _drain(self) -> None:
        with self._lock:
            ready, self._ready = self._ready, []
        for future, results, exc in ready:
            if future.cancelled():  # the caller went away (stream closed)
                continue
            if exc is not None:
                future.set_exception(exc)
            else:
                future.set_result(results or [])
