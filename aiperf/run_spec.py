"""A run as its operator asks for it: what StartRun carries. One type on both sides of the wire:
the CLI builds it (aiperf.api.control_session), the master takes it (master/rpc/conversions.py
turns the request into it) and records the run's configuration from it."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class RunLimits:
    """Limits of a run; 0 means no limit."""

    max_models: int = 0
    max_rounds_per_worker: int = 0
    max_epochs_per_round: int = 0


@dataclass(frozen=True)
class RunSpec:
    """A run to start; 0 means the default (warm-up rounds, intervals) or none (min_workers)."""

    duration_s: float
    profile: str = "smoke"
    seed: int = 0
    precision: str = ""  # "": the profile's (official: mixed_fp16; smoke: fp32)
    limits: RunLimits = field(default_factory=RunLimits)
    warmup_rounds: int = 0
    min_workers: int = 0
    allow_concurrent: bool = False
    report_interval_s: float = 0.0
    resource_interval_s: float = 0.0
    deterministic: bool = False
    xla: bool | None = None  # None: the profile's (official: on; smoke: off)
    inherit: bool = True       # children start from their parent's weights
    keep_checkpoints: int = 0  # retention's top K; 0: DEFAULT_KEEP_CHECKPOINTS
