"""Whether a run is official: its configuration as started (the profile's
defaults filled in) and the datasets its workers reported (SPEC section 3,
"Official runs"; the rules themselves are aiperf/official.py).

`run_config` turns a RunSpec into the precision and configuration recorded
with the run; `unofficial_reasons` reads them back, with the run's workers,
into the reasons the scoreboard, `aiperf status` and the report list.
Pure functions of plain records; used by master/core/master.py.
"""

from __future__ import annotations

import math
from typing import Any

from aiperf import official, scoring
from aiperf.precision import PRECISIONS
from aiperf.profiles import PROFILES
from aiperf.retention import DEFAULT_KEEP_CHECKPOINTS
from master.core.requests import DEFAULT_REPORT_INTERVAL_S, DEFAULT_RESOURCE_INTERVAL_S, RunSpec
from master.store.errors import InvalidArgument
from master.store.records import RunRecord, RunWorker


def run_config(spec: RunSpec) -> tuple[str, dict[str, Any]]:
    """The run's precision and recorded configuration; InvalidArgument for a
    spec no run can have. Unset settings (precision "", xla None, warm-up 0)
    take the profile's official values."""
    rules = scoring.PROFILES.get(spec.profile)
    if rules is None:
        raise InvalidArgument(f"unknown profile {spec.profile}")
    profile = PROFILES[spec.profile]
    precision = spec.precision or profile.precision
    if precision not in PRECISIONS:
        raise InvalidArgument(f"unknown precision {spec.precision}")
    if not math.isfinite(spec.duration_s) or spec.duration_s <= 0:
        raise InvalidArgument(f"duration must be positive, got {spec.duration_s:g} s")
    if spec.duration_s < rules.min_duration_s:
        raise InvalidArgument(f"the {spec.profile} profile needs a duration of at least {rules.min_duration_s:.0f} s, "
                              f"got {spec.duration_s:g} s")
    for name in ("report_interval_s", "resource_interval_s"):
        v = getattr(spec, name)
        if not math.isfinite(v) or v < 0:
            raise InvalidArgument(f"{name} must be >= 0")
    config = {
        "limits": {
            "max_models": spec.limits.max_models,
            "max_rounds_per_worker": spec.limits.max_rounds_per_worker,
            "max_epochs_per_round": spec.limits.max_epochs_per_round,
        },
        "warmup_rounds": spec.warmup_rounds or profile.warmup_rounds,
        "min_workers": spec.min_workers,
        "deterministic": bool(spec.deterministic),
        "xla": profile.xla if spec.xla is None else bool(spec.xla),
        "inherit": bool(spec.inherit),
        "keep_checkpoints": spec.keep_checkpoints or DEFAULT_KEEP_CHECKPOINTS,
        "report_interval_s": spec.report_interval_s or DEFAULT_REPORT_INTERVAL_S,
        "resource_interval_s": spec.resource_interval_s or DEFAULT_RESOURCE_INTERVAL_S,
        "min_running_time_s": rules.min_running_time_s,
        "max_error": rules.max_error,
        "target_accuracy": rules.target_accuracy,
        "official": rules.official,
    }
    return precision, config


def unofficial_reasons(run: RunRecord, joined: list[RunWorker]) -> tuple[str, ...]:
    """Why the run is not official, () when it is: its profile and settings
    (a run recorded before XLA was a run setting counts as XLA off), then each
    worker whose reported dataset is not ImageNet-1k with its published split
    sizes. A worker that never submitted a model reported nothing and did no
    work: it is not asked for a dataset."""
    profile = PROFILES[run.profile]
    reasons = official.settings_reasons(profile, run.config, run.precision)
    if profile.official:
        for rw in joined:
            if rw.dataset is None:
                continue
            problems = official.dataset_reasons(profile, rw.dataset)
            if problems:
                reasons.append(f"worker {rw.worker.id} ({rw.worker.name}) dataset: {'; '.join(problems)}")
    return tuple(reasons)
