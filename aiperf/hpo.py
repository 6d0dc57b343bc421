"""Hyperparameter choice: warm-up defaults, then TPE (SPEC section 5).

Rounds 1..`profile.warmup_rounds` of a worker train with their parent model's
hyperparameters (the original's warm-up; the profile's defaults for a child
without a trained parent, or where the profile says so). After warm-up an
architecture trains `Profile.trials_per_architecture` times (the original's
maxTPEsearchNum, 2 for the official profile): the first like a warm-up round,
the others with TPE's proposals; with one trial, TPE proposes every round's.
TPE is NNI's `HyperoptTuner` (algorithm ``tpe``, maximising), rebuilt for every proposal
from the run's whole hyperparameter history (all workers, from the master's
SQL), so every worker and a restarted master see the same tuner state and
nothing is pickled between processes.

Searched (per accelerator): ``batch_size`` (a choice over the profile's batch
sizes) and ``kernel_size`` (a choice over {3, 5, 7}, the kernel of the convs
that morphism inserted). A proposal is deterministic given the seed and the
history (as a multiset: the history is put in a canonical order first).

Two deliberate departures from NNI's defaults, both so that TPE is really in
effect (SPEC section 9: in the original code it was in effect random):

- hyperopt's TPE samples at random until it has 20 observations; here it
  models the history from `startup_observations` (default 5, the warm-up
  length) on.
- NNI replaces a proposal that equals an already-known configuration by a
  random one (meant for concurrent trials of one experiment). Here a repeated
  configuration is legitimate, it trains a different architecture, so the
  imported observations are not used for that check.

NNI (and hyperopt) are imported lazily: `aiperf` imports without them.
"""

from __future__ import annotations

import functools
import logging
import math
from typing import Any, Sequence

from aiperf.hyperparameters import Hyperparameters
from aiperf.profiles import Profile

log = logging.getLogger(__name__)

# (hyperparameters, accuracy) pairs
HyperHistory = Sequence[tuple[Hyperparameters, float | None]]

# NNI's import_data skips falsy values, so a failed model (accuracy 0, e.g. out
# of memory) is recorded as this tiny accuracy: TPE still learns to avoid it.
_MIN_VALUE = 1e-6
DEFAULT_STARTUP_OBSERVATIONS = 5


def search_space(profile: Profile) -> dict[str, dict[str, Any]]:
    """The NNI search space of a profile (batch size per accelerator, inserted kernel size)."""
    return {
        "batch_size": {"_type": "choice", "_value": [int(b) for b in profile.batch_sizes]},
        "kernel_size": {"_type": "choice", "_value": [int(k) for k in profile.kernel_sizes]},
    }


class Tuner:
    """TPE over a profile's space, primed with a run's (hyperparameters, accuracy) history.

    `history` holds pairs of the hyperparameters and the
    model's accuracy (predicted final accuracy for warm-up rounds; 0.0
    for a failed model; None for one still training, which is skipped).
    Entries outside the profile's space are skipped with a warning.
    """

    def __init__(self, profile: Profile, history: HyperHistory, *,
                 startup_observations: int = DEFAULT_STARTUP_OBSERVATIONS) -> None:
        import hyperopt
        from nni.algorithms.hpo.hyperopt_tuner import HyperoptTuner

        # NNI logs every imported observation and hyperopt every posterior at INFO.
        for name in ("hyperopt_AutoML", "hyperopt"):
            quiet = logging.getLogger(name)
            if quiet.level == logging.NOTSET:
                quiet.setLevel(logging.WARNING)
        self.profile = profile
        self.space = search_space(profile)
        self._tuner = HyperoptTuner("tpe", optimize_mode="maximize")
        self._tuner.update_search_space(self.space)
        self._tuner.rval.algo = functools.partial(hyperopt.tpe.suggest,
                                                  n_startup_jobs=startup_observations)
        self.observations = _canonical(profile, history)
        if self.observations:
            self._tuner.import_data([{"parameter": p.to_dict(), "value": v} for p, v in self.observations])
        # See the module docstring: imported configurations must not force random proposals.
        self._tuner.total_data.clear()
        self._next_id = 0

    def propose(self, seed: int) -> Hyperparameters:
        """One proposal from the profile's space.

        A fresh Tuner gives the same proposal for the same seed and history.
        Further calls on one Tuner avoid its own earlier proposals (NNI's rule
        for concurrent trials), so a batch of distinct proposals can be drawn.
        """
        import numpy as np

        self._tuner.rval.rstate = np.random.RandomState(seed % (2**32))
        params = self._tuner.generate_parameters(self._next_id)
        self._next_id += 1
        hyper = Hyperparameters(params["batch_size"], params["kernel_size"])
        if not _in_space(self.profile, hyper):  # pragma: no cover
            raise RuntimeError(f"TPE proposed {hyper}, outside the search space {self.space}")
        return hyper


