"""The master's clock defines a run's window, and totals cannot overflow.

Store rules on SQLite and PostgreSQL; the rest through a real master on a real
port with a real SQLite file, restarted on the same file across a deadline with
a fake clock.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import create_engine, select

from aiperf.api import aiperf_pb2 as pb
from aiperf.api.client import ControlClient, WorkerClient
from aiperf.api.control_session import ControlSession
from aiperf.api.views import run_status_to_dict, scoreboard_to_dict
from aiperf.flops import count_flops
from aiperf_cli.report import fetch_report
from aiperf_cli.tables import status_line
from master.store.errors import FailedPrecondition, InvalidArgument
from master.store.records import INT64_MAX, NewModel, NewRun, Outage, ProgressInput, WorkerInput
from master.store.sql.sql_store import SqlStore
from master.store.sql.tables import MasterLifeRow
from tests.support.fake_clock import FakeClock
from tests.support.master_clients import HP, wait_for

UINT64_MAX = 2**64 - 1


# ---------------------------------------------------------------- store helpers


@pytest.fixture
def store(db_url: str):
    s = SqlStore(db_url)
    yield s
    s.close()


def _running_run(store: SqlStore, now: float = 100.0, duration_s: float = 60.0, concurrent: bool = False) -> int:
    spec = NewRun(profile="smoke", seed=1, duration_s=duration_s, precision="fp32",
                  config={"limits": {}, "min_running_time_s": 120.0}, software={})
    run = store.create_run(spec, now, allow_concurrent=concurrent)
    return store.start_run(run.id, now).id


def _worker(store: SqlStore, name: str = "node-1", now: float = 100.0) -> int:
    return store.register_worker(WorkerInput(name, name, [], 1, 1, {}), now)[0].id


def _model(store: SqlStore, run_id: int, worker_id: int, flops: int = 1, now: float = 100.0) -> int:
    return store.add_model(NewModel(run_id, None, worker_id, 1, "{}", "ab" * 32, 32, 3, "training",
                                    flops, flops), now).id


def _report(mid: int, wid: int, seq: int, t: float, trained: int, validated: int = 0, flops: int = 1) -> ProgressInput:
    ops = flops * (trained + validated)
    return ProgressInput(mid, wid, seq, t, 1, trained, validated, None, ops, ops, False)


# ---------------------------------------------------------------- totals (store)


def test_run_images_are_exact_far_beyond_int64(store: SqlStore):
    run_id = _running_run(store)
    wid = _worker(store)
    mids = [_model(store, run_id, wid) for _ in range(5)]
    half = INT64_MAX // 2  # a report's operations (1 per image) stay within int64
    results = store.add_progress([_report(m, wid, 1, 101.0, half, half) for m in mids])
    assert all(r.error is None for r in results)
    # SQLite's SUM would raise "integer overflow" here; PostgreSQL's gives numeric
    assert store.run_images(run_id) == (5 * half, 5 * half)
    assert sum(p.ops for p in store.timeline(run_id)) == 10 * half


def test_a_report_that_would_overflow_is_refused_alone(store: SqlStore):
    run_id = _running_run(store)
    wid = _worker(store)
    full, other = _model(store, run_id, wid), _model(store, run_id, wid)
    assert store.add_progress([_report(full, wid, 1, 101.0, INT64_MAX - 10)])[0].error is None
    batch = [
        _report(full, wid, 2, 102.0, 11),                    # the model's total would pass 2^63 - 1
        _report(other, wid, 1, 102.0, 10),                   # fine, in the same transaction
        ProgressInput(other, wid, 2, 102.0, 1, 2, 0, None, INT64_MAX + 1, INT64_MAX + 1, False),  # ops too big
        _report(full, wid, 3, 102.0, 10),                    # exactly up to the limit: fine
    ]
    results = store.add_progress(batch)
    assert isinstance(results[0].error, InvalidArgument) and "images_trained total" in str(results[0].error)
    assert results[1].error is None
    assert isinstance(results[2].error, InvalidArgument) and "master_flops" in str(results[2].error)
    assert results[3].error is None
    assert store.get_model(full).images_trained == INT64_MAX
    assert store.get_model(other).images_trained == 10
    assert [p.ops for p in store.timeline(run_id)] == [INT64_MAX - 10, 10, 10]
    # the refused seqs were not recorded: they can be sent again, with sane figures
    assert store.add_progress([_report(other, wid, 2, 103.0, 1)])[0].duplicate is False


# ---------------------------------------------------------------- the window (store)


def test_a_run_never_stops_after_its_deadline(store: SqlStore):
    run_id = _running_run(store, now=100.0, duration_s=60.0)
    assert store.stop_run(run_id, 191.3, "deadline reached").stopped_at == 160.0
    run, _ = store.finish_run(run_id, 200.0, "finished", "")
    assert run.stopped_at == 160.0 and run.finished_at == 200.0
    aborted = _running_run(store, now=300.0, duration_s=60.0)
    assert store.finish_run(aborted, 400.0, "aborted", "operator")[0].stopped_at == 360.0
    early = _running_run(store, now=500.0, duration_s=60.0)
    assert store.stop_run(early, 530.0, "operator").stopped_at == 530.0  # before the deadline: now


def test_no_model_is_accepted_after_the_deadline(store: SqlStore):
    run_id = _running_run(store, now=100.0, duration_s=60.0)
    wid = _worker(store)
    _model(store, run_id, wid, now=160.0)  # at the deadline: still inside
    with pytest.raises(FailedPrecondition, match="deadline"):
        _model(store, run_id, wid, now=160.5)


def test_outages_come_from_the_liveness_stamps_and_belong_to_the_runs_they_overlap(db_url: str):
    s = SqlStore(db_url)
    assert s.record_master_start(50.0) is None  # the first life: nothing before it
    s.record_master_alive(90.0)
    before = _running_run(s, now=60.0)
    s.finish_run(before, 70.0, "finished", "")
    during = _running_run(s, now=80.0)
    s.record_master_alive(120.0)
    s.close()

    s = SqlStore(db_url)  # a restarted master
    assert s.get_run(during).outages == ()
    assert s.record_master_start(151.3) == Outage(120.0, 151.3)
    assert s.get_run(during).outages == (Outage(120.0, 151.3),)
    assert s.get_run(before).outages == ()  # finished before the outage
    s.record_master_alive(155.0)
    s.record_master_alive(156.0)
    s.close()

    s = SqlStore(db_url)
    assert s.record_master_start(200.0) == Outage(156.0, 200.0)
    assert s.outages() == [Outage(120.0, 151.3), Outage(156.0, 200.0)]
    assert s.get_run(during).outages == (Outage(120.0, 151.3), Outage(156.0, 200.0))
    after = _running_run(s, now=201.0, concurrent=True)
    assert s.get_run(after).outages == ()
    s.close()

    s = SqlStore(db_url)  # a clock set back: no downtime can be measured, none is invented
    assert s.record_master_start(199.0) is None
    assert s.outages() == [Outage(120.0, 151.3), Outage(156.0, 200.0)]
    with s.engine.connect() as conn:
        assert len(conn.execute(select(MasterLifeRow.id)).all()) == 4
    s.close()
    s = SqlStore(db_url)
    assert s.outages() == [Outage(120.0, 151.3), Outage(156.0, 200.0)]
    s.close()


# ---------------------------------------------------------------- through a real server


def _clients(h) -> tuple[WorkerClient, ControlClient]:
    return WorkerClient(h.address, h.worker_token, retries=0), ControlClient(h.address, h.admin_token, retries=0)


def _alive_at(db: str) -> float:
    engine = create_engine(db)
    try:
        with engine.connect() as conn:
            return conn.execute(select(MasterLifeRow.alive_at).order_by(MasterLifeRow.id.desc())).scalars().first()
    finally:
        engine.dispose()


def test_a_deadline_passed_while_the_master_was_down(master_server, small_graph, tmp_path):
    """The issue's case: a 60 s run, the master down from t0 + 55 s to t0 + 91.3 s."""
    db = f"sqlite:///{tmp_path / 'window.db'}"
    clock = FakeClock()
    t0 = clock.t
    h = master_server(db, clock=clock, heartbeat_interval_s=10_000.0, tick_s=0.02)
    w, c = _clients(h)
    wid = w.register(name="node-1", host="node-1").worker_id
    run_id = c.start_run(60, profile="smoke").config.run_id
    fc = count_flops(small_graph)
    mid = w.submit_model(wid, small_graph.to_json(), small_graph.hash(), 0, 1, HP).model_id
    for seq, dt in ((1, 10.0), (2, 50.0)):
        clock.t = t0 + dt
        w.report_progress(wid, mid, seq, 1000, 0, 1, fc.ops(1000, 0))
    clock.t = t0 + 55.0
    wait_for(lambda: _alive_at(db) == t0 + 55.0, what="the liveness stamp")
    credential = w.credential(wid)  # what the worker keeps in its state directory
    w.close()
    c.close()
    h.master.tick = lambda flush=True: None  # a crash: no final stamp on the way down
    h.stop(grace_s=0)

    clock.t = t0 + 91.3
    h2 = master_server(db, clock=clock, heartbeat_interval_s=10_000.0, tick_s=0.02)
    w2, c2 = _clients(h2)
    w2.set_credential(wid, credential)
    # closed at its deadline before any request was served
    st = c2.run_status(run_id)
    assert st.run.state == pb.RUN_STOPPING
    assert st.run.stopped_at == t0 + 60.0 == st.run.deadline
    assert st.run.stop_reason == "deadline reached while the master was down"
    assert st.elapsed_s == pytest.approx(60.0)
    assert [(o.start, o.end) for o in st.run.outages] == [(t0 + 55.0, t0 + 91.3)]

    # the report the worker held during the outage: accepted (kept), stamped now, not scored
    ack = w2.report_progress(wid, mid, 3, 1000, 0, 1, fc.ops(1000, 0))
    assert not ack.duplicate and ack.run_state == pb.RUN_STOPPING
    assert h2.store.get_model(mid).images_trained == 3000
    sb = c2.scoreboard(run_id)
    assert sb.elapsed_s == pytest.approx(60.0) and sb.reports == 2
    assert sb.total_ops == pytest.approx(fc.ops(2000, 0))
    assert sb.flops == pytest.approx(fc.ops(2000, 0) / 60.0)
    assert sb.images_trained == 3000  # the run's images, also those after the deadline
    tl = c2.timeline(run_id)
    assert [p.elapsed_s for p in tl.points] == pytest.approx([10.0, 50.0])

    # shown by status, the scoreboard and the report
    d = run_status_to_dict(st)
    assert d["downtime_s"] == pytest.approx(36.3) and d["downtime_in_window_s"] == pytest.approx(5.0)
    assert "master down 36.3 s in 1 outage (5.0 s inside the scored window)" in status_line(d)
    assert scoreboard_to_dict(sb)["outages"] == [{"start": t0 + 55.0, "end": t0 + 91.3, "duration_s": pytest.approx(36.3)}]
    _, report = fetch_report(ControlSession(c2), run_id)
    assert "Master downtime</th><td>36.3 s in 1 outage (5.0 s inside the scored window)" in report

    # the grace period counts from the restart: the worker can still finish its model
    w2.finish_model(wid, mid, "done", best_accuracy=0.5)
    wait_for(lambda: c2.run_status(run_id).run.state == pb.RUN_FINISHED, what="finished")
    final = c2.scoreboard(run_id)
    assert final.run.stopped_at == t0 + 60.0 and final.elapsed_s == pytest.approx(60.0)
    assert final.best_accuracy == 0.0 and final.reports == 2  # the final accuracy came after the deadline
    w2.close()
    c2.close()


