"""The master's storage interface: plain records in, plain records out.

Small role protocols (RunStore, WorkerStore, ModelStore, ProgressStore, ...), so
that each caller depends on what it uses (the roster on runs and workers, the
progress writer on progress), and `Store`, all of them, which the Master holds.
One implementation, `SqlStore` in master/store/sql/sql_store.py (SQLAlchemy 2 on
SQLite or PostgreSQL). No SQL lives anywhere else. The store enforces the
invariants that must hold inside one transaction (a progress report belongs to
the worker's open model, a retried report is not counted twice, one active run,
...) and raises the errors of master/store/errors.py; the servicers map them to
gRPC status codes. A failed call writes nothing. Ownership is checked here and
nowhere else: a progress report or a finish for another worker's model is
refused with PermissionDenied.

Totals cannot overflow: a report is refused (InvalidArgument, for that item
only) when one of its figures or its model's running image totals would leave
a signed 64-bit integer, the widest integer both databases store; sums over
many rows (a run's images) are computed exactly, never in a 64-bit SQL SUM.

The master's clock defines a run's window: a running run stops at
min(now, deadline), so stopped_at never lies after the deadline, even when the
master was down at the deadline. The master stamps its liveness in the store
(`record_master_alive`); the gap between one life's last stamp and the next
life's start is an outage, listed in every run it overlapped (`RunRecord.outages`).
"""

from __future__ import annotations

import abc
from typing import Any, Protocol, Sequence

from aiperf.retention import StoredModel
from aiperf.scoring import Point
from master.store.records import (
    AuditInput,
    AuditRecord,
    ModelEnd,
    ModelRecord,
    NewModel,
    NewRun,
    Outage,
    ProgressInput,
    ProgressResult,
    ResourceSampleInput,
    ResourceSampleRecord,
    RunRecord,
    RunWorker,
    WorkerInput,
    WorkerRecord,
)


class RunStore(Protocol):
    """Runs: created, started, stopped and finished; the master's window of each."""

    @abc.abstractmethod
    def create_run(self, spec: NewRun, now: float, allow_concurrent: bool = False) -> RunRecord:
        """New run in state pending. FailedPrecondition when another run is
        active (pending/running/stopping) and allow_concurrent is false."""

    @abc.abstractmethod
    def get_run(self, run_id: int) -> RunRecord:
        """NotFound when unknown."""

    @abc.abstractmethod
    def current_run(self) -> RunRecord | None:
        """The newest active run (pending, running or stopping), if any."""

    @abc.abstractmethod
    def latest_run(self) -> RunRecord | None:
        """The newest run in any state."""

    @abc.abstractmethod
    def active_runs(self) -> list[RunRecord]: ...

    @abc.abstractmethod
    def list_runs(self, limit: int, offset: int = 0) -> tuple[list[RunRecord], int]:
        """A page of every run, newest first, and how many runs there are."""

    @abc.abstractmethod
    def start_run(self, run_id: int, now: float) -> RunRecord:
        """pending -> running: t0 = now, deadline = now + duration."""

    @abc.abstractmethod
    def stop_run(self, run_id: int, now: float, reason: str) -> RunRecord:
        """running -> stopping (stopped_at = min(now, deadline)); pending -> finished.
        Stopping an already stopping run is a no-op; FailedPrecondition when over."""

    @abc.abstractmethod
    def finish_run(self, run_id: int, now: float, state: str, reason: str) -> tuple[RunRecord, list[int]]:
        """-> finished or aborted; open models of the run become abandoned
        (their reported progress is kept). A run still running gets
        stopped_at = min(now, deadline). Returns the run and those model ids."""


class MasterLifeStore(Protocol):
    """The master's lives: its liveness stamps and the outages between them."""

    @abc.abstractmethod
    def record_master_start(self, now: float) -> Outage | None:
        """A new life of the master begins at `now`; returns the outage since
        the previous life's last liveness stamp (None for the first life)."""

    @abc.abstractmethod
    def record_master_alive(self, now: float) -> None:
        """The current life's liveness stamp (no-op before record_master_start)."""

    @abc.abstractmethod
    def outages(self) -> list[Outage]:
        """Every outage of the master, oldest first."""


