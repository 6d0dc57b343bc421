"""The checkpoint store (worker/checkpoints.py) on a real directory, its record at FinishModel
through the real server, retention (aiperf/retention.py, master/core/retention.py), and the CLI's
`checkpoint` and `inherited_from` fields."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aiperf.api import aiperf_pb2 as pb
from aiperf.api import bounds
from aiperf.api.client import ApiError, ControlClient
from aiperf.api.records import ModelRecord
from aiperf.hyperparameters import Hyperparameters
from aiperf.retention import StoredModel, checkpoints_to_delete, kept_checkpoints, record_holders
from aiperf.states import ModelState
from master.store.records import ModelEnd
from tests.support.checkpoint_runs import (
    checkpoint_worker,
    finish_done,
    finish_stored,
    morph_child,
    morph_children,
    write_file,
)
from tests.support.master_clients import HP
from tests.support.schema_round_trip import down_and_up
from worker.checkpoints import Checkpoint, CheckpointError, LocalStore, open_store, read_checkpoint

# ---------------------------------------------------------------- the store on a real directory


def test_put_then_read_gives_the_same_bytes_and_digest(tmp_path):
    data = np.random.default_rng(0).bytes(3 << 20)  # several copy chunks
    store = open_store(str(tmp_path / "store"))
    ckpt = store.put(7, 42, write_file(tmp_path / "w.weights.h5", data))
    assert isinstance(ckpt, Checkpoint) and ckpt.size_bytes == len(data)
    assert ckpt.sha256 == hashlib.sha256(data).hexdigest()
    assert ckpt.uri == (tmp_path / "store" / "run-7" / "model-42.weights.h5").resolve().as_uri()
    assert [p.name for p in (tmp_path / "store" / "run-7").iterdir()] == ["model-42.weights.h5"]  # no temp left
    copy = read_checkpoint(ckpt.uri, ckpt.sha256, tmp_path / "in")
    assert copy.parent == tmp_path / "in" and copy.read_bytes() == data


def test_file_urls_and_plain_paths_open_the_same_store(tmp_path):
    a, b = open_store(str(tmp_path / "s")), open_store((tmp_path / "s").as_uri())
    assert isinstance(a, LocalStore) and a.url == b.url == (tmp_path / "s").resolve().as_uri()


def test_a_corrupt_checkpoint_is_refused_and_its_copy_removed(tmp_path):
    store = open_store(str(tmp_path / "store"))
    ckpt = store.put(1, 1, write_file(tmp_path / "w.weights.h5", b"weights" * 100))
    stored = Path(ckpt.uri[len("file://"):])
    stored.write_bytes(b"weightz" * 100)  # same size, other bytes
    with pytest.raises(CheckpointError, match=r"corrupt: SHA-256 [0-9a-f]{64}, recorded " + ckpt.sha256):
        read_checkpoint(ckpt.uri, ckpt.sha256, tmp_path / "in")
    assert not (tmp_path / "in" / stored.name).exists()


def test_a_missing_checkpoint_is_named(tmp_path):
    uri = (tmp_path / "nowhere" / "model-3.weights.h5").as_uri()
    with pytest.raises(CheckpointError, match=r"checkpoint .*model-3.weights.h5 is missing"):
        read_checkpoint(uri, "0" * 64, tmp_path / "in")
    with pytest.raises(CheckpointError, match="does not name a .weights.h5 file"):
        read_checkpoint((tmp_path / "x.txt").as_uri(), "0" * 64, tmp_path / "in")
    with pytest.raises(CheckpointError, match="only local files"):
        read_checkpoint("file://otherhost/x/model-1.weights.h5", "0" * 64, tmp_path / "in")


def test_delete_removes_only_inside_the_store_and_missing_is_fine(tmp_path):
    store = open_store(str(tmp_path / "store"))
    ckpt = store.put(1, 2, write_file(tmp_path / "w.weights.h5", b"x"))
    store.delete(ckpt.uri)
    assert not Path(ckpt.uri[len("file://"):]).exists()
    store.delete(ckpt.uri)  # again: not an error
    outside = write_file(tmp_path / "keep.weights.h5", b"mine")
    with pytest.raises(CheckpointError, match="is not in the store"):
        store.delete(outside.as_uri())
    with pytest.raises(CheckpointError, match="is not in the store"):
        store.delete((tmp_path / "store" / ".." / "keep.weights.h5").as_uri())
    assert outside.exists()


def test_object_store_urls_without_fsspec_name_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "fsspec", None)  # import fsspec -> ImportError
    with pytest.raises(CheckpointError, match=r"needs fsspec: pip install 'aiperf\[object-store\]'"):
        open_store("s3://bucket/prefix")
    with pytest.raises(CheckpointError, match="needs fsspec"):
        read_checkpoint("s3://bucket/prefix/run-1/model-1.weights.h5", "0" * 64, tmp_path)
    with pytest.raises(CheckpointError, match="empty"):
        open_store(" ")
    with pytest.raises(CheckpointError, match="ids must be >= 1"):
        open_store(str(tmp_path)).put(0, 1, write_file(tmp_path / "w.weights.h5", b"x"))


def test_an_fsspec_store_round_trips_through_memory(tmp_path):
    pytest.importorskip("fsspec")
    store = open_store("memory://aiperf-test/ckpt")
    ckpt = store.put(2, 5, write_file(tmp_path / "w.weights.h5", b"abc" * 1000))
    assert ckpt.uri == "memory://aiperf-test/ckpt/run-2/model-5.weights.h5"
    assert read_checkpoint(ckpt.uri, ckpt.sha256, tmp_path / "in").read_bytes() == b"abc" * 1000
    store.delete(ckpt.uri)
    with pytest.raises(CheckpointError, match="missing"):
        read_checkpoint(ckpt.uri, ckpt.sha256, tmp_path / "in2")


# ---------------------------------------------------------------- Keras weights through the store


def test_saved_weights_load_into_the_model_built_from_the_graph(tmp_path, small_graph):
    import keras

    from aiperf.keras_builder import build_model
    from worker.inheritance import Inheritance
    from worker.rounds import layer_weights

    trained = build_model(small_graph, kernel_size=3, seed=1)
    weights = layer_weights(trained)
    inh = Inheritance(open_store(str(tmp_path / "store")), tmp_path / "scratch")
    ckpt = inh.save(1, 9, small_graph, 3, weights)
    assert ckpt is not None and ckpt.uri.endswith("run-1/model-9.weights.h5")
    assert list((tmp_path / "scratch").iterdir()) == []  # the scratch file went into the store
    parent = ModelRecord(model_id=9, run_id=1, state=ModelState.DONE, checkpoint_uri=ckpt.uri,
                         checkpoint_sha256=ckpt.sha256, hyperparameters=Hyperparameters(32, 3))
    loaded = inh.parent_weights(parent, small_graph)
    assert set(loaded) == set(weights)
    for name, arrays in weights.items():
        for a, b in zip(arrays, loaded[name]):
            np.testing.assert_array_equal(a, b)
    model = build_model(small_graph, kernel_size=3, seed=2)
    model.load_weights(read_checkpoint(ckpt.uri, ckpt.sha256, tmp_path / "again"))  # the API's own reader
    x = np.random.default_rng(0).random((2, 32, 32, 3)).astype("float32")
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(trained(x, training=False)),
                                  keras.ops.convert_to_numpy(model(x, training=False)))
    assert inh.save(1, 10, small_graph, 3, {"no_such_layer": []}) is None  # logged, not raised


# ---------------------------------------------------------------- bounds of the new fields


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="0123456789abcdefABCDEFgx", max_size=70))
def test_a_checkpoint_digest_is_empty_or_64_lowercase_hex(text):
    req = pb.FinishModelRequest(worker_id=1, model_id=1, state=pb.MODEL_DONE, checkpoint_sha256=text)
    ok = text == "" or (len(text) == 64 and all(c in "0123456789abcdef" for c in text))
    if ok:
        bounds.check(req)
    else:
        with pytest.raises(bounds.BoundsError, match=r"^FinishModelRequest.checkpoint_sha256: must be empty or 64"):
            bounds.check(req)


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=1100))
def test_a_checkpoint_uri_is_printable_and_bounded(text):
    req = pb.FinishModelRequest(worker_id=1, model_id=1, state=pb.MODEL_DONE, checkpoint_uri=text)
    if len(text) <= bounds.MAX_CHECKPOINT_URI_CHARS and text.isprintable():
        bounds.check(req)
    else:
        with pytest.raises(bounds.BoundsError, match=r"^FinishModelRequest.checkpoint_uri: "):
            bounds.check(req)


@settings(max_examples=50, deadline=None)
@given(st.integers(0, 2**64 - 1), st.integers(0, 2**32 - 1))
def test_inherited_from_and_keep_checkpoints_are_bounded(inherited, keep):
    sub = pb.SubmitModelRequest(worker_id=1, round=1, inherited_from=inherited)
    start = pb.StartRunRequest(duration_s=60, keep_checkpoints=keep)
    for msg, ok in ((sub, inherited <= bounds.MAX_ID), (start, keep <= bounds.MAX_KEEP_CHECKPOINTS)):
        if ok:
            bounds.check(msg)
        else:
            with pytest.raises(bounds.BoundsError):
                bounds.check(msg)


# ---------------------------------------------------------------- retention, the pure rule


def test_retention_keeps_the_top_k_and_the_parents_of_open_models():
    models = [StoredModel(1, None, "done", True), StoredModel(2, 1, "done", True), StoredModel(3, 1, "done", True),
              StoredModel(4, 2, "done", True), StoredModel(5, 3, "training", False),
              StoredModel(6, 4, "failed", False), StoredModel(7, 2, "done", False)]
    ranked = [4, 2, 7, 3, 1]
    assert kept_checkpoints(models, ranked, 2) == {4, 2, 3}  # 3: the parent of the model in training
    assert checkpoints_to_delete(models, ranked, 2) == [1]
    assert checkpoints_to_delete(models, ranked, 0) == [1, 2, 4]
    assert checkpoints_to_delete(models, ranked, 10) == []
    with pytest.raises(ValueError):
        checkpoints_to_delete(models, ranked, -1)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["queued", "training", "done", "failed", "abandoned"]),
                          st.booleans(), st.integers(0, 30)), max_size=30), st.integers(0, 12))
def test_retention_never_deletes_what_it_keeps_and_keeps_at_most_k_plus_open_parents(rows, keep):
    models = [StoredModel(i + 1, (p % (i + 1)) or None, state, has and state == "done")
              for i, (state, has, p) in enumerate(rows)]
    ranked = [m.model_id for m in models if m.state == "done"][::-1]
    doomed = set(checkpoints_to_delete(models, ranked, keep))
    kept = kept_checkpoints(models, ranked, keep)
    open_parents = {m.parent_id for m in models if m.state in ("queued", "training") and m.parent_id}
    assert not doomed & kept and doomed <= {m.model_id for m in models if m.has_checkpoint}
    assert set(ranked[:keep]) | open_parents == kept
    assert {m.model_id for m in models if m.has_checkpoint} - kept == doomed


# ---------------------------------------------------------------- through the real server


def test_finish_model_records_the_checkpoint_and_the_cli_shows_it(master_server, small_graph, capsys, monkeypatch):
    from aiperf_cli.main import main

    h = master_server()
    ControlClient(h.address, h.admin_token).start_run(600, profile="smoke", seed=1)
    w, wid = checkpoint_worker(h)
    uri = "file:///shared/ckpt/run-1/model-1.weights.h5"
    a, reply = finish_done(w, wid, small_graph, 0, 1, 0.4, uri)
    assert reply.model.checkpoint_uri == uri and reply.model.checkpoint_sha256 == hashlib.sha256(uri.encode()).hexdigest()
    assert not reply.delete_checkpoints
    # a retried finish with the same checkpoint is accepted; another checkpoint is refused
    assert w.finish_model(wid, a, "done", best_accuracy=0.4, checkpoint_uri=uri,
                          checkpoint_sha256=reply.model.checkpoint_sha256).model.checkpoint_uri == uri
    with pytest.raises(ApiError) as e:
        w.finish_model(wid, a, "done", best_accuracy=0.4, checkpoint_uri=uri + "x", checkpoint_sha256="0" * 64)
    assert e.value.code.name == "FAILED_PRECONDITION"
    [child] = morph_children(small_graph, 1)
    b, _ = finish_done(w, wid, child, a, 2, 0.5, inherited_from=a)
    monkeypatch.setenv("AIPERF_MASTER", h.address)
    monkeypatch.setenv("AIPERF_ADMIN_TOKEN", h.admin_token)
    assert main(["models", "--json"]) == 0
    models = {m["model_id"]: m for m in json.loads(capsys.readouterr().out)["models"]}
    assert models[a]["checkpoint"] == {"uri": uri, "sha256": reply.model.checkpoint_sha256, "deleted": False,
                                       "delete_error": None}
    assert models[a]["inherited_from"] is None
    assert models[b]["checkpoint"] is None and models[b]["inherited_from"] == a


@pytest.mark.parametrize("fields, problem", [
    ({"checkpoint_uri": "file:///x/model-1.weights.h5"}, "go together"),
    ({"checkpoint_sha256": "0" * 64}, "go together"),
])
def test_a_half_checkpoint_or_a_failed_one_is_invalid(master_server, small_graph, fields, problem):
    h = master_server()
    ControlClient(h.address, h.admin_token).start_run(600, profile="smoke", seed=1)
    w, wid = checkpoint_worker(h)
    mid = w.submit_model(wid, small_graph.to_json(), small_graph.hash(), 0, 1, HP).model_id
    with pytest.raises(ApiError) as e:
        w.finish_model(wid, mid, "done", best_accuracy=0.1, **fields)
    assert e.value.code.name == "INVALID_ARGUMENT" and problem in e.value.details
    with pytest.raises(ApiError) as e:
        w.finish_model(wid, mid, "failed", reason="oom", checkpoint_uri="file:///x/model-1.weights.h5",
                       checkpoint_sha256="0" * 64)
    assert e.value.code.name == "INVALID_ARGUMENT" and "only MODEL_DONE" in e.value.details
    with pytest.raises(ApiError) as e:  # a child inherits from its parent or nothing
        w.submit_model(wid, small_graph.to_json(), small_graph.hash(), 0, 1, HP, inherited_from=mid)
    assert e.value.code.name == "INVALID_ARGUMENT" and "inherited_from" in e.value.details


def test_retention_hands_each_worker_its_own_checkpoints_to_delete(master_server, small_graph):
    h = master_server()
    control = ControlClient(h.address, h.admin_token)
    run = control.start_run(600, profile="smoke", seed=1, keep_checkpoints=2)
    # the models are ranked by predicted accuracy and report none, so no accuracy record holder is
    # kept (tested below): the top K and the open models' parents alone decide
    assert run.config.keep_checkpoints == 2 and run.config.inherit
    w1, id1 = checkpoint_worker(h, "node-1")
    w2, id2 = checkpoint_worker(h, "node-2")
    # each graph a child of the model it is submitted under (the master checks the descent)
    graphs = [*morph_children(small_graph, 2), None, None, None, None, None]
    graphs[2] = morph_child(graphs[0], 2)                            # under m2
    graphs[3], graphs[4] = morph_children(graphs[2], 2)              # under m3
    graphs[5] = morph_child(graphs[3], 5)                            # under m4
    graphs[6] = morph_child(graphs[5], 6)                            # under m6
    u = [f"file:///s/run-1/model-{i}.weights.h5" for i in range(7)]
    m1, r = finish_done(w1, id1, small_graph, 0, 1, 0.30, u[0], reported=False)  # ranks: m1
    assert not r.delete_checkpoints
    m2, r = finish_done(w2, id2, graphs[0], m1, 1, 0.40, u[1], reported=False)   # m2 > m1
    assert not r.delete_checkpoints
    # w1 starts a child of m1: m1's checkpoint must stay while it trains
    open_child = w1.submit_model(id1, graphs[1].to_json(), graphs[1].hash(), m1, 2, HP).model_id
    m3, r = finish_done(w2, id2, graphs[2], m2, 2, 0.50, u[2], reported=False)   # top 2: m3, m2; m1 kept as a parent
    assert not r.delete_checkpoints
    # its child failed: m1 is no parent of an open model any more, nor in the top 2 (m3, m2)
    r = w1.finish_model(id1, open_child, "failed", reason="out of memory")
    assert [(d.model_id, d.uri) for d in r.delete_checkpoints] == [(m1, u[0])]
    m5, r = finish_done(w1, id1, graphs[4], m3, 3, 0.55, u[4], reported=False)   # top 2: m5, m3; m2 may go, but it is w2's
    assert not r.delete_checkpoints
    m4, r = finish_done(w2, id2, graphs[3], m3, 3, 0.60, u[3], reported=False)   # top 2: m4, m5 -> m2 and m3 (w2's) go
    assert [(d.model_id, d.uri) for d in r.delete_checkpoints] == [(m2, u[1]), (m3, u[2])]
    m6, r = finish_done(w2, id2, graphs[5], m4, 4, 0.70, u[5], reported=False)   # top 2: m6, m4 -> m5 may go: w1's, not w2's
    assert not r.delete_checkpoints
    r = w1.finish_model(id1, w1.submit_model(id1, graphs[6].to_json(), graphs[6].hash(), m6, 4, HP).model_id,
                        "failed", reason="out of memory")
    assert [(d.model_id, d.uri) for d in r.delete_checkpoints] == [(m5, u[4])]  # w1 hears of its own
    models = {m.model_id: m for m in control.list_models().models}
    assert [mid for mid, m in sorted(models.items()) if m.checkpoint_deleted] == [m1, m2, m3, m5]
    assert models[m4].checkpoint_uri == u[3] and not models[m4].checkpoint_deleted


def test_accuracy_record_holders_are_the_models_that_beat_all_before_them():
    reports = [(1, 0.30), (2, 0.20), (3, 0.30), (4, 0.50), (2, 0.60), (5, 0.55)]
    assert record_holders(reports) == {1, 4, 2}  # 3 only tied 1: acc(t) stays 1's
    assert record_holders([]) == frozenset()
    models = [StoredModel(i, None, "done", True) for i in range(1, 6)]
    assert checkpoints_to_delete(models, [2, 5, 4, 1, 3], 1, record_holders(reports)) == [3, 5]


@given(st.lists(st.tuples(st.integers(1, 20), st.floats(0, 1)), max_size=60))
def test_the_model_behind_any_acc_t_is_a_record_holder(reports):
    """Whatever prefix of the reports acc(t) is taken over, the model that first reached its
    maximum holds a record (so retention keeps the regulated score's model for the audit)."""
    holders = record_holders(reports)
    for end in range(1, len(reports) + 1):
        best = max(a for _, a in reports[:end])
        first = next(m for m, a in reports[:end] if a == best)
        assert first in holders


def test_retention_keeps_an_early_record_holder_outside_the_top_k(master_server, small_graph):
    """keep 1: m1 held the run's best accuracy before m2 beat it; m2 is the top 1, m1 stays (it may
    be behind the regulated score), and m3, never the best, goes."""
    h = master_server()
    ControlClient(h.address, h.admin_token).start_run(600, profile="smoke", seed=1, keep_checkpoints=1)
    w, wid = checkpoint_worker(h, "node-1")
    graphs = morph_children(small_graph, 3)
    deleted = []
    for i, (graph, acc) in enumerate(zip([small_graph, *graphs[:2]], (0.50, 0.70, 0.40))):
        _, r = finish_stored(w, wid, graph, i + 1, acc)
        deleted += [d.model_id for d in r.delete_checkpoints]
    assert deleted == [3]


# ---------------------------------------------------------------- migration 0005


def test_migration_0005_round_trips_and_old_models_have_no_checkpoint(db_url: str):
    from master.store.records import NewModel, NewRun, WorkerInput
    from master.store.sql.sql_store import SqlStore

    s = SqlStore(db_url)
    try:
        run = s.start_run(s.create_run(NewRun("smoke", 1, 600.0, "fp32", {"limits": {}}, {}), 100.0).id, 100.0)
        w, _ = s.register_worker(WorkerInput("n", "n", [], 1, 1, {}), 100.0)
        new = NewModel(run.id, None, w.id, 1, "{}", "ab" * 32, 32, 3, "training", 30, 10)
        a = s.add_model(new, 101.0).id
        b = s.add_model(NewModel(run.id, a, w.id, 2, "{}", "cd" * 32, 32, 3, "training", 30, 10,
                                 inherited_from=a), 102.0).id
        s.finish_model(ModelEnd(a, w.id, "done", "", 0.5, None, "file:///c/model-1.weights.h5", "0" * 64), 103.0)
        assert (s.get_model(a).checkpoint_uri, s.get_model(b).inherited_from) == ("file:///c/model-1.weights.h5", a)
    finally:
        s.close()
    down_and_up(db_url, "0004")  # back to the previous release, and forward again
    s = SqlStore(db_url)
    try:
        old_a, old_b = s.get_model(a), s.get_model(b)
        assert (old_a.checkpoint_uri, old_a.checkpoint_sha256, old_a.checkpoint_deleted) == ("", "", False)
        assert old_b.inherited_from == 0  # trained from scratch, as every model before 0005 was
        # retention looks only at the open model: the done one has no checkpoint any more
        assert [(m.model_id, m.has_checkpoint) for m, _, _ in s.stored_checkpoints(run.id)] == [(b, False)]
    finally:
        s.close()


def test_a_bad_checkpoints_url_stops_the_worker_with_one_line(capsys, monkeypatch, tmp_path):
    from aiperf_cli.main import main

    monkeypatch.setitem(sys.modules, "fsspec", None)
    rc = main(["worker", "--master", "127.0.0.1:9", "--token", "t", "--state-dir", str(tmp_path),
               "--no-measure-peak", "--checkpoints", "s3://bucket/ckpt"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "aiperf[object-store]" in err, err


def test_the_worker_deletes_what_retention_lets_go_from_its_store(master_server, small_graph, tmp_path, caplog):
    import logging

    from aiperf.morphism import deeper_at
    from worker.agent import Agent, AgentConfig, Outbox
    from worker.trainer import TrainResult

    h = master_server()
    control = ControlClient(h.address, h.admin_token)
    run_id = control.start_run(600, profile="smoke", seed=1, keep_checkpoints=1).config.run_id
    agent = Agent(AgentConfig(master=h.address, token=h.worker_token, name="keeper", measure_peak=False,
                              checkpoints=str(tmp_path / "store")))
    try:
        agent._register()
        ids = [agent._submit(g, 0, n + 1, Hyperparameters(32, 3))
               for n, g in enumerate((small_graph, deeper_at(small_graph, "conv2_block1_out")))]
        ckpts = [agent.inheritance.store.put(run_id, mid, write_file(tmp_path / f"{mid}.weights.h5", b"w" * (mid + 1)))
                 for mid in ids]
        box = Outbox()
        with caplog.at_level(logging.INFO, logger="worker.inheritance"):
            # the second is below the first: neither the top 1 nor ever the run's best accuracy
            for n, (mid, acc) in enumerate(zip(ids, (0.6, 0.5))):
                agent._finish(box, mid, n + 1, TrainResult("done", (acc,), 1, 100, 10, 1, acc, acc), ckpts[n])
            box.close()
        files = {mid: Path(c.uri[len("file://"):]) for mid, c in zip(ids, ckpts)}
        assert files[ids[0]].exists() and not files[ids[1]].exists()  # only the top 1 stays
        assert f"event=checkpoint_deleted model={ids[1]}" in caplog.text
        models = {m.model_id: m for m in control.list_models().models}
        assert models[ids[1]].checkpoint_deleted and not models[ids[0]].checkpoint_deleted
        assert models[ids[0]].checkpoint_sha256 == hashlib.sha256(b"w" * (ids[0] + 1)).hexdigest()
    finally:
        agent.client.close()
        agent.inheritance.close()
