"""A round's hyperparameters, chosen from the run's models, and chosen again when the memory plan
of the prepared round says they cannot fit.

The choice (docs/spec.md, "Hyperparameters"): the parent's or the profile's defaults during
warm-up, TPE on the round's snapshot after, TPE's observations being the run's done models with
their accuracy and its failed ones as failures. A round whose compiled step XLA plans over the
device's memory fails while it is prepared, before it is submitted (worker/jax_memory.py): its
batch sizes are then lowered as after an out-of-memory round (`profile_after_out_of_memory`)
and the round is chosen and prepared again, so that no model the plan already knows cannot fit
is submitted and failed.
"""

from __future__ import annotations

import logging
from typing import Any, Iterable, Mapping

from aiperf.api.records import ModelRecord
from aiperf.hyperparameters import Hyperparameters
from aiperf.profiles import Profile
from aiperf.states import ModelState
from worker.rounds import profile_after_out_of_memory

log = logging.getLogger(__name__)


def model_with_hash(models: Mapping[int, ModelRecord], graph_hash: str | None) -> int:
    """The model id of an architecture in a history; 0 when unknown."""
    if graph_hash:
        for mid, m in sorted(models.items()):
            if m.graph_hash == graph_hash:
                return mid
    return 0


def tpe_observations(models: Iterable[ModelRecord]) -> list[tuple[Hyperparameters, float]]:
    """TPE's (hyperparameters, accuracy) pairs from the run's models, by model id: a done
    model with its (predicted) accuracy, a model that failed on its own (out of memory,
    NaN loss) with 0.0, a failure. Open, abandoned and cut models are left out, and so are
    hyperparameters that break the rule."""
    out: list[tuple[Hyperparameters, float]] = []
    for m in sorted(models, key=lambda m: m.model_id):
        if m.hyperparameters is None:
            continue
        if m.state == ModelState.DONE and m.has_accuracy:
            out.append((m.hyperparameters, m.predicted_accuracy or m.best_accuracy))
        elif m.state == ModelState.FAILED:
            out.append((m.hyperparameters, 0.0))
    return out


def round_hyperparameters(profile: Profile, round_index: int, parent_id: int, models: Mapping[int, ModelRecord],
                          *, seed: int, warmup_rounds: int) -> tuple[Hyperparameters, str]:
    """This round's hyperparameters and their source: the parent's during warm-up (where the
    profile says so), else the defaults; TPE on the round's models after warm-up."""
    from aiperf.hpo import choose_hyperparameters

    parent = models.get(parent_id)
    inherited = None
    if parent is not None and parent.state == ModelState.DONE:
        inherited = parent.hyperparameters
        if inherited is None:  # the master checks them; never trust, though
            log.warning("event=parent_hyperparameters_unusable model=%d", parent_id)
    observations = tpe_observations(models.values()) if round_index > warmup_rounds else []
    return choose_hyperparameters(profile, round_index, observations, seed=seed, warmup_rounds=warmup_rounds,
                                  parent=inherited)


def replanned_profile(profile: Profile, batch_size: int, prepared: Any) -> Profile | None:
    """The lowered profile to choose the round again from, when `prepared` (a PreparedRound at
    `batch_size` per accelerator) failed by its memory plan, which estimates what fits; None when
    it did not, or when no smaller size is left (the round then goes ahead, and fails as before)."""
    fits = getattr(prepared, "batch_size_that_fits", None)
    if fits is None or prepared.compiled is not None:
        return None
    lowered = profile_after_out_of_memory(profile, batch_size, fits)
    if max(lowered.batch_sizes) >= batch_size:  # nothing smaller: each try would fail again
        return None
    log.warning("event=round_replanned failed_batch=%d fits=%d batch_size=%d: chosen again before submitting",
                batch_size, fits, lowered.batch_size)
    return lowered
