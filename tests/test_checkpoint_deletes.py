"""A checkpoint retention let go that its worker could not delete (FinishModelRequest.
undeleted_checkpoints): the worker says so with its next FinishModel, the master records it as
stored with the error and never lets it go again; only the worker's own, within bounds; the
column survives a migration round trip (0008)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aiperf.api import aiperf_pb2 as pb
from aiperf.api.bounds import MAX_REASON_CHARS, MAX_UNDELETED_PER_FINISH
from aiperf.api.client import ApiError, ControlClient
from tests.schema_round_trip import down_and_up
from tests.test_checkpoints import HP, _children, _done, _file, _worker
from worker.checkpoints import CheckpointError


def test_the_worker_reports_what_it_could_not_delete_and_the_master_keeps_it_stored(
        master_server, small_graph, tmp_path, monkeypatch, capsys):
    from aiperf.hyperparameters import Hyperparameters
    from cli.main import main
    from worker.agent import Agent, AgentConfig, Outbox
    from worker.trainer import TrainResult

    h = master_server()
    control = ControlClient(h.address, h.admin_token)
    run_id = control.start_run(600, profile="smoke", seed=1, keep_checkpoints=1).config.run_id
    agent = Agent(AgentConfig(master=h.address, token=h.worker_token, name="keeper", measure_peak=False,
                              checkpoints=str(tmp_path / "store")))

    def refuse(uri: str) -> None:
        raise CheckpointError(f"cannot delete {uri}: permission denied")

    try:
        agent._register()
        ids = [agent._submit(g, 0, n + 1, Hyperparameters(32, 3))
               for n, g in enumerate([small_graph, *_children(small_graph, 2)])]
        ckpts = [agent.inheritance.store.put(run_id, mid, _file(tmp_path / f"{mid}.weights.h5", b"w" * mid))
                 for mid in ids]
        monkeypatch.setattr(agent.inheritance.store, "delete", refuse)
        box = Outbox()
        # keep 1: m1 is the top and the record; m2 is let go at its own finish and not deleted,
        # which m3's finish reports; m3 is let go at its finish and not deleted either
        for n, (mid, acc) in enumerate(zip(ids, (0.6, 0.5, 0.4))):
            agent._finish(box, mid, n + 1, TrainResult("done", (acc,), 1, 100, 10, 1, acc, acc), ckpts[n])
        box.close()
        assert all(Path(c.uri[len("file://"):]).exists() for c in ckpts)
        models = {m.model_id: m for m in control.list_models().models}
        assert not models[ids[1]].checkpoint_deleted and "permission denied" in models[ids[1]].checkpoint_delete_error
        assert models[ids[2]].checkpoint_deleted and not models[ids[2]].checkpoint_delete_error, \
            "its failure waits for the worker's next FinishModel"
        assert agent.inheritance.undeleted == [(ids[2], f"cannot delete {ckpts[2].uri}: permission denied")]
        assert ids[1] not in {m.model_id for m, _, _ in h.store.stored_checkpoints(run_id)}, \
            "retention does not let it go again"
        monkeypatch.setenv("AIPERF_MASTER", h.address)
        monkeypatch.setenv("AIPERF_ADMIN_TOKEN", h.admin_token)
        assert main(["models", "--json"]) == 0
        rows = {m["model_id"]: m for m in json.loads(capsys.readouterr().out)["models"]}
        assert "permission denied" in rows[ids[1]]["checkpoint"]["delete_error"]
        assert rows[ids[0]]["checkpoint"]["delete_error"] is None
    finally:
        agent.stream.close()
        agent.client.close()


def _released(h, small_graph):
    """Two workers; worker A's m1 (top 1) and m2 (let go at its finish). -> (a, b, m1, m2)."""
    ControlClient(h.address, h.admin_token).start_run(600, profile="smoke", seed=1, keep_checkpoints=1)
    a, wa = _worker(h, "node-a")
    b, wb = _worker(h, "node-b")
    g1, g2 = _children(small_graph, 2)
    m1, _ = _done(a, wa, g1, 0, 1, 0.6, "file:///s/run-1/model-1.weights.h5", reported=False)
    m2, reply = _done(a, wa, g2, 0, 2, 0.5, "file:///s/run-1/model-2.weights.h5", reported=False)
    assert [d.model_id for d in reply.delete_checkpoints] == [m2]
    return (a, wa), (b, wb), m1, m2


def _open_model(client, wid: int, graph, rnd: int) -> int:
    return client.submit_model(wid, graph.to_json(), graph.hash(), 0, rnd, HP).model_id


