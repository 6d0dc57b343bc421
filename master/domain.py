"""What the Master takes and returns: plain dataclasses, no protobuf.

The servicers (master/servicers.py) convert protobuf messages to these and
back (master/conversions.py); the Master never sees protobuf. The store's own
records (RunRecord, ModelRecord, ...) live in master/store.py and appear here
as parts of the replies.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from aiperf import scoring, timeline
from master.store import AuditRecord, ModelRecord, RunRecord, RunWorker, WorkerRecord

DEFAULT_WARMUP_ROUNDS = 5
DEFAULT_REPORT_INTERVAL_S = 30.0
DEFAULT_RESOURCE_INTERVAL_S = 30.0


# ---------------------------------------------------------------- requests


@dataclass(frozen=True)
class Limits:
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
    limits: Limits = field(default_factory=Limits)
    warmup_rounds: int = 0
    min_workers: int = 0
    allow_concurrent: bool = False
    report_interval_s: float = 0.0
    resource_interval_s: float = 0.0
    deterministic: bool = False
    xla: bool | None = None  # None: the profile's (official: on; smoke: off)
    inherit: bool = True       # children start from their parent's weights
    keep_checkpoints: int = 0  # retention's top K; 0: DEFAULT_KEEP_CHECKPOINTS


@dataclass(frozen=True)
class ModelSubmission:
    """A model a worker is about to train (run_id 0: the current run; parent_id 0: none)."""

    worker_id: int
    run_id: int
    graph_json: str
    graph_hash: str
    parent_id: int
    round: int
    batch_size: int
    kernel_size: int
    queue: bool = False  # True: queued until its first report
    dataset: dict[str, Any] | None = None  # the dataset it trains on (DatasetInfo's fields); None: not reported
    inherited_from: int = 0  # 0: from scratch; else parent_id


@dataclass(frozen=True)
class AuditSubmission:
    """What `aiperf audit` found for a DONE model's stored weights (RecordAudit)."""

    model_id: int
    audited_accuracy: float | None  # None: the weights were not evaluated
    architecture_ok: bool
    verdict: str
    auditor_host: str
    validation_images: int
    detail: str = ""
    audited_images_per_second: float = 0.0  # the model's steps timed on one device of the auditor; 0: not timed
    auditor_hardware: str = ""              # that device's model (aiperf.audit.hardware_name)


@dataclass(frozen=True)
class ProgressReport:
    """Images a worker processed since its previous report of the model."""

    worker_id: int
    model_id: int
    seq: int
    epoch: int
    images_trained: int
    images_validated: int
    accuracy: float | None  # a new observed validation accuracy
    worker_flops: int


@dataclass(frozen=True)
class ModelFinish:
    """The end of a model: state "done" or "failed"."""

    worker_id: int
    model_id: int
    state: str
    reason: str = ""
    best_accuracy: float | None = None
    predicted_accuracy: float | None = None
    checkpoint_uri: str = ""     # the model's weights in its worker's store; "" none
    checkpoint_sha256: str = ""
    undeleted: tuple[tuple[int, str], ...] = ()  # (model id, error): let go earlier, not deleted


@dataclass(frozen=True)
class ResourceSampleReport:
    """One resource sample as a worker sends it: taken `age_s` seconds before sending."""

    age_s: float
    accelerator_index: int  # -1: host-wide
    accelerator_util: float
    accelerator_memory_used: int
    cpu_util: float
    memory_used: int


# ---------------------------------------------------------------- replies


@dataclass(frozen=True)
class Registration:
    """A registered worker, the models of its earlier life (now abandoned) and its credential."""

    worker: WorkerRecord
    abandoned_model_ids: list[int]
    credential: str = field(repr=False)  # the secret: never in a log line


@dataclass(frozen=True)
class History:
    """Models of a run after a given id, and every DONE model's id, best first."""

    run_id: int
    models: list[ModelRecord]
    ranked_model_ids: list[int]


@dataclass(frozen=True)
class HyperparameterObservation:
    """A DONE model's hyperparameters and its accuracy: the predicted one when known, else the best observed."""

    model_id: int
    round: int
    worker_id: int
    batch_size: int
    kernel_size: int
    accuracy: float


@dataclass(frozen=True)
class ModelPage:
    """A page of a run's models and how many there are in all."""

    run_id: int
    models: list[ModelRecord]
    total: int


@dataclass(frozen=True)
class RunPage:
    """A page of runs, newest first, and how many there are in all."""

    runs: list[RunRecord]
    total: int
    master_time: float


@dataclass(frozen=True)
class WorkerEntry:
    """A registered worker as the master sees it now: state and last heartbeat from its
    memory (the database's copy is written lazily), and the model it trains."""

    worker: WorkerRecord
    current_model_id: int | None
    current_run_id: int | None


@dataclass(frozen=True)
class WorkerPage:
    workers: list[WorkerEntry]
    total: int
    master_time: float


@dataclass(frozen=True)
class RunStatus:
    run: RunRecord
    master_time: float
    elapsed_s: float
    workers_alive: int
    workers_joined: int
    model_counts: dict[str, int]  # state -> models of the run
    unofficial_reasons: tuple[str, ...] = ()  # why the run is not official (master/officiality.py)


@dataclass(frozen=True)
class Scoreboard:
    """A run's score and everything printed with it."""

    run: RunRecord
    result: scoring.ScoreResult
    rules: scoring.ProfileRules
    peak_flops: float | None       # sum of the accelerators' accepted peaks; None when the efficiency is unknown
    peak_verdict: str              # run_rules.peak_verdict: "checked", "capped", "unverified peak" or ""
    flops_mismatch_reports: int
    implausible_reports: int       # reports refused above the workers' accepted peaks in this run (stored)
    workers: list[RunWorker]       # the workers that took part, with their inventory when they joined
    workers_alive: int
    model_counts: dict[str, int]
    best_model_id: int | None
    images_trained: int
    images_validated: int
    unofficial_reasons: tuple[str, ...] = ()  # why the run is not official (master/officiality.py)
    audit: "RegulatedAudit | None" = None  # the audit of the model behind the regulated score

    @property
    def accelerators(self) -> int:
        return sum(len(rw.inventory.get("accelerators", [])) for rw in self.workers)

    @property
    def models_done(self) -> int:
        return self.model_counts.get("done", 0)


@dataclass(frozen=True)
class RegulatedAudit:
    """The model behind a run's regulated score and its latest audit (master/audits.py)."""

    model_id: int | None        # None: no accuracy reported yet
    status: str                 # aiperf.audit STATUS_*; "" when model_id is None
    latest: AuditRecord | None  # None: never audited


@dataclass(frozen=True)
class RunTimeline:
    """FLOPS(t) and best accuracy at each report, and resource means per time bucket."""

    run: RunRecord
    points: list[timeline.CurvePoint]
    resources: list[timeline.ResourcePoint]
