"""`aiperf runs`, `aiperf workers` and `aiperf status` over the ListRuns / ListWorkers
calls of the control service: a real master on a loopback port, a real SQLite file."""

from __future__ import annotations

import json
import time
from typing import Any

import grpc
import pytest

from aiperf.api import aiperf_pb2 as pb
from aiperf.api.client import Accelerator, ApiError, ControlClient, WorkerClient
from aiperf.hyperparameters import Hyperparameters
from aiperf_cli.main import main
from tests.support.master_clients import wait_for

H100 = Accelerator("NVIDIA H100 80GB HBM3", 80 * 2**30, 0.0)


@pytest.fixture
def cluster(master_server, monkeypatch):
    h = master_server(heartbeat_interval_s=0.3)
    monkeypatch.setenv("AIPERF_MASTER", h.address)
    monkeypatch.setenv("AIPERF_ADMIN_TOKEN", h.admin_token)
    monkeypatch.setenv("COLUMNS", "200")  # rich's tables: one line per row
    with WorkerClient(h.address, h.tokens.worker) as w, ControlClient(h.address, h.admin_token) as c:
        yield h, w, c


def run(capsys: Any, *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_status_before_the_first_run_lists_the_workers(cluster, capsys):
    h, w, _ = cluster
    rc, out, err = run(capsys, "status", "--json")
    assert rc == 0, err
    d = json.loads(out)
    assert d["has_run"] is False and d["run_id"] is None and d["registered_workers"] == []
    rc, out, _ = run(capsys, "status")
    assert rc == 0 and "no run yet" in out and "no worker registered" in out

    reg = w.register("node-a", "host-a.example", [H100, H100], cpus=8, memory_bytes=2**34)
    rc, out, err = run(capsys, "status", "--json")
    d = json.loads(out)
    assert rc == 0 and d["workers_alive"] == 1 and d["workers_registered"] == 1
    (entry,) = d["registered_workers"]
    assert entry["worker_id"] == reg.worker_id and entry["name"] == "node-a" and entry["host"] == "host-a.example"
    assert entry["state"] == "alive" and entry["current_model_id"] is None
    assert [a["model"] for a in entry["accelerators"]] == [H100.model] * 2
    assert abs(entry["last_heartbeat"] - time.time()) < 30
    rc, out, _ = run(capsys, "status")
    assert rc == 0 and "node-a" in out and "2 x NVIDIA H100" in out and "alive" in out


def test_workers_show_state_heartbeat_and_current_model(cluster, capsys, small_graph):
    h, w, c = cluster
    a = w.register("node-a", "host-a", [H100])
    w.register("node-b", "host-b", [])
    run_id = c.start_run(600, profile="smoke").config.run_id
    w.heartbeat(a.worker_id)
    sub = w.submit_model(a.worker_id, small_graph.to_json(), small_graph.hash(), parent_id=0, round=1,
                         hyperparameters=Hyperparameters(32, 3))
    # b falls silent: lost after 3 heartbeat intervals; a keeps beating
    def b_lost() -> bool:
        w.heartbeat(a.worker_id, sub.model_id)
        return c.list_workers(state="lost").total == 1

    wait_for(b_lost, 10, "worker b lost", 0.1)
    rc, out, err = run(capsys, "workers", "--json")
    assert rc == 0, err
    d = json.loads(out)
    by_name = {x["name"]: x for x in d["workers"]}
    assert d["total"] == 2 and by_name["node-a"]["state"] == "alive" and by_name["node-b"]["state"] == "lost"
    assert by_name["node-a"]["current_model_id"] == sub.model_id and by_name["node-a"]["current_run_id"] == run_id
    assert by_name["node-b"]["current_model_id"] is None
    assert by_name["node-a"]["last_heartbeat"] > by_name["node-b"]["last_heartbeat"]

    rc, out, _ = run(capsys, "workers", "--state", "lost", "--json")
    assert rc == 0 and [x["name"] for x in json.loads(out)["workers"]] == ["node-b"]
    rc, out, _ = run(capsys, "workers", "--run", str(run_id), "--json")  # b never beat while the run ran
    assert rc == 0 and [x["name"] for x in json.loads(out)["workers"]] == ["node-a"]
    rc, out, _ = run(capsys, "workers")
    assert rc == 0 and "node-a" in out and "lost" in out and f"{sub.model_id} (run {run_id})" in out
    rc, out, _ = run(capsys, "workers", "--limit", "1", "--json")
    assert rc == 0 and len(json.loads(out)["workers"]) == 1 and json.loads(out)["total"] == 2
    rc, _, err = run(capsys, "workers", "--state", "asleep")
    assert rc == 2 and "'asleep' is not one of 'alive', 'lost'" in err
    rc, _, err = run(capsys, "workers", "--run", "99")
    assert rc == 4 and "run 99 not found" in err


def test_runs_newest_first_with_stop_reason(cluster, capsys):
    _, _, c = cluster
    rc, out, _ = run(capsys, "runs")
    assert rc == 0 and "no run yet" in out
    first = c.start_run(3600, profile="official").config.run_id
    c.stop_run(first, abort=True, reason="operator test")
    second = c.start_run(600, profile="smoke").config.run_id
    rc, out, err = run(capsys, "runs", "--json")
    assert rc == 0, err
    d = json.loads(out)
    assert d["total"] == 2 and [r["run_id"] for r in d["runs"]] == [second, first]
    assert d["runs"][1]["state"] == "aborted" and d["runs"][1]["stop_reason"] == "operator test"
    rc, out, _ = run(capsys, "runs")
    assert rc == 0 and "operator test" in out and "aborted" in out and "smoke" in out
    rc, out, _ = run(capsys, "runs", "--limit", "1", "--json")
    assert [r["run_id"] for r in json.loads(out)["runs"]] == [second] and json.loads(out)["total"] == 2
    # status --run picks an older run; the workers listed are the same
    rc, out, _ = run(capsys, "status", "--run", str(first), "--json")
    assert rc == 0 and json.loads(out)["run_id"] == first and json.loads(out)["state"] == "aborted"


def test_list_calls_page_and_refuse_unknown_filters(cluster):
    _, w, c = cluster
    ids = [w.register(f"n{i}", f"h{i}").worker_id for i in range(5)]
    page = c.list_workers(limit=2, offset=2)
    assert [x.worker_id for x in page.workers] == ids[2:4] and page.total == 5
    assert c.list_workers(offset=10).workers == [] and c.list_runs().total == 0
    with pytest.raises(ApiError) as exc:
        c._call("ListWorkers", c._stub.ListWorkers, pb.ListWorkersRequest(state=7))
    assert exc.value.code == grpc.StatusCode.INVALID_ARGUMENT and "state" in exc.value.details


def test_scoreboard_of_a_stopped_run_is_final_with_its_stop_reason(cluster, capsys):
    _, _, c = cluster
    run_id = c.start_run(3600, profile="official").config.run_id
    rc, out, _ = run(capsys, "scoreboard")
    assert rc == 0 and "Score (provisional)" in out and "Stopped" not in out
    c.stop_run(run_id, abort=True, reason="power cut in rack 4")
    rc, out, _ = run(capsys, "scoreboard", "--run", str(run_id))
    # the table and the JSON say the same: final (nothing changes it), short of its minimum running time
    assert rc == 0 and "Score (final, short of the minimum running time)" in out and "provisional" not in out
    assert "aborted: power cut in rack 4" in out
    rc, out, _ = run(capsys, "scoreboard", "--json")
    d = json.loads(out)
    assert d["final"] is True and d["stop_reason"] == "power cut in rack 4"
    assert d["provisional"] is False and d["short_of_minimum"] is True
