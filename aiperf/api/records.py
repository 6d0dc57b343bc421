"""Plain records of what the master answers a worker: what the worker agent holds, with the
states as the enums of aiperf/states.py and hyperparameters as the one `Hyperparameters` type.

Protobuf stops in aiperf.api: `aiperf.api.wire` turns the messages into these records and
`aiperf.api.session.WorkerSession` answers with them, so worker/ never sees a message. The
field names are the messages' own (docs/spec.md describes them); a state the master sends that
this side does not know is None, a profile or precision "".
"""

from __future__ import annotations

from dataclasses import dataclass

from aiperf.hyperparameters import Hyperparameters
from aiperf.run_spec import RunLimits
from aiperf.states import ModelState, RunState, WorkerState


@dataclass(frozen=True)
class RunConfig:
    run_id: int
    profile: str = ""    # "official", "smoke"; "": unknown to this side
    seed: int = 0
    duration_s: float = 0.0
    precision: str = ""  # a name of aiperf.precision.PRECISIONS; "": unknown to this side
    limits: RunLimits = RunLimits()
    warmup_rounds: int = 0
    min_running_time_s: float = 0.0
    report_interval_s: float = 0.0
    resource_interval_s: float = 0.0
    min_workers: int = 0
    deterministic: bool = False
    xla: bool = False
    inherit: bool = False
    keep_checkpoints: int = 0


@dataclass(frozen=True)
class RunInfo:
    config: RunConfig
    state: RunState | None
    created_at: float = 0.0
    started_at: float = 0.0
    deadline: float = 0.0
    stopped_at: float = 0.0
    finished_at: float = 0.0
    stop_reason: str = ""
    rules_version: str = ""


@dataclass(frozen=True)
class ModelRecord:
    """One model of a run's history (the Model message)."""

    model_id: int
    run_id: int
    state: ModelState | None
    # None: the stored values break the rule (the master checks them; the worker never trusts)
    hyperparameters: Hyperparameters | None
    parent_id: int = 0
    worker_id: int = 0
    round: int = 0
    graph_json: str = ""
    graph_hash: str = ""
    best_accuracy: float = 0.0
    predicted_accuracy: float = 0.0
    has_accuracy: bool = False
    created_at: float = 0.0
    finished_at: float = 0.0
    reason: str = ""
    flops_per_train_image: int = 0
    flops_per_eval_image: int = 0
    images_trained: int = 0
    images_validated: int = 0
    epochs: int = 0
    checkpoint_uri: str = ""
    checkpoint_sha256: str = ""
    inherited_from: int = 0
    checkpoint_deleted: bool = False
    checkpoint_delete_error: str = ""
    init_seed: int = 0  # the master's initialisation seed (ListModels to an admin only; 0 otherwise)


@dataclass(frozen=True)
class SubmittedModel:
    """What SubmitModel answers a worker: the new model's id and the seed its fresh weights come from."""

    model_id: int
    init_seed: int


@dataclass(frozen=True)
class Registration:
    """What Register answers: the worker's id and credential, and the active run (None: none)."""

    worker_id: int
    credential: str
    heartbeat_interval_s: float = 0.0
    run: RunInfo | None = None
    abandoned_model_ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class Heartbeat:
    """What a heartbeat answers: the active run (None: none) and the worker's state."""

    worker_state: WorkerState | None
    run: RunInfo | None = None
    heartbeat_interval_s: float = 0.0
    master_time: float = 0.0


@dataclass(frozen=True)
class CheckpointToDelete:
    """A checkpoint of this worker that retention lets go."""

    model_id: int
    uri: str