class WorkerStore(Protocol):
    """Registered workers: their inventory, credential, state and last heartbeat."""

    @abc.abstractmethod
    def register_worker(self, info: WorkerInput, now: float,
                        credential_hash: str | None = None) -> tuple[WorkerRecord, list[int]]:
        """Create or update the worker named info.name (alive, heartbeat now).
        An existing worker's open models are abandoned (it restarted); their ids
        are returned. credential_hash, when given, becomes the worker's credential
        hash (None keeps the stored one). Whether the caller may take the name is
        the Master's decision (master/core/identity.py), made before this call."""

    @abc.abstractmethod
    def get_worker(self, worker_id: int) -> WorkerRecord: ...

    @abc.abstractmethod
    def worker_by_name(self, name: str) -> WorkerRecord | None: ...

    @abc.abstractmethod
    def worker_credential_hash(self, worker_id: int) -> str | None:
        """The hash of the worker's credential; None for a worker registered
        before credentials existed. NotFound when the worker is unknown."""

    @abc.abstractmethod
    def list_workers(self, state: str | None = None) -> list[WorkerRecord]: ...

    @abc.abstractmethod
    def open_models_by_worker(self) -> dict[int, tuple[int, int]]:
        """worker id -> (model id, run id) of the newest queued or training model of each worker that has one."""

    @abc.abstractmethod
    def record_heartbeats(self, beats: dict[int, float]) -> None:
        """Store last-heartbeat times (worker id -> time); a lost worker becomes alive."""

    @abc.abstractmethod
    def set_credential_hash(self, worker_id: int, digest: str) -> None:
        """Replace the worker's credential hash (a credential voided after a conflict)."""

    @abc.abstractmethod
    def mark_workers_lost(self, worker_ids: Sequence[int], now: float, reason: str = "worker lost") -> list[int]:
        """Workers -> lost, their open models -> abandoned (with `reason`); returns those model ids."""


class RunWorkerStore(Protocol):
    """The workers that took part in a run: when they joined, their dataset, their refused reports."""

    @abc.abstractmethod
    def join_run(self, run_id: int, worker_id: int, now: float) -> bool:
        """Record that the worker takes part in the run; False when already recorded."""

    @abc.abstractmethod
    def run_workers(self, run_id: int) -> list[RunWorker]: ...

    @abc.abstractmethod
    def record_dataset(self, run_id: int, worker_id: int, dataset: dict[str, Any], now: float) -> None:
        """Record the dataset the worker trains on in the run (joining it if it had not)."""

    @abc.abstractmethod
    def add_implausible_reports(self, counts: dict[tuple[int, int], int], now: float) -> None:
        """Add to each (run, worker)'s count of reports refused as implausible (joining it to the run if needed)."""

    @abc.abstractmethod
    def worker_run_ops(self, run_id: int, worker_id: int) -> int:
        """The master-counted operations of all the worker's reports in the run."""


class ModelStore(Protocol):
    """The models of a run: submitted, listed, ranked and finished."""

    @abc.abstractmethod
    def add_model(self, new: NewModel, now: float, max_models: int = 0) -> ModelRecord:
        """NotFound: parent not in the run; FailedPrecondition: the run is not
        running, its deadline has passed (now > deadline) or max_models is reached."""

    @abc.abstractmethod
    def get_model(self, model_id: int) -> ModelRecord: ...

    @abc.abstractmethod
    def models_since(self, run_id: int, since_id: int, limit: int = 0) -> list[ModelRecord]:
        """Models of the run with id > since_id, ascending."""

    @abc.abstractmethod
    def ranked_done_ids(self, run_id: int, limit: int = 0) -> list[int]:
        """Ids of DONE models, best first (aiperf.scoring.model_rank_key): predicted accuracy
        (best accuracy when no prediction), then best accuracy, then id; the first `limit`
        (0: all)."""

    @abc.abstractmethod
    def list_models(
        self, run_id: int, state: str | None = None, limit: int = 1000, offset: int = 0
    ) -> tuple[list[ModelRecord], int]:
        """A page of the run's models (ascending id) and the total count."""

    @abc.abstractmethod
    def count_models(self, run_id: int) -> dict[str, int]: ...

    @abc.abstractmethod
    def finish_model(self, end: ModelEnd, now: float) -> ModelRecord:
        """-> done or failed, with the checkpoint of a done model ("" none). PermissionDenied:
        another worker's model; FailedPrecondition: abandoned, already finished in another
        state, another checkpoint is recorded for it, or a checkpoint for a model no longer
        open (a checkpoint comes once, with the finish of an open model).
        A best accuracy above every reported one is added to the time line as
        a zero-image report at `now`, so the time line holds every accuracy."""

    @abc.abstractmethod
    def graphs_with_hash(self, run_id: int, graph_hash: str, limit: int) -> list[str]:
        """The graph JSON of the run's first `limit` models of this architecture, ascending id."""

    @abc.abstractmethod
    def hyperparameter_history(self, run_id: int) -> list[ModelRecord]:
        """DONE models of the run, ascending id."""


