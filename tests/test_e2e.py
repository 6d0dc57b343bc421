"""End to end: master and worker as real subprocesses on loopback, a short smoke run.

These are the slowest tests of the suite (a few minutes of real training on
the built-in digits dataset); they check what a user relies on: the stored
history links parents, rounds increase, warm-up is respected and TPE takes
over, every child inherits its parent's weights, the master's FLOP count
agrees with the worker's, the scoreboard is complete, the audit passes (all of
it on each backend: the JAX worker and auditor run with TensorFlow made
unimportable, as on a GPU node without it), and a worker killed mid-round loses
nothing it already reported
(a master restarted mid-round: tests/test_e2e_restart.py, a file of its own so that
`make test`'s processes run it beside these).
"""

from __future__ import annotations

import json
import re
import signal
import time

import psutil
import pytest

from aiperf.api import aiperf_pb2 as pb
from aiperf.graph import Graph
from tests.support.cluster import Cluster

pytestmark = pytest.mark.slow

SCOREBOARD_KEYS = {"run_id", "state", "profile", "elapsed_s", "flops", "score", "regulated_score",
                   "valid_flops", "error", "valid", "invalid_reason", "provisional", "workers",
                   "accelerators", "models_done"}


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(tmp_path)
    yield c
    c.close()


@pytest.fixture(scope="module", params=["tensorflow", "jax"])
def smoke_run(request, tmp_path_factory):
    """A finished smoke run on one worker of each backend, (cluster, run_id, backend, env): trained
    once for the tests that read it; the JAX worker runs with TensorFlow unimportable.

    Its worker is lost after 9 s of silence, not 3: on a loaded 2-core machine a worker compiling the
    next round beside the one it trains was seen silent for more than 3 s.

    Counted in models, not wall time, so a loaded machine makes it slower, not red: the master
    refuses a fourth model, the worker takes that as the end of its run. One epoch a round:
    nothing the tests check depends on how well the models learn, only on what was reported."""
    backend = request.param
    if backend == "jax":
        pytest.importorskip("jax")
    cluster = Cluster(tmp_path_factory.mktemp(f"smoke-{backend}"), heartbeat_interval_s=3.0)
    try:
        start = cluster.cli("start", "--duration", "30m", "--profile", "smoke", "--seed", "7",
                            "--max-models", "3", "--max-epochs", "1")
        assert start.returncode == 0, start.stderr
        run_id = cluster.control.run_status().run.config.run_id
        env = cluster.backend_env(backend)
        worker = cluster.worker("w1", "--exit-when-done", "--backend", backend, env=env)
        assert worker.wait(timeout=900) == 0, "the worker exits cleanly when the run takes no more models"
        cluster.control.stop_run(run_id, reason="three models done")
        cluster.wait_state(run_id, {pb.RUN_FINISHED}, timeout_s=120)
        yield cluster, run_id, backend, env
    finally:
        cluster.close()


