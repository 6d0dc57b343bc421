"""Deletes in flight: before deleting what a FinishModel's reply lets go, the worker writes them
to its undeleted file as "deleting" (worker/undeleted.py, worker/inheritance.py); a worker
stopped in between deletes them when it starts, only checkpoints its own store holds."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aiperf.api import aiperf_pb2 as pb
from aiperf.api.bounds import MAX_CHECKPOINT_URI_CHARS, MAX_ID
from aiperf.api.client import ControlClient
from tests.support.checkpoint_runs import RefusingStore, finish_failed, finish_two, write_file
from worker.checkpoints import CheckpointError, LocalStore
from worker.inheritance import Inheritance
from worker.undeleted import Kept, UndeletedFile


def _doomed(store, tmp_path: Path, ids) -> list[pb.CheckpointToDelete]:
    """Checkpoints of run 1 stored in `store`, as a FinishModel reply lets them go."""
    return [pb.CheckpointToDelete(model_id=m, uri=store.put(1, m, write_file(tmp_path / f"{m}.h5", b"w" * m)).uri)
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
        store.put(1, d.model_id, write_file(tmp_path / "again.h5", b"again"))
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
    inh = Inheritance(RefusingStore(), tmp_path / "scratch", kept=kept)
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
    spared = [store.put(7, m, write_file(base / "w.h5", b"w")).uri for m in (1, 4, MAX_ID + 1)]
    spared += [store.put(5, 5, write_file(base / "w.h5", b"w")).uri]  # model 5's, named below for others
    (store.root / "run-2").mkdir()
    (store.root / "run-3").symlink_to(out)
    for p in [out / f"model-{m}.weights.h5" for m in range(10)] + [store.root / "run-2" / "keep.txt"]:
        p.write_bytes(b"x")
        spared.append(p.as_uri())
    names = {"url": store.url, "out": out.as_uri(), **dict(zip(("k1", "k4", "kmax"), spared))}

    def fill(v: object) -> object:
        return names.get(v.strip("{}"), v) if isinstance(v, str) and v[:1] + v[-1:] == "{}" else v

    deleting, ours = [], set()
    for kind, value in entries:
        if kind == "ours":
            deleting.append([value, store.put(1, value, write_file(base / "w.h5", b"w")).uri])
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
        ids, ckpts, g3 = finish_two(first, run_id, small_graph, tmp_path, monkeypatch, killed)
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
        finish_failed(second, g3)
        m2 = h.store.get_model(ids[1])
        assert (m2.checkpoint_deleted, m2.checkpoint_delete_error) == (False, error), "the record says where it is"
    finally:
        for agent in agents:
            agent.client.close()
