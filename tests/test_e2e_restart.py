"""End to end: a worker rides through a master killed and restarted mid-round (real
subprocesses on loopback, tests/support/cluster.py's Cluster)."""

from __future__ import annotations

import signal
import time

import pytest

from aiperf.api import aiperf_pb2 as pb
from tests.support.cluster import Cluster

pytestmark = pytest.mark.slow


def test_worker_survives_a_master_restart(tmp_path):
    cluster = Cluster(tmp_path, heartbeat_interval_s=3.0)
    try:
        # The run's clock starts when the worker registers (--min-workers 1), not during its start-up.
        # 90 s: on two cores at load ~6 the last event the checks need (the first model after the
        # restart) came 48 s after registration; the deadline only has to come after it.
        assert cluster.cli("start", "--duration", "90s", "--profile", "smoke", "--seed", "5",
                           "--min-workers", "1").returncode == 0
        run_id = cluster.control.run_status().run.config.run_id
        worker = cluster.worker("w1", "--exit-when-done")
        victim = cluster.wait_for_training_model(run_id)

        killed_at = time.time()
        cluster.master.send_signal(signal.SIGKILL)  # the master dies mid-round ...
        cluster.master.wait(timeout=30)
        time.sleep(2.0)
        cluster.start_master()  # ... and comes back on the same database and port
        cluster.control.wait_ready(60)

        final = cluster.wait_state(run_id, {pb.RUN_FINISHED}, timeout_s=300)
        # the outage is recorded from the last liveness stamp (at most ~1 s before the kill)
        [outage] = final.run.outages
        assert killed_at - 2.5 <= outage.start <= killed_at and outage.end - outage.start >= 2.0
        assert final.run.stopped_at == final.run.deadline and final.elapsed_s == pytest.approx(90.0)
        assert "master down" in cluster.cli("status", "--run", str(run_id)).stdout
        assert worker.wait(timeout=120) == 0, "the worker rode through the restart and exited cleanly"
        models = {m.model_id: m for m in cluster.models(run_id)}
        survivor = models[victim.model_id]
        # The round in flight was reported to the end and finished: nothing lost.
        assert survivor.state == pb.MODEL_DONE, f"{survivor.state} {survivor.reason}"
        assert survivor.images_trained > victim.images_trained
        assert survivor.epochs >= 1 and survivor.has_accuracy
        assert any(m.model_id > victim.model_id for m in models.values()), "work went on after the restart"
        assert cluster.control.scoreboard(run_id).flops_mismatch_reports == 0
    finally:
        cluster.close()