class RetentionStore(Protocol):
    """What checkpoint retention reads and records: the checkpoints kept, let go, or not deleted."""

    @abc.abstractmethod
    def stored_checkpoints(self, run_id: int) -> list[tuple[StoredModel, int, str]]:
        """The run's models that retention looks at, with their worker id and checkpoint URI
        ("" none): those whose checkpoint is recorded and not deleted, and the open ones
        (queued, training), whose parents it keeps. Not the whole history: a FinishModel reads
        this, at any run length."""

    @abc.abstractmethod
    def mark_checkpoints_deleted(self, model_ids: Sequence[int]) -> None:
        """Record that these models' checkpoints were handed to their worker for deletion."""

    @abc.abstractmethod
    def restore_checkpoints(self, worker_id: int, undeleted: Sequence[tuple[int, str]]) -> list[int]:
        """Record as stored, with the error, the checkpoints (model id, error) their worker could
        not delete; stored_checkpoints leaves them out from then on (retention does not let them
        go again). Returns the ids that were recorded as deleted. NotFound: no such model;
        PermissionDenied: another worker's model (nothing is changed)."""


class ProgressStore(Protocol):
    """Progress reports: recorded in batches, read back as the run's time line and totals."""

    @abc.abstractmethod
    def add_progress(self, items: Sequence[ProgressInput]) -> list[ProgressResult]:
        """Record reports in one transaction. Per item: NotFound (no model),
        PermissionDenied (another worker's model), FailedPrecondition (model
        not open, or its run is over), InvalidArgument (a figure, or the model's
        image totals with it, outside [0, INT64_MAX]) in `error`, nothing
        written for it; `duplicate` when (model_id, seq) was already recorded.
        A queued model becomes training at its first report. A report stamped
        after the run's deadline (or stop) is recorded but not scored."""

    @abc.abstractmethod
    def progress_seq(self, model_id: int, seq: int) -> tuple[int, bool]:
        """The model's highest recorded seq (0: none) and whether `seq` is recorded."""

    @abc.abstractmethod
    def timeline(self, run_id: int) -> list[Point]:
        """Every progress report of the run as scoring points, by time."""

    @abc.abstractmethod
    def run_images(self, run_id: int) -> tuple[int, int]:
        """Images trained and validated by all models of the run (exact, any size)."""

    @abc.abstractmethod
    def flops_mismatch_count(self, run_id: int) -> int: ...

    @abc.abstractmethod
    def accuracy_reports(self, run_id: int) -> list[tuple[int, float, float]]:
        """(model id, accuracy, t) of every report of the run that carried one, in the order
        received (by t, then id)."""

    @abc.abstractmethod
    def accuracy_model_at(self, run_id: int, t: float) -> int | None:
        """The model behind acc(t): of the run's reports received by t, the one with the highest
        accuracy (the earliest on a tie); None when none reported an accuracy."""


class ResourceStore(Protocol):
    """The workers' resource samples (utilization, memory)."""

    @abc.abstractmethod
    def add_resource_samples(self, run_id: int | None, items: Sequence[ResourceSampleInput]) -> int: ...

    @abc.abstractmethod
    def resource_samples(self, worker_id: int | None = None, run_id: int | None = None) -> list[ResourceSampleRecord]: ...


class AuditStore(Protocol):
    """Audits of DONE models' stored weights."""

    @abc.abstractmethod
    def add_audit(self, audit: AuditInput) -> AuditRecord:
        """Record an audit of a model (NotFound: no such model); its run is the model's."""

    @abc.abstractmethod
    def audits(self, run_id: int) -> list[AuditRecord]:
        """Every audit of the run's models, oldest first."""

    @abc.abstractmethod
    def stamped_digests(self, model_id: int) -> list[tuple[int, float, str]]:
        """(epoch, master time, weights digest) of each of the model's reports that carried a
        digest (an epoch's end), in the order received."""

    @abc.abstractmethod
    def epoch_accuracy(self, model_id: int, epoch: int) -> float | None:
        """The accuracy the model's report closing `epoch` carried (the last such); None: none did."""

    @abc.abstractmethod
    def model_owners(self, run_id: int) -> list[tuple[int, int]]:
        """(model id, worker id) of every model of the run, ascending id: what node audits draw from."""

    @abc.abstractmethod
    def latest_audit(self, model_id: int) -> AuditRecord | None:
        """The model's most recent audit of its weights (node audits aside); None when there is none."""


class Store(RunStore, MasterLifeStore, WorkerStore, RunWorkerStore, ModelStore, RetentionStore, ProgressStore,
            ResourceStore, AuditStore, Protocol):
    """Everything the master keeps: every role above, and close(). Times are master-clock seconds."""

    @abc.abstractmethod
    def close(self) -> None: ...
