"""Per-worker identity through a real master on a loopback port.

The shared worker token admits a worker; the credential Register returns binds
every later call, and every Connect message, to one worker id. A call naming
another worker's id, or carrying no or a wrong credential, is PERMISSION_DENIED
and stores nothing; a live worker's name cannot be taken; a restarted worker
(or master) keeps working with the credential it kept.
"""

from __future__ import annotations

import asyncio
import hashlib
import string
from pathlib import Path
from typing import Any

import grpc
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from sqlalchemy import text

from aiperf.api import aiperf_pb2 as pb
from aiperf.api import aiperf_pb2_grpc as pb_grpc
from aiperf.api.calls import CREDENTIAL_METADATA
from aiperf.api.client import ApiError, ResourceSample, WorkerClient
from aiperf.flops import count_flops
from tests.support.fake_clock import FakeClock
from tests.support.master_clients import HP, clients, register

DENIED = grpc.StatusCode.PERMISSION_DENIED


def snapshot(h: Any) -> dict[str, Any]:
    """Everything a worker call could have written."""
    with h.store.engine.connect() as conn:
        tables = {t: conn.execute(text(f"SELECT * FROM {t} ORDER BY 1")).all()
                  for t in ("models", "progress", "resource_samples", "run_workers")}
        tables["workers"] = conn.execute(text("SELECT id, name, state, credential_hash FROM workers ORDER BY id")).all()
    return tables


def refused(fn, *args, **kwargs) -> ApiError:
    with pytest.raises(ApiError) as e:
        fn(*args, **kwargs)
    return e.value


def two_workers_and_a_model(h: Any, small_graph: Any) -> tuple[WorkerClient, WorkerClient, int, int, int, Any]:
    """Worker A (its own client) with a model in training and one report; worker B (another client)."""
    wa, c = clients(h)
    wb = WorkerClient(h.address, h.worker_token, retries=0)
    a, b = register(wa, "node-a"), register(wb, "node-b")
    c.start_run(600, profile="smoke")
    fc = count_flops(small_graph)
    mid = wa.submit_model(a, small_graph.to_json(), small_graph.hash(), 0, 1, HP).model_id
    wa.report_progress(a, mid, 1, 100, 0, 1, fc.ops(100, 0))
    return wa, wb, a, b, mid, fc


def test_every_worker_call_naming_another_workers_id_is_denied_and_stores_nothing(master_server, small_graph, db_url):
    h = master_server(db_url)
    wa, wb, a, b, mid, fc = two_workers_and_a_model(h, small_graph)
    key_a, key_b = wa.credential(a), wb.credential(b)
    before = snapshot(h)
    wb.set_credential(a, key_b)  # B's client names A's id, proving B's identity
    js, hs = small_graph.to_json(), small_graph.hash()
    calls = {
        "SubmitModel": lambda: wb.submit_model(a, js, hs, 0, 2, HP),
        "GetHistory": lambda: wb.get_history(a),
        "GetHyperparameterHistory": lambda: wb.get_hyperparameter_history(a),
        "FinishModel": lambda: wb.finish_model(a, mid, "done", best_accuracy=0.999, predicted_accuracy=0.999),
        "SendResourceSamples": lambda: wb.send_resource_samples(a, [ResourceSample(cpu_util=0.5)]),
        "Connect.heartbeat": lambda: wb.heartbeat(a, mid),
        "Connect.progress": lambda: wb.report_progress(a, mid, 2, 10**6, 0, 1, fc.ops(10**6, 0)),
    }
    for method, call in calls.items():
        err = refused(call)
        assert err.code == DENIED, method
        assert f"worker {a}" in err.details and "not this worker's" in err.details, (method, err.details)
        assert key_a not in err.details and key_b not in err.details, method
    assert snapshot(h) == before, "a refused call wrote something"
    m = wa.get_history(a).models[0]
    assert (m.state, m.images_trained, m.has_accuracy) == (pb.MODEL_TRAINING, 100, False)
    # both workers still work with their own credentials
    assert wa.report_progress(a, mid, 2, 50, 0, 1, fc.ops(50, 0)).master_flops == fc.ops(50, 0)
    assert wb.get_history(b).run_id == m.run_id