def test_smoke_run_end_to_end(smoke_run):
    cluster, run_id, backend, env = smoke_run
    models = cluster.models(run_id)
    done = [m for m in models if m.state == pb.MODEL_DONE]
    assert len(done) >= 3, f"only {len(done)} models done; see {cluster.dir}"
    by_id = {m.model_id: m for m in models}

    # Parents link: the stored parent is in the history and the child's graph names its hash.
    for m in models:
        graph = Graph.from_json(m.graph_json)
        assert graph.hash() == m.graph_hash
        if m.parent_id:
            parent = by_id[m.parent_id]
            assert parent.model_id < m.model_id
            assert graph.meta["parent"] == parent.graph_hash
            assert graph.meta["operations"], "a child records the operations applied"
    assert any(m.parent_id for m in models[1:]), "children descend from earlier models"
    assert len({m.graph_hash for m in models}) == len(models), "no architecture trained twice"
    # One worker: each parent's checkpoint is written before its child's first step, so every child
    # inherits, the one the look-ahead prepared while its parent still trained included.
    assert all(m.inherited_from == m.parent_id for m in models if m.parent_id), [
        (m.model_id, m.parent_id, m.inherited_from) for m in models]

    # Rounds increase per worker; warm-up rounds use the default hyperparameters, or their
    # parent's (which, trained in warm-up too, had the defaults).
    rounds = [m.round for m in models]
    assert rounds == sorted(rounds) and rounds[0] == 1 and len(set(rounds)) == len(rounds)
    from aiperf.profiles import get_profile

    smoke = get_profile("smoke")
    for m in models:
        if m.round <= smoke.warmup_rounds:
            assert m.hyperparameters.batch_size == smoke.batch_size
            assert m.hyperparameters.kernel_size == smoke.kernel_size
    worker_log = cluster.log("worker-w1")
    for r in range(1, min(max(rounds), smoke.warmup_rounds) + 1):
        assert re.search(rf"event=round_start round={r} .*source=(default|parent)", worker_log)
    assert re.search(r"event=round_start round=1 .*source=default", worker_log)  # the base has no parent
    if max(rounds) > smoke.warmup_rounds:
        assert re.search(rf"event=round_start round={smoke.warmup_rounds + 1} .*source=tpe", worker_log)

    # The master's own FLOP count agrees with the worker's, and images were counted.
    board = json.loads(cluster.cli("scoreboard", "--json").stdout)
    assert SCOREBOARD_KEYS <= set(board)
    assert board["run_id"] == run_id and board["state"] == "finished" and board["profile"] == "smoke"
    assert board["models_done"] == len(done)
    assert board["workers"] == 1
    assert board["flops"] > 0 and board["score"] > 0
    sb = cluster.control.scoreboard(run_id)
    assert sb.flops_mismatch_reports == 0
    assert sb.total_ops == pytest.approx(sb.worker_ops, rel=0.01)
    assert sb.images_trained > 0 and sb.images_validated > 0
    best = max(m.best_accuracy for m in done)
    assert board["error"] == pytest.approx(1 - best, abs=1e-6)
    if board["valid"]:
        assert board["invalid_reason"] is None
    else:
        assert board["invalid_reason"]
    # The worker's resource samples reached the master's database.
    from master.store.sql.sql_store import SqlStore

    store = SqlStore(f"sqlite:///{cluster.dir / 'm.db'}")
    try:
        samples = store.resource_samples(run_id=run_id)
    finally:
        store.close()
    assert samples and all(0.0 <= s.cpu_util <= 1.0 and s.memory_used > 0 for s in samples
                           if s.accelerator_index == -1)
    # A worker without accelerators measured its CPU at start: the run shows an efficiency
    # (SPEC section 7), and no honest report was refused; its dataset report is recorded.
    assert board["efficiency_vs_measured"] and board["peak_verdict"] == "unverified peak"
    assert sb.implausible_reports == 0
    # CPUs have no datasheet entry: no datasheet efficiency, and the scoreboard says why
    assert board["efficiency"] is None and board["efficiency_unknown_reason"].startswith("no datasheet entry for CPU")
    (node,) = board["hardware"]
    assert node["cpu_peak_flops"]["float32"] == pytest.approx(board["peak_flops"])
    assert node["dataset"]["kind"] == "digits" and len(node["dataset"]["fingerprint"]) == 64
    assert (node["dataset"]["train_images"], node["dataset"]["validation_images"]) == (1437, 360)
    assert "the smoke profile is never official" in board["unofficial_reasons"]
    assert node["backend"] == backend and board["backends"] == backend
    # The readable table shows the same run.
    table = cluster.cli("scoreboard")
    assert table.returncode == 0 and "smoke" in table.stdout and f"backend {backend}" in table.stdout
    # The audit of the best model, on the same backend: its stored weights give its accuracy and
    # its training steps, timed here, are as fast as the worker claimed.
    audit = cluster.cli("audit", "--top", "1", "--backend", backend, "--json", env=env, timeout=600)
    assert audit.returncode == 0, audit.stderr[-3000:]
    (row,) = json.loads(audit.stdout)["audits"]
    assert row["verdict"] == "passed" and row["throughput"] == "passed", row


