"""Resent progress reports: known before the budget is spent.

A worker resends a report whose acknowledgement it lost (same model, same seq). The
store answers it as a duplicate, counted once; but the physical budget
(master/core/budget.py) is claimed before the store sees the report, so a resend of a
report near the worker's peak would be refused as implausible and counted against an
honest worker. `ResentReports` decides, before the claim, whether a report is a resend:

- a (model, seq) still in flight (claimed, not yet committed) is a resend;
- a seq above the highest one the master saw committed for its model is new (no store read:
  the hot path of reports in order);
- any other seq (a retry, or a model not in memory after a restart) is looked up in the store.

A report let through as a resend spends no budget and is marked so
(`ProgressInput.resent`): the store records it only when it is a duplicate, and refuses it
otherwise ("not recorded; resend it", master/store/progress_rules.py), so skipping the claim
never lets unbudgeted work in.
"""

from __future__ import annotations

import collections
import threading
from typing import Callable

# models whose highest committed seq stays in memory (an evicted one costs one store read)
RESEND_MODELS = 1 << 17

SeqLookup = Callable[[int, int], tuple[int, bool]]  # (model, seq) -> (highest seq stored, seq stored)


class ResentReports:
    """The highest committed seq per model and the reports in flight; thread-safe."""

    def __init__(self, lookup: SeqLookup) -> None:
        self._lookup = lookup
        self._lock = threading.Lock()
        self._top: collections.OrderedDict[int, int] = collections.OrderedDict()
        self._in_flight: collections.Counter[tuple[int, int]] = collections.Counter()

    def needs_store(self, model_id: int, seq: int) -> bool:
        """True when `begin` will read the store for this report."""
        with self._lock:
            if (model_id, seq) in self._in_flight:
                return False
            top = self._top.get(model_id)
        return top is None or seq <= top

    def begin(self, model_id: int, seq: int) -> bool:
        """Whether the report is a resend (spend no budget on it). A new one is in flight
        from here until `end`, which the caller must call whatever happens."""
        key = (model_id, seq)
        with self._lock:
            if key in self._in_flight:
                return True
            top = self._top.get(model_id)
            if top is not None and seq > top:
                self._in_flight[key] += 1
                return False
        stored_top, stored = self._lookup(model_id, seq)
        with self._lock:
            self._raise_top(model_id, stored_top)
            if stored:
                return True
            self._in_flight[key] += 1
            return False

    def end(self, model_id: int, seq: int, resent: bool) -> None:
        """The report's write returned or failed (a resend was never in flight)."""
        if resent:
            return
        key = (model_id, seq)
        with self._lock:
            self._in_flight[key] -= 1
            if self._in_flight[key] <= 0:
                del self._in_flight[key]

    def committed(self, model_id: int, seq: int) -> None:
        """The store holds (model, seq): recorded now, or found a duplicate."""
        with self._lock:
            self._raise_top(model_id, seq)

    def new_model(self, model_id: int) -> None:
        """A model just submitted has no report yet."""
        with self._lock:
            self._raise_top(model_id, 0)

    def forget(self, model_id: int) -> None:
        with self._lock:
            self._top.pop(model_id, None)

    def _raise_top(self, model_id: int, seq: int) -> None:
        self._top[model_id] = max(seq, self._top.get(model_id, seq))
        self._top.move_to_end(model_id)
        while len(self._top) > RESEND_MODELS:
            self._top.popitem(last=False)
