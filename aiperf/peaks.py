"""Checked peaks: a worker's measured GEMM rate against the vendor's datasheet (SPEC section 7).

A run's efficiency is its score over the sum of the datasheet figures of its
accelerators at the run's compute type (`datasheet_peak`: HPL's Rmax/Rpeak).
A worker also measures each accelerator's dense GEMM rate per compute type
(`worker.gemm`); the sum of these peaks is the denominator of a run's
efficiency against the measured peak and, per worker, the bound on the
operations the master accepts from it. A measured rate is a claim, so it is
checked here against the vendor's *dense* datasheet figure (never the "with
sparsity" one: our GEMMs are dense) and capped at that figure + `TOLERANCE`:

- "checked": the accelerator is in the table and the rate is within the bound;
- "capped": above the bound: the bound is accepted instead, and the record says so;
- "unverified": an accelerator the table does not know; the rate is accepted as
  measured up to the table's fastest bound for the compute type (`largest_bound`), and the
  scoreboard labels it "unverified peak" (an official run does not accept it);
- "unverified (CPU)": a worker without an accelerator measures its CPU the same
  way. CPUs have no table here (too many models and clock/turbo/AVX variants);
  the rate is only bounded by physics: `CPU_MAX_FLOPS_PER_CPU` per logical CPU
  (above it: "capped").

Matching the model string (as NVML or TensorFlow reports it, e.g. "NVIDIA H100
80GB HBM3", "NVIDIA A100-SXM4-80GB", "Tesla V100-SXM2-32GB", "AMD Instinct
MI300X") goes from the most specific entry to the least: H100 NVL, then PCIe,
then SXM ("SXM" or "HBM3" in the name). A family name without a recognised
variant (a plain "NVIDIA H100") is bounded by the family's fastest variant, a
bound that holds whichever variant it is.

Compute types: "float32" (TensorFlow's name) is bounded by the larger of the
FP32 and TF32 figures, because TensorFlow runs float32 matrix products on TF32
tensor cores by default on NVIDIA Ampere and later
(`tf.config.experimental.enable_tensor_float_32_execution`, on by default since
TF 2.4). A compute type a chip has no figure for (bf16 on a V100) is emulated
with wider units, so it is bounded by the chip's fastest figure at that width
or wider.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass
from typing import Any

from aiperf.limits import MAX_CPUS, MAX_MODEL_NAME_CHARS

TOLERANCE = 0.05  # a measured rate may exceed the datasheet by 5% (clocks, rounding of the figures)

CHECKED = "checked"
CAPPED = "capped"
UNVERIFIED = "unverified"
UNVERIFIED_CPU = "unverified (CPU)"
VERDICTS = (CHECKED, CAPPED, UNVERIFIED, UNVERIFIED_CPU)

# The fastest dense arithmetic a CPU core is known to reach, with room: Intel AMX
# does 2048 INT8 operations per cycle per core (1024 BF16 FLOP); at a 6 GHz clock
# that is 1.2288e13 per logical CPU, more than any CPU's floating-point rate.
CPU_MAX_FLOPS_PER_CPU = 2048 * 6.0e9

T = 1e12  # datasheets quote TFLOPS

# Table columns and their widths in bits (the emulation rule in the module doc).
COLUMNS: dict[str, int] = {"fp32": 32, "tf32": 19, "fp16": 16, "bf16": 16, "fp8": 8}

# GEMM compute types as a worker names them (TensorFlow dtypes), with the table's
# short names accepted as aliases.
DTYPES: dict[str, str] = {
    "float32": "float32", "fp32": "float32", "tf32": "tf32", "float16": "float16", "fp16": "float16",
    "bfloat16": "bfloat16", "bf16": "bfloat16", "float8": "float8", "fp8": "float8",
}
# Which columns bound a compute type, and its width in bits.
_BOUNDED_BY: dict[str, tuple[str, ...]] = {
    "float32": ("fp32", "tf32"), "tf32": ("tf32",), "float16": ("fp16",), "bfloat16": ("bf16",), "float8": ("fp8",),
}
_WIDTH: dict[str, int] = {"float32": 32, "tf32": 19, "float16": 16, "bfloat16": 16, "float8": 8}


@dataclass(frozen=True)
class Datasheet:
    """Dense peak rates (FLOPS) of one accelerator, per precision; None: no such unit."""

    name: str
    source: str  # the vendor document the figures come from
    pattern: str  # regex on the normalised model string (see `normalise`)
    fp32: float
    tf32: float | None = None
    fp16: float | None = None
    bf16: float | None = None
    fp8: float | None = None

    def figure(self, column: str) -> float | None:
        value: float | None = getattr(self, column)
        return value


_H100_SHEET = "NVIDIA H100 Tensor Core GPU datasheet"
_H200_SHEET = "NVIDIA H200 Tensor Core GPU datasheet"

# Most specific first: the first entry whose pattern matches wins. Tensor-core
# figures of A100 and later are quoted "with sparsity" in the datasheets; the
# dense figure is half of it (the datasheets' footnote), which is what is stored.
TABLE: tuple[Datasheet, ...] = (
    # H100 NVL: FP32 60 TF; TF32 835, BF16/FP16 1,671, FP8 3,341 TF with sparsity.
    Datasheet("H100 NVL", _H100_SHEET, r"\bH100\b.*\bNVL\b", 60 * T, 417.5 * T, 835.5 * T, 835.5 * T, 1670.5 * T),
    # H100 PCIe: FP32 51 TF; TF32 756, BF16/FP16 1,513, FP8 3,026 TF with sparsity.
    Datasheet("H100 PCIe", _H100_SHEET, r"\bH100\b.*\bPCIE\b", 51 * T, 378 * T, 756.5 * T, 756.5 * T, 1513 * T),
    # H100 SXM: FP32 67 TF; TF32 989, BF16/FP16 1,979, FP8 3,958 TF with sparsity.
    # NVML calls it "NVIDIA H100 80GB HBM3"; any H100 not named otherwise gets these, the fastest.
    Datasheet("H100 SXM", _H100_SHEET, r"\bH100\b", 67 * T, 494.5 * T, 989.5 * T, 989.5 * T, 1979 * T),
    # H200 NVL: FP32 60 TF; TF32 835, BF16/FP16 1,671, FP8 3,341 TF with sparsity.
    Datasheet("H200 NVL", _H200_SHEET, r"\bH200\b.*\bNVL\b", 60 * T, 417.5 * T, 835.5 * T, 835.5 * T, 1670.5 * T),
    # H200 SXM ("NVIDIA H200"): FP32 67 TF; TF32 989, BF16/FP16 1,979, FP8 3,958 TF with sparsity.
    Datasheet("H200 SXM", _H200_SHEET, r"\bH200\b", 67 * T, 494.5 * T, 989.5 * T, 989.5 * T, 1979 * T),
    # HGX B200, per GPU: FP32 75 TF; TF32 2.2, FP16/BF16 4.5, FP8 9 PFLOPS with sparsity.
    Datasheet("B200", "NVIDIA HGX B200 datasheet (per-GPU specifications)", r"\bB200\b",
              75 * T, 1100 * T, 2250 * T, 2250 * T, 4500 * T),
    # A100 40GB/80GB, PCIe and SXM alike: FP32 19.5 TF; TF32 312, BF16/FP16 624 TF with sparsity.
    Datasheet("A100 PCIe", "NVIDIA A100 Tensor Core GPU datasheet", r"\bA100\b.*\bPCIE\b",
              19.5 * T, 156 * T, 312 * T, 312 * T),
    Datasheet("A100 SXM", "NVIDIA A100 Tensor Core GPU datasheet", r"\bA100\b", 19.5 * T, 156 * T, 312 * T, 312 * T),
    # L40S: FP32 91.6 TF; TF32 183, BF16/FP16 362.05, FP8 733 TF dense (366, 733, 1,466 with sparsity).
    Datasheet("L40S", "NVIDIA L40S GPU datasheet", r"\bL40S\b", 91.6 * T, 183 * T, 362.05 * T, 362.05 * T, 733 * T),
    # Volta has no sparsity, TF32, BF16 or FP8; FP16 is the "tensor performance" figure.
    # V100S PCIe: single precision 16.4 TF, tensor 130 TF.
    Datasheet("V100S PCIe", "NVIDIA V100 Tensor Core GPU datasheet", r"\bV100S\b", 16.4 * T, None, 130 * T),
    # V100 SXM2: single precision 15.7 TF, tensor 125 TF.
    Datasheet("V100 SXM2", "NVIDIA V100 Tensor Core GPU datasheet", r"\bV100\b.*\bSXM2\b", 15.7 * T, None, 125 * T),
    # V100 PCIe: single precision 14 TF, tensor 112 TF.
    Datasheet("V100 PCIe", "NVIDIA V100 Tensor Core GPU datasheet", r"\bV100\b.*\bPCIE\b", 14 * T, None, 112 * T),
    # Any other V100 (SXM3, FHHL, unnamed): the fastest V100 figures, the V100S's.
    Datasheet("V100 (variant not named)", "NVIDIA V100 Tensor Core GPU datasheet", r"\bV100\b",
              16.4 * T, None, 130 * T),
    # MI300X: FP32 (matrix and vector) 163.4 TF; TF32 653.7, FP16/BF16 1,307.4, FP8 2,614.9 TF dense.
    Datasheet("MI300X", "AMD Instinct MI300X accelerator datasheet", r"\bMI300X\b",
              163.4 * T, 653.7 * T, 1307.4 * T, 1307.4 * T, 2614.9 * T),
    # MI250X: FP32 matrix 95.7 TF, FP16/BF16 383 TF per package of two GCDs. Each GCD is
    # a device of its own to ROCm and TensorFlow (and measured alone), so half is stored.
    Datasheet("MI250X (one GCD)", "AMD Instinct MI250X accelerator datasheet", r"\bMI250X\b",
              95.7 / 2 * T, None, 383 / 2 * T, 383 / 2 * T),
)


@dataclass(frozen=True)
class PeakCheck:
    """The outcome of checking one measured GEMM rate: what to record and use."""

    model: str  # as reported
    dtype: str  # the compute type, as TensorFlow names it ("float32", "float16", "bfloat16", ...)
    measured_flops: float
    accepted_flops: float  # min(measured, bound): what efficiency and plausibility use
    datasheet_flops: float | None  # the figure checked against (None: unverified)
    bound_flops: float | None  # datasheet × (1 + TOLERANCE), or the CPU bound
    entry: str | None  # the table entry matched, e.g. "H100 SXM"
    basis: str  # which figure of which document, or why none
    verdict: str  # one of VERDICTS

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def normalise(model: str) -> str:
    """Upper case, with '-', '_' and '/' as spaces: "NVIDIA A100-PCIE-40GB" -> "NVIDIA A100 PCIE 40GB"."""
    return " ".join(re.sub(r"[-_/]", " ", model).upper().split())


def datasheet_of(model: str) -> Datasheet | None:
    """The table entry for an accelerator model string; None when it is not in the table."""
    name = normalise(_check_model(model))
    return next((d for d in TABLE if re.search(d.pattern, name)), None)


def datasheet_peak(model: str, dtype: str) -> float | None:
    """The datasheet's dense figure of an accelerator for a GEMM compute type (the
    figure a measured rate is checked against, without the tolerance): its Rpeak.
    None when the accelerator is not in the table. ValueError as `check_peak`."""
    column = _dtype(dtype)
    sheet = datasheet_of(model)
    return None if sheet is None else _figure(sheet, column)[0]


def check_peak(model: str, dtype: str, measured_flops: float) -> PeakCheck:
    """Check an accelerator's measured GEMM rate of `dtype` against its datasheet.

    ValueError for a rate that is negative or not finite, an unknown compute
    type or a model name that is not a string or is too long.
    """
    column = _dtype(dtype)
    measured = _rate(measured_flops)
    sheet = datasheet_of(model)
    if sheet is None:  # no figure of its own: no chip in the table is faster
        ceiling = largest_bound(column)
        return PeakCheck(model, column, measured, min(measured, ceiling), None, ceiling, None,
                         "accelerator not in the datasheet table; bounded by the table's fastest", UNVERIFIED)
    figure, basis = _figure(sheet, column)
    bound = figure * (1.0 + TOLERANCE)
    verdict = CAPPED if measured > bound else CHECKED
    return PeakCheck(model, column, measured, min(measured, bound), figure, bound, sheet.name,
                     f"{basis}, {sheet.source}", verdict)


def largest_bound(dtype: str) -> float:
    """The largest bound (figure x (1 + TOLERANCE)) of any table entry for `dtype`: what an
    accelerator without an entry, or without a measured rate, is bounded by."""
    column = _dtype(dtype)
    return max(_figure(sheet, column)[0] for sheet in TABLE) * (1.0 + TOLERANCE)


def check_cpu_peak(cpus: int, dtype: str, measured_flops: float, model: str = "CPU") -> PeakCheck:
    """Check a CPU's measured GEMM rate: no datasheet, only the physical bound of
    `CPU_MAX_FLOPS_PER_CPU` per logical CPU ("unverified (CPU)", or "capped")."""
    column = _dtype(dtype)
    measured = _rate(measured_flops)
    if isinstance(cpus, bool) or not isinstance(cpus, int) or not 1 <= cpus <= MAX_CPUS:
        raise ValueError(f"cpus must be an integer in 1..{MAX_CPUS}, got {cpus!r}")
    bound = cpus * CPU_MAX_FLOPS_PER_CPU
    verdict = CAPPED if measured > bound else UNVERIFIED_CPU
    return PeakCheck(_check_model(model), column, measured, min(measured, bound), None, bound, None,
                     f"no CPU datasheet; bounded by {cpus} CPUs x {CPU_MAX_FLOPS_PER_CPU:.4g} FLOPS", verdict)


def _figure(sheet: Datasheet, column: str) -> tuple[float, str]:
    """The figure bounding `column` on `sheet`, and its description."""
    own = [(f, c) for c in _BOUNDED_BY[column] if (f := sheet.figure(c)) is not None]
    if own:
        value, c = max(own)
        return value, f"{c.upper()} dense"
    # No unit of this type: emulated on wider units, bounded by the fastest of them.
    wider = [(f, c) for c, bits in COLUMNS.items()
             if bits >= _WIDTH[column] and (f := sheet.figure(c)) is not None]
    value, c = max(wider)
    return value, f"{c.upper()} dense (no {column} unit: emulated on wider units)"


def _dtype(dtype: str) -> str:
    if not isinstance(dtype, str) or dtype.lower() not in DTYPES:
        raise ValueError(f"unknown GEMM compute type {dtype!r} (known: {', '.join(DTYPES)})")
    return DTYPES[dtype.lower()]


def _rate(flops: float) -> float:
    if isinstance(flops, bool) or not isinstance(flops, (int, float)) or not math.isfinite(flops) or flops < 0:
        raise ValueError(f"a measured rate must be a finite number >= 0, got {flops!r}")
    return float(flops)


def _check_model(model: str) -> str:
    if not isinstance(model, str):
        raise ValueError(f"an accelerator model must be a string, got {type(model).__name__}")
    if len(model) > MAX_MODEL_NAME_CHARS:
        raise ValueError(f"accelerator model name longer than {MAX_MODEL_NAME_CHARS} characters")
    return model
