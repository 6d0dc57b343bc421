"""A checkpoint retention let go that its worker could not delete (FinishModelRequest.
undeleted_checkpoints): the worker says so with its next FinishModel, the master records it as
stored with the error and never lets it go again; only the worker's own, within bounds; the
column survives a migration round trip (0008). The worker keeps the list in its state directory
(worker/undeleted.py), so a restarted worker still sends it."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aiperf.api import aiperf_pb2 as pb
from aiperf.api.bounds import MAX_CHECKPOINT_URI_CHARS, MAX_ID, MAX_REASON_CHARS, MAX_UNDELETED_PER_FINISH, clip_text
from aiperf.api.client import ApiError, ControlClient
from tests.schema_round_trip import down_and_up
from tests.test_checkpoints import HP, _children, _done, _file, _worker
from worker.checkpoints import CheckpointError, CheckpointStore, LocalStore
from worker.inheritance import Inheritance
from worker.undeleted import MAX_DELETING, MAX_ENTRIES, MAX_FILE_BYTES, Kept, UndeletedFile

_PRINTABLE = st.characters(exclude_categories=("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp", "Zs"), include_characters=" ")


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


# ---------------------------------------------------------------- kept across restarts (worker/undeleted.py)


def _finish_two(agent: Any, run_id: int, small_graph: Any, tmp_path: Path, monkeypatch: Any,
                delete: Any) -> tuple[list[int], list[Any], Any]:
    """`agent` registers, submits two children with stored checkpoints and finishes them with
    `delete` as its store's (keep 1: the second is let go at its finish); their ids, their
    checkpoints and a third child."""
    from aiperf.hyperparameters import Hyperparameters
    from worker.agent import Outbox
    from worker.trainer import TrainResult

    agent._register()
    g1, g2, g3 = _children(small_graph, 3)
    ids = [agent._submit(g, 0, n + 1, Hyperparameters(32, 3)) for n, g in enumerate((g1, g2))]
    ckpts = [agent.inheritance.store.put(run_id, mid, _file(tmp_path / f"{mid}.weights.h5", b"w" * mid))
             for mid in ids]
    monkeypatch.setattr(agent.inheritance.store, "delete", delete)
    box = Outbox()
    for n, (mid, acc) in enumerate(zip(ids, (0.6, 0.5))):
        agent._finish(box, mid, n + 1, TrainResult("done", (acc,), 1, 100, 10, 1, acc, acc), ckpts[n])
    box.close()
    return ids, ckpts, g3


def _finish_failed(agent: Any, graph: Any) -> None:
    """`agent` submits `graph` as round 3 and finishes it failed: its FinishModel carries the undeleted list."""
    from aiperf.hyperparameters import Hyperparameters
    from worker.agent import Outbox
    from worker.trainer import TrainResult

    model_id = agent._submit(graph, 0, 3, Hyperparameters(32, 3))
    box = Outbox()
    agent._finish(box, model_id, 3, TrainResult("failed", (), 0, 0, 0, 0, None, None, reason="out of memory"))
    box.close()


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
        ids, ckpts, g3 = _finish_two(first, run_id, small_graph, tmp_path, monkeypatch, refuse)
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
        _finish_failed(second, g3)
        m2 = h.store.get_model(ids[1])
        assert (m2.checkpoint_deleted, m2.checkpoint_delete_error) == (False, error)
        assert Path(ckpts[1].uri[len("file://"):]).exists(), "the record says where the file still is"
        assert second.inheritance.undeleted == [] and not kept.exists(), "sent: nothing left to keep"
        assert Agent(cfg).inheritance.undeleted == []
    finally:
        for agent in agents:
            agent.stream.close()
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
    inh = Inheritance(_Refusing(), tmp_path / "scratch", kept=kept)
    inh.delete((), answered=5)
    with caplog.at_level(logging.WARNING):
        inh.delete([pb.CheckpointToDelete(model_id=MAX_ENTRIES + n, uri=f"file:///c/{n}") for n in range(1, 9)])
    assert len(inh.undeleted) == MAX_ENTRIES and inh.undeleted[-1][0] == MAX_ENTRIES + 5
    assert caplog.text.count("event=undeleted_not_kept") == 3
    assert kept.load().undeleted == inh.undeleted


class _Refusing(CheckpointStore):
    url = "file:///c"

    def delete(self, uri: str) -> None:
        raise CheckpointError(f"cannot delete {uri}: read-only file system")


def test_the_inheritance_keeps_its_undeleted_list_in_the_file_on_every_change(tmp_path, caplog):
    kept = UndeletedFile(tmp_path / "state", "master:50051", "node-1")
    doomed = [pb.CheckpointToDelete(model_id=n, uri=f"file:///c/{n}") for n in (4, 5)]
    inh = Inheritance(_Refusing(), tmp_path / "scratch", kept=kept)
    inh.delete(doomed)
    expected = [(n, f"cannot delete file:///c/{n}: read-only file system") for n in (4, 5)]
    assert inh.undeleted == expected and kept.load().undeleted == expected
    again = Inheritance(_Refusing(), tmp_path / "scratch", kept=kept)  # a restarted worker
    assert again.undeleted == expected
    again.delete((), answered=1)
    assert kept.load().undeleted == expected[1:] and again.undeleted == expected[1:]
    again.delete((), answered=1)
    assert not kept.path.exists()
    # a state directory that cannot be written: logged, the list still in memory, nothing raised
    blocked = UndeletedFile(tmp_path / "a-file", "master:50051", "node-1")
    (tmp_path / "a-file").write_text("")
    inh = Inheritance(_Refusing(), tmp_path / "scratch", kept=blocked)
    with caplog.at_level(logging.WARNING):
        inh.delete(doomed[:1])
    assert inh.undeleted == expected[:1] and "event=undeleted_not_saved" in caplog.text
    # without a state directory: in memory only, as before
    memory = Inheritance(_Refusing(), tmp_path / "scratch")
    memory.delete(doomed)
    assert memory.undeleted == expected


# ---------------------------------------------------------------- deletes in flight ("deleting" in the same file)


def _doomed(store, tmp_path: Path, ids) -> list[pb.CheckpointToDelete]:
    """Checkpoints of run 1 stored in `store`, as a FinishModel reply lets them go."""
    return [pb.CheckpointToDelete(model_id=m, uri=store.put(1, m, _file(tmp_path / f"{m}.h5", b"w" * m)).uri)
            for m in ids]


def _exists(uri: str) -> bool:
    return Path(uri[len("file://"):]).exists()


class _Crashing(LocalStore):
    """A store whose `n`th delete stops the process (`stop`); each delete first checks that the
    kept file names every checkpoint of `doomed` whose file is still there: what a kill at that
    moment would leave on disk."""

    def __init__(self, root: Path, kept: UndeletedFile, n: int = 0, stop: type[BaseException] = SystemExit):
        super().__init__(root)
        self.kept, self.n, self.stop, self.calls = kept, n, stop, 0
        self.doomed: list[pb.CheckpointToDelete] = []

    def delete(self, uri: str) -> None:
        self.calls += 1
        on_disk = self.kept.load()
        for d in self.doomed:
            assert not _exists(d.uri) or (d.model_id, d.uri) in on_disk.deleting or \
                d.model_id in {m for m, _ in on_disk.undeleted}, f"model {d.model_id} is on no list on disk"
        if self.calls == self.n:
            raise self.stop()
        if "refuse" in uri:
            raise CheckpointError(f"cannot delete {uri}: read-only file system")
        super().delete(uri)


@pytest.mark.parametrize("stop", [SystemExit, KeyboardInterrupt])
def test_a_worker_stopped_while_deleting_deletes_the_rest_when_it_starts(tmp_path, stop, caplog):
    kept = UndeletedFile(tmp_path / "state", "master:50051", "node-1")
    store = _Crashing(tmp_path / "store", kept, n=2, stop=stop)
    store.doomed = doomed = _doomed(store, tmp_path, (4, 5, 6))
    inh = Inheritance(store, tmp_path / "scratch", kept=kept)
    with pytest.raises(stop):  # stopped at the 2nd delete of 3
        inh.delete(doomed)
    assert [_exists(d.uri) for d in doomed] == [False, True, True]
    assert {m for m, _ in kept.load().deleting} >= {5, 6}, "the rest are on disk"
    # a new process with the same state directory and store
    with caplog.at_level(logging.INFO):
        again = Inheritance(_Crashing(tmp_path / "store", kept), tmp_path / "scratch", kept=kept)
    assert not any(_exists(d.uri) for d in doomed)
    assert again.undeleted == [] and not kept.path.exists(), "all deleted: nothing left to keep"
    assert "event=deleting_loaded" in caplog.text


def test_the_file_names_every_doomed_checkpoint_until_it_is_gone(tmp_path):
    kept = UndeletedFile(tmp_path / "state", "master:50051", "node-1")
    kept.save([(1, "earlier")])
    store = _Crashing(tmp_path / "store", kept)
    store.doomed = doomed = _doomed(store, tmp_path, (4, 5, 6))
    refused = pb.CheckpointToDelete(model_id=7, uri=f"{store.url}/refuse/model-7.weights.h5")
    store.doomed.append(refused)
    Inheritance(store, tmp_path / "scratch", kept=kept).delete([doomed[0], refused, *doomed[1:3]], answered=1)
    assert store.calls == 4 and not any(_exists(d.uri) for d in doomed[:3])
    assert kept.load() == Kept([(7, f"cannot delete {refused.uri}: read-only file system")], [])


def test_the_file_is_written_before_and_after_the_deletes_not_per_checkpoint(tmp_path, monkeypatch):
    import worker.inheritance

    kept = UndeletedFile(tmp_path / "state", "master:50051", "node-1")
    writes: list[Kept] = []
    save = kept.save
    monkeypatch.setattr(kept, "save", lambda u, d=(): (writes.append(Kept(list(u), list(d))), save(u, d))[1])
    store = _Crashing(tmp_path / "store", kept)
    store.doomed = doomed = _doomed(store, tmp_path, range(1, 6))
    inh = Inheritance(store, tmp_path / "scratch", kept=kept)
    inh.delete([])
    assert writes == [], "nothing to do, nothing written"
    store.doomed = doomed[:3]
    inh.delete(doomed[:3])
    assert writes == [Kept([], [(d.model_id, d.uri) for d in doomed[:3]]), Kept([], [])]
    for d in doomed[:3]:
        store.put(1, d.model_id, _file(tmp_path / "again.h5", b"again"))
    writes.clear()
    inh.delete([], answered=0)
    inh.undeleted.append((9, "busy"))
    inh.delete([], answered=1)
    assert writes == [Kept([], [])], "an answer alone: once"
    writes.clear()
    monkeypatch.setattr(worker.inheritance, "MAX_DELETING", 2)  # a reply larger than the file's bound
    store.doomed = doomed[3:]
    inh.delete(doomed[3:] + doomed[:3])
    late = [(d.model_id, "not deleted: more than 2 let go at once") for d in doomed[:3]]
    assert writes == [Kept(late, [(d.model_id, d.uri) for d in doomed[3:]]), Kept(late, [])]
    assert [_exists(d.uri) for d in doomed] == [True] * 3 + [False] * 2, "the rest wait, recorded as stored"
    writes.clear()
    kept.save([], [(d.model_id, d.uri) for d in doomed[:2]])
    writes.clear()
    Inheritance(store, tmp_path / "scratch", kept=kept)
    assert writes == [Kept([], [])], "a start with deletes to finish writes once"


def test_a_retried_delete_of_a_file_already_gone_counts_as_done(tmp_path):
    store = LocalStore(tmp_path / "store")
    [d] = _doomed(store, tmp_path, (4,))
    kept = UndeletedFile(tmp_path / "state", "master:50051", "node-1")
    kept.save([], [(d.model_id, d.uri)])  # deleted, then stopped before the file was written again
    store.delete(d.uri)
    store.delete(d.uri)  # again: nothing raised
    assert Inheritance(store, tmp_path / "scratch", kept=kept).undeleted == [] and not kept.path.exists()
    # a real error is still one (a directory where the checkpoint was)
    Path(d.uri[len("file://"):]).mkdir()
    with pytest.raises(CheckpointError):
        store.delete(d.uri)


def test_an_object_store_delete_of_a_missing_object_counts_as_done():
    from worker.checkpoints import FsspecStore

    class Fs:
        def __init__(self, error: OSError) -> None:
            self.error = error

        def rm(self, path: str) -> None:
            raise self.error

    store = FsspecStore.__new__(FsspecStore)  # without fsspec: only its delete is under test
    store.url, store._root, store.fs = "s3://b/ckpt", "b/ckpt", Fs(FileNotFoundError("b/ckpt/run-1/model-4"))
    store.delete("s3://b/ckpt/run-1/model-4.weights.h5")
    store.fs = Fs(PermissionError("access denied"))
    with pytest.raises(CheckpointError, match="access denied"):
        store.delete("s3://b/ckpt/run-1/model-4.weights.h5")
    assert store.holds("s3://b/ckpt/run-1/model-4.weights.h5", 4)
    assert not store.holds("s3://b/ckpt/run-1/model-4.weights.h5", 5)
    assert not store.holds("s3://b/ckpt/run-1/../model-4.weights.h5", 4)
    assert not store.holds("s3://b/other/run-1/model-4.weights.h5", 4)


def test_a_retried_delete_that_fails_joins_the_undeleted_list(tmp_path):
    kept = UndeletedFile(tmp_path / "state", "master:50051", "node-1")
    uri = "file:///c/run-1/model-4.weights.h5"
    kept.save([(3, "busy")], [(4, uri)])
    inh = Inheritance(_Refusing(), tmp_path / "scratch", kept=kept)
    expected = [(3, "busy"), (4, f"cannot delete {uri}: read-only file system")]
    assert inh.undeleted == expected and kept.load() == Kept(expected, [])


def test_a_worker_without_a_store_keeps_its_deletes_in_flight(tmp_path, caplog):
    kept = UndeletedFile(tmp_path / "state", "master:50051", "node-1")
    kept.save([(3, "busy")], [(4, "file:///c/run-1/model-4.weights.h5")])
    with caplog.at_level(logging.WARNING):
        inh = Inheritance(None, tmp_path / "scratch", kept=kept)
    assert "event=deleting_kept count=1" in caplog.text
    inh.delete((), answered=1)
    assert kept.load() == Kept([], [(4, "file:///c/run-1/model-4.weights.h5")])


def test_a_local_store_holds_only_the_names_put_gives(tmp_path):
    store = LocalStore(tmp_path / "store")
    [d] = _doomed(store, tmp_path, (4,))
    root, url = store.root, store.url
    (tmp_path / "out").mkdir()
    (root / "run-9").symlink_to(tmp_path / "out")
    (root / "run-1" / "model-5.weights.h5").symlink_to(tmp_path / "out" / "model-5.weights.h5")
    assert store.holds(d.uri, 4) and store.holds(f"{url}/run-2/model-4.weights.h5", 4), "any run, even gone"
    for uri, model_id in ((d.uri, 5), (f"{url}/run-9/model-4.weights.h5", 4), (f"{url}/run-1/model-5.weights.h5", 5),
                          (f"{url}/run-1/../../out/model-4.weights.h5", 4), (f"{url}/run-1/./model-4.weights.h5", 4),
                          (f"{url}/run-1/../run-1/model-4.weights.h5", 4), (str(root / "run-1/model-4.weights.h5"), 4),
                          (f"file://other-host{root}/run-1/model-4.weights.h5", 4), ("run-1/model-4.weights.h5", 4),
                          (f"{url}/run-1/model-4.h5", 4), (f"{url}/model-4.weights.h5", 4), (f"{url}/run-1", 4),
                          (f"s3://b{root}/run-1/model-4.weights.h5", 4), (f"{url}/run-0/model-4.weights.h5", 4),
                          (f"{url}/run-1/model-04.weights.h5", 4), (url, 4), ("", 4)):
        assert not store.holds(uri, model_id), uri


# entries that would name a checkpoint kept in run 7 but for their id or shape: the file of model 1, 4
# or MAX_ID + 1 ({k1}, {k4}, {kmax}); none may be deleted
_BAD_ENTRIES = st.one_of(
    st.sampled_from([[True, "{k1}"], [4.0, "{k4}"], ["4", "{k4}"], [MAX_ID + 1, "{kmax}"], [0, "{k1}"], [-1, "{k1}"],
                     [4, None], [4, 4], [4], [4, "{k4}", "{k4}"], ["{k4}", 4], {"4": "{k4}"}, None, "{k4}"]),
    st.tuples(st.integers(1, 9), st.text(max_size=5)).map(list))
# entries in bounds that name no checkpoint of the model they name (not 4 or 5): files that must stay
_FOREIGN = ("{out}/model-{m}.weights.h5", "{url}/run-3/model-{m}.weights.h5", "{url}/run-2/keep.txt",
            "{url}/run-1/../../out/model-{m}.weights.h5", "{k4}", "{url}/run-5/model-{m}.weights.h5")
_FOREIGN_ENTRIES = st.tuples(st.sampled_from(_FOREIGN), st.sampled_from([1, 2, 3, 6, 7]))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.one_of(st.tuples(st.just("ours"), st.integers(1, 9)),
                          st.tuples(st.just("foreign"), _FOREIGN_ENTRIES),
                          st.tuples(st.just("bad"), _BAD_ENTRIES)), max_size=12))
def test_a_garbled_or_forged_deleting_list_deletes_nothing_but_its_own_checkpoints(tmp_path, entries):
    import tempfile

    base = Path(tempfile.mkdtemp(dir=tmp_path))
    store, out = LocalStore(base / "store"), base / "out"
    out.mkdir()
    spared = [store.put(7, m, _file(base / "w.h5", b"w")).uri for m in (1, 4, MAX_ID + 1)]
    spared += [store.put(5, 5, _file(base / "w.h5", b"w")).uri]  # model 5's, named below for others
    (store.root / "run-2").mkdir()
    (store.root / "run-3").symlink_to(out)
    for p in [out / f"model-{m}.weights.h5" for m in range(10)] + [store.root / "run-2" / "keep.txt"]:
        p.write_bytes(b"x")
        spared.append(p.as_uri())
    names = {"url": store.url, "out": out.as_uri(), **dict(zip(("k1", "k4", "kmax"), spared))}
    fill = (lambda v: names.get(v.strip("{}"), v) if isinstance(v, str) and v[:1] + v[-1:] == "{}" else v)
    deleting, ours = [], set()
    for kind, value in entries:
        if kind == "ours":
            deleting.append([value, store.put(1, value, _file(base / "w.h5", b"w")).uri])
            ours.add(value)
        elif kind == "foreign":
            template, m = value
            deleting.append([m, template.format(m=m, **names)])
        else:
            deleting.append([fill(v) for v in value] if isinstance(value, list) else fill(value))
    kept = UndeletedFile(base / "state", "master:50051", "node-1")
    _write_private(kept, {"undeleted": [], "deleting": deleting})
    inh = Inheritance(store, base / "scratch", kept=kept)
    assert all(_exists(uri) for uri in spared), "nothing but the named model's checkpoint in the store is deleted"
    assert not any(_exists(f"{store.url}/run-1/model-{m}.weights.h5") for m in ours)
    assert inh.undeleted == [] and kept.load() == Kept(), "dropped, not reported: the master never let them go"


def test_an_entry_past_the_uri_bound_is_dropped_though_its_store_holds_it(tmp_path):
    deep = tmp_path.joinpath(*["d" * 250] * 4, "store")  # a store whose checkpoints' URIs are too long to record
    store = LocalStore(deep)
    [d] = _doomed(store, tmp_path, (4,))
    assert len(d.uri) > MAX_CHECKPOINT_URI_CHARS and store.holds(d.uri, 4)
    kept = UndeletedFile(tmp_path / "state", "master:50051", "node-1")
    _write_private(kept, {"undeleted": [], "deleting": [[4, d.uri]]})
    Inheritance(store, tmp_path / "scratch", kept=kept)
    assert _exists(d.uri)


def _write_private(kept: UndeletedFile, fields: dict) -> None:
    kept.path.parent.mkdir(mode=0o700, exist_ok=True)
    kept.path.write_text(json.dumps({"master": "master:50051", "name": "node-1", **fields}))
    kept.path.chmod(0o600)


def test_dropped_deleting_entries_are_logged(tmp_path, caplog):
    store = LocalStore(tmp_path / "store")
    kept = UndeletedFile(tmp_path / "state", "master:50051", "node-1")
    _write_private(kept, {"undeleted": [], "deleting": [[1, "/etc/passwd"], [True, "x"], [2, "a\tb"]]})
    with caplog.at_level(logging.WARNING):
        Inheritance(store, tmp_path / "scratch", kept=kept)
    assert f"event=deleting_entries_dropped path={kept.path} dropped=2: not (model id, uri) pairs" in caplog.text
    assert "event=deleting_entries_dropped count=1 first=1:'/etc/passwd': not checkpoints of the store" in caplog.text
    assert Path("/etc/passwd").exists()


@pytest.mark.parametrize("uri", ["file://[/run-1/model-4.weights.h5", "file://[::1/x", "http://]/y"])
def test_a_deleting_entry_that_is_no_url_is_dropped_and_the_worker_starts(tmp_path, caplog, uri):
    store = LocalStore(tmp_path / "store")
    kept = UndeletedFile(tmp_path / "state", "master:50051", "node-1")
    _write_private(kept, {"undeleted": [], "deleting": [[4, uri]]})
    with caplog.at_level(logging.WARNING):
        inh = Inheritance(store, tmp_path / "scratch", kept=kept)
    assert inh.undeleted == [] and kept.load() == Kept()
    assert "event=deleting_entries_dropped count=1" in caplog.text
    with pytest.raises(CheckpointError, match="not in the local store"):
        store.delete(uri)


def test_an_undeleted_file_without_deletes_in_flight_still_loads(tmp_path):
    kept = UndeletedFile(tmp_path, "master:50051", "node-1")
    kept.path.write_text(json.dumps({"master": "master:50051", "name": "node-1", "undeleted": [[3, "busy"]]}))
    assert kept.load() == Kept([(3, "busy")], [])
    kept.path.write_text(json.dumps({"master": "master:50051", "name": "node-1", "undeleted": [[3, "busy"]],
                                     "deleting": {"4": "x"}}))
    assert kept.load() == Kept(), "a file this worker did not write: ignored whole"


@pytest.mark.parametrize("refused", [False, True])
def test_a_worker_killed_before_its_deletes_finishes_them_when_it_starts_again(
        master_server, small_graph, tmp_path, monkeypatch, refused):
    from worker.agent import Agent, AgentConfig

    h = master_server()
    run_id = ControlClient(h.address, h.admin_token).start_run(600, profile="smoke", seed=1,
                                                               keep_checkpoints=1).config.run_id
    cfg = AgentConfig(master=h.address, token=h.worker_token, name="keeper", measure_peak=False,
                      state_dir=tmp_path / "state")
    agents = [first := Agent(cfg)]
    kept, at_kill = UndeletedFile(cfg.state_dir, cfg.master, cfg.name).path, []

    def killed(uri: str) -> None:  # what the disk holds when the process is killed before this delete
        at_kill.append(kept.read_bytes())

    try:
        ids, ckpts, g3 = _finish_two(first, run_id, small_graph, tmp_path, monkeypatch, killed)
        assert h.store.get_model(ids[1]).checkpoint_deleted and _exists(ckpts[1].uri)
        kept.write_bytes(at_kill[0])
        if refused:
            def refuse(self, uri: str) -> None:
                raise CheckpointError(f"cannot delete {uri}: permission denied")
            monkeypatch.setattr(LocalStore, "delete", refuse)
        agents.append(second := Agent(cfg))  # the same name, master and state directory
        assert _exists(ckpts[1].uri) == refused and _exists(ckpts[0].uri)
        if not refused:
            assert second.inheritance.undeleted == [] and not kept.exists()
            return
        error = f"cannot delete {ckpts[1].uri}: permission denied"
        assert second.inheritance.undeleted == [(ids[1], error)]
        second._register()
        _finish_failed(second, g3)
        m2 = h.store.get_model(ids[1])
        assert (m2.checkpoint_deleted, m2.checkpoint_delete_error) == (False, error), "the record says where it is"
    finally:
        for agent in agents:
            agent.stream.close()
            agent.client.close()
