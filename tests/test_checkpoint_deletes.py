"""A checkpoint retention let go that its worker could not delete (FinishModelRequest.
undeleted_checkpoints): the worker says so with its next FinishModel, the master records it as
stored with the error and never lets it go again; only the worker's own, within bounds; the
column survives a migration round trip (0008). The worker keeps the list in its state directory
(worker/undeleted.py), so a restarted worker still sends it; the deletes in flight kept there
too: tests/test_deletes_in_flight.py."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aiperf.api import aiperf_pb2 as pb
from aiperf.api.bounds import MAX_CHECKPOINT_URI_CHARS, MAX_ID, MAX_REASON_CHARS, MAX_UNDELETED_PER_FINISH, clip_text
from aiperf.api.client import ApiError, ControlClient
from master.store.records import ModelEnd
from tests.support.checkpoint_runs import (
    RefusingStore,
    checkpoint_worker,
    finish_done,
    finish_failed,
    finish_two,
    morph_children,
    write_file,
)
from tests.support.master_clients import HP
from tests.support.schema_round_trip import down_and_up
from worker.checkpoints import CheckpointError
from worker.inheritance import Inheritance
from worker.undeleted import MAX_DELETING, MAX_ENTRIES, MAX_FILE_BYTES, Kept, UndeletedFile

_PRINTABLE = st.characters(exclude_categories=("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp", "Zs"), include_characters=" ")


def test_the_worker_reports_what_it_could_not_delete_and_the_master_keeps_it_stored(
        master_server, small_graph, tmp_path, monkeypatch, capsys):
    from aiperf.hyperparameters import Hyperparameters
    from aiperf_cli.main import main
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
               for n, g in enumerate([small_graph, *morph_children(small_graph, 2)])]
        ckpts = [agent.inheritance.store.put(run_id, mid, write_file(tmp_path / f"{mid}.weights.h5", b"w" * mid))
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
        agent.client.close()


def _released(h, small_graph):
    """Two workers; worker A's m1 (top 1) and m2 (let go at its finish). -> (a, b, m1, m2)."""
    ControlClient(h.address, h.admin_token).start_run(600, profile="smoke", seed=1, keep_checkpoints=1)
    a, wa = checkpoint_worker(h, "node-a")
    b, wb = checkpoint_worker(h, "node-b")
    g1, g2 = morph_children(small_graph, 2)
    m1, _ = finish_done(a, wa, g1, 0, 1, 0.6, "file:///s/run-1/model-1.weights.h5", reported=False)
    m2, reply = finish_done(a, wa, g2, 0, 2, 0.5, "file:///s/run-1/model-2.weights.h5", reported=False)
    assert [d.model_id for d in reply.delete_checkpoints] == [m2]
    return (a, wa), (b, wb), m1, m2


def _open_model(client, wid: int, graph, rnd: int) -> int:
    return client.submit_model(wid, graph.to_json(), graph.hash(), 0, rnd, HP).model_id


def test_only_the_workers_own_checkpoints_and_within_bounds(master_server, small_graph):
    h = master_server()
    (a, wa), (b, wb), m1, m2 = _released(h, small_graph)
    g3, g4 = morph_children(small_graph, 4)[2:]
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
    mine = _open_model(b, wb, morph_children(small_graph, 3)[2], 1)
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
    from master.store.records import NewModel, NewRun, WorkerInput
    from master.store.sql.sql_store import SqlStore

    s = SqlStore(db_url)
    try:
        run = s.start_run(s.create_run(NewRun("smoke", 1, 600.0, "fp32", {"limits": {}}, {}), 100.0).id, 100.0)
        w, _ = s.register_worker(WorkerInput("n", "n", [], 1, 1, {}), 100.0)
        a = s.add_model(NewModel(run.id, None, w.id, 1, "{}", "ab" * 32, 32, 3, "training", 30, 10), 101.0).id
        s.finish_model(ModelEnd(a, w.id, "done", "", 0.5, None, "file:///c/model-1.weights.h5", "0" * 64), 103.0)
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
        agent.client.close()


# ---------------------------------------------------------------- kept across restarts (worker/undeleted.py)


