"""The master's per-run gauges computed at scrape time (master/observability/metrics.py
RunCollector, master/core/scrape.py) and its database-error counter, scraped from a
real master's /metrics over HTTP, on a real SQLite file."""

from __future__ import annotations

import sqlite3
import threading
import time

import grpc
import pytest

from aiperf.api import aiperf_pb2 as pb
from aiperf.api import aiperf_pb2_grpc as pb_grpc
from aiperf.api.client import Accelerator, ApiError, ControlClient, WorkerClient
from aiperf.flops import count_flops
from tests.support.fake_clock import FakeClock
from tests.support.master_clients import HP, scrape


def test_run_gauges_are_computed_at_each_scrape(master_server, small_graph, tmp_path):
    clock = FakeClock()
    h = master_server(metrics_port=0, clock=clock, tick_s=3600.0)
    w = WorkerClient(h.address, h.worker_token, retries=0)
    c = ControlClient(h.address, h.admin_token, retries=0)
    wid = w.register("n1", "n1", [Accelerator("Tesla V100", 32 << 30, 0.0)]).worker_id
    run_id = c.start_run(600, profile="smoke").config.run_id
    labels = f'{{profile="smoke",run_id="{run_id}"}}'
    first = scrape(h.metrics_port)
    assert first[f"aiperf_run_elapsed_seconds{labels}"] == 0.0
    assert first[f"aiperf_run_provisional{labels}"] == 1.0 and first[f"aiperf_run_valid{labels}"] == 0.0
    assert f"aiperf_run_best_accuracy{labels}" not in first  # no accuracy observed yet

    fc = count_flops(small_graph)
    mid = w.submit_model(wid, small_graph.to_json(), small_graph.hash(), 0, 1, HP).model_id
    clock.t += 30
    w.report_progress(wid, mid, 1, 1000, 100, 1, fc.ops(1000, 100), val_accuracy=0.62)
    clock.t += 10  # no tick in between: the scrape itself computes
    now = scrape(h.metrics_port)
    board = c.scoreboard(run_id)
    assert now[f"aiperf_run_elapsed_seconds{labels}"] == pytest.approx(40.0)
    assert now[f"aiperf_run_best_accuracy{labels}"] == pytest.approx(0.62)
    assert now[f"aiperf_run_score{labels}"] == pytest.approx(board.score) and board.score > 0
    assert now[f"aiperf_run_regulated_score{labels}"] == pytest.approx(board.regulated_score)
    assert now[f"aiperf_run_valid_flops{labels}"] == pytest.approx(board.valid_flops)
    # a V100 of no named variant: the datasheet's fastest V100 float32 figure (V100S, 16.4 TFLOPS)
    # is its Rpeak; it measured no GEMM rate, so there is no efficiency against a measured peak
    assert now[f"aiperf_run_efficiency{labels}"] == pytest.approx(board.score / 16.4e12)
    assert now[f"aiperf_run_efficiency{labels}"] == pytest.approx(board.efficiency)
    assert f"aiperf_run_efficiency_vs_measured{labels}" not in now and board.efficiency_vs_measured == 0.0

    # a stopped run keeps its final figures on the dashboard (the latest run is scraped)
    c.stop_run(run_id, abort=True, reason="done here")
    clock.t += 100
    after = scrape(h.metrics_port)
    assert after[f"aiperf_run_elapsed_seconds{labels}"] == pytest.approx(40.0)  # frozen at the stop
    assert after["aiperf_database_errors_total"] == 0.0
    # the unary calls answered, by method and status code
    handled = 'aiperf_grpc_server_handled_total{grpc_code="%s",grpc_method="%s",grpc_service="aiperf.v1.%s"}'
    assert after[handled % ("OK", "StartRun", "ControlService")] == 1.0
    assert after[handled % ("OK", "SubmitModel", "WorkerService")] == 1.0
    assert after[handled % ("OK", "GetScoreboard", "ControlService")] == 1.0
    w.close()
    c.close()