def test_only_the_workers_own_checkpoints_and_within_bounds(master_server, small_graph):
    h = master_server()
    (a, wa), (b, wb), m1, m2 = _released(h, small_graph)
    g3, g4 = _children(small_graph, 4)[2:]
    other = _open_model(b, wb, g3, 1)
    with pytest.raises(ApiError) as e:  # B speaks for A's checkpoint
        b.finish_model(wb, other, "failed", reason="x", undeleted=[(m2, "gone")])
    assert e.value.code.name == "PERMISSION_DENIED" and f"model {m2}" in e.value.details
    mine = _open_model(a, wa, g4, 3)
    for undeleted, code in (([(10**6, "x")], "NOT_FOUND"),
                            ([(m2, "x")] * (MAX_UNDELETED_PER_FINISH + 1), "INVALID_ARGUMENT"),
                            ([(0, "x")], "INVALID_ARGUMENT")):
        with pytest.raises(ApiError) as e:
            a.finish_model(wa, mine, "failed", reason="x", undeleted=undeleted)
        assert e.value.code.name == code, (undeleted[:1], e.value)
    bad = pb.FinishModelRequest(worker_id=wa, model_id=mine, state=pb.MODEL_FAILED, reason="x",
                                undeleted_checkpoints=[pb.CheckpointNotDeleted(model_id=m2, error="a\x00b")])
    with pytest.raises(ApiError) as e:  # a raw request: the client would have cleaned the text
        a._call("FinishModel", a._stub.FinishModel, bad, retry=False)
    assert e.value.code.name == "INVALID_ARGUMENT"
    assert h.store.get_model(m2).checkpoint_deleted, "a refused request changes nothing"
    # a checkpoint that was never let go (m1) is not marked; the released one is, once
    a.finish_model(wa, mine, "failed", reason="x", undeleted=[(m1, "no"), (m2, "read-only file system")])
    assert (h.store.get_model(m1).checkpoint_delete_error, h.store.get_model(m1).checkpoint_deleted) == ("", False)
    m = h.store.get_model(m2)
    assert (m.checkpoint_deleted, m.checkpoint_delete_error) == (False, "read-only file system")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(0, 2**64 - 1), st.text(max_size=MAX_REASON_CHARS + 20)), max_size=5))
def test_any_report_is_an_answer_and_never_touches_another_workers_model(master_server, small_graph, undeleted):
    h = master_server()
    (a, wa), (b, wb), m1, m2 = _released(h, small_graph)
    mine = _open_model(b, wb, _children(small_graph, 3)[2], 1)
    request = pb.FinishModelRequest(worker_id=wb, model_id=mine, state=pb.MODEL_FAILED, reason="x",
                                    undeleted_checkpoints=[pb.CheckpointNotDeleted(model_id=i, error=t)
                                                           for i, t in undeleted])
    try:
        b._call("FinishModel", b._stub.FinishModel, request, retry=False)
    except ApiError as e:
        assert e.code.name in {"INVALID_ARGUMENT", "NOT_FOUND", "PERMISSION_DENIED"}, e
    assert h.store.get_model(m2).checkpoint_deleted and not h.store.get_model(m2).checkpoint_delete_error
    assert not h.store.get_model(m1).checkpoint_delete_error


def test_migration_0008_round_trips_and_older_models_have_no_delete_error(db_url: str):
    from master.sqlstore import SqlStore
    from master.store import NewModel, NewRun, WorkerInput

    s = SqlStore(db_url)
    try:
        run = s.start_run(s.create_run(NewRun("smoke", 1, 600.0, "fp32", {"limits": {}}, {}), 100.0).id, 100.0)
        w, _ = s.register_worker(WorkerInput("n", "n", [], 1, 1, {}), 100.0)
        a = s.add_model(NewModel(run.id, None, w.id, 1, "{}", "ab" * 32, 32, 3, "training", 30, 10), 101.0).id
        s.finish_model(a, w.id, "done", "", 0.5, None, 103.0, "file:///c/model-1.weights.h5", "0" * 64)
        s.mark_checkpoints_deleted([a])
        assert s.restore_checkpoints(w.id, [(a, "busy")]) == [a]
        assert s.get_model(a).checkpoint_delete_error == "busy"
    finally:
        s.close()
    down_and_up(db_url, "0007")
    s = SqlStore(db_url)
    try:
        old = s.get_model(a)
        assert (old.checkpoint_delete_error, old.checkpoint_deleted) == ("", False)
        assert [m.model_id for m, _, _ in s.stored_checkpoints(run.id)] == [a], "stored again, as recorded"
    finally:
        s.close()


def test_a_finish_refused_for_its_undeleted_list_goes_through_without_it(master_server, small_graph, tmp_path,
                                                                          caplog):
    """Undeleted ids the master does not know (a master on another database) must not hold back
    the model's own finish: it is sent again without them, and they are dropped."""
    import logging

    from aiperf.hyperparameters import Hyperparameters
    from worker.agent import Agent, AgentConfig, Outbox
    from worker.trainer import TrainResult

    h = master_server()
    control = ControlClient(h.address, h.admin_token)
    control.start_run(600, profile="smoke", seed=1)
    agent = Agent(AgentConfig(master=h.address, token=h.worker_token, name="w", measure_peak=False,
                              checkpoints=str(tmp_path / "store")))
    try:
        agent._register()
        mid = agent._submit(small_graph, 0, 1, Hyperparameters(32, 3))
        agent.inheritance.undeleted.append((10**6, "permission denied"))
        box = Outbox()
        with caplog.at_level(logging.WARNING, logger="worker.agent"):
            agent._finish(box, mid, 1, TrainResult("done", (0.5,), 1, 100, 10, 1, 0.5, 0.5), None)
            box.close()
        assert control.list_models().models[0].state == pb.MODEL_DONE
        assert agent.inheritance.undeleted == [] and "event=undeleted_refused" in caplog.text
    finally:
        agent.stream.close()
        agent.client.close()
