"""The audit's throughput check (docs/spec.md, "Audit"): the master compares a worker's claims with
the auditor's timed rate.

The rule itself (aiperf/audit.py) by examples and properties; the master's side through a real
server on a scripted clock, with a CPU worker that reports a known rate and audits sent directly
(the timing is worker/throughput.py's, tested at the end on a tiny network).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import grpc
import pytest
from hypothesis import given
from hypothesis import strategies as st

from aiperf import audit as rule
from aiperf.api import aiperf_pb2 as pb
from aiperf.api import bounds
from aiperf.api.client import ApiError, ControlClient, WorkerClient
from aiperf.flops import count_flops
from aiperf.graph import with_inserted_kernel
from aiperf.hyperparameters import Hyperparameters
from master.store.records import ModelEnd
from tests.support.fake_clock import FakeClock
from tests.support.graphs import tiny_resnet50
from tests.support.master_clients import AUDIT_TOKENS
from tests.support.schema_round_trip import down_and_up

CPU = "Test CPU 9000"
HARDWARE = f"{CPU} (4 CPUs)"  # what aiperf.audit.hardware_name makes of the worker below


def _throughput(claimed: float, audited: float, worker_flops: float = 0.0, audited_flops: float = 1.0,
                worker: str = HARDWARE, auditor: str = HARDWARE) -> rule.Throughput:
    return rule.Throughput(worker, auditor, claimed, audited, worker_flops, audited_flops)


# ---------------------------------------------------------------- the rule


@pytest.mark.parametrize("t, expected", [
    (_throughput(100.0, 100.0), rule.PASSED),
    (_throughput(125.0, 100.0), rule.PASSED),  # the margin: 25%
    (_throughput(125.01, 100.0), rule.TOO_FAST),
    (_throughput(10.0, 100.0, worker_flops=1.26, audited_flops=1.0), rule.TOO_FAST),  # the worker's average
    (_throughput(10.0, 0.0), rule.NOT_TIMED),
    (_throughput(10.0, float("nan")), rule.NOT_TIMED),
    (_throughput(1e9, 100.0, auditor="NVIDIA H100 80GB HBM3"), rule.DIFFERENT_HARDWARE),
    (_throughput(10.0, 100.0, worker="", auditor=""), rule.DIFFERENT_HARDWARE),  # unknown is never the same
    (_throughput(10.0, 100.0, auditor="  test cpu 9000  (4 CPUs) "), rule.PASSED),  # case and spacing aside
])
def test_throughput_verdict(t, expected):
    assert rule.throughput_verdict(t) == expected


@given(claimed=st.floats(0, 1e12), audited=st.floats(1e-3, 1e12), wf=st.floats(0, 1e18), af=st.floats(0, 1e18))
def test_too_fast_exactly_when_a_claim_exceeds_the_margin(claimed, audited, wf, af):
    t = _throughput(claimed, audited, wf, af)
    margin = 1 + rule.THROUGHPUT_TOLERANCE
    expected = rule.TOO_FAST if claimed > audited * margin or wf > af * margin else rule.PASSED
    assert rule.throughput_verdict(t) == expected
    if expected == rule.PASSED:  # a smaller claim never fails where a larger one passed
        assert rule.throughput_verdict(_throughput(claimed / 2, audited, wf / 2, af)) == rule.PASSED


def test_hardware_names_and_the_final_verdict():
    assert rule.hardware_name(["NVIDIA H100 80GB HBM3"] * 8, "x", 64) == ("NVIDIA H100 80GB HBM3", 8)
    assert rule.hardware_name(["A", "B", "A"], "", 0) == ("A + B", 3)  # a mixed node: no one device matches
    assert rule.hardware_name([], "AMD  EPYC 7B13", 4) == ("AMD EPYC 7B13 (4 CPUs)", 1)
    assert rule.hardware_name([], "", 4) == ("", 1)
    assert rule.final_verdict(rule.PASSED, rule.TOO_FAST) == rule.TOO_FAST
    assert rule.final_verdict(rule.FAILED, rule.PASSED) == rule.FAILED
    assert rule.final_verdict(rule.CORRUPT, rule.TOO_FAST) == rule.CORRUPT


# ---------------------------------------------------------------- through the master


class Run:
    """A smoke run with one CPU worker on a scripted clock; `model` reports `rate` images/s for
    `seconds` in 10 s reports and finishes it."""

    def __init__(self, tmp: Path) -> None:
        from master.server import MasterConfig, serve

        self.clock = FakeClock(3_000_000.0)
        self.h = serve(MasterConfig(f"sqlite:///{tmp / 'master.db'}", port=0, host="127.0.0.1",
                                    data_dir=tmp / "master", heartbeat_interval_s=10_000.0, env={}, clock=self.clock,
                                    **AUDIT_TOKENS))
        self.w = WorkerClient(self.h.address, self.h.worker_token, retries=0)
        self.c = ControlClient(self.h.address, self.h.admin_token, retries=0)
        self.wid = self.w.register(name="w", host="w", cpus=4, cpu_peak_flops_by_dtype={"float32": 1e12},
                                   cpu_model=CPU).worker_id
        self.c.start_run(3600, profile="smoke", precision="fp32")
        self.graph = tiny_resnet50()
        self.flops = count_flops(with_inserted_kernel(self.graph, 3))

    def model(self, rate: float, seconds: int, accuracy: float = 0.5) -> int:
        mid = self.w.submit_model(self.wid, self.graph.to_json(), self.graph.hash(), 0, 1,
                                  Hyperparameters(32, 3)).model_id
        for seq in range(1, seconds // 10 + 1):
            self.clock.t += 10
            n = int(rate * 10)
            self.w.report_progress(self.wid, mid, seq, n, 0, 1, self.flops.ops(n, 0), val_accuracy=accuracy)
        self.w.finish_model(self.wid, mid, "done", best_accuracy=accuracy)
        return mid

    def audit(self, mid: int, rate: float, hardware: str = HARDWARE) -> Any:
        return self.c.record_audit(mid, verdict=rule.PASSED, architecture_ok=True, audited_accuracy=0.5,
                                   validation_images=360, audited_images_per_second=rate, auditor_hardware=hardware)


@pytest.fixture
def run(tmp_path):
    r = Run(tmp_path)
    yield r
    r.h.stop(grace_s=0)


def test_claims_within_the_timed_rate_pass_and_above_it_invalidate_the_run(run):
    mid = run.model(rate=1000.0, seconds=100)
    a = run.audit(mid, 1000.0)
    assert a.verdict == rule.PASSED and a.throughput == rule.PASSED
    assert a.worker_hardware == HARDWARE and a.auditor_hardware == HARDWARE
    assert a.claimed_images_per_second == pytest.approx(1000.0)
    assert a.audited_flops == pytest.approx(1000.0 * run.flops.train)
    assert a.throughput_tolerance == rule.THROUGHPUT_TOLERANCE
    assert "throughput" not in run.c.scoreboard().invalid_reason
    # the same claims against a device timed at 700 images/s: 1000 > 875
    a = run.audit(mid, 700.0)
    assert a.verdict == rule.TOO_FAST and a.throughput == rule.TOO_FAST
    board = run.c.scoreboard()
    assert not board.valid and f"throughput audit: model {mid}'s worker claimed 1000 images/s" in board.invalid_reason
    # the model's latest audit counts (as for accuracy)
    run.audit(mid, 1000.0)
    assert "throughput" not in run.c.scoreboard().invalid_reason


def test_the_workers_whole_run_counts_not_only_the_audited_model(run):
    """A worker honest on its audited model but claiming three times that rate on another: its
    operations over its time in the run exceed the audited rate's."""
    audited = run.model(rate=1000.0, seconds=100)
    run.model(rate=3000.0, seconds=100, accuracy=0.2)
    a = run.audit(audited, 1000.0)
    assert a.claimed_images_per_second == pytest.approx(1000.0)
    assert a.worker_flops > a.audited_flops * (1 + rule.THROUGHPUT_TOLERANCE)
    assert a.verdict == rule.TOO_FAST