def test_a_restarted_worker_sends_what_its_earlier_life_could_not_delete(master_server, small_graph, tmp_path,
                                                                        monkeypatch):
    from worker.agent import Agent, AgentConfig

    h = master_server()
    control = ControlClient(h.address, h.admin_token)
    run_id = control.start_run(600, profile="smoke", seed=1, keep_checkpoints=1).config.run_id
    state = tmp_path / "state"
    cfg = AgentConfig(master=h.address, token=h.worker_token, name="keeper", measure_peak=False, state_dir=state)
    agents = [first := Agent(cfg)]

    def refuse(uri: str) -> None:
        raise CheckpointError(f"cannot delete {uri}: permission denied")

    try:
        ids, ckpts, g3 = finish_two(first, run_id, small_graph, tmp_path, monkeypatch, refuse)
        error = f"cannot delete {ckpts[1].uri}: permission denied"
        assert first.inheritance.undeleted == [(ids[1], error)]
        [kept] = state.glob("undeleted-*.json")
        assert (kept.stat().st_mode & 0o777) == 0o600
        assert h.store.get_model(ids[1]).checkpoint_deleted, "the master waits for the worker's next FinishModel"

        # the process stops before its next FinishModel; a new one with the same name and master
        agents.append(second := Agent(cfg))
        assert second.inheritance.undeleted == [(ids[1], error)]
        second._register()
        assert second.worker_id == first.worker_id
        finish_failed(second, g3)
        m2 = h.store.get_model(ids[1])
        assert (m2.checkpoint_deleted, m2.checkpoint_delete_error) == (False, error)
        assert Path(ckpts[1].uri[len("file://"):]).exists(), "the record says where the file still is"
        assert second.inheritance.undeleted == [] and not kept.exists(), "sent: nothing left to keep"
        assert Agent(cfg).inheritance.undeleted == []
    finally:
        for agent in agents:
            agent.client.close()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(1, MAX_ID), st.text(st.characters(exclude_categories=()),
                                                           max_size=MAX_REASON_CHARS + 20)), max_size=20),
       st.text(st.characters(exclude_categories=()), min_size=1, max_size=30),
       st.lists(st.tuples(st.integers(1, MAX_ID), st.text(_PRINTABLE, min_size=1, max_size=MAX_CHECKPOINT_URI_CHARS)),
                max_size=5))
def test_the_undeleted_file_round_trips(tmp_path, entries, name, deleting):
    kept = UndeletedFile(tmp_path / "state", "master:50051", name)
    kept.save(entries, deleting)
    assert kept.path.exists() == bool(entries or deleting), "empty lists leave no file"
    assert kept.load() == Kept([(m, clip_text(e, MAX_REASON_CHARS)) for m, e in entries], deleting)
    assert UndeletedFile(tmp_path / "state", "other:50051", name).load() == Kept(), \
        "another master's is another file"


def test_the_undeleted_file_is_private_and_replaced_whole(tmp_path):
    state = tmp_path / "state"
    kept = UndeletedFile(state, "master:50051", "node-1")
    assert kept.load() == Kept()
    kept.save([(3, "read-only file system")])
    assert kept.path.name.startswith("undeleted-") and kept.path.parent == state
    assert (state.stat().st_mode & 0o777) == 0o700 and (kept.path.stat().st_mode & 0o777) == 0o600
    kept.save([(3, "read-only file system"), (4, "busy")])
    assert kept.load().undeleted == [(3, "read-only file system"), (4, "busy")]
    assert [p.name for p in state.iterdir()] == [kept.path.name], "no temporary file left behind"
    assert UndeletedFile(state, "master:50051", "node-2").load() == Kept()


@pytest.mark.parametrize("content, event", [
    ("{not json", "undeleted_file_unreadable"),
    ('{"master": "master:50051", "name": "node-1", "undeleted": [[1, "x"]]}' + " " * MAX_FILE_BYTES,
     "undeleted_file_unreadable"),  # this worker's, but larger than any list it writes
    ("\xff\xfe", "undeleted_file_unreadable"),
    ("[1, 2]", "undeleted_file_ignored"),
    ('{"master": "master:50051", "name": "node-9", "undeleted": [[1, "x"]]}', "undeleted_file_ignored"),
    ('{"master": "master:50051", "name": "node-1", "undeleted": {"1": "x"}}', "undeleted_file_ignored"),
    ('{"master": "master:50051", "name": "node-1"}', "undeleted_file_ignored"),
    ("[" * 100_000 + "]" * 100_000, "undeleted_file_unreadable"),
])
def test_a_garbled_or_foreign_undeleted_file_is_ignored_with_a_warning(tmp_path, caplog, content, event):
    kept = UndeletedFile(tmp_path, "master:50051", "node-1")
    kept.path.write_bytes(content.encode("latin-1"))
    with caplog.at_level(logging.WARNING):
        assert kept.load() == Kept()
    assert f"event={event}" in caplog.text


