"""The store's records: plain dataclasses in, plain dataclasses out.

A record extends what was asked for (NewRun -> RunRecord, WorkerInput ->
WorkerRecord, NewModel -> ModelRecord) with what the store adds.

States are the enums of aiperf/states.py (str-valued: the database holds their values).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from aiperf.states import ModelState, RunState, WorkerState
from master.store.errors import StoreError

INT64_MAX = 2**63 - 1  # the widest integer SQLite and PostgreSQL (bigint) store


@dataclass(frozen=True)
class Outage:
    """A time the master was down, on its own clock: from its last liveness
    stamp (`start`, known to within the stamp period) to its restart (`end`)."""

    start: float
    end: float

    @property
    def duration_s(self) -> float:
        return max(0.0, self.end - self.start)

    def overlap_s(self, t_from: float, t_to: float) -> float:
        """Seconds of this outage inside [t_from, t_to]."""
        return max(0.0, min(self.end, t_to) - max(self.start, t_from))


@dataclass(frozen=True)
class NewRun:
    """A run as created."""

    profile: str
    seed: int
    duration_s: float
    precision: str
    config: dict[str, Any]  # limits, warmup_rounds, intervals, min_workers, min_running_time_s
    software: dict[str, str]
    # the rules it is scored under (aiperf/ruleset.py), recorded at StartRun; "": a run from before
    rules_version: str = field(default="", kw_only=True)


@dataclass(frozen=True)
class RunRecord(NewRun):
    id: int
    state: RunState
    created_at: float
    started_at: float | None
    deadline: float | None
    stopped_at: float | None
    finished_at: float | None
    stop_reason: str
    outages: tuple[Outage, ...] = ()  # master downtime between created_at and finished_at (or now)


@dataclass(frozen=True)
class WorkerInput:
    """A worker as it registers."""

    name: str
    host: str
    accelerators: list[dict[str, Any]]  # {"model": str, "memory_bytes": int, "peak_flops": float}
    cpus: int
    memory_bytes: int
    software: dict[str, str]
    # A worker without accelerators: its CPU's measured GEMM rates and their checks
    # ({"peak_flops_by_dtype": {...}, "peak_checks": {...}}); {} when none was measured.
    cpu: dict[str, Any] = field(default_factory=dict, kw_only=True)
    backend: str = field(default="tensorflow", kw_only=True)  # the framework it trains with (aiperf.api.enums)


@dataclass(frozen=True)
class WorkerRecord(WorkerInput):
    id: int
    state: WorkerState
    registered_at: float
    last_heartbeat: float


@dataclass(frozen=True)
class RunWorker:
    """A worker that took part in a run, with its inventory when it joined."""

    worker: WorkerRecord
    joined_at: float
    inventory: dict[str, Any]
    dataset: dict[str, Any] | None = None  # the dataset it reported (DatasetInfo's fields); None: none
    implausible_reports: int = 0           # its reports refused above its accepted peak in this run


@dataclass(frozen=True)
class NewModel:
    """A model as submitted, with the master's FLOP count per image."""

    run_id: int
    parent_id: int | None
    worker_id: int
    round: int
    graph_json: str
    graph_hash: str
    batch_size: int
    kernel_size: int
    state: ModelState  # TRAINING or QUEUED when submitted
    flops_per_train_image: int
    flops_per_eval_image: int
    inherited_from: int = field(default=0, kw_only=True)  # 0: trained from scratch


@dataclass(frozen=True)
class ModelEnd:
    """How a model ended, as its worker said (the store's finish_model): its state, why, its best
    and predicted accuracy, and the checkpoint of its weights ("" none)."""

    model_id: int
    worker_id: int
    state: ModelState  # DONE, FAILED or CUT
    reason: str = ""
    best_accuracy: float | None = None
    predicted_accuracy: float | None = None
    checkpoint_uri: str = ""
    checkpoint_sha256: str = ""


@dataclass(frozen=True)
class ModelRecord(NewModel):
    id: int
    reason: str
    created_at: float
    started_at: float | None
    finished_at: float | None
    best_accuracy: float | None
    predicted_accuracy: float | None
    images_trained: int
    images_validated: int
    epochs: int
    checkpoint_uri: str = ""        # "": none recorded
    checkpoint_sha256: str = ""
    checkpoint_deleted: bool = False  # retention told its worker to delete it
    checkpoint_delete_error: str = ""  # its worker could not (it stays stored, never let go again); "" none


@dataclass(frozen=True)
class ProgressInput:
    model_id: int
    worker_id: int
    seq: int
    t: float
    epoch: int
    images_trained: int
    images_validated: int
    val_accuracy: float | None  # stored in the progress table's `accuracy` column
    worker_flops: int
    master_flops: int
    flops_mismatch: bool
    resent: bool = False  # no budget was spent on it: recorded only as a duplicate (master/core/resends.py)
    weights_sha256: str = ""  # the weights' digest at an epoch's end (master/core/weight_lineage.py)


@dataclass(frozen=True)
class ProgressResult:
    """Outcome of one report: recorded, a duplicate (nothing counted), or an error."""

    model_id: int
    seq: int
    duplicate: bool = False
    master_flops: int = 0
    flops_mismatch: bool = False
    model_state: str = ""  # a ModelState; "" for a report on no known model
    error: StoreError | None = field(default=None, compare=False)
    run_id: int = 0  # the model's run (recorded reports)


@dataclass(frozen=True)
class ResourceSampleInput:
    worker_id: int
    t: float
    accelerator_index: int
    accelerator_util: float
    accelerator_memory_used: int
    cpu_util: float
    memory_used: int


@dataclass(frozen=True)
class ResourceSampleRecord(ResourceSampleInput):
    run_id: int | None = None


@dataclass(frozen=True)
class AuditInput:
    """An audit of a DONE model's stored weights as the master records it (verdict checked)."""

    model_id: int
    audited_at: float
    auditor_host: str
    verdict: str
    architecture_ok: bool
    claimed_accuracy: float | None
    audited_accuracy: float | None  # None: the weights were not evaluated
    validation_images: int
    tolerance: float
    detail: str = ""
    # the throughput check (aiperf.audit.Throughput; "" and zeros in audits recorded before it)
    throughput: str = ""
    worker_hardware: str = ""
    auditor_hardware: str = ""
    claimed_images_per_second: float = 0.0
    audited_images_per_second: float = 0.0
    worker_flops: float = 0.0
    audited_flops: float = 0.0
    throughput_tolerance: float = 0.0
    node_audit: bool = False  # timing and inventory on the worker's node of a model the master drew
    inventory: str = ""       # a node audit's inventory check: "matches" or "differs: ..."


@dataclass(frozen=True)
class AuditRecord(AuditInput):
    id: int = 0
    run_id: int = 0
