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

from dataclasses import dataclass, field
from typing import Iterable, Sequence

DEFAULT_KEEP_CHECKPOINTS = 10  # `aiperf start --keep-checkpoints`; ResNet-50's weights: about 100 MB each
OPEN_STATES = frozenset({"queued", "training"})


@dataclass(frozen=True)
class StoredModel:
    """What retention needs to know of one model of the run."""

    model_id: int
    parent_id: int | None
    state: str             # queued, training, done, failed, abandoned
    has_checkpoint: bool   # a checkpoint is recorded and not yet deleted


@dataclass
class RecordHolders:
    """The run's best accuracy so far and every model that held it, folded one report at a time
    (in the order the master received them; a tie keeps the earlier holder, as acc(t) does)."""

    best: float = float("-inf")
    holders: set[int] = field(default_factory=set)

    def add(self, model_id: int, accuracy: float) -> None:
        if accuracy > self.best:
            self.best = accuracy
            self.holders.add(model_id)


def record_holders(accuracies: Iterable[tuple[int, float]]) -> frozenset[int]:
    """Ids of the models that held the best accuracy so far, from (model id, accuracy) reports in
    the order the master received them."""
    fold = RecordHolders()
    for model_id, accuracy in accuracies:
        fold.add(model_id, accuracy)
    return frozenset(fold.holders)


def kept_checkpoints(models: Iterable[StoredModel], ranked_done_ids: Sequence[int], keep: int,
                     holders: Iterable[int] = ()) -> frozenset[int]:
    """Ids whose checkpoints must stay: the top `keep` of `ranked_done_ids` (best first), the
    parents of open models and the accuracy record `holders`."""
    if keep < 0:
        raise ValueError(f"keep must be >= 0, got {keep}")
    kept = set(ranked_done_ids[:keep])
    kept.update(m.parent_id for m in models if m.state in OPEN_STATES and m.parent_id)
    kept.update(holders)
    return frozenset(kept)


def checkpoints_to_delete(models: Sequence[StoredModel], ranked_done_ids: Sequence[int], keep: int,
                          holders: Iterable[int] = ()) -> list[int]:
    """Ids of the models whose stored checkpoints may be deleted now, ascending."""
    kept = kept_checkpoints(models, ranked_done_ids, keep, holders)
    return sorted(m.model_id for m in models if m.has_checkpoint and m.model_id not in kept)
