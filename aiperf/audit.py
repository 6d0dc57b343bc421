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

Throughput. The weights say nothing of how many images the worker trained, and
a worker can claim its accelerator's whole datasheet peak (the master's
physical bound) while training at a fifth of it. So the auditor also times the
model's training steps, at its batch size, precision and XLA setting, on one
device of its own hardware, on in-memory batches (no input pipeline, no
validation, no reporting: an upper bound of what a worker's device does), and
the master compares that rate with two claims, both per device of the worker:
the model's images over its life (submission to finish), and the worker's
counted operations over its whole time in the run. Either above the audited
rate by more than `THROUGHPUT_TOLERANCE` is TOO_FAST, and a run with a TOO_FAST
audit is invalid, whatever its profile. The tolerance covers clocks and
thermals of one accelerator model against another unit of the same model
(a few percent) and timing noise on a shared machine; a worker's own overheads
(input pipeline, validation, checkpoints, reports) only lower its claims. A lie
smaller than the tolerance goes unseen. The check needs the auditor on the
worker's hardware (the same accelerator model; for a worker without
accelerators the same CPU model and count): elsewhere it is DIFFERENT_HARDWARE.

Weights from outside the run. The checkpoint's accuracy says nothing of where the
weights came from: weights trained before the run (or another model's), claimed
from a model's first report, pass the check above. Every model starts from the
weights its master-given seed gives (`worker.weight_seed`), so the auditor re-trains
the model's first epoch from them, as its worker did (graph, kernel, batch,
precision, the profile's schedule for the model's round), validates it on the same
split and sends that accuracy; the master compares it with the accuracy the worker
reported at its first epoch's end (`retrain_verdict`), and a shortfall beyond
`retrain_tolerance` is NOT_EARNED, which fails the audit. The tolerance is
training noise, not rounding: the auditor does not reproduce the worker's data
order or its accelerator's summation order, so its first epoch is another model
than the worker's, from the same start. Two such models differ by the spread of
SGD over one epoch (`RETRAIN_TOLERANCE`, 5 points: a few points between shuffles,
largest far from convergence, where a first epoch is) and by the sampling of the
split they are measured on: each accuracy has a standard error of at most
sqrt(0.25 / n) on n images, so their difference three standard errors of at most
3·sqrt(0.5 / n) (6.7 points on 1,000 images, 0.95 on ImageNet's 50,000). Weights
trained for many epochs are tens of points above a first epoch (ResNet-50 on
ImageNet). It is one-sided: a first epoch reported below what it gives raises no
score.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from aiperf import peaks
from aiperf.limits import MAX_MODEL_NAME_CHARS

ACCURACY_TOLERANCE = 0.005  # absolute top-1, see the module docstring
THROUGHPUT_TOLERANCE = 0.25  # relative, see the module docstring
RETRAIN_TOLERANCE = 0.05  # absolute top-1 of a first epoch re-trained from the seed, see the module docstring

PASSED = "passed"
FAILED = "failed"                        # the weights give less accuracy than claimed
WRONG_ARCHITECTURE = "wrong architecture"  # the weights are not the recorded graph at its kernel size
NO_CHECKPOINT = "no checkpoint"          # none recorded, deleted by retention, or missing from the store
CORRUPT = "corrupt"                      # its SHA-256 differs from the recorded one, or it cannot be read
VERDICTS = (PASSED, FAILED, WRONG_ARCHITECTURE, NO_CHECKPOINT, CORRUPT)  # of the weights (the auditor's)
NOT_EARNED = "not earned in the run"     # its first epoch, re-trained from its seed, falls short of the report
TOO_FAST = "too fast"                    # the worker claimed more than the audited rate allows
DIFFERENT_HARDWARE = "different hardware"  # the auditor's device is not the worker's: throughput unchecked
NOT_TIMED = "not timed"                  # the auditor sent no timed rate

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


def retrain_tolerance(validation_images: int) -> float:
    """RETRAIN_TOLERANCE plus three standard errors of the difference of two models' accuracies
    on a split of this size (each at most sqrt(0.25 / n)): 3·sqrt(0.5 / n)."""
    return RETRAIN_TOLERANCE + (3.0 * math.sqrt(0.5 / validation_images) if validation_images > 0 else 0.0)


def retrain_verdict(reported: float | None, retrained: float, validation_images: int) -> str:
    """PASSED when the first epoch re-trained from the model's seed reaches the accuracy its worker
    reported at that epoch's end, less `retrain_tolerance`; else NOT_EARNED. A model that reported
    no first-epoch accuracy claimed nothing there: PASSED."""
    if reported is None:
        return PASSED
    if not math.isfinite(retrained) or validation_images <= 0:
        return NOT_EARNED
    return PASSED if retrained >= reported - retrain_tolerance(validation_images) else NOT_EARNED


def status(latest_verdict: str | None) -> str:
    """The scoreboard's word for a model's latest audit verdict (None: never audited)."""
    if latest_verdict is None:
        return STATUS_NOT_AUDITED
    return STATUS_PASSED if latest_verdict == PASSED else STATUS_FAILED


@dataclass(frozen=True)
class Throughput:
    """What the throughput check compares, per device (see the module docstring)."""

    worker_hardware: str
    auditor_hardware: str
    claimed_images_per_second: float  # the model's images over its life, per device of its worker
    audited_images_per_second: float  # the auditor's timed rate on one device; 0: not timed
    worker_flops: float               # the worker's counted operations over its time in the run, per device
    audited_flops: float              # audited_images_per_second x the model's operations per trained image


def hardware_name(accelerator_models: Sequence[str], cpu_model: str, cpus: int) -> tuple[str, int]:
    """(what the throughput check compares, devices): a node's accelerator model and how many it
    has (distinct models joined by " + " when mixed, which no one device matches); without
    accelerators its CPU model and count as one device ("" when the model is unknown)."""
    if accelerator_models:
        return " + ".join(sorted({" ".join(m.split()) for m in accelerator_models})), len(accelerator_models)
    model = " ".join(cpu_model.split())
    return (f"{model} ({cpus} CPUs)" if model else ""), 1


def same_hardware(worker: str, auditor: str) -> bool:
    """Whether two hardware descriptions name the same model: the same datasheet table entry
    when both have one ("NVIDIA H100-SXM5-80GB" and "NVIDIA H100 80GB HBM3" are one chip,
    aiperf/peaks.py), else the same text (case, spacing and dashes aside; "" never matches)."""
    a, b = peaks.normalise(worker), peaks.normalise(auditor)
    if not a or not b:
        return False
    # a mixed node ("A + B") is no one device: its text never names a table entry
    sheets = [peaks.datasheet_of(x) if x.isascii() and "+" not in x and len(x) <= MAX_MODEL_NAME_CHARS else None
              for x in (a, b)]
    if sheets[0] is not None and sheets[1] is not None:
        return sheets[0].name == sheets[1].name
    return a == b


def throughput_verdict(t: Throughput) -> str:
    """NOT_TIMED, DIFFERENT_HARDWARE, TOO_FAST or PASSED (see the module docstring)."""
    if not (math.isfinite(t.audited_images_per_second) and t.audited_images_per_second > 0):
        return NOT_TIMED
    if not same_hardware(t.worker_hardware, t.auditor_hardware):
        return DIFFERENT_HARDWARE
    margin = 1.0 + THROUGHPUT_TOLERANCE
    if t.claimed_images_per_second > t.audited_images_per_second * margin or t.worker_flops > t.audited_flops * margin:
        return TOO_FAST
    return PASSED


def final_verdict(weights: str, throughput: str) -> str:
    """The audit's verdict: the weights' when they did not pass, else the throughput check's."""
    return weights if weights != PASSED else throughput
