"""Honest retries through the real server: a report resent after its acknowledgement was
lost (same model, same seq) is answered as a duplicate before any budget is spent, and is
never counted implausible, even when its first copy used the worker's whole budget."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aiperf.api.client import Accelerator, ApiError
from aiperf.flops import count_flops
from tests.support.fake_clock import FakeClock
from tests.support.master_clients import HP, clients

RATE = 5e13  # the worker's measured float32 rate, under its H100's datasheet: its ceiling


def _setup(master_server, small_graph, db_url: str | None = None):
    clock = FakeClock()
    h = master_server(db_url, clock=clock, heartbeat_interval_s=10_000.0)
    w, c = clients(h)
    wid = w.register(name="gpu", host="gpu", cpus=2, memory_bytes=8 << 30,
                     accelerators=[Accelerator("NVIDIA H100 80GB HBM3", 80 << 30, 0.0, {"float32": RATE})]).worker_id
    c.start_run(3600, profile="smoke")
    mid = w.submit_model(wid, small_graph.to_json(), small_graph.hash(), 0, 1, HP).model_id
    return h, clock, w, c, wid, mid


def _at_peak(fc, seconds: float) -> int:
    """Images that fill `seconds` at the ceiling (the 5 s clock slack left unused)."""
    return int(RATE * seconds / fc.train)


def test_a_resend_of_a_report_at_the_peak_is_a_duplicate_not_implausible(master_server, small_graph):
    h, clock, w, c, wid, mid = _setup(master_server, small_graph)
    fc = count_flops(small_graph)
    clock.t += 10
    n = _at_peak(fc, 14.0)  # 14 s of work in 10 s + 5 s slack: the budget is nearly spent
    assert not w.report_progress(wid, mid, 1, n, 0, 1, fc.ops(n, 0)).duplicate
    for _ in range(3):  # the ack was lost, three times
        ack = w.report_progress(wid, mid, 1, n, 0, 1, fc.ops(n, 0))
        assert ack.duplicate and ack.master_flops == fc.ops(n, 0)
    # a resend that claims more is still the first copy: nothing inflated
    assert w.report_progress(wid, mid, 1, 10 * n, 0, 1, fc.ops(10 * n, 0)).duplicate
    clock.t += 10
    m = _at_peak(fc, 9.0)  # the budget the resends did not spend is there for the next report
    assert not w.report_progress(wid, mid, 2, m, 0, 1, fc.ops(m, 0)).duplicate
    sb = c.scoreboard()
    assert sb.implausible_reports == 0 and sb.total_ops == pytest.approx(fc.ops(n + m, 0))


def test_a_refused_report_sent_again_is_judged_again(master_server, small_graph):
    """A report refused as implausible was not recorded: its seq is free, and a smaller one is accepted."""
    h, clock, w, c, wid, mid = _setup(master_server, small_graph)
    fc = count_flops(small_graph)
    clock.t += 10
    big = _at_peak(fc, 30.0)
    with pytest.raises(ApiError, match="above its accepted peak"):
        w.report_progress(wid, mid, 1, big, 0, 1, fc.ops(big, 0))
    with pytest.raises(ApiError, match="above its accepted peak"):  # the same lie resent: refused again
        w.report_progress(wid, mid, 1, big, 0, 1, fc.ops(big, 0))
    n = _at_peak(fc, 5.0)
    assert not w.report_progress(wid, mid, 1, n, 0, 1, fc.ops(n, 0)).duplicate
    sb = c.scoreboard()
    assert sb.implausible_reports == 2 and sb.total_ops == pytest.approx(fc.ops(n, 0))


def test_a_resend_after_a_master_restart_is_a_duplicate(master_server, small_graph, tmp_path):
    db = f"sqlite:///{tmp_path / 'resend.db'}"
    h, clock, w, c, wid, mid = _setup(master_server, small_graph, db)
    fc = count_flops(small_graph)
    clock.t += 10
    n = _at_peak(fc, 14.0)
    w.report_progress(wid, mid, 1, n, 0, 1, fc.ops(n, 0))
    h.stop()
    h2 = master_server(db, clock=clock, heartbeat_interval_s=10_000.0)
    w2, c2 = clients(h2)
    w2.set_credential(wid, w.credential(wid))
    assert w2.report_progress(wid, mid, 1, n, 0, 1, fc.ops(n, 0)).duplicate  # looked up in the store
    assert c2.scoreboard().implausible_reports == 0


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(order=st.lists(st.integers(1, 6), min_size=1, max_size=25))
def test_any_resend_order_counts_each_report_once_and_refuses_none(master_server, small_graph, order):
    """Reports 1..6, each filling its own 10 s at the peak, sent in order with any resends
    of earlier ones in between: no refusal, and the total is each report once."""
    h, clock, w, c, wid, mid = _setup(master_server, small_graph)
    fc = count_flops(small_graph)
    n = _at_peak(fc, 10.0)
    sent = 0
    for seq in order:
        if seq > sent + 1:
            seq = sent + 1  # the next new report, or a resend of an earlier one
        if seq == sent + 1:
            clock.t += 10
            sent = seq
            assert not w.report_progress(wid, mid, seq, n, 0, 1, fc.ops(n, 0)).duplicate
        else:
            assert w.report_progress(wid, mid, seq, n, 0, 1, fc.ops(n, 0)).duplicate
    sb = c.scoreboard()
    assert sb.implausible_reports == 0 and sb.total_ops == pytest.approx(fc.ops(sent * n, 0))
    h.stop(grace_s=0)
