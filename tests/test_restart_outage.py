"""A master killed while 3 workers train, kept down 45 s and 90 s, restarted on the same
database and port: no model abandoned, every worker back within a few seconds of the master
serving again, no acknowledged report lost. An outage longer than the master's limit
(resume_outage_s) ends the models of before cleanly: abandoned with the outage named, the
workers told they were lost. Real master subprocesses (SIGKILL), the real client, streams
and worker outbox (benchmarks/fault_bench.py's scenario), no TensorFlow."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.fault_bench import restart_scenario

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("outage_s", [45.0, 90.0])
def test_workers_ride_through_a_master_outage(tmp_path: Path, outage_s: float) -> None:
    r = restart_scenario(tmp_path, outage_s, workers=3)
    assert r["models"] == 3 and r["abandoned"] == 0, r
    assert r["acked_images_lost"] == 0 and r["acked_reports"] > 3 * 10, r
    # back within a few seconds of the master serving: the channel reconnects within its
    # bounded back-off (2 s), then the worker beats at its next turn (every 5 s)
    assert max(r["back_after_s"]) < 8.0, r
    assert not any(r["lost_seen"]) and not r["dropped"], r


def test_an_outage_longer_than_the_limit_ends_the_models_cleanly(tmp_path: Path) -> None:
    r = restart_scenario(tmp_path, 15.0, workers=3, resume_outage_s=10.0)
    assert r["models"] == 3 and r["abandoned"] == 3, r
    assert len(r["reasons"]) == 1 and r["reasons"][0].startswith("master down ") and "10 s" in r["reasons"][0], r
    assert all(r["lost_seen"]), r  # each worker was told, and starts anew
    assert r["acked_images_lost"] == 0, r  # what was acknowledged before the outage stays
    assert all("FAILED_PRECONDITION" in error for _what, error in r["dropped"]), r
