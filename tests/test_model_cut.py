"""A model the run's deadline or a stop ended before a first validation is "cut", not
"failed": on the wire, in the database (migration 0011), in every table and count."""

from __future__ import annotations

import json

from sqlalchemy import text

from aiperf.states import FINISHED_MODEL_STATES, ModelState
from aiperf_cli.main import main
from master.store.records import ModelEnd
from master.store.sql.sql_store import SqlStore
from tests.support.master_clients import HP
from tests.support.schema_round_trip import down_and_up
from tests.support.store_rows import added_model, registered_worker, started_run


def test_cut_is_a_way_a_worker_ends_a_model():
    assert ModelState.CUT == "cut" and ModelState.CUT in FINISHED_MODEL_STATES


def _rows(db_url: str) -> dict[int, tuple[str, str]]:
    from master.store.sql.engine import make_engine

    engine = make_engine(db_url)
    try:
        with engine.connect() as conn:
            return {i: (s, r) for i, s, r in conn.execute(text("SELECT id, state, reason FROM models"))}
    finally:
        engine.dispose()


def test_migration_0011_turns_the_old_cut_failures_into_cut_and_back(db_url):
    s = SqlStore(db_url)
    try:
        run_id, wid = started_run(s), registered_worker(s)
        old, new, failed = (added_model(s, run_id, wid) for _ in range(3))
        s.finish_model(ModelEnd(old, wid, ModelState.FAILED, "cut: deadline reached", None, None), 110.0)  # before 0011
        s.finish_model(ModelEnd(new, wid, ModelState.CUT, "stop requested", None, None), 110.0)
        s.finish_model(ModelEnd(failed, wid, ModelState.FAILED, "out of memory", None, None), 110.0)
    finally:
        s.close()
    down_and_up(db_url, "0010")  # 0011 down (cut -> failed "cut: ...") and up again
    rows = _rows(db_url)
    assert rows[old] == ("cut", "deadline reached")
    assert rows[new] == ("cut", "stop requested")
    assert rows[failed] == ("failed", "out of memory")


def test_a_cut_model_reads_cut_in_every_view(cli, capsys, small_graph):
    from aiperf.api.client import WorkerClient

    assert main(["start", "--duration", "5m", "--profile", "smoke"]) == 0
    with WorkerClient(cli.address, cli.worker_token) as w:
        wid = w.register(name="n1", host="n1").worker_id
        mid = w.submit_model(wid, small_graph.to_json(), small_graph.hash(), 0, 1, HP).model_id
        w.finish_model(wid, mid, ModelState.CUT, reason="stop requested")
    capsys.readouterr()
    assert main(["models", "--json"]) == 0
    (m,) = json.loads(capsys.readouterr().out)["models"]
    assert m["state"] == "cut" and m["reason"] == "stop requested"
    assert main(["models", "--state", "cut"]) == 0
    out = capsys.readouterr().out
    assert "run 1: 1 model" in out and "│ cut " in out and "failed" not in out
    assert main(["scoreboard", "--json"]) == 0
    counts = json.loads(capsys.readouterr().out)["models"]
    assert counts["cut"] == 1 and counts["failed"] == 0
    assert main(["scoreboard"]) == 0
    assert "0 done, 1 cut" in capsys.readouterr().out
