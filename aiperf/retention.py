"""Checkpoint retention: which stored checkpoints of a run may be deleted (pure; docs/spec.md, "Checkpoints").

A checkpoint is kept while it may still be inherited from, as far as the master
can tell: the models ranked in the run's top `keep` (the search expands the
best models first, so children come mostly from them), and the parents of
the models still open (queued or training: a worker may be reading its
parent's checkpoint right now). Every other stored checkpoint may go. A child
whose parent's checkpoint is gone trains from scratch (and says so), so the
rule trades disk for inheritance, never correctness.
"""

from __future__ import annotations

from dataclasses import dataclass
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


def kept_checkpoints(models: Iterable[StoredModel], ranked_done_ids: Sequence[int], keep: int) -> frozenset[int]:
    """Ids whose checkpoints must stay: the top `keep` of `ranked_done_ids` (best first) and the
    parents of open models."""
    if keep < 0:
        raise ValueError(f"keep must be >= 0, got {keep}")
    kept = set(ranked_done_ids[:keep])
    kept.update(m.parent_id for m in models if m.state in OPEN_STATES and m.parent_id)
    return frozenset(kept)


def checkpoints_to_delete(models: Sequence[StoredModel], ranked_done_ids: Sequence[int], keep: int) -> list[int]:
    """Ids of the models whose stored checkpoints may be deleted now, ascending."""
    kept = kept_checkpoints(models, ranked_done_ids, keep)
    return sorted(m.model_id for m in models if m.has_checkpoint and m.model_id not in kept)