def test_a_connect_message_naming_another_worker_is_denied_and_the_stream_lives_on(master_server, small_graph):
    h = master_server()
    wa, wb, a, b, mid, fc = two_workers_and_a_model(h, small_graph)
    before = snapshot(h)
    channel = grpc.insecure_channel(h.address)
    metadata = (("authorization", f"Bearer {h.worker_token}"), (CREDENTIAL_METADATA, wb.credential(b)))
    messages = [
        pb.WorkerMessage(heartbeat=pb.HeartbeatRequest(worker_id=a)),
        pb.WorkerMessage(progress=pb.ProgressReport(worker_id=a, model_id=mid, seq=2, images_trained=10**6,
                                                    epoch=1, worker_flops=fc.ops(10**6, 0))),
        pb.WorkerMessage(progress=pb.ProgressReport(worker_id=b, model_id=mid, seq=2, images_trained=10**6,
                                                    epoch=1, worker_flops=fc.ops(10**6, 0))),
        pb.WorkerMessage(heartbeat=pb.HeartbeatRequest(worker_id=b)),
    ]
    replies = list(pb_grpc.WorkerServiceStub(channel).Connect(iter(messages), metadata=metadata, timeout=10))
    channel.close()
    assert [r.WhichOneof("body") for r in replies] == ["error", "error", "error", "heartbeat"]
    assert all(r.error.code == DENIED.value[0] for r in replies[:3])
    assert f"worker {a}:" in replies[0].error.message and f"worker {a}:" in replies[1].error.message
    assert f"belongs to worker {a}, not {b}" in replies[2].error.message  # B's own id, A's model
    assert replies[3].heartbeat.worker_state == pb.WORKER_ALIVE
    after = snapshot(h)
    assert after["models"] == before["models"] and after["progress"] == before["progress"]


@pytest.mark.parametrize("credential", [None, "", "x" * 43, "wrong"])
def test_a_missing_or_wrong_credential_is_denied_on_every_call(master_server, small_graph, credential):
    h = master_server()
    wa, _, a, _, mid, fc = two_workers_and_a_model(h, small_graph)
    before = snapshot(h)
    channel = grpc.insecure_channel(h.address)
    stub = pb_grpc.WorkerServiceStub(channel)
    metadata = (("authorization", f"Bearer {h.worker_token}"),)
    if credential is not None:
        metadata += ((CREDENTIAL_METADATA, credential),)
    unary = [
        (stub.SubmitModel, pb.SubmitModelRequest(worker_id=a, graph_json=small_graph.to_json(),
                                                 graph_hash=small_graph.hash(), round=2,
                                                 hyperparameters=pb.Hyperparameters(batch_size=32, kernel_size=3))),
        (stub.GetHistory, pb.GetHistoryRequest(worker_id=a)),
        (stub.GetHyperparameterHistory, pb.GetHyperparameterHistoryRequest(worker_id=a)),
        (stub.FinishModel, pb.FinishModelRequest(worker_id=a, model_id=mid, state=pb.MODEL_DONE)),
        (stub.SendResourceSamples, pb.SendResourceSamplesRequest(worker_id=a, samples=[pb.ResourceSample()])),
    ]
    for method, request in unary:
        with pytest.raises(grpc.RpcError) as e:
            method(request, metadata=metadata, timeout=10)
        assert e.value.code() == DENIED and f"worker {a}" in e.value.details()
        expected = "no worker credential" if not credential else "not this worker's"
        assert expected in e.value.details()
    stream = stub.Connect(iter([pb.WorkerMessage(heartbeat=pb.HeartbeatRequest(worker_id=a)),
                                pb.WorkerMessage(progress=pb.ProgressReport(worker_id=a, model_id=mid, seq=2,
                                                                            images_trained=1, epoch=1))]),
                          metadata=metadata, timeout=10)
    assert [r.error.code for r in stream] == [DENIED.value[0]] * 2
    channel.close()
    assert snapshot(h) == before


def test_forged_heartbeats_do_not_keep_another_worker_alive(master_server):
    clock = FakeClock()
    h = master_server(clock=clock, heartbeat_interval_s=5.0, tick_s=3600.0)
    wa, _ = clients(h)
    wb = WorkerClient(h.address, h.worker_token, retries=0)
    a, b = register(wa, "node-a"), register(wb, "node-b")
    wb.set_credential(a, wb.credential(b))
    for _ in range(4):
        clock.t += 4
        assert refused(wb.heartbeat, a).code == DENIED
        wb.heartbeat(b)
        h.master.tick()
    assert not h.master.is_alive(a) and h.master.is_alive(b)  # silent 16 s > 3 intervals


