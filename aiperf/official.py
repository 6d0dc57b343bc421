"""The locked official workload (SPEC section 3, "Official runs"): what a run
must leave as the profile fixes it to be official, and the dataset it must train on.

An official run uses its profile's fixed settings: the warm-up length, the
epoch schedule with no cap, no cap on rounds or models, the profile's
precision family and XLA setting; and every worker trains on ImageNet-1k with
exactly its published split sizes. Anything else makes the run unofficial,
with the reasons listed (the scoreboard, `aiperf status` and the report print
them). Pure functions: the master applies them to a run's recorded
configuration and its workers' reported datasets, a worker to its own dataset
at start.

Why: an official score is compared with other machines' official scores; a
shorter warm-up, capped epochs or rounds, fp32 instead of the original's
mixed precision, XLA off, or a subset of ImageNet each change the work per
second measured, so they make a different benchmark.
"""

from __future__ import annotations

from typing import Any, Mapping

from aiperf.profiles import Profile

# ImageNet-1k (ILSVRC 2012): the published split sizes.
IMAGENET_TRAIN_IMAGES = 1_281_167
IMAGENET_VALIDATION_IMAGES = 50_000
IMAGENET_CLASSES = 1000
IMAGENET_KINDS = ("imagenet-tfrecord", "imagenet-folder")

# The original AIPerf trained with mixed precision (FP16 with loss scaling) and XLA;
# BF16 is the fast path where FP16 tensor units are absent or slower (and needs no
# loss scaling). Either mixed policy is official; the default is the original's.
OFFICIAL_PRECISIONS = ("mixed_fp16", "mixed_bf16")

# The limits a run may set (RunSpec.limits), as the CLI names them.
_LIMIT_FLAGS = {"max_epochs_per_round": "--max-epochs", "max_rounds_per_worker": "--max-rounds",
                "max_models": "--max-models"}


def settings_reasons(profile: Profile, config: Mapping[str, Any], precision: str) -> list[str]:
    """Why a run of `profile` with this recorded configuration is not official
    ([] when it is): the profile itself, and every setting that differs from it."""
    if not profile.official:
        return [f"the {profile.name} profile is never official"]
    reasons = []
    warmup = int(config.get("warmup_rounds", profile.warmup_rounds))
    if warmup != profile.warmup_rounds:
        reasons.append(f"--warmup-rounds {warmup} (official: {profile.warmup_rounds})")
    limits = config.get("limits", {})
    for key, flag in _LIMIT_FLAGS.items():
        value = int(limits.get(key, 0))
        if value:
            reasons.append(f"{flag} {value} (official: no cap)")
    if precision not in OFFICIAL_PRECISIONS:
        reasons.append(f"precision {precision} (official: {' or '.join(OFFICIAL_PRECISIONS)})")
    xla = bool(config.get("xla", False))
    if xla != profile.xla:
        reasons.append(f"XLA {'on' if xla else 'off'} (official: {'on' if profile.xla else 'off'})")
    if config.get("deterministic"):
        # its models start from weights that follow from the run seed, known before the run
        reasons.append("--deterministic (initial weights from the run seed; official: the master's secret)")
    return reasons


def dataset_reasons(profile: Profile, dataset: Mapping[str, Any]) -> list[str]:
    """Why a worker's reported dataset cannot serve an official run of `profile`
    ([] when it can): ImageNet-1k with its published split sizes at the profile's input size."""
    if not profile.official:
        return []
    if not dataset.get("kind"):
        return ["no dataset reported"]
    problems = []
    if dataset["kind"] not in IMAGENET_KINDS:
        problems.append(f"dataset kind {dataset['kind']} (official: {' or '.join(IMAGENET_KINDS)})")
    for key, want, what in (("train_images", IMAGENET_TRAIN_IMAGES, "training images"),
                            ("validation_images", IMAGENET_VALIDATION_IMAGES, "validation images"),
                            ("num_classes", IMAGENET_CLASSES, "classes"),
                            ("image_size", profile.input_size, "px input")):
        got = int(dataset.get(key, 0))
        if got != want:
            problems.append(f"{got:,} {what} (official: {want:,})")
    return problems


def is_official_dataset(profile: Profile, dataset: Mapping[str, Any]) -> bool:
    return not dataset_reasons(profile, dataset)
