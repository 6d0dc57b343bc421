"""The workers' heartbeats, kept in memory: who is alive, who is lost.

The last beat of every worker is kept here and written to the store lazily
(`take_unwritten`): losing a few seconds of them in a crash is harmless, and
one UPDATE per beat would cost more than the beat itself. Thread-safe.

The stored beat is a record (who was last seen when, across restarts), not
what the master decides with: the listings, the scoreboard's workers and
lost-worker detection read memory (`live`), a lost worker's beat is written
before it is marked lost, and a restarted master gives every alive worker a
fresh grace period. So a large fleet's beats are written less often
(`flush_period`): at 10,000 workers beating every 5 s, every 20 s instead of
every 5 s, a quarter of the rows. What a restart does read is the stored
state, so a lost worker that comes back is written at once (`take_back`).
"""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Iterable

from aiperf.states import WorkerState
from master.store.records import WorkerRecord

# The most rows a second the periodic flush writes: a longer period for a larger fleet.
FLUSH_ROWS_PER_S = 500.0


class Heartbeats:
    """Last heartbeat time per known worker, the beats not written yet, and the lost workers."""

    def __init__(self, workers: Iterable[WorkerRecord], now: float) -> None:
        self._lock = threading.Lock()
        self._last: dict[int, float] = {}
        self._unwritten: dict[int, float] = {}
        self._lost: set[int] = set()
        self._back: set[int] = set()  # lost workers that beat again, not written yet
        self._grace: dict[int, float] = {}  # worker -> not lost before this time (a restart's grace)
        self._heard: dict[int, float] = {}  # worker -> its last beat in this master's life
        self._leaving: set[int] = set()  # said their last beat: lost at the next mark_silent
        # A restarted master gives every known alive worker a fresh grace period.
        for w in workers:
            self.learn(w, now)

    def learn(self, w: WorkerRecord, now: float | None = None) -> None:
        """Know a worker as stored (alive ones get a grace period until `now`)."""
        with self._lock:
            if w.state == WorkerState.ALIVE and now is not None:
                self._last[w.id] = max(w.last_heartbeat, now)
            else:
                self._last.setdefault(w.id, w.last_heartbeat)
            if w.state == WorkerState.LOST:
                self._lost.add(w.id)

    def grant_grace(self, worker_ids: Iterable[int], since: float, grace_s: float) -> None:
        """Alive workers among worker_ids are not lost for grace_s seconds from `since` (the
        moment they could reconnect), then as usual: lost unless they beat within the limit."""
        with self._lock:
            for w in worker_ids:
                if w in self._last and w not in self._lost:
                    self._last[w] = max(self._last[w], since)
                    self._grace[w] = since + grace_s

    def lose(self, worker_ids: Iterable[int]) -> None:
        """These workers are lost now (stored so by the caller), whatever their last beat."""
        with self._lock:
            for w in worker_ids:
                self._lost.add(w)
                self._grace.pop(w, None)

    def heard_within(self, worker_id: int, now: float, window_s: float) -> bool:
        """True when the worker beat in this master's life less than window_s ago (a grace period,
        a stored beat or its Register do not count: only its own heartbeats)."""
        with self._lock:
            heard = self._heard.get(worker_id)
        return heard is not None and now - heard < window_s

    def alive_ids(self) -> list[int]:
        with self._lock:
            return [w for w in self._last if w not in self._lost]

    def knows(self, worker_id: int) -> bool:
        with self._lock:
            return worker_id in self._last

    def registered(self, worker_id: int, now: float) -> None:
        """A worker (re)registered: alive, its beat already written with it."""
        with self._lock:
            self._last[worker_id] = now
            self._heard.pop(worker_id, None)  # a new life: not heard until it beats
            self._grace.pop(worker_id, None)
            self._unwritten.pop(worker_id, None)
            self._lost.discard(worker_id)
            self._leaving.discard(worker_id)

    def leave(self, worker_id: int) -> None:
        """The worker said it stops: the next mark_silent counts it lost, however recent its beat."""
        with self._lock:
            self._leaving.add(worker_id)

    def beat(self, worker_id: int, now: float) -> bool:
        """Record a heartbeat; True when the worker was lost until now."""
        with self._lock:
            self._leaving.discard(worker_id)
            was_lost = worker_id in self._lost
            self._last[worker_id] = now
            self._heard[worker_id] = now
            self._unwritten[worker_id] = now
            self._lost.discard(worker_id)
            self._grace.pop(worker_id, None)
            if was_lost:
                self._back.add(worker_id)
        return was_lost

    def take_unwritten(self, only: Iterable[int] | None = None) -> dict[int, float]:
        """The beats to write (worker id -> time), all or those of `only`, forgotten here."""
        with self._lock:
            if only is None:
                unwritten, self._unwritten = self._unwritten, {}
                return unwritten
            return self._pop_unwritten(only)

    def take_back(self) -> dict[int, float]:
        """The beats of lost workers that came back, to write now: a restarted master reads
        their stored state, and would take them for lost again."""
        with self._lock:
            back, self._back = self._back, set()
            return self._pop_unwritten(back)

    def _pop_unwritten(self, worker_ids: Iterable[int]) -> dict[int, float]:
        """Those of worker_ids with a beat to write, forgotten here (under the lock)."""
        return {w: self._unwritten.pop(w) for w in worker_ids if w in self._unwritten}

    def flush_period(self, shortest_s: float) -> float:
        """How long the unwritten beats may wait: shortest_s, or longer when there are more
        than FLUSH_ROWS_PER_S a second of them to write."""
        with self._lock:
            pending = len(self._unwritten)
        return max(shortest_s, pending / FLUSH_ROWS_PER_S)

    def mark_silent(self, now: float, limit_s: float) -> dict[int, float]:
        """Workers silent for more than limit_s become lost; returns them with their silence in seconds."""
        with self._lock:
            lost = {w: now - t for w, t in self._last.items()
                    if w not in self._lost and (w in self._leaving or (now - t > limit_s
                                                                     and now >= self._grace.get(w, now)))}
            self._lost.update(lost)
            self._leaving.difference_update(lost)
            for w in lost:
                self._grace.pop(w, None)
        return lost

    def not_lost(self, worker_ids: Iterable[int], beats: dict[int, float]) -> None:
        """Undo mark_silent for workers whose loss could not be stored, with their beats taken
        for it (a newer beat wins): the next mark_silent finds them again."""
        with self._lock:
            self._lost.difference_update(worker_ids)
            for w, t in beats.items():
                self._unwritten.setdefault(w, t)

    def alive_count(self) -> int:
        with self._lock:
            return sum(1 for w in self._last if w not in self._lost)

    def live(self, w: WorkerRecord) -> WorkerRecord:
        """The stored worker with the state and last beat held here (as stored when never seen)."""
        with self._lock:
            last = self._last.get(w.id)
            lost = w.id in self._lost
        if last is None:
            return w
        return replace(w, state=WorkerState.LOST if lost else WorkerState.ALIVE, last_heartbeat=max(last, w.last_heartbeat))

    def is_alive(self, worker_id: int) -> bool:
        with self._lock:
            return worker_id in self._last and worker_id not in self._lost
