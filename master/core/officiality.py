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

from aiperf import official, peaks, scoring
from aiperf.limits import MAX_MODEL_NAME_CHARS
from aiperf.precision import PRECISIONS
from aiperf.profiles import PROFILES
from aiperf.retention import DEFAULT_KEEP_CHECKPOINTS
from aiperf.run_spec import RunSpec
from master.core.requests import DEFAULT_REPORT_INTERVAL_S, DEFAULT_RESOURCE_INTERVAL_S
from master.core.run_rules import checked_rates
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
            problems = hardware_problems(rw.inventory, run)
            if problems:
                reasons.append(f"worker {rw.worker.id} ({rw.worker.name}) hardware: {'; '.join(problems)}")
    return tuple(reasons)


def hardware_problems(inventory: dict[str, Any], run: RunRecord) -> list[str]:
    """Why a worker's hardware cannot be counted in an official run, [] when it can: every
    accelerator must be a datasheet table entry (its canonical name: aiperf/peaks.py), with a
    measured peak for the run's compute type, and named by its UUID (the identity one chip
    has: master/core/devices.py). A CPU has no datasheet entry."""
    accelerators = inventory.get("accelerators", [])
    if not accelerators:
        return ["no accelerator: a CPU has no datasheet entry"]
    dtype = PRECISIONS[run.precision].gemm_dtype if run.precision in PRECISIONS else None
    problems: dict[str, list[int]] = {}
    for i, a in enumerate(accelerators):
        model = str(a.get("model", ""))[:MAX_MODEL_NAME_CHARS]
        if peaks.datasheet_of(model) is None:
            problems.setdefault(f"{model or 'an unnamed accelerator'!r} is not in the datasheet table", []).append(i)
        elif dtype is None or checked_rates(a).get(dtype) is None:
            problems.setdefault(f"no measured {dtype} peak", []).append(i)
        if not a.get("uuid"):
            problems.setdefault("no UUID", []).append(i)
    return [f"{what} (accelerator{'s' if len(ix) > 1 else ''} {_indices(ix)})" for what, ix in problems.items()]


def _indices(ix: list[int]) -> str:
    shown = ", ".join(map(str, ix[:8]))
    return shown + (f" and {len(ix) - 8} more" if len(ix) > 8 else "")
