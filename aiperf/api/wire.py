"""The messages of aiperf_pb2 as the plain records of aiperf.api.records, and back: where
protobuf stops on a worker's side (the master's end is master/rpc/conversions.py)."""

from __future__ import annotations

from typing import Iterable

from aiperf.api import aiperf_pb2 as pb
from aiperf.api.enums import MODEL_STATES, PRECISIONS, PROFILES, RUN_STATES, WORKER_STATES
from aiperf.api.records import CheckpointToDelete, Heartbeat, ModelRecord, Registration, RunConfig, RunInfo
from aiperf.hyperparameters import HyperparameterError, Hyperparameters
from aiperf.run_spec import RunLimits


def hyperparameters_of(h: pb.Hyperparameters) -> Hyperparameters | None:
    """The hyperparameters of a message; None when they break the rule (a history row is
    read as stored, and the tuner and the agent leave such a row out)."""
    try:
        return Hyperparameters(int(h.batch_size), int(h.kernel_size))
    except HyperparameterError:
        return None


def run_config(c: pb.RunConfig) -> RunConfig:
    return RunConfig(
        run_id=c.run_id, profile=PROFILES.get(c.profile, ""), seed=c.seed, duration_s=c.duration_s,
        precision=PRECISIONS.get(c.precision, ""),
        limits=RunLimits(c.limits.max_models, c.limits.max_rounds_per_worker, c.limits.max_epochs_per_round),
        warmup_rounds=c.warmup_rounds, min_running_time_s=c.min_running_time_s,
        report_interval_s=c.report_interval_s, resource_interval_s=c.resource_interval_s,
        min_workers=c.min_workers, deterministic=c.deterministic, xla=c.xla, inherit=c.inherit,
        keep_checkpoints=c.keep_checkpoints,
    )


def run_info(r: pb.RunInfo) -> RunInfo:
    return RunInfo(
        config=run_config(r.config), state=RUN_STATES.get(r.state), created_at=r.created_at,
        started_at=r.started_at, deadline=r.deadline, stopped_at=r.stopped_at, finished_at=r.finished_at,
        stop_reason=r.stop_reason, rules_version=r.rules_version,
    )


def model_record(m: pb.Model) -> ModelRecord:
    return ModelRecord(
        model_id=m.model_id, run_id=m.run_id, state=MODEL_STATES.get(m.state),
        hyperparameters=hyperparameters_of(m.hyperparameters), parent_id=m.parent_id, worker_id=m.worker_id,
        round=m.round, graph_json=m.graph_json, graph_hash=m.graph_hash, best_accuracy=m.best_accuracy,
        predicted_accuracy=m.predicted_accuracy, has_accuracy=m.has_accuracy, created_at=m.created_at,
        finished_at=m.finished_at, reason=m.reason, flops_per_train_image=m.flops_per_train_image,
        flops_per_eval_image=m.flops_per_eval_image, images_trained=m.images_trained,
        images_validated=m.images_validated, epochs=m.epochs, checkpoint_uri=m.checkpoint_uri,
        checkpoint_sha256=m.checkpoint_sha256, inherited_from=m.inherited_from,
        checkpoint_deleted=m.checkpoint_deleted, checkpoint_delete_error=m.checkpoint_delete_error,
        init_seed=m.init_seed,
    )


def registration(r: pb.RegisterResponse) -> Registration:
    return Registration(
        worker_id=r.worker_id, credential=r.credential, heartbeat_interval_s=r.heartbeat_interval_s,
        run=run_info(r.run) if r.has_run else None, abandoned_model_ids=tuple(r.abandoned_model_ids),
    )


def heartbeat(h: pb.HeartbeatResponse) -> Heartbeat:
    return Heartbeat(
        worker_state=WORKER_STATES.get(h.worker_state), run=run_info(h.run) if h.has_run else None,
        heartbeat_interval_s=h.heartbeat_interval_s, master_time=h.master_time,
    )


def checkpoints_to_delete(doomed: Iterable[pb.CheckpointToDelete]) -> list[CheckpointToDelete]:
    return [CheckpointToDelete(d.model_id, d.uri) for d in doomed]
