"""Retention at any run length (master/core/retention.py): a FinishModel reads the models that hold a
checkpoint or are open, the top `keep` ranked by the database, and the run's accuracy record
holders as the master folded them from its reports; not the run's history. Its decision must be
the pure rule's (aiperf/retention.py) over the whole history, on SQLite and PostgreSQL."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aiperf.api.client import Accelerator, ControlClient, WorkerClient
from aiperf.retention import record_holders

# its baseline (the rule over the whole history) is this test's oracle
from benchmarks import retention_bench as BENCH
from master.core.retention import AccuracyRecords, release_checkpoints
from master.store.records import ModelEnd, NewModel, NewRun, ProgressInput, WorkerInput

ACCURACY = st.sampled_from([0.1, 0.25, 0.5, 0.75, 0.9])  # few values: ties in the ranking and the records


@dataclass(frozen=True)
class Spec:
    state: str                 # done, failed, training, queued
    parent: int                # index of an earlier model (0 and the first model: none)
    worker: int                # 0 or 1
    best: float | None
    predicted: float | None
    stored: bool               # a done model's checkpoint was recorded ...
    deleted: bool              # ... and later handed over for deletion


SPECS = st.lists(st.builds(Spec, st.sampled_from(["done", "done", "failed", "training", "queued"]),
                           st.integers(0, 20), st.integers(0, 1), st.none() | ACCURACY, st.none() | ACCURACY,
                           st.booleans(), st.booleans()), min_size=1, max_size=14)
REPORTS = st.lists(st.tuples(st.integers(0, 13), ACCURACY), max_size=30)


@pytest.fixture
def store(db_url: str) -> Iterator:
    from master.store.sql.sql_store import SqlStore

    s = SqlStore(db_url)
    yield s
    s.close()


def _history(store, specs: list[Spec], reports: list[tuple[int, float]], keep: int):
    """A run built through the store as the master builds it; returns (run, worker ids, model ids)."""
    run = store.create_run(NewRun("smoke", 1, 600.0, "fp32", {"limits": {}, "keep_checkpoints": keep}, {}), 100.0,
                           allow_concurrent=True)  # one run per example, in one database
    run = store.start_run(run.id, 100.0)
    workers = [store.register_worker(WorkerInput(f"n{i}-{run.id}", "h", [], 1, 1, {}), 100.0)[0].id for i in (0, 1)]
    ids: list[int] = []
    for i, spec in enumerate(specs):
        parent = ids[spec.parent % i] if i and spec.parent else None
        new = NewModel(run.id, parent, workers[spec.worker], i + 1, "{}", f"{run.id:08x}{i:056x}", 32, 3,
                       "queued" if spec.state == "queued" else "training", 30, 10)
        ids.append(store.add_model(new, 101.0 + i).id)
    seq = {mid: 0 for mid in ids}
    for t, (index, accuracy) in enumerate(reports):
        if index >= len(specs) or specs[index].state == "queued":
            continue  # a report makes a queued model training
        mid = ids[index]
        seq[mid] += 1
        [result] = store.add_progress([ProgressInput(mid, workers[specs[index].worker], seq[mid], 200.0 + t, 1,
                                                     1, 1, accuracy, 0, 0, False)])
        assert result.error is None
    for mid, spec in zip(ids, specs):
        if spec.state in ("done", "failed"):
            uri = f"file:///c/model-{mid}.weights.h5" if spec.stored and spec.state == "done" else ""
            store.finish_model(ModelEnd(mid, workers[spec.worker], spec.state, "", spec.best, spec.predicted, uri, "0" * 64 if uri else ""), 300.0 + mid)
    store.mark_checkpoints_deleted([mid for mid, spec in zip(ids, specs)
                                    if spec.stored and spec.deleted and spec.state == "done"])
    return store.get_run(run.id), workers, ids


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(SPECS, REPORTS, st.integers(0, 4))
def test_retention_reads_little_and_decides_as_the_rule_over_the_whole_history(store, specs, reports, keep):
    run, workers, ids = _history(store, specs, reports, keep)
    models, _ = store.list_models(run.id, limit=10_000)
    ranked = BENCH.python_ranking(models)
    assert store.ranked_done_ids(run.id) == ranked, "the database sorts as aiperf.scoring.model_rank_key"
    assert store.ranked_done_ids(run.id, limit=keep or 1) == ranked[:keep or 1]
    looked_at = {m.model_id for m, _, _ in store.stored_checkpoints(run.id)}
    assert looked_at == {m.id for m in models if (m.checkpoint_uri and not m.checkpoint_deleted)
                         or m.state in ("queued", "training")}, "only live checkpoints and open models are read"
    for worker_id in workers:
        expected = BENCH.whole_history(store, run, worker_id)
        assert release_checkpoints(store, run, worker_id, AccuracyRecords(store)) == expected
    assert BENCH.whole_history(store, run, workers[0]) == [], "what was released is recorded as deleted"


def test_accuracy_records_fold_what_arrives_after_the_first_read(store):
    run, workers, ids = _history(store, [Spec("training", 0, 0, None, None, False, False)] * 3,
                                 [(0, 0.5), (1, 0.25)], 1)
    records = AccuracyRecords(store)
    records.add(run.id, ids[2], 0.9, 240.0)  # before the first read: the read will see it in the store instead
    assert records.holders(run.id) == {ids[0]}
    [r] = store.add_progress([ProgressInput(ids[1], workers[0], 2, 250.0, 1, 1, 1, 0.75, 0, 0, False)])
    assert r.error is None and r.run_id == run.id
    records.committed([ProgressInput(ids[1], workers[0], 2, 250.0, 1, 1, 1, 0.75, 0, 0, False)], [r])
    records.add(run.id, ids[2], 0.75, 251.0)  # a tie keeps the earlier holder
    in_store = record_holders((m, a) for m, a, _ in store.accuracy_reports(run.id))
    assert records.holders(run.id) == {ids[0], ids[1]} == in_store


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 6), ACCURACY, st.integers(0, 20)), max_size=25), st.randoms())
def test_a_report_folded_late_still_holds_its_record(reports, rng):
    """The master stamps a report when it arrives and folds it when its commit ends: in any
    order of folding, the holders include every model that held the record in time order
    (ties: the earlier), i.e. every model behind acc(t) for any t."""
    from aiperf.retention import RecordHolders

    timed = [(m, a, float(t)) for m, a, t in reports]
    fold = RecordHolders()
    for m, a, t in rng.sample(timed, len(timed)):
        fold.add(m, a, t)
    ordered = sorted(range(len(timed)), key=lambda i: (timed[i][2], i))
    assert record_holders((timed[i][0], timed[i][1]) for i in ordered) <= fold.holders
    for end in sorted({t for _, _, t in timed}):
        upto = [timed[i] for i in ordered if timed[i][2] <= end]
        best = max(a for _, a, _ in upto)
        assert next(m for m, a, _ in upto if a == best) in fold.holders



def test_a_master_keeps_the_record_holders_it_hears_of_after_its_first_finish(master_server, small_graph):
    """keep 1. m1 reports 0.5 (the master reads the run's records at its finish); m2 reports
    nothing but finishes at 0.8 (its best enters the time line at FinishModel); m3 reports 0.9;
    m4 reports 0.4. m1, m2 and m3 each held the run's best accuracy, so only m4 is let go, here
    and after a restart of the master on the same database."""
    from tests.support.checkpoint_runs import finish_stored, morph_children

    h = master_server()
    ControlClient(h.address, h.admin_token).start_run(600, profile="smoke", seed=1, keep_checkpoints=1)
    w = WorkerClient(h.address, h.worker_token, retries=0)
    wid = w.register(name="n", host="n", accelerators=[Accelerator("Tesla V100", 32 << 30)]).worker_id
    deleted, ids = [], []
    for i, (graph, acc, report) in enumerate(zip([small_graph, *morph_children(small_graph, 3)], (0.5, 0.8, 0.9, 0.4),
                                                 (True, False, True, True))):
        mid, r = finish_stored(w, wid, graph, i + 1, acc, report)
        deleted += [d.model_id for d in r.delete_checkpoints]
        ids.append(mid)
    assert deleted == [ids[3]]
    assert h.master.records.holders(h.master.current_run().id) == set(ids[:3])
    assert AccuracyRecords(h.store).holders(h.master.current_run().id) == set(ids[:3]), "as read after a restart"


def test_the_retention_bench_decides_as_its_baseline_and_prints_its_results(capsys):
    assert BENCH.main(["--sizes", "300", "--repeats", "1", "--reports", "3", "--postgres-url", ""]) == 0
    [line] = [l for l in capsys.readouterr().out.splitlines() if l.startswith("RESULT ")]
    fields = dict(kv.split("=") for kv in line.split()[1:])
    assert set(fields) == {"retention_ms_300", "retention_baseline_ms_300", "retention_speedup_300"}
    assert all(float(v) > 0 for v in fields.values())


def test_the_writer_folds_what_it_recorded_even_when_its_caller_is_gone(store):
    """A caller that went away after its report was queued (a closed stream) does not keep the
    report's accuracy from the record holders: the writer's hook runs at the commit."""
    from master.core.progress_writer import ProgressWriter

    run, workers, ids = _history(store, [Spec("training", 0, 0, None, None, False, False)], [], 1)
    records = AccuracyRecords(store)
    assert records.holders(run.id) == frozenset()
    writer = ProgressWriter(store, on_commit=records.committed)
    try:
        writer.submit([ProgressInput(ids[0], workers[0], 1, 300.0, 1, 1, 1, 0.5, 0, 0, False)],
                      lambda results, error: None)  # nobody waits for the answer
    finally:
        writer.close()  # drains the queue
    assert records.holders(run.id) == {ids[0]}