def test_entries_that_are_not_model_id_and_error_are_dropped_with_a_warning(tmp_path, caplog):
    kept = UndeletedFile(tmp_path, "master:50051", "node-1")
    bad = [[0, "zero"], [-3, "negative"], [True, "a bool"], [MAX_ID + 1, "too large"], ["4", "text id"],
           [5.0, "float id"], [6, 6], [6, None], [7], [8, "x", "y"], {"model_id": 9}, None, "10"]
    long = "é\x00" * MAX_REASON_CHARS
    kept.path.write_text(json.dumps({"master": "master:50051", "name": "node-1",
                                     "undeleted": [[1, "a"], *bad, [MAX_ID, long]]}))
    with caplog.at_level(logging.WARNING):
        assert kept.load().undeleted == [(1, "a"), (MAX_ID, clip_text(long, MAX_REASON_CHARS))]
    assert f"event=undeleted_entries_dropped path={kept.path} dropped={len(bad)}" in caplog.text


def test_the_undeleted_list_is_bounded(tmp_path, caplog):
    kept = UndeletedFile(tmp_path / "state", "master:50051", "node-1")
    # the worst case fits the size cap it is read with: every entry at the largest id, error and uri
    worst = [(MAX_ID, "\U0001F600" * (MAX_REASON_CHARS + 5))] * MAX_ENTRIES
    worst_uri = [(MAX_ID, "\U0001F600" * MAX_CHECKPOINT_URI_CHARS)] * (MAX_DELETING + 5)
    kept.save(worst, worst_uri)
    assert kept.path.stat().st_size <= MAX_FILE_BYTES
    assert kept.load() == Kept([(MAX_ID, clip_text(worst[0][1], MAX_REASON_CHARS))] * MAX_ENTRIES,
                               worst_uri[:MAX_DELETING])
    # a file with more than MAX_ENTRIES (not written by a worker): the first MAX_ENTRIES, logged
    kept.path.write_text(json.dumps({"master": "master:50051", "name": "node-1",
                                     "undeleted": [[n, "x"] for n in range(1, MAX_ENTRIES + 6)],
                                     "deleting": [[n, "x"] for n in range(1, MAX_DELETING + 4)]}))
    with caplog.at_level(logging.WARNING):
        assert kept.load() == Kept([(n, "x") for n in range(1, MAX_ENTRIES + 1)],
                                   [(n, "x") for n in range(1, MAX_DELETING + 1)])
    assert "event=undeleted_entries_dropped" in caplog.text and "dropped=5: more than" in caplog.text
    assert "event=deleting_entries_dropped" in caplog.text and "dropped=3: more than" in caplog.text
    kept.save(kept.load().undeleted)
    # the worker keeps at most MAX_ENTRIES waiting; the rest are logged
    inh = Inheritance(RefusingStore(), tmp_path / "scratch", kept=kept)
    inh.delete((), answered=5)
    with caplog.at_level(logging.WARNING):
        inh.delete([pb.CheckpointToDelete(model_id=MAX_ENTRIES + n, uri=f"file:///c/{n}") for n in range(1, 9)])
    assert len(inh.undeleted) == MAX_ENTRIES and inh.undeleted[-1][0] == MAX_ENTRIES + 5
    assert caplog.text.count("event=undeleted_not_kept") == 3
    assert kept.load().undeleted == inh.undeleted


def test_the_inheritance_keeps_its_undeleted_list_in_the_file_on_every_change(tmp_path, caplog):
    kept = UndeletedFile(tmp_path / "state", "master:50051", "node-1")
    doomed = [pb.CheckpointToDelete(model_id=n, uri=f"file:///c/{n}") for n in (4, 5)]
    inh = Inheritance(RefusingStore(), tmp_path / "scratch", kept=kept)
    inh.delete(doomed)
    expected = [(n, f"cannot delete file:///c/{n}: read-only file system") for n in (4, 5)]
    assert inh.undeleted == expected and kept.load().undeleted == expected
    again = Inheritance(RefusingStore(), tmp_path / "scratch", kept=kept)  # a restarted worker
    assert again.undeleted == expected
    again.delete((), answered=1)
    assert kept.load().undeleted == expected[1:] and again.undeleted == expected[1:]
    again.delete((), answered=1)
    assert not kept.path.exists()
    # a state directory that cannot be written: logged, the list still in memory, nothing raised
    blocked = UndeletedFile(tmp_path / "a-file", "master:50051", "node-1")
    (tmp_path / "a-file").write_text("")
    inh = Inheritance(RefusingStore(), tmp_path / "scratch", kept=blocked)
    with caplog.at_level(logging.WARNING):
        inh.delete(doomed[:1])
    assert inh.undeleted == expected[:1] and "event=undeleted_not_saved" in caplog.text
    # without a state directory: in memory only, as before
    memory = Inheritance(RefusingStore(), tmp_path / "scratch")
    memory.delete(doomed)
    assert memory.undeleted == expected
