"""Credentials that rotate (master/core/identity.py): every Register returns a new credential
and voids the one before; a copy used after its owner restarted is refused; a copy used while
its owner is active voids the credential for both and is reported (a log line and
aiperf_credential_conflicts), rather than handing the name over. Real master, real port."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import grpc
import pytest

from aiperf.api import aiperf_pb2 as pb
from aiperf.api.client import ApiError, ControlClient, WorkerClient
from aiperf.hyperparameters import Hyperparameters
from tests.fake_clock import FakeClock

HP = Hyperparameters(32, 3)


def refused(fn: Any, *args: Any, **kwargs: Any) -> ApiError:
    with pytest.raises(ApiError) as e:
        fn(*args, **kwargs)
    return e.value


def client(h: Any) -> WorkerClient:
    return WorkerClient(h.address, h.worker_token, retries=0)


def as_holder(h: Any, worker_id: int, credential: str) -> WorkerClient:
    c = client(h)
    c.set_credential(worker_id, credential)
    return c


def test_every_register_rotates_and_a_copy_from_before_a_restart_is_refused(master_server: Any,
                                                                             small_graph: Any) -> None:
    clock = FakeClock()
    h = master_server(clock=clock, heartbeat_interval_s=5.0, tick_s=3600.0)
    owner = client(h)
    first = owner.register(name="node-1", host="node-1")
    wid, copy = first.worker_id, first.credential
    seen = {copy}
    for _ in range(3):  # the owner restarts, silent for a heartbeat interval each time
        clock.t += 5.0
        reg = client(h).register(name="node-1", host="node-1", credential=owner.credential(wid))
        assert reg.worker_id == wid and reg.credential not in seen and len(reg.credential) == 43
        seen.add(reg.credential)
        owner.set_credential(wid, reg.credential)
        assert owner.heartbeat(wid).worker_state == pb.WORKER_ALIVE
    thief = as_holder(h, wid, copy)
    assert refused(thief.heartbeat, wid).code == grpc.StatusCode.PERMISSION_DENIED
    clock.t += 5.0
    err = refused(client(h).register, name="node-1", host="x", credential=copy)
    assert err.code == grpc.StatusCode.ALREADY_EXISTS  # the old copy proves nothing
    assert owner.heartbeat(wid).worker_state == pb.WORKER_ALIVE, "the owner is untouched"


def test_a_copy_used_while_its_owner_is_active_voids_it_for_both(master_server: Any, small_graph: Any,
                                                                  caplog: Any, tmp_path: Path) -> None:
    clock = FakeClock()
    db = f"sqlite:///{tmp_path / 'm.db'}"
    h = master_server(db, clock=clock, heartbeat_interval_s=5.0, tick_s=3600.0)
    owner = client(h)
    reg = owner.register(name="node-1", host="node-1")
    wid, key = reg.worker_id, reg.credential
    ControlClient(h.address, h.admin_token).start_run(600)
    mid = owner.submit_model(wid, small_graph.to_json(), small_graph.hash(), 0, 1, HP).model_id
    clock.t += 3.0
    owner.heartbeat(wid, mid)  # the owner is active
    clock.t += 1.0
    with caplog.at_level(logging.WARNING, logger="master.core.identity"):
        err = refused(client(h).register, name="node-1", host="elsewhere", credential=key)
    assert err.code == grpc.StatusCode.PERMISSION_DENIED and "two processes hold it" in err.details
    assert key not in err.details
    assert [r.getMessage().split()[0] for r in caplog.records if "credential_conflict" in r.getMessage()] == [
        "event=credential_conflict"]
    assert h.master.metrics.credential_conflicts._value.get() == 1
    # both are refused now, the owner too, and nothing of the owner's was handed over
    err = refused(owner.heartbeat, wid)
    assert err.code == grpc.StatusCode.PERMISSION_DENIED and "voided" in err.details
    assert refused(as_holder(h, wid, key).finish_model, wid, mid, "done", 0.5).code == grpc.StatusCode.PERMISSION_DENIED
    assert h.store.get_model(mid).state == "training" and h.store.get_worker(wid).host == "node-1"
    # voided in the database: a restarted master refuses it too
    h.stop(grace_s=0)
    h2 = master_server(db, clock=clock, heartbeat_interval_s=5.0, tick_s=3600.0)
    assert refused(as_holder(h2, wid, key).heartbeat, wid).code == grpc.StatusCode.PERMISSION_DENIED
    err = refused(client(h2).register, name="node-1", host="node-1", credential=key)
    assert err.code == grpc.StatusCode.ALREADY_EXISTS  # the restart's grace: the name is not free yet
    # once the worker is marked lost, the name is free: whoever registers it gets a new credential
    clock.t += 40.0
    h2.master.tick()
    again = client(h2).register(name="node-1", host="node-1")
    assert again.worker_id == wid and again.credential != key
