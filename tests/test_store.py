"""The SQL store on SQLite and PostgreSQL: migrations, invariants, no partial writes."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from master.store.errors import FailedPrecondition, NotFound, PermissionDenied, SchemaError
from master.store.records import ModelEnd, NewModel, ResourceSampleInput, WorkerInput
from master.store.sql.engine import head_revision, make_engine
from master.store.sql.sql_store import SqlStore
from tests.support.store_rows import added_model, progress_row, registered_worker, started_run


@pytest.fixture
def store(db_url: str):
    s = SqlStore(db_url)
    yield s
    s.close()


def test_fresh_database_is_migrated_to_head_and_reopening_is_a_no_op(db_url: str):
    s = SqlStore(db_url)
    assert s.previous_revision == "empty"
    s.close()
    s = SqlStore(db_url)
    assert s.previous_revision == head_revision()
    with s.engine.connect() as conn:
        assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == head_revision()
    s.close()


def test_models_and_migrations_agree(db_url: str):
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    from master.store.sql.tables import Base

    s = SqlStore(db_url)
    with s.engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    s.close()
    assert diff == [], f"models changed without a migration: {diff}"


def test_a_newer_schema_is_refused_and_left_untouched(db_url: str):
    SqlStore(db_url).close()
    engine = make_engine(db_url)
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '9999_future'"))
    with pytest.raises(SchemaError, match="newer"):
        SqlStore(db_url)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == "9999_future"
    engine.dispose()


def test_sqlite_uses_wal(tmp_path):
    s = SqlStore(f"sqlite:///{tmp_path / 'w.db'}")
    with s.engine.connect() as conn:
        assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"
    s.close()


def test_only_one_active_run_unless_told_otherwise(store: SqlStore):
    first = started_run(store)
    with pytest.raises(FailedPrecondition, match=f"run {first} is still active"):
        started_run(store)
    second = started_run(store, allow_concurrent=True)
    assert [r.id for r in store.active_runs()] == [first, second]
    assert store.current_run().id == second
    run = store.get_run(first)
    assert run.state == "running" and run.started_at == 100.0 and run.deadline == 700.0
    with pytest.raises(NotFound):
        store.get_run(999)


def test_run_lifecycle_and_abandoning_open_models(store: SqlStore):
    run_id, w = started_run(store), registered_worker(store)
    m = added_model(store, run_id, w)
    stopped = store.stop_run(run_id, 200.0, "deadline reached")
    assert stopped.state == "stopping" and stopped.stopped_at == 200.0
    assert store.stop_run(run_id, 250.0, "again").stopped_at == 200.0  # no-op
    run, abandoned = store.finish_run(run_id, 300.0, "finished", "")
    assert run.state == "finished" and run.finished_at == 300.0 and abandoned == [m]
    assert store.get_model(m).state == "abandoned"
    with pytest.raises(FailedPrecondition):
        store.stop_run(run_id, 400.0, "")
    assert store.current_run() is None and store.latest_run().id == run_id


def test_register_is_idempotent_and_a_restart_abandons_the_old_model(store: SqlStore):
    run_id = started_run(store)
    w1 = registered_worker(store, "node-1")
    m = added_model(store, run_id, w1)
    store.add_progress([progress_row(m, w1, 1, 110.0)])
    w, abandoned = store.register_worker(
        WorkerInput(name="node-1", host="node-1b", accelerators=[], cpus=4, memory_bytes=1, software={}), 120.0)
    assert w.id == w1 and w.host == "node-1b" and abandoned == [m]
    model = store.get_model(m)
    assert model.state == "abandoned" and model.images_trained == 100  # progress kept
    assert registered_worker(store, "node-2") != w1


def test_the_credential_hash_is_kept_per_worker(store: SqlStore):
    info = WorkerInput(name="node-1", host="node-1", accelerators=[], cpus=1, memory_bytes=1, software={})
    w, _ = store.register_worker(info, 100.0)
    assert store.worker_credential_hash(w.id) is None  # none issued through the store alone
    store.register_worker(info, 110.0, "ab" * 32)
    store.register_worker(info, 120.0)  # None keeps the stored hash
    assert store.worker_credential_hash(w.id) == "ab" * 32
    store.register_worker(info, 130.0, "cd" * 32)
    assert store.worker_credential_hash(w.id) == "cd" * 32
    assert store.worker_by_name("node-1").id == w.id and store.worker_by_name("node-2") is None
    with pytest.raises(NotFound, match="worker 999"):
        store.worker_credential_hash(999)


def test_migration_0003_adds_an_empty_credential_to_existing_workers(db_url: str):
    from alembic import command

    from master.store.sql.engine import _alembic_config

    engine = make_engine(db_url)
    with engine.begin() as conn:  # a database of the previous release, with a worker in it
        cfg = _alembic_config()
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0001")
        conn.execute(text("INSERT INTO workers (name, host, accelerators, cpus, memory_bytes, software, state, "
                          "registered_at, last_heartbeat) VALUES ('old', 'old', '[]', 1, 1, '{}', 'alive', 1, 1)"))
    engine.dispose()
    s = SqlStore(db_url)
    try:
        assert s.previous_revision == "0001"
        old = s.worker_by_name("old")
        assert old is not None and old.state == "alive" and s.worker_credential_hash(old.id) is None
    finally:
        s.close()


def test_lost_workers_and_heartbeats(store: SqlStore):
    run_id, w = started_run(store), registered_worker(store)
    m = added_model(store, run_id, w)
    assert store.mark_workers_lost([w], 150.0) == [m]
    assert store.get_worker(w).state == "lost"
    store.record_heartbeats({w: 160.0})
    worker = store.get_worker(w)
    assert worker.state == "alive" and worker.last_heartbeat == 160.0
    assert [x.id for x in store.list_workers("alive")] == [w]


def test_heartbeats_of_many_workers_are_all_recorded(store: SqlStore):
    # written in several transactions (chunks); none may be dropped at a chunk boundary
    workers = [registered_worker(store, f"node-{i}") for i in range(600)]
    store.record_heartbeats({w: 1000.0 + w for w in workers})
    assert {w.id: w.last_heartbeat for w in store.list_workers("alive")} == {w: 1000.0 + w for w in workers}


def test_a_heartbeat_flush_lets_a_waiting_report_batch_in_between_its_chunks(store: SqlStore, monkeypatch):
    """A flush of thousands of heartbeats is many short transactions under the store's write lock;
    a report batch waiting for that lock gets it between two of them, not after the last (a lock
    released and taken back at once is seldom handed over: the reports' p99 at 10,000 workers)."""
    import threading
    import time

    import master.store.sql.workers as sql_workers

    run, worker = started_run(store), registered_worker(store)
    model = added_model(store, run, worker)
    monkeypatch.setattr(sql_workers, "HEARTBEAT_CHUNK", 2)
    events: list[str] = []
    write_chunk = store._sql.write_heartbeats

    def report() -> None:
        store.add_progress([progress_row(model, worker, 1, 200.0)])
        events.append("report")

    reporter = threading.Thread(target=report)

    def chunk(conn, items) -> None:
        events.append("chunk")
        if len(events) == 1:  # the reports arrive while the first chunk holds the lock
            reporter.start()
            time.sleep(0.2)
        write_chunk(conn, items)

    monkeypatch.setattr(store._sql, "write_heartbeats", chunk)
    store.record_heartbeats({worker: 1000.0, **{10_000 + i: 1.0 for i in range(19)}})  # 10 chunks
    reporter.join(timeout=30)
    assert events.count("chunk") == 10 and "report" in events
    assert events.index("report") <= 3, events  # after the first chunk or two, not the tenth
    assert store.get_model(model).images_trained == 100


def test_on_postgresql_a_report_batch_commits_during_a_heartbeat_flush(store: SqlStore, monkeypatch):
    """PostgreSQL locks rows: a flush of workers' beats and the progress writer's batch (models and
    progress rows) run side by side; on SQLite, one writer, the batch waits for a chunk (above)."""
    import threading

    if store.dialect == "sqlite":
        pytest.skip("SQLite has one writer: the flush hands the lock over between chunks (test above)")
    run, worker = started_run(store), registered_worker(store)
    model = added_model(store, run, worker)
    committed = threading.Event()
    write_chunk = store._sql.write_heartbeats

    def report() -> None:
        store.add_progress([progress_row(model, worker, 1, 200.0)])
        committed.set()

    def chunk(conn, items) -> None:
        write_chunk(conn, items)
        threading.Thread(target=report).start()
        # the report batch commits while this chunk's transaction is still open
        assert committed.wait(10), "the report batch waited for the heartbeat flush"

    monkeypatch.setattr(store._sql, "write_heartbeats", chunk)
    store.record_heartbeats({worker: 1000.0})
    assert store.get_model(model).images_trained == 100
    assert store.get_worker(worker).last_heartbeat == 1000.0


def test_workers_joining_a_run_do_not_make_the_next_report_batch_read_its_models_back(store: SqlStore, monkeypatch):
    """At a run's start every worker joins (a run_workers row, no model or run changed): the
    progress writer's cache of the models it writes stays; a write that changes a model clears it."""
    run, worker = started_run(store), registered_worker(store)
    model = added_model(store, run, worker)
    store.add_progress([progress_row(model, worker, 1, 200.0)])
    reads: list[str] = []
    state = store._progress_state

    def counted(conn, ids):
        reads.extend(str(i) for i in ids if i not in store._progress_models)
        return state(conn, ids)

    monkeypatch.setattr(store, "_progress_state", counted)
    others = [registered_worker(store, f"node-{i + 2}") for i in range(3)]  # registering changes no model either, but
    store.add_progress([progress_row(model, worker, 2, 201.0)])  # clears the cache: this batch reads it back
    reads.clear()
    for other in others:
        assert store.join_run(run, other, 201.0)
    store.add_progress([progress_row(model, worker, 3, 202.0)])
    assert reads == []  # from the cache
    store.finish_model(ModelEnd(added_model(store, run, worker), worker, "failed", "x", None, None), 203.0)
    store.add_progress([progress_row(model, worker, 4, 204.0)])
    assert reads == [str(model)]  # another model changed: read back
    assert store.get_model(model).images_trained == 400


def test_models_parent_limit_and_history(store: SqlStore):
    run_id, w = started_run(store), registered_worker(store)
    a = added_model(store, run_id, w)
    b = added_model(store, run_id, w, parent=a)
    assert store.get_model(b).parent_id == a
    with pytest.raises(NotFound, match="parent model 999"):
        added_model(store, run_id, w, parent=999)
    with pytest.raises(FailedPrecondition, match="limit of 2 models"):
        store.add_model(NewModel(run_id, None, w, 1, "{}", "cd" * 32, 8, 3, "training", 1, 1), 102.0, max_models=2)
    assert [m.id for m in store.models_since(run_id, 0)] == [a, b]
    assert [m.id for m in store.models_since(run_id, a)] == [b]
    store.finish_model(ModelEnd(a, w, "done", "", 0.5, 0.9), 130.0)
    store.finish_model(ModelEnd(b, w, "done", "", 0.6, None), 131.0)
    # a ranks on its prediction 0.9, b on its best 0.6
    assert store.ranked_done_ids(run_id) == [a, b]
    assert [m.id for m in store.hyperparameter_history(run_id)] == [a, b]
    assert store.count_models(run_id) == {"done": 2}
    page, total = store.list_models(run_id, "done", limit=1, offset=1)
    assert total == 2 and [m.id for m in page] == [b]


def test_progress_is_idempotent_and_checked(store: SqlStore):
    run_id, w, other = started_run(store), registered_worker(store), registered_worker(store, "node-2")
    m = added_model(store, run_id, w)
    q = added_model(store, run_id, w, state="queued")
    res = store.add_progress([progress_row(m, w, 1, 110.0), progress_row(m, w, 2, 120.0, acc=0.4), progress_row(q, w, 1, 121.0)])
    assert [r.error for r in res] == [None, None, None] and not any(r.duplicate for r in res)
    assert store.get_model(q).state == "training"  # queued -> training at its first report
    again = store.add_progress([progress_row(m, w, 2, 130.0, trained=999)])
    assert again[0].duplicate and again[0].master_flops == 3000
    bad = store.add_progress([progress_row(m, other, 3, 131.0), progress_row(999, w, 1, 131.0)])
    assert isinstance(bad[0].error, PermissionDenied) and isinstance(bad[1].error, NotFound)
    model = store.get_model(m)
    assert model.images_trained == 200 and model.best_accuracy == 0.4 and model.epochs == 1
    assert [(p.t, p.ops, p.accuracy) for p in store.timeline(run_id)] == [
        (110.0, 3000, None), (120.0, 3000, 0.4), (121.0, 3000, None)]
    assert store.run_images(run_id) == (300, 0)
    store.finish_model(ModelEnd(m, w, "done", "", 0.4, None), 140.0)
    closed = store.add_progress([progress_row(m, w, 3, 150.0)])
    assert isinstance(closed[0].error, FailedPrecondition)
    assert len(store.timeline(run_id)) == 3


def test_a_large_batch_of_reports_is_recorded_whole(store: SqlStore):
    # more reports and models than one multi-row statement holds; queued models
    # (no start time yet) and reports without accuracy mixed in
    run_id, w = started_run(store), registered_worker(store)
    models = [added_model(store, run_id, w, state="queued" if i % 3 == 0 else "training") for i in range(520)]
    batch = [progress_row(m, w, seq, 200.0 + seq, trained=10 * seq, acc=0.5 if m % 2 and seq == 2 else None)
             for seq in (1, 2) for m in models]
    res = store.add_progress(batch)
    assert all(r.error is None and not r.duplicate for r in res) and len(res) == 1040
    assert store.run_images(run_id) == (520 * 30, 0)
    for m in (models[0], models[1], models[-1]):
        rec = store.get_model(m)
        assert rec.state == "training" and rec.images_trained == 30 and rec.started_at is not None
        assert rec.best_accuracy == (0.5 if m % 2 else None)
    assert all(r.duplicate for r in store.add_progress(batch[:600]))
    assert store.run_images(run_id) == (520 * 30, 0)


def test_progress_state_kept_in_memory_stays_true(store: SqlStore, db_url: str):
    """add_progress keeps the models' state between batches: out-of-order reports, retries,
    other writes and a restarted store must all see what the database holds."""
    run_id, w = started_run(store), registered_worker(store)
    m = added_model(store, run_id, w)
    assert [r.error for r in store.add_progress([progress_row(m, w, 5, 110.0)])] == [None]
    late = store.add_progress([progress_row(m, w, 3, 111.0), progress_row(m, w, 5, 112.0), progress_row(m, w, 3, 113.0)])
    assert [r.duplicate for r in late] == [False, True, True] and all(r.error is None for r in late)
    assert store.get_model(m).images_trained == 200
    # a restarted master (a new store on the same database) still refuses to count a retry twice
    reopened = SqlStore(db_url)
    try:
        again = reopened.add_progress([progress_row(m, w, 3, 114.0), progress_row(m, w, 6, 115.0)])
        assert [r.duplicate for r in again] == [True, False]
        assert reopened.get_model(m).images_trained == 300
    finally:
        reopened.close()
    # another write (the run aborted) is seen by the next batch
    store.finish_run(run_id, 120.0, "aborted", "test")
    closed = store.add_progress([progress_row(m, w, 7, 121.0)])
    assert isinstance(closed[0].error, FailedPrecondition)
    assert store.run_images(run_id) == (300, 0)


def test_finish_model_rules_and_the_final_accuracy_enters_the_time_line(store: SqlStore):
    run_id, w, other = started_run(store), registered_worker(store), registered_worker(store, "node-2")
    m = added_model(store, run_id, w)
    store.add_progress([progress_row(m, w, 1, 110.0, acc=0.5)])
    with pytest.raises(PermissionDenied):
        store.finish_model(ModelEnd(m, other, "done", "", 0.5, None), 120.0)
    done = store.finish_model(ModelEnd(m, w, "done", "", 0.55, 0.7), 120.0)
    assert done.state == "done" and done.best_accuracy == 0.55 and done.predicted_accuracy == 0.7
    assert store.finish_model(ModelEnd(m, w, "done", "", 0.55, 0.7), 121.0).finished_at == 120.0  # retried: unchanged
    with pytest.raises(FailedPrecondition):
        store.finish_model(ModelEnd(m, w, "failed", "oops", None, None), 122.0)
    assert [(p.t, p.ops, p.accuracy) for p in store.timeline(run_id)] == [(110.0, 3000, 0.5), (120.0, 0, 0.55)]


def test_resource_samples(store: SqlStore):
    run_id, w = started_run(store), registered_worker(store)
    n = store.add_resource_samples(run_id, [ResourceSampleInput(w, 105.0, 0, 0.9, 1 << 30, 0.5, 2 << 30),
                                            ResourceSampleInput(w, 106.0, -1, 0.0, 0, 0.25, 3 << 30)])
    assert n == 2
    samples = store.resource_samples(worker_id=w, run_id=run_id)
    assert [(s.t, s.accelerator_index, s.cpu_util) for s in samples] == [(105.0, 0, 0.5), (106.0, -1, 0.25)]


def test_join_run_records_the_inventory_once(store: SqlStore):
    run_id, w = started_run(store), registered_worker(store)
    assert store.join_run(run_id, w, 110.0) is True
    assert store.join_run(run_id, w, 111.0) is False
    [rw] = store.run_workers(run_id)
    assert rw.worker.id == w and rw.joined_at == 110.0
    assert rw.inventory["accelerators"][0]["model"] == "V100" and rw.inventory["software"] == {"tensorflow": "2.21"}


def test_migration_0004_keeps_run_workers_with_no_dataset_and_no_refusals(db_url: str):
    from alembic import command

    from master.store.sql.engine import _alembic_config

    engine = make_engine(db_url)
    with engine.begin() as conn:  # a database of the previous release: a run with a worker in it
        cfg = _alembic_config()
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0003")
        conn.execute(text("INSERT INTO workers (name, host, accelerators, cpus, memory_bytes, software, state, "
                          "registered_at, last_heartbeat) VALUES ('old', 'old', '[]', 1, 1, '{}', 'alive', 1, 1)"))
    engine.dispose()
    s = SqlStore(db_url)
    try:
        assert s.previous_revision == "0003"
        run_id = started_run(s)
        old = s.worker_by_name("old")
        assert old is not None and old.cpu == {}
        s.join_run(run_id, old.id, 2.0)
        (rw,) = s.run_workers(run_id)
        assert rw.dataset is None and rw.implausible_reports == 0
        s.add_implausible_reports({(run_id, old.id): 2}, 3.0)
        s.record_dataset(run_id, old.id, {"kind": "digits", "train_images": 1437}, 3.0)
        (rw,) = s.run_workers(run_id)
        assert rw.implausible_reports == 2 and rw.dataset == {"kind": "digits", "train_images": 1437}
    finally:
        s.close()