def choose_hyperparameters(profile: Profile, round_index: int, history: HyperHistory,
                           seed: int, *, warmup_rounds: int | None = None,
                           parent: Hyperparameters | None = None) -> tuple[Hyperparameters, str]:
    """Hyperparameters for a worker's round `round_index` (1-based), and their source.

    During warm-up (round <= warmup_rounds, default `profile.warmup_rounds`):
    the parent model's hyperparameters when the profile says so
    (`warmup_from_parent`, as the original) and `parent` is given, source
    "parent"; a value outside this worker's space (another worker's memory gave
    the parent another batch size) is replaced by the profile's default. Else
    ``(profile.default_hyperparameters(), "default")``. After warm-up the same for
    an architecture's first trial when it has several (`Profile.trial`), else
    ``(Tuner(profile, history).propose(seed), "tpe")``: vary the seed per round.
    Pass a profile already scaled to the accelerator (`Profile.for_accelerator_memory`).
    """
    if round_index < 1:
        raise ValueError(f"round index must be >= 1, got {round_index!r}")
    warmup = profile.warmup_rounds if warmup_rounds is None else warmup_rounds
    # An architecture's first training after warm-up, when it has more (trials_per_architecture
    # >= 2), starts from its parent's as in warm-up: the original's "init point" before TPE.
    first_of_several = profile.trials_per_architecture > 1 and profile.trial(round_index, warmup) == 1
    if round_index <= warmup or first_of_several:
        if parent is not None and profile.warmup_from_parent:
            return inherited_hyperparameters(profile, parent), "parent"
        return profile.default_hyperparameters(), "default"
    hyper = Tuner(profile, history).propose(seed)
    log.info("round %d: TPE proposes %s from %d observations", round_index, hyper, len(history))
    return hyper, "tpe"


def inherited_hyperparameters(profile: Profile, parent: Hyperparameters) -> Hyperparameters:
    """The parent's hyperparameters, each one outside `profile`'s space replaced by its default."""
    default = profile.default_hyperparameters()
    return Hyperparameters(
        parent.batch_size if parent.batch_size in profile.batch_sizes else default.batch_size,
        parent.kernel_size if parent.kernel_size in profile.kernel_sizes else default.kernel_size)


def _in_space(profile: Profile, hyper: Hyperparameters) -> bool:
    return hyper.batch_size in profile.batch_sizes and hyper.kernel_size in profile.kernel_sizes


def _canonical(profile: Profile, history: HyperHistory) -> list[tuple[Hyperparameters, float]]:
    """Observations TPE can use (finite accuracy, inside the space), in a canonical order."""
    out: list[tuple[Hyperparameters, float]] = []
    skipped = 0
    for h, value in history:
        if value is None or not math.isfinite(float(value)):
            continue
        if not _in_space(profile, h):
            skipped += 1
            continue
        out.append((h, max(float(value), _MIN_VALUE)))
    if skipped:
        log.warning("TPE history: skipped %d entries outside the %s profile's search space",
                    skipped, profile.name)
    out.sort(key=lambda pv: (pv[0].batch_size, pv[0].kernel_size, pv[1]))
    return out
