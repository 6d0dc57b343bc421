"""The audit rule (docs/spec.md, "Audit"): when a model's stored weights back its claimed accuracy.

`aiperf audit` re-evaluates a DONE model's checkpoint on the validation split
and sends the master what it found; the master recomputes the verdict from the
same figures with `verdict` and refuses a request whose verdict disagrees.

Tolerance. Validation runs the network in inference mode: batch normalisation
uses its moving statistics, there is no dropout and no augmentation, and the
validation split is read in a fixed order. The same weights on the same images
therefore give the same logits up to floating-point rounding (summation order
differs between GPU kernels, CPU and batch sizes: relative differences of about
1e-6 in fp32, 1e-3 in fp16). Only an image whose two highest logits are that
close can change its top-1 answer, a few images in 10,000. The tolerance is
`ACCURACY_TOLERANCE` (0.5 percentage points, 250 of ImageNet's 50,000
validation images, many times that) plus one image of the split (a 360-image
smoke split moves in steps of 0.28 points). It is one-sided: only a claim above
what the weights give fails; a claim below it raises no score.
"""

from __future__ import annotations

import math

ACCURACY_TOLERANCE = 0.005  # absolute top-1, see the module docstring

PASSED = "passed"
FAILED = "failed"                        # the weights give less accuracy than claimed
WRONG_ARCHITECTURE = "wrong architecture"  # the weights are not the recorded graph at its kernel size
NO_CHECKPOINT = "no checkpoint"          # none recorded, deleted by retention, or missing from the store
CORRUPT = "corrupt"                      # its SHA-256 differs from the recorded one, or it cannot be read
VERDICTS = (PASSED, FAILED, WRONG_ARCHITECTURE, NO_CHECKPOINT, CORRUPT)

# What the scoreboard says of the model behind the regulated score.
STATUS_PASSED = "passed"
STATUS_FAILED = "failed"
STATUS_NOT_AUDITED = "not audited"


def tolerance(validation_images: int) -> float:
    """ACCURACY_TOLERANCE plus one image of a split of this size (0 images: the tolerance alone)."""
    return ACCURACY_TOLERANCE + (1.0 / validation_images if validation_images > 0 else 0.0)


def verdict(claimed: float | None, audited: float | None, architecture_ok: bool, validation_images: int) -> str:
    """The verdict of an audit that read the checkpoint: WRONG_ARCHITECTURE unless the shapes
    match; FAILED when the weights were not evaluated or give less than the claim minus the
    tolerance; else PASSED. (A checkpoint that could not be read is NO_CHECKPOINT or CORRUPT,
    decided where it was read.)"""
    if not architecture_ok:
        return WRONG_ARCHITECTURE
    if audited is None or not math.isfinite(audited) or validation_images <= 0:
        return FAILED
    claim = claimed if claimed is not None else 0.0
    return PASSED if audited >= claim - tolerance(validation_images) else FAILED


def status(latest_verdict: str | None) -> str:
    """The scoreboard's word for a model's latest audit verdict (None: never audited)."""
    if latest_verdict is None:
        return STATUS_NOT_AUDITED
    return STATUS_PASSED if latest_verdict == PASSED else STATUS_FAILED