def test_mllog_export_of_the_smoke_run_passes_mlperf_compliance_checker(smoke_run):
    from mlperf_logging.compliance_checker.mlp_parser import parse_file

    from tests.support.mlperf_checker import check_log

    cluster, run_id, _, _ = smoke_run
    log = cluster.dir / "smoke.mllog"
    export = cluster.cli("export", "--run", str(run_id), "--format", "mllog", "--out", str(log))
    assert export.returncode == 0, export.stderr
    verdict = check_log(log)  # MLPerf Training 4.0.0, open division, ResNet
    assert verdict.passed, verdict.output

    # What the rules were checked on is the run's own record: a block per model trained, an
    # accuracy per model that reported one, the split the worker loaded, the worker's CPUs.
    loglines, errors = parse_file(str(log), ruleset="4.0.0")
    assert not errors
    models = [m for m in cluster.models(run_id) if m.images_trained]
    blocks = [ll.value["metadata"] for ll in loglines if ll.key == "block_start"]
    assert sorted(b["aiperf_model_id"] for b in blocks) == sorted(m.model_id for m in models)
    assert all(b["epoch_count"] == 1 for b in blocks)  # --max-epochs 1
    accuracies = {ll.value["metadata"]["aiperf_model_id"]: ll.value["value"] for ll in loglines
                  if ll.key == "eval_accuracy"}
    assert accuracies == {m.model_id: pytest.approx(m.best_accuracy) for m in models if m.has_accuracy}
    value = {ll.key: ll.value["value"] for ll in loglines}
    assert (value["train_samples"], value["eval_samples"]) == (1437, 360)
    (node,) = cluster.control.scoreboard(run_id).inventory
    assert value["submission_platform"] == f"1 node, {node.cpus} CPUs without accelerator"
    stop = next(ll for ll in loglines if ll.key == "run_stop")
    board = cluster.control.scoreboard(run_id)
    assert stop.value["metadata"]["status"] == ("success" if board.valid else "aborted")

    # The checker can fail: an accuracy without the epoch it was measured at is rejected.
    broken = cluster.dir / "no-epoch-num.mllog"
    broken.write_text(log.read_text().replace('"epoch_num": ', '"aiperf_epoch": '))
    verdict = check_log(broken)
    assert verdict.returncode == 1 and "'epoch_num' in v['metadata']" in verdict.output, verdict.output


def test_killed_worker_loses_nothing_reported(cluster):
    start = cluster.cli("start", "--duration", "240s", "--profile", "smoke", "--seed", "11")
    assert start.returncode == 0, start.stderr
    run_id = cluster.control.run_status().run.config.run_id
    worker = cluster.worker("w1")

    # Wait for a model in training with progress already reported, then SIGKILL its worker.
    victim = cluster.wait_for_training_model(run_id)
    children = psutil.Process(worker.pid).children(recursive=True)
    assert children, "the generator pool runs in child processes"
    worker.send_signal(signal.SIGKILL)
    worker.wait(timeout=30)
    seen_trained = victim.images_trained
    _, alive = psutil.wait_procs(children, timeout=15)
    assert not alive, f"orphans left by the killed worker: {[p.pid for p in alive]}"

    cluster.worker("w1")  # same name: re-registers as the same worker
    deadline = time.monotonic() + 240
    after = []
    while time.monotonic() < deadline:
        models = {m.model_id: m for m in cluster.models(run_id)}
        after = [m for m in models.values() if m.model_id > victim.model_id and m.state == pb.MODEL_DONE]
        if models[victim.model_id].state == pb.MODEL_ABANDONED and after:
            break
        time.sleep(1.0)
    killed = models[victim.model_id]
    assert killed.state == pb.MODEL_ABANDONED
    assert killed.reason
    assert killed.images_trained >= seen_trained, "progress reported before the kill is kept"
    assert after, "the restarted worker trains again"
    assert after[0].worker_id == killed.worker_id
    assert after[0].round > killed.round
    cluster.control.stop_run(run_id, reason="test over")
    cluster.wait_state(run_id, {pb.RUN_FINISHED}, timeout_s=180)
    board = cluster.control.scoreboard(run_id)
    assert board.images_trained >= seen_trained
