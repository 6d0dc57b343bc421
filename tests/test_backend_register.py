"""The backend a worker trains with, recorded at Register and shown wherever its hardware is:
`aiperf workers`, the scoreboard's hardware section, the report and the exports; one run may mix
backends; a worker from before the field reads as TensorFlow; an unknown value is refused."""

from __future__ import annotations

import csv
import json

import grpc
import pytest

from aiperf.api import aiperf_pb2 as pb
from aiperf.api.client import ControlClient, WorkerClient
from tests.support.schema_round_trip import down_and_up


def test_each_workers_backend_is_listed_and_a_run_may_mix_them(master_server, capsys):
    from aiperf.api.control_session import ControlSession
    from aiperf.api.views import scoreboard_to_dict
    from aiperf_cli.main import main
    from aiperf_cli.report import fetch_report

    h = master_server()
    w = WorkerClient(h.address, h.worker_token, retries=0)
    c = ControlClient(h.address, h.admin_token, retries=0)
    try:
        ids = {name: w.register(name=name, host=name, cpus=2, backend=backend).worker_id
               for name, backend in (("tf", "tensorflow"), ("jx", "jax"), ("old", ""))}
        listed = {i.worker_id: i.backend for i in c.list_workers().workers}
        assert listed == {ids["tf"]: pb.BACKEND_TENSORFLOW, ids["jx"]: pb.BACKEND_JAX,
                          ids["old"]: pb.BACKEND_TENSORFLOW}, "unsaid: a worker from before, on TensorFlow"
        run = c.start_run(3600, profile="smoke", min_workers=1)
        for wid in ids.values():  # each joins the run with its inventory
            w.heartbeat(wid)
        board = scoreboard_to_dict(c.scoreboard(run.config.run_id))
        backends = {node["name"]: node["backend"] for node in board["hardware"]}
        assert backends == {"tf": "tensorflow", "jx": "jax", "old": "tensorflow"}
        assert board["backends"] == "jax, tensorflow"
        _, page = fetch_report(ControlSession(c), run.config.run_id)
        assert "backend jax" in page
        env = ["--master", h.address, "--admin-token", h.admin_token]
        assert main(["workers", *env]) == 0
        table = capsys.readouterr().out
        assert "backend" in table and "jax" in table and "tensorflow" in table
        assert main(["scoreboard", *env]) == 0
        assert "backend jax" in capsys.readouterr().out
        assert main(["export", "--format", "csv", "--table", "scoreboard", *env]) == 0
        header, row = capsys.readouterr().out.splitlines()[:2]
        assert dict(zip(header.split(","), next(csv.reader([row]))))["backends"] == "jax, tensorflow"
        assert main(["export", "--format", "json", *env]) == 0
        exported = json.loads(capsys.readouterr().out)["scoreboard"]["hardware"]
        assert sorted(n["backend"] for n in exported) == ["jax", "tensorflow", "tensorflow"]
    finally:
        w.close()
        c.close()


def test_an_unknown_backend_is_refused(master_server):
    h = master_server()
    w = WorkerClient(h.address, h.worker_token, retries=0)
    try:
        req = pb.RegisterRequest(api_version=pb.API_VERSION_1, name="x", host="x", backend=7)
        with pytest.raises(grpc.RpcError) as exc:
            w._stub.Register(req, metadata=w._metadata, timeout=10)
        assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "backend" in exc.value.details()
        with pytest.raises(KeyError):
            w.register(name="y", host="y", backend="pytorch")  # the client sends only the API's names
    finally:
        w.close()


def test_migration_0009_round_trips_and_older_workers_read_as_tensorflow(db_url: str):
    from master.store.records import WorkerInput
    from master.store.sql.sql_store import SqlStore

    s = SqlStore(db_url)
    try:
        w, _ = s.register_worker(WorkerInput("n", "n", [], 1, 1, {}, backend="jax"), 100.0)
        assert s.get_worker(w.id).backend == "jax"
    finally:
        s.close()
    down_and_up(db_url, "0008")
    s = SqlStore(db_url)
    try:
        assert s.get_worker(w.id).backend == "tensorflow"  # registered before the column: TensorFlow
    finally:
        s.close()


def test_a_run_workers_inventory_keeps_the_backend_it_joined_with(db_url: str):
    from master.store.records import NewRun, WorkerInput
    from master.store.sql.sql_store import SqlStore

    s = SqlStore(db_url)
    try:
        run = s.start_run(s.create_run(NewRun("smoke", 1, 600.0, "fp32", {"limits": {}}, {}), 100.0).id, 100.0)
        w, _ = s.register_worker(WorkerInput("n", "n", [], 1, 1, {}, backend="jax"), 100.0)
        s.join_run(run.id, w.id, 101.0)
        s.register_worker(WorkerInput("n", "n", [], 1, 1, {}, backend="tensorflow"), 102.0)  # restarted on TF
        (joined,) = s.run_workers(run.id)
        assert joined.inventory["backend"] == "jax" and joined.worker.backend == "tensorflow"
    finally:
        s.close()