def test_a_late_tick_or_stop_does_not_stretch_the_window(master_server, small_graph):
    clock = FakeClock()
    t0 = clock.t
    h = master_server(clock=clock, heartbeat_interval_s=10_000.0, tick_s=3600.0)  # no background tick
    w, c = _clients(h)
    wid = w.register(name="node-1", host="node-1").worker_id
    run_id = c.start_run(60, profile="smoke").config.run_id
    fc = count_flops(small_graph)
    mid = w.submit_model(wid, small_graph.to_json(), small_graph.hash(), 0, 1, HP).model_id
    clock.t = t0 + 30
    w.report_progress(wid, mid, 1, 1000, 0, 1, fc.ops(1000, 0))
    clock.t = t0 + 75  # past the deadline, the run not stopped yet
    w.report_progress(wid, mid, 2, 1000, 0, 1, fc.ops(1000, 0))
    sb = c.scoreboard(run_id)
    assert sb.run.state == pb.RUN_RUNNING and sb.elapsed_s == pytest.approx(60.0)
    assert sb.reports == 1 and sb.total_ops == pytest.approx(fc.ops(1000, 0))
    with pytest.raises(Exception, match="deadline"):
        w.submit_model(wid, small_graph.to_json(), small_graph.hash(), 0, 1, HP)
    stopped = c.stop_run(run_id, reason="operator")
    assert stopped.stopped_at == t0 + 60 and stopped.outages == []
    w.close()
    c.close()