def test_a_live_workers_name_cannot_be_taken(master_server, small_graph):
    clock = FakeClock()
    h = master_server(clock=clock, heartbeat_interval_s=5.0, tick_s=3600.0)
    w, c = clients(h)
    reg = w.register(name="node-1", host="node-1")
    wid, key = reg.worker_id, reg.credential
    other = register(w, "node-2")
    assert len(key) == 43 and w.credential(wid) == key and w.credential(other) not in ("", key)
    c.start_run(600, profile="smoke")
    mid = w.submit_model(wid, small_graph.to_json(), small_graph.hash(), 0, 1, HP).model_id
    intruder = WorkerClient(h.address, h.worker_token, retries=0)
    for presented in ("", "guess", key[:-1]):
        err = refused(intruder.register, name="node-1", host="elsewhere", credential=presented)
        assert err.code == grpc.StatusCode.ALREADY_EXISTS
        assert "'node-1' is in use by a live worker" in err.details and "marked lost" in err.details
        assert key not in err.details
    assert w.get_history(wid).models[0].state == pb.MODEL_TRAINING, "the refused register abandoned nothing"
    assert h.store.get_worker(wid).host == "node-1"
    # the worker itself, restarted (silent for a heartbeat interval), presents the credential it kept:
    # same id, a new credential (the kept one is void from now on), old model abandoned
    clock.t += 5.0
    again = WorkerClient(h.address, h.worker_token, retries=0).register(name="node-1", host="node-1",
                                                                        credential=key)
    assert (again.worker_id, list(again.abandoned_model_ids)) == (wid, [mid])
    assert again.credential not in ("", key) and len(again.credential) == 43
    assert c.list_models(state="abandoned").models[0].reason == "worker restarted"


def test_the_name_is_free_once_its_worker_is_lost(master_server):
    clock = FakeClock()
    h = master_server(clock=clock, heartbeat_interval_s=5.0, tick_s=3600.0)
    old, _ = clients(h)
    wid = register(old, "node-1")
    old_key = old.credential(wid)
    clock.t += 16
    h.master.tick()
    assert h.store.get_worker(wid).state == "lost"
    new = WorkerClient(h.address, h.worker_token, retries=0)
    reg = new.register(name="node-1", host="node-1")  # no credential needed any more
    assert reg.worker_id == wid and reg.credential != old_key
    assert new.heartbeat(wid).worker_state == pb.WORKER_ALIVE
    err = refused(old.heartbeat, wid)  # the old process comes back: its credential is void
    assert err.code == DENIED and f"worker {wid}:" in err.details
    assert refused(old.register, name="node-1", host="node-1").code == grpc.StatusCode.ALREADY_EXISTS


def test_an_open_streams_credential_is_void_once_its_name_is_taken_over(master_server):
    # The master remembers the credential object a stream proved (it skips the hash on the
    # stream's later messages); a new credential for the worker must void that memo.
    import queue

    clock = FakeClock()
    h = master_server(clock=clock, heartbeat_interval_s=5.0, tick_s=3600.0)
    old, _ = clients(h)
    wid = register(old, "node-1")
    outbox: queue.Queue = queue.Queue()
    channel = grpc.insecure_channel(h.address)
    metadata = (("authorization", f"Bearer {h.worker_token}"), (CREDENTIAL_METADATA, old.credential(wid)))
    replies = pb_grpc.WorkerServiceStub(channel).Connect(iter(outbox.get, None), metadata=metadata, timeout=30)
    beat = pb.WorkerMessage(heartbeat=pb.HeartbeatRequest(worker_id=wid))
    try:
        for _ in range(2):  # proven once, then from the memo
            outbox.put(beat)
            assert next(replies).heartbeat.worker_state == pb.WORKER_ALIVE
        clock.t += 16
        h.master.tick()
        new = WorkerClient(h.address, h.worker_token, retries=0)
        assert new.register(name="node-1", host="node-1").worker_id == wid  # a new credential for the name
        outbox.put(beat)
        reply = next(replies)
        assert reply.WhichOneof("body") == "error" and reply.error.code == DENIED.value[0]
        assert new.heartbeat(wid).worker_state == pb.WORKER_ALIVE
    finally:
        outbox.put(None)
        channel.close()


def test_only_the_hash_of_a_credential_is_stored(master_server, tmp_path: Path):
    db = tmp_path / "hash.db"
    h = master_server(f"sqlite:///{db}")
    w, _ = clients(h)
    wid = register(w)
    key = w.credential(wid)
    with h.store.engine.connect() as conn:
        stored = conn.execute(text("SELECT credential_hash FROM workers WHERE id = :i"), {"i": wid}).scalar()
    assert stored == hashlib.sha256(key.encode()).hexdigest()
    h.stop()
    raw = b"".join(p.read_bytes() for p in tmp_path.glob("hash.db*"))
    assert stored.encode() in raw and key.encode() not in raw


