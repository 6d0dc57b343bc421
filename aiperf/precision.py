"""The precisions a run may declare: one table for the API, the trainer, the GEMM peak and scoring.

A run names its precision as the API and CLI do (``fp32``, ``mixed_fp16``, ...).
From that name follow the Keras dtype policy the workers train with, the GEMM
compute type whose measured rate is the accelerator's peak (efficiency), and
whether the run can be valid: the official rule allows FP16 and wider,
nothing below. Pure FP16/BF16 runs train with the mixed policy (Keras keeps
the variables in float32); below 16 bits there is no Keras policy, so such a
run trains in float32 and is scored as invalid.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Precision:
    name: str  # as the API, the CLI and the store name it
    keras_policy: str  # Keras dtype policy of the training
    gemm_dtype: str | None  # compute type of the GEMM peak; None: not measured (no efficiency)
    official: bool  # allowed in a valid run: 16 bits or wider


# In the order of the API's Precision enum.
PRECISIONS: dict[str, Precision] = {p.name: p for p in (
    Precision("fp32", "float32", "float32", official=True),
    Precision("mixed_fp16", "mixed_float16", "float16", official=True),
    Precision("mixed_bf16", "mixed_bfloat16", "bfloat16", official=True),
    Precision("fp16", "mixed_float16", "float16", official=True),
    Precision("bf16", "mixed_bfloat16", "bfloat16", official=True),
    Precision("fp8", "float32", None, official=False),
    Precision("int8", "float32", None, official=False),
)}

# The GEMM compute types a worker measures, in this order.
GEMM_DTYPES: tuple[str, ...] = ("float32", "float16", "bfloat16")


def get_precision(name: str) -> Precision:
    """The precision called `name`; ValueError naming the known ones otherwise."""
    try:
        return PRECISIONS[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown precision {name!r} (known: {', '.join(PRECISIONS)})") from None


def is_official(name: str) -> bool:
    """Whether a run in this precision can be valid (an unknown name cannot)."""
    precision = PRECISIONS.get(name)
    return precision is not None and precision.official
