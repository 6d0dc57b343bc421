"""Where protobuf stops on the worker's side (aiperf/api/wire.py): every field of a message the
worker reads has a plain record field of the same name, holding the same value, with the states as
the enums of aiperf/states.py and hyperparameters as the one Hyperparameters type; a value this side
cannot read (an unknown state, hyperparameters breaking the rule) is None, never an exception."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from aiperf.api import aiperf_pb2 as pb
from aiperf.api import records, wire
from aiperf.hyperparameters import Hyperparameters
from aiperf.limits import MAX_KERNEL_SIZE
from aiperf.states import ModelState, RunState, WorkerState

# message -> (record, message fields the record leaves out or folds, each with its reason)
MIRRORED = {
    pb.Model: (records.ModelRecord, {}),
    pb.RunConfig: (records.RunConfig, {}),
    pb.Limits: (records.RunLimits, {}),
    pb.RunInfo: (records.RunInfo, {"outages": "the master's downtime: the CLI's business, not the worker's"}),
    pb.RegisterResponse: (records.Registration, {"has_run": "run is None", "master_time": "unused by workers",
                                                 "api_version": "checked by the master"}),
    pb.HeartbeatResponse: (records.Heartbeat, {"has_run": "run is None"}),
    pb.CheckpointToDelete: (records.CheckpointToDelete, {}),
}


def test_each_record_has_the_fields_of_its_message_and_the_same_names() -> None:
    for message, (record, left_out) in MIRRORED.items():
        wire_names = {f.name for f in message.DESCRIPTOR.fields} - set(left_out)
        record_names = {f.name for f in dataclasses.fields(record)}
        assert wire_names == record_names, f"{message.DESCRIPTOR.name} vs {record.__name__}"


def _model() -> pb.Model:
    return pb.Model(model_id=7, run_id=2, parent_id=3, worker_id=4, round=5, graph_json="{}", graph_hash="ab",
                    hyperparameters=pb.Hyperparameters(batch_size=64, kernel_size=5), state=pb.MODEL_DONE,
                    best_accuracy=0.5, predicted_accuracy=0.6, has_accuracy=True, created_at=1.0, finished_at=2.0,
                    reason="r", flops_per_train_image=30, flops_per_eval_image=10, images_trained=100,
                    images_validated=20, epochs=3, checkpoint_uri="file:///c", checkpoint_sha256="0" * 64,
                    inherited_from=3, checkpoint_deleted=True, checkpoint_delete_error="gone")


def test_a_model_keeps_every_value() -> None:
    m = _model()
    r = wire.model_record(m)
    assert r.state is ModelState.DONE and r.hyperparameters == Hyperparameters(64, 5)
    for f in dataclasses.fields(r):
        if f.name not in ("state", "hyperparameters"):
            assert getattr(r, f.name) == getattr(m, f.name), f.name


@settings(max_examples=200, deadline=None)
@given(batch=st.integers(0, 2**32 - 1), kernel=st.integers(0, 2**32 - 1), state=st.integers(0, 2**31 - 1))
def test_what_this_side_cannot_read_is_none(batch: int, kernel: int, state: int) -> None:
    r = wire.model_record(pb.Model(model_id=1, hyperparameters=pb.Hyperparameters(batch_size=batch, kernel_size=kernel),
                                   state=state))
    valid = batch >= 1 and kernel % 2 == 1 and kernel <= MAX_KERNEL_SIZE
    assert r.hyperparameters == (Hyperparameters(batch, kernel) if valid else None)
    known = {pb.ModelState.Value(f"MODEL_{s.name}"): s for s in ModelState}
    assert r.state is known.get(state)


def test_a_heartbeat_without_a_run_has_none_and_states_are_enums() -> None:
    hb = wire.heartbeat(pb.HeartbeatResponse(has_run=False, run=pb.RunInfo(state=pb.RUN_RUNNING),
                                             worker_state=pb.WORKER_LOST, heartbeat_interval_s=2.0))
    assert hb == records.Heartbeat(worker_state=WorkerState.LOST, run=None, heartbeat_interval_s=2.0)
    run = pb.RunInfo(state=pb.RUN_STOPPING, config=pb.RunConfig(
        run_id=9, profile=pb.PROFILE_OFFICIAL, precision=pb.PRECISION_MIXED_FP16, inherit=True,
        limits=pb.Limits(max_epochs_per_round=2)))
    got = wire.heartbeat(pb.HeartbeatResponse(has_run=True, run=run, worker_state=pb.WORKER_ALIVE))
    assert got.worker_state is WorkerState.ALIVE and got.run is not None and got.run.state is RunState.STOPPING
    assert (got.run.config.run_id, got.run.config.profile, got.run.config.precision, got.run.config.inherit,
            got.run.config.limits.max_epochs_per_round) == (9, "official", "mixed_fp16", True, 2)
    unknown = wire.run_config(pb.RunConfig(profile=77, precision=77))
    assert (unknown.profile, unknown.precision) == ("", "")


def test_a_registration_keeps_its_credential_and_abandoned_models() -> None:
    reg = wire.registration(pb.RegisterResponse(worker_id=3, credential="c" * 43, heartbeat_interval_s=5.0,
                                                has_run=False, abandoned_model_ids=[4, 5]))
    assert reg == records.Registration(worker_id=3, credential="c" * 43, heartbeat_interval_s=5.0, run=None,
                                       abandoned_model_ids=(4, 5))
    doomed = wire.checkpoints_to_delete([pb.CheckpointToDelete(model_id=2, uri="file:///x")])
    assert doomed == [records.CheckpointToDelete(2, "file:///x")]
