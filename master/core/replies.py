"""What the Master returns: plain dataclasses, no protobuf.

The servicers (master/rpc/servicers.py) convert these to protobuf replies
(master/rpc/conversions.py). The store's own records (RunRecord, ModelRecord,
...) live in master/store/records.py and appear here as parts of the replies.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from aiperf import scoring, timeline
from aiperf.states import ModelState
from master.store.records import AuditRecord, ModelRecord, RunRecord, RunWorker, WorkerRecord


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

    @classmethod
    def of(cls, m: ModelRecord) -> "HyperparameterObservation":
        return cls(model_id=m.id, round=m.round, worker_id=m.worker_id, batch_size=m.batch_size,
                   kernel_size=m.kernel_size,
                   accuracy=m.predicted_accuracy if m.predicted_accuracy is not None else (m.best_accuracy or 0.0))


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
    unofficial_reasons: tuple[str, ...] = ()  # why the run is not official (master/core/officiality.py)


@dataclass(frozen=True)
class Scoreboard:
    """A run's score and everything printed with it."""

    run: RunRecord
    result: scoring.ScoreResult
    rules: scoring.ProfileRules
    peak_flops: float | None       # sum of the accelerators' accepted peaks; None when that efficiency is unknown
    peak_verdict: str              # run_rules.peak_verdict: "checked", "capped", "unverified peak" or ""
    flops_mismatch_reports: int
    implausible_reports: int       # reports refused above the workers' accepted peaks in this run (stored)
    workers: list[RunWorker]       # the workers that took part, with their inventory when they joined
    workers_alive: int
    model_counts: dict[str, int]
    best_model_id: int | None
    images_trained: int
    images_validated: int
    unofficial_reasons: tuple[str, ...] = ()  # why the run is not official (master/core/officiality.py)
    audit: "RegulatedAudit | None" = None  # the audit of the model behind the regulated score
    datasheet_peak_flops: float | None = None  # sum of the accelerators' datasheet peaks (Rpeak); None: unknown
    efficiency_unknown_reason: str = ""  # why there is no datasheet efficiency (run_rules.datasheet_peaks)
    scoring_rules_version: str = ""  # the rules this master scores by (run.rules_version: those at its start)

    @property
    def accelerators(self) -> int:
        return sum(len(rw.inventory.get("accelerators", [])) for rw in self.workers)

    @property
    def models_done(self) -> int:
        return self.model_counts.get(ModelState.DONE, 0)


@dataclass(frozen=True)
class RegulatedAudit:
    """The model behind a run's regulated score and its latest audit (master/core/audits.py)."""

    model_id: int | None        # None: no accuracy reported yet
    status: str                 # aiperf.audit STATUS_*; "" when model_id is None
    latest: AuditRecord | None  # None: never audited


@dataclass(frozen=True)
class RunTimeline:
    """FLOPS(t) and best accuracy at each report, and resource means per time bucket."""

    run: RunRecord
    points: list[timeline.CurvePoint]
    resources: list[timeline.ResourcePoint]
