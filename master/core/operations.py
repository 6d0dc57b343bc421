"""The operations a run has recorded so far, kept in memory for the live metrics.

Zero for a run the master creates; for a run it finds at start, read from the
store (the sum of its timeline) before the progress writer starts; then added
to by every report the writer commits (Master._committed), so that the
current-FLOPS gauge costs no query per tick. An older run asked for later is
read then (a commit to it between that read and its entry would be missed: no
report is committed to a run that is over).
"""

from __future__ import annotations

import threading

from master.store.protocol import ProgressStore


class RunOperations:
    """Per run: the master-counted operations of its recorded reports."""

    def __init__(self, store: ProgressStore) -> None:
        self._store = store
        self._lock = threading.Lock()
        self._totals: dict[int, int] = {}

    def total(self, run_id: int) -> int:
        with self._lock:
            if run_id in self._totals:
                return self._totals[run_id]
        total = sum(p.ops for p in self._store.timeline(run_id))  # outside the lock: commits go on
        with self._lock:
            return self._totals.setdefault(run_id, total)

    def created(self, run_id: int) -> None:
        """A run just created: nothing recorded yet."""
        with self._lock:
            self._totals[run_id] = 0

    def add(self, run_id: int, ops: int) -> None:
        """A committed report's operations (a run not read yet is read whole when first asked)."""
        with self._lock:
            if run_id in self._totals:
                self._totals[run_id] += ops