def test_other_hardware_and_no_timing_never_pass(run):
    mid = run.model(rate=10.0, seconds=20)
    assert run.audit(mid, 1e6, hardware="NVIDIA H100 80GB HBM3").verdict == rule.DIFFERENT_HARDWARE
    assert run.audit(mid, 0.0, hardware="").verdict == rule.NOT_TIMED
    # the weights' own verdict comes first
    a = run.c.record_audit(mid, verdict=rule.FAILED, architecture_ok=True, audited_accuracy=0.1,
                           validation_images=360, audited_images_per_second=1e-3, auditor_hardware=HARDWARE)
    assert a.verdict == rule.FAILED and a.throughput == rule.TOO_FAST
    assert "throughput audit" in run.c.scoreboard().invalid_reason  # still a proven false count
    with pytest.raises(ApiError) as exc:
        run.audit(mid, 100.0, hardware=" ")
    assert exc.value.code == grpc.StatusCode.INVALID_ARGUMENT and "auditor_hardware" in exc.value.details


def test_the_cpu_model_is_registered_and_listed(run):
    (info,) = run.c.list_workers().workers
    assert info.cpu_model == CPU


def test_record_audit_rate_and_hardware_bounds():
    ok = dict(model_id=1, verdict=rule.PASSED, audited_images_per_second=bounds.MAX_AUDIT_IMAGES_PER_S,
              auditor_hardware="h" * bounds.MAX_HARDWARE_CHARS)
    bounds.check(pb.RecordAuditRequest(**ok))
    for field, bad in (("audited_images_per_second", -1.0), ("audited_images_per_second", float("inf")),
                       ("audited_images_per_second", bounds.MAX_AUDIT_IMAGES_PER_S * 1.01),
                       ("auditor_hardware", "h" * (bounds.MAX_HARDWARE_CHARS + 1)), ("auditor_hardware", "a\x1bb")):
        with pytest.raises(bounds.BoundsError) as exc:
            bounds.check(pb.RecordAuditRequest(**{**ok, field: bad}))
        assert exc.value.field == f"RecordAuditRequest.{field}"
    with pytest.raises(bounds.BoundsError):
        bounds.check(pb.RegisterRequest(name="w", cpu_model="c" * (bounds.MAX_MODEL_NAME_CHARS + 1)))


