"""Checkpoint retention: which stored checkpoints of a run may be deleted (pure; docs/spec.md, "Checkpoints").

A checkpoint is kept while it may still be inherited from, as far as the master
can tell: the models ranked in the run's top `keep` (the search expands the
best models first, so children come mostly from them), and the parents of
the models still open (queued or training: a worker may be reading its
parent's checkpoint right now). Every other stored checkpoint may go. A child
whose parent's checkpoint is gone trains from scratch (and says so), so the
rule trades disk for inheritance, never correctness.

The audit needs one more: the model behind the regulated score (docs/spec.md,
"Audit") is the one that held the run's best accuracy at the score's time, which
may be long before the run ends and outside the final top K. Every model that
ever held the run's best accuracy (`record_holders`) is therefore kept: a few
models, since each one beat all before it.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from aiperf.states import OPEN_MODEL_STATES

DEFAULT_KEEP_CHECKPOINTS = 10  # `aiperf start --keep-checkpoints`; ResNet-50's weights: about 100 MB each


@dataclass(frozen=True)
class StoredModel:
    """What retention needs to know of one model of the run."""

    model_id: int
    parent_id: int | None
    state: str             # queued, training, done, failed, abandoned
    has_checkpoint: bool   # a checkpoint is recorded and not yet deleted


@dataclass
class RecordHolders:
    """Every model that held the run's best accuracy, folded one report at a time; a report may
    come late (its time `t` before reports already folded: the master stamps a report when it
    arrives and records it when its group commit ends). A report holds the record when its
    accuracy beats every report before its `t` (a tie keeps the earlier holder, as acc(t) does).
    `records` keeps each report that held it when it was folded: a late one may end a later
    one's record, but holders are never taken back (retention keeps one checkpoint too many,
    never one too few), and the best before any `t` is still the maximum of `records` before it."""

    records: list[tuple[float, float, int]] = field(default_factory=list)  # (t, accuracy, model id), by t

    def add(self, model_id: int, accuracy: float, t: float) -> None:
        at = bisect.bisect_left(self.records, (t, float("-inf"), -1))  # the records strictly before t
        if all(accuracy > a for _, a, _ in self.records[:at]):
            self.records.insert(at, (t, accuracy, model_id))

    @property
    def holders(self) -> frozenset[int]:
        return frozenset(m for _, _, m in self.records)


def record_holders(accuracies: Iterable[tuple[int, float]]) -> frozenset[int]:
    """Ids of the models that held the best accuracy so far, from (model id, accuracy) reports in
    the order the master received them."""
    fold = RecordHolders()
    for t, (model_id, accuracy) in enumerate(accuracies):
        fold.add(model_id, accuracy, float(t))
    return fold.holders


def kept_checkpoints(models: Iterable[StoredModel], ranked_done_ids: Sequence[int], keep: int,
                     holders: Iterable[int] = ()) -> frozenset[int]:
    """Ids whose checkpoints must stay: the top `keep` of `ranked_done_ids` (best first), the
    parents of open models and the accuracy record `holders`."""
    if keep < 0:
        raise ValueError(f"keep must be >= 0, got {keep}")
    kept = set(ranked_done_ids[:keep])
    kept.update(m.parent_id for m in models if m.state in OPEN_MODEL_STATES and m.parent_id)
    kept.update(holders)
    return frozenset(kept)


def checkpoints_to_delete(models: Sequence[StoredModel], ranked_done_ids: Sequence[int], keep: int,
                          holders: Iterable[int] = ()) -> list[int]:
    """Ids of the models whose stored checkpoints may be deleted now, ascending."""
    kept = kept_checkpoints(models, ranked_done_ids, keep, holders)
    return sorted(m.model_id for m in models if m.has_checkpoint and m.model_id not in kept)