# ---------------------------------------------------------------- totals through a real server

FIGURE = st.integers(min_value=0, max_value=INT64_MAX)
REPORTS = st.lists(st.tuples(st.integers(0, 3), FIGURE, FIGURE), min_size=1, max_size=12)


@pytest.fixture(scope="module")
def shared_master(tmp_path_factory):
    """One real master for all examples of the property test (a fresh run per example)."""
    from master.server import MasterConfig, serve

    d = tmp_path_factory.mktemp("totals")
    clock = FakeClock()
    h = serve(MasterConfig(f"sqlite:///{d / 'totals.db'}", port=0, host="127.0.0.1", data_dir=d,
                           heartbeat_interval_s=10_000.0, worker_token="w", admin_token="a", env={}, clock=clock,
                           tick_s=3600.0))
    c = ControlClient(h.address, h.admin_token, retries=0)
    yield h, c, clock
    c.close()
    h.stop(grace_s=0)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(flops=st.lists(st.integers(1, INT64_MAX), min_size=4, max_size=4), reports=REPORTS)
def test_scoreboard_and_timeline_survive_any_accepted_totals(shared_master, flops, reports):
    """Extreme but accepted rows inserted through the master's own store: GetScoreboard,
    GetTimeline and GetRunStatus answer, with exact (or saturated) totals."""
    h, c, clock = shared_master
    store = h.store
    now = clock.t
    run_id = _running_run(store, now=now, duration_s=3600.0, concurrent=True)
    wid = _worker(store, name=f"node-{run_id}", now=now)
    mids = [_model(store, run_id, wid, flops=f, now=now) for f in flops]
    seqs = [0] * 4
    trained = validated = ops = 0
    for k, (i, tr, va) in enumerate(reports):
        seqs[i] += 1
        master_ops = flops[i] * (tr + va)
        item = ProgressInput(mids[i], wid, seqs[i], now + 1 + k, 1, tr, va, 0.5, master_ops, master_ops, False)
        [res] = store.add_progress([item])
        model = store.get_model(mids[i])
        if res.error is None:
            trained, validated, ops = trained + tr, validated + va, ops + master_ops
        else:  # refused only because a figure or a model total would leave int64
            assert isinstance(res.error, InvalidArgument)
            assert master_ops > INT64_MAX or model.images_trained + tr > INT64_MAX \
                or model.images_validated + va > INT64_MAX
            seqs[i] -= 1
    clock.t = now + 100
    sb = c.scoreboard(run_id)
    assert sb.images_trained == min(trained, UINT64_MAX) and sb.images_validated == min(validated, UINT64_MAX)
    assert sb.total_ops == pytest.approx(float(ops)) and sb.worker_ops == pytest.approx(float(ops))
    assert sb.flops == pytest.approx(ops / 100.0)
    tl = c.timeline(run_id, max_points=5)
    assert (tl.points[-1].ops if tl.points else 0.0) == pytest.approx(float(ops))
    assert c.run_status(run_id).run.config.run_id == run_id
    store.finish_run(run_id, clock.t, "aborted", "example over")