# ---------------------------------------------------------------- the timing


def test_the_in_memory_batch_is_filled_from_a_small_split():
    """A batch larger than the split it comes from is filled by repeating its images (the timed
    steps themselves run in tests/test_audit.py, through `aiperf audit`)."""
    from worker.data import load_dataset
    from worker.throughput import one_batch

    class Tiny:  # a 40-image split of the digits set
        data = load_dataset("digits", None, image_size=32)

        def validation(self, batch_size: int) -> Any:
            return self.data.validation(40).take(1)

    x, y = one_batch(Tiny(), 64)
    assert int(x.shape[0]) == int(y.shape[0]) == 64
    assert (x[40:] == x[:24]).all() and (y[40:] == y[:24]).all()  # the split's images again, in order


def test_migration_0007_round_trips_and_older_audits_read_unchecked(db_url: str):
    """Down to 0006 and up again: an audit recorded before the throughput check keeps its verdict
    and reads "" and zeros for it (db_url: SQLite, and PostgreSQL when configured)."""
    from master.store.records import AuditInput, NewModel, NewRun, WorkerInput
    from master.store.sql.sql_store import SqlStore

    s = SqlStore(db_url)
    try:
        run = s.start_run(s.create_run(NewRun("smoke", 1, 600.0, "fp32", {"limits": {}}, {}), 100.0).id, 100.0)
        w, _ = s.register_worker(WorkerInput("n", "n", [], 1, 1, {}), 100.0)
        mid = s.add_model(NewModel(run.id, None, w.id, 1, "{}", "ab" * 32, 32, 3, "training", 30, 10), 101.0).id
        s.finish_model(ModelEnd(mid, w.id, "done", "", 0.5, None, "", ""), 103.0)
        s.add_audit(AuditInput(mid, 104.0, "auditor", rule.TOO_FAST, True, 0.5, 0.5, 360, 0.008,
                               throughput=rule.TOO_FAST, worker_hardware=HARDWARE, auditor_hardware=HARDWARE,
                               claimed_images_per_second=900.0, audited_images_per_second=500.0))
        assert s.audits(run.id)[0].claimed_images_per_second == 900.0
    finally:
        s.close()
    down_and_up(db_url, "0006")
    s = SqlStore(db_url)
    try:
        (a,) = s.audits(run.id)
        assert a.verdict == rule.TOO_FAST and a.audited_accuracy == 0.5
        assert (a.throughput, a.worker_hardware, a.claimed_images_per_second, a.audited_images_per_second) == (
            "", "", 0.0, 0.0)
    finally:
        s.close()