def test_a_restarted_master_still_knows_every_credential(master_server, small_graph, tmp_path: Path):
    db = f"sqlite:///{tmp_path / 'restart.db'}"
    h = master_server(db)
    w, c = clients(h)
    a, b = register(w, "node-a"), register(w, "node-b")
    c.start_run(600, profile="smoke")
    mid = w.submit_model(a, small_graph.to_json(), small_graph.hash(), 0, 1, HP).model_id
    keys = {a: w.credential(a), b: w.credential(b)}
    h.stop()
    h2 = master_server(db)
    w2, _ = clients(h2)
    for wid, key in keys.items():
        w2.set_credential(wid, key)
    assert w2.heartbeat(a).worker_state == pb.WORKER_ALIVE
    assert w2.get_history(b).models[0].model_id == mid
    w2.set_credential(a, keys[b])
    assert refused(w2.finish_model, a, mid, "done", 0.9).code == DENIED
    # the restarted master gives its workers a grace period: their names are still theirs
    err = refused(WorkerClient(h2.address, h2.worker_token, retries=0).register, name="node-a", host="x")
    assert err.code == grpc.StatusCode.ALREADY_EXISTS
    # node-b has not called this master yet: its restart, presenting its kept credential, gets its id back
    assert w2.register(name="node-b", host="node-b", credential=keys[b]).worker_id == b


def test_random_credentials_are_never_accepted(master_server):
    h = master_server()
    w, _ = clients(h)
    wid = register(w)
    key = w.credential(wid)
    forger = WorkerClient(h.address, h.worker_token, retries=0)
    printable = st.text(alphabet=string.ascii_letters + string.digits + string.punctuation + " ", max_size=200)
    near_misses = st.builds(lambda i, c: key[:i] + c + key[i + 1:], st.integers(0, len(key)),
                            st.sampled_from(string.ascii_letters + string.digits + "-_"))

    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(st.one_of(printable, near_misses, st.just(key[:-1]), st.just(key + "A"), st.just(key.upper())))
    def check(guess: str) -> None:
        assume(guess.strip() != key)  # gRPC trims the whitespace around a metadata value
        forger.set_credential(wid, guess)
        with pytest.raises(ApiError) as e:
            forger.get_history(wid)
        assert e.value.code == DENIED and key not in e.value.details

    check()
    assert w.heartbeat(wid).worker_state == pb.WORKER_ALIVE  # the real one still works after the flood


def test_the_master_checks_credentials_in_one_place_without_grpc(tmp_path: Path):
    from master.core.identity import credential_hash
    from master.core.master import Master
    from master.core.requests import ProgressReport
    from master.store.errors import AlreadyExists, NotFound, PermissionDenied
    from master.store.records import WorkerInput
    from master.store.sql.sql_store import SqlStore

    store = SqlStore(f"sqlite:///{tmp_path / 'plain.db'}")
    # a worker registered before credentials existed (store call without a hash): it has none
    legacy, _ = store.register_worker(WorkerInput("old", "old", [], 1, 1, {}), 1.0)
    m = Master(store, clock=FakeClock())
    try:
        with pytest.raises(PermissionDenied, match=f"worker {legacy.id} registered before worker credentials"):
            m.heartbeat(legacy.id, credential="anything")
        reg = m.register(WorkerInput("old", "old", [], 1, 1, {}))  # claims the name: it had no credential
        assert reg.worker.id == legacy.id and store.worker_credential_hash(legacy.id) == credential_hash(reg.credential)
        assert m.heartbeat(legacy.id, credential=reg.credential)[1] == "alive"
        with pytest.raises(AlreadyExists):
            m.register(WorkerInput("old", "elsewhere", [], 1, 1, {}))
        with pytest.raises(AlreadyExists):  # a megabyte of credential is refused like any wrong one
            m.register(WorkerInput("old", "old", [], 1, 1, {}), "x" * 10**6)
        with pytest.raises(PermissionDenied, match="not this worker's"):
            m.heartbeat(legacy.id, credential=reg.credential + "x" * 10**6)
        with pytest.raises(NotFound):  # an unknown id is NOT_FOUND (the agent re-registers on it)
            m.heartbeat(999, credential=reg.credential)
        with pytest.raises(PermissionDenied, match="no worker credential"):
            asyncio.run(m.report_progress(ProgressReport(legacy.id, 1, 1, 1, 1, 0, None, 0), credential=""))
    finally:
        m.close()
        store.close()