def test_database_errors_are_counted_and_the_scrape_still_answers(master_server, tmp_path):
    db = tmp_path / "broken.db"
    h = master_server(f"sqlite:///{db}", metrics_port=0)
    c = ControlClient(h.address, h.admin_token, retries=0)
    c.start_run(600, profile="smoke")
    assert scrape(h.metrics_port)["aiperf_database_errors_total"] == 0.0
    with sqlite3.connect(db) as other:  # the table vanishes under the master, as in a botched restore
        other.execute("ALTER TABLE runs RENAME TO runs_gone")
    with pytest.raises(ApiError) as exc:
        c.run_status(1)
    assert exc.value.code == grpc.StatusCode.INTERNAL
    metrics = scrape(h.metrics_port)  # the run gauges fail to read: the scrape answers without them
    assert metrics["aiperf_database_errors_total"] >= 1.0
    # that scrape's own failed read is counted (after the counter was written out)
    assert scrape(h.metrics_port)["aiperf_database_errors_total"] > metrics["aiperf_database_errors_total"]
    assert not any(k.startswith("aiperf_run_score{") for k in metrics)
    assert "process_resident_memory_bytes" in metrics
    handled = 'aiperf_grpc_server_handled_total{grpc_code="INTERNAL",grpc_method="GetRunStatus",' \
              'grpc_service="aiperf.v1.ControlService"}'
    assert metrics[handled] == 1.0
    c.close()


@pytest.mark.parametrize("deadline", [True, False], ids=["deadline", "cancelled"])
def test_a_unary_call_the_caller_gives_up_on_is_counted_with_its_code(master_server, deadline):
    h = master_server(metrics_port=0)
    entered, release = threading.Event(), threading.Event()
    real = h.master.run_status

    def slow(run_id: int):
        entered.set()
        release.wait(10)
        return real(run_id)

    h.master.run_status = slow
    try:
        with grpc.insecure_channel(h.address) as channel:
            stub = pb_grpc.ControlServiceStub(channel)
            md = (("authorization", "Bearer test-admin-token"),)
            if deadline:
                with pytest.raises(grpc.RpcError) as exc:
                    stub.GetRunStatus(pb.GetRunStatusRequest(run_id=1), metadata=md, timeout=0.5)
                assert exc.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
            else:
                future = stub.GetRunStatus.future(pb.GetRunStatusRequest(run_id=1), metadata=md)
                assert entered.wait(10)
                future.cancel()
        code = "DEADLINE_EXCEEDED" if deadline else "CANCELLED"
        handled = f'aiperf_grpc_server_handled_total{{grpc_code="{code}",grpc_method="GetRunStatus",' \
                  'grpc_service="aiperf.v1.ControlService"}'
        for _ in range(100):  # the server learns of it after the client
            metrics = scrape(h.metrics_port)
            if handled in metrics:
                break
            time.sleep(0.05)
        assert metrics.get(handled) == 1.0
        assert not any('grpc_method="GetRunStatus"' in k and 'grpc_code="OK"' in k for k in metrics)
    finally:
        release.set()


def test_a_relayed_call_cancelled_in_flight_is_counted_cancelled():
    """The master's end of the relay cancels its calls in flight when it closes; a relayed call
    has no deadline of its own there, so it is counted CANCELLED (not an error of the count)."""
    import asyncio
    from concurrent.futures import ThreadPoolExecutor
    from types import SimpleNamespace

    from master.frontends.master_end import RelayContext
    from master.observability.metrics import MasterMetrics
    from master.rpc.servicers import _unary

    release = threading.Event()
    servicer = SimpleNamespace(pool=ThreadPoolExecutor(1), m=SimpleNamespace(metrics=MasterMetrics()),
                               SERVICE="aiperf.v1.ControlService")

    async def main() -> None:
        task = asyncio.ensure_future(_unary(servicer, "GetRunStatus", RelayContext(""), release.wait, 10))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    try:
        asyncio.run(main())
    finally:
        release.set()
        servicer.pool.shutdown()
    labels = {"grpc_service": "aiperf.v1.ControlService", "grpc_method": "GetRunStatus", "grpc_code": "CANCELLED"}
    assert servicer.m.metrics.registry.get_sample_value("aiperf_grpc_server_handled_total", labels) == 1.0
