"""Every numeric bound of aiperf/api/bounds.py at its edge, through the RPC that
stores it and what the master derives from it (the accuracy row FinishModel adds,
a model's image totals, a run's operations, a deadline), read back through the
control API. Real masters on loopback ports, SQLite and PostgreSQL; hypothesis
draws each field at its lower or upper edge."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aiperf import limits
from aiperf.api import aiperf_pb2 as pb
from aiperf.api import bounds
from aiperf.api.client import Accelerator, ResourceSample
from aiperf.audit import PASSED
from aiperf.flops import count_flops
from aiperf.hyperparameters import Hyperparameters
from aiperf.peaks import largest_bound
from aiperf.profiles import SMOKE
from tests.support.fake_clock import FakeClock
from tests.support.master_clients import HP, clients

# a submission's batch is one of its profile's sizes (the master's submission rules), which stay far
# below limits.MAX_BATCH_SIZE: the largest the smoke profile has
BIGGEST_BATCH = max(SMOKE.batch_sizes)


def edge(message: Any, name: str) -> Any:
    """The bound of one field of a request (an Integer or a Real of bounds.RULES)."""
    return bounds.RULES[message][name]


def test_a_report_at_the_last_seq_is_finished_with_its_accuracy(master_server, db_url, small_graph):
    """FinishModel adds the time line's row of an accuracy no report carried: seq 0 (reports
    are 1..MAX_SEQ), never seq + 1, which overflowed BIGINT after a report at MAX_SEQ."""
    h = master_server(db_url)
    w, c = clients(h)
    wid = w.register(name="edge", host="h", accelerators=[Accelerator("X", 1 << 30)]).worker_id
    c.start_run(600)
    fc = count_flops(small_graph)
    mid = w.submit_model(wid, small_graph.to_json(), small_graph.hash(), 0, 1, HP).model_id
    assert not w.report_progress(wid, mid, limits.MAX_SEQ, 10, 0, 1, fc.ops(10, 0), val_accuracy=0.25).duplicate
    assert w.report_progress(wid, mid, limits.MAX_SEQ, 10, 0, 1, fc.ops(10, 0), val_accuracy=0.25).duplicate
    w.finish_model(wid, mid, "done", best_accuracy=1.0, predicted_accuracy=1.0)
    w.finish_model(wid, mid, "done", best_accuracy=1.0, predicted_accuracy=1.0)  # a retry: accepted, no new row
    [m] = c.list_models().models
    assert m.state == pb.MODEL_DONE and m.best_accuracy == 1.0 and m.images_trained == 10
    board = c.scoreboard()
    assert board.reports == 2 and board.best_accuracy == 1.0  # the report and the finish's accuracy row


def test_every_bound_at_its_maximum_is_stored_and_read_back(master_server, db_url, small_graph):
    clock = FakeClock()
    h = master_server(db_url, clock=clock)
    w, c = clients(h)
    accs = [Accelerator("A" * limits.MAX_MODEL_NAME_CHARS, limits.MAX_ACCELERATOR_MEMORY_BYTES,
                        limits.MAX_OPS_PER_S_PER_ACCELERATOR)] * limits.MAX_ACCELERATORS_PER_WORKER
    reg = w.register(name="n" * limits.MAX_NAME_CHARS, host="h" * limits.MAX_NAME_CHARS, accelerators=accs,
                     cpus=limits.MAX_CPUS, memory_bytes=limits.MAX_HOST_MEMORY_BYTES)
    wid = reg.worker_id
    run = c.start_run(limits.MAX_RUN_DURATION_S, seed=limits.MAX_SEED, max_models=limits.MAX_MODELS,
                      max_rounds_per_worker=limits.MAX_ROUND, max_epochs_per_round=limits.MAX_EPOCH,
                      warmup_rounds=limits.MAX_ROUND, report_interval_s=limits.MAX_INTERVAL_S,
                      resource_interval_s=limits.MAX_INTERVAL_S, keep_checkpoints=limits.MAX_KEEP_CHECKPOINTS)
    assert run.config.seed == limits.MAX_SEED and run.config.duration_s == limits.MAX_RUN_DURATION_S
    dataset = {"kind": "k" * limits.MAX_DATASET_KIND_CHARS, "train_images": limits.MAX_DATASET_IMAGES,
               "validation_images": limits.MAX_DATASET_IMAGES, "num_classes": limits.MAX_DATASET_CLASSES,
               "image_size": limits.MAX_IMAGE_SIZE, "fingerprint": "f" * limits.MAX_GRAPH_HASH_CHARS}
    mid = w.submit_model(wid, small_graph.to_json(), small_graph.hash(), 0, limits.MAX_ROUND,
                         Hyperparameters(BIGGEST_BATCH, 7), dataset=dataset).model_id
    fc = count_flops(small_graph)
    per_report = min(limits.MAX_IMAGES_PER_REPORT, limits.MAX_OPS_PER_REPORT // fc.train)
    # an accelerator without a datasheet entry is bounded by the table's fastest (smoke: float32)
    rate = min(limits.MAX_OPS_PER_S_PER_ACCELERATOR, largest_bound("float32")) * limits.MAX_ACCELERATORS_PER_WORKER
    images = 0
    for seq in (limits.MAX_SEQ - 1, limits.MAX_SEQ):
        clock.t += fc.train * per_report / rate + 1.0  # long enough for physics, short of losing the worker
        w.heartbeat(wid, mid)
        w.report_progress(wid, mid, seq, per_report, 0, limits.MAX_EPOCH, limits.MAX_OPS_PER_REPORT, val_accuracy=1.0)
        images += per_report
    w.send_resource_samples(wid, [ResourceSample(
        age_s=limits.MAX_SAMPLE_AGE_S, accelerator_index=limits.MAX_ACCELERATORS_PER_WORKER - 1, accelerator_util=1.0,
        accelerator_memory_used=limits.MAX_ACCELERATOR_MEMORY_BYTES, cpu_util=1.0,
        memory_used=limits.MAX_HOST_MEMORY_BYTES)])
    w.finish_model(wid, mid, "done", best_accuracy=1.0, predicted_accuracy=1.0, reason="r" * limits.MAX_REASON_CHARS,
                   checkpoint_uri="u" * limits.MAX_CHECKPOINT_URI_CHARS, checkpoint_sha256="0" * 64)
    [m] = c.list_models().models
    assert (m.state, m.round, m.images_trained, m.epochs) == (pb.MODEL_DONE, limits.MAX_ROUND, images, limits.MAX_EPOCH)
    assert m.hyperparameters.batch_size == BIGGEST_BATCH
    board = c.scoreboard()
    assert board.reports == 2 and board.images_trained == images and board.best_accuracy == 1.0
    assert board.total_ops == pytest.approx(2 * per_report * fc.train, rel=1e-9)
    [worker] = c.list_workers().workers
    assert worker.memory_bytes == limits.MAX_HOST_MEMORY_BYTES and worker.cpus == limits.MAX_CPUS
    assert {a.memory_bytes for a in worker.accelerators} == {limits.MAX_ACCELERATOR_MEMORY_BYTES}
    tl = c.timeline()
    assert tl.points and tl.points[-1].best_accuracy == 1.0
    status = c.run_status()
    assert status.run.config.seed == limits.MAX_SEED and status.run.config.limits.max_models == limits.MAX_MODELS
    audit = c.record_audit(mid, verdict=PASSED, architecture_ok=True, audited_accuracy=1.0,
                           validation_images=limits.MAX_AUDIT_IMAGES, auditor_host="a" * limits.MAX_NAME_CHARS,
                           detail="d" * limits.MAX_REASON_CHARS, audited_images_per_second=limits.MAX_AUDIT_IMAGES_PER_S,
                           auditor_hardware="x" * limits.MAX_HARDWARE_CHARS)
    assert audit.validation_images == limits.MAX_AUDIT_IMAGES
    [stored] = c.list_audits().audits
    assert stored.audited_images_per_second == limits.MAX_AUDIT_IMAGES_PER_S
    # the reads at their largest pages and offsets
    assert len(c.timeline(max_points=limits.MAX_TIMELINE_POINTS, buckets=limits.MAX_TIMELINE_BUCKETS).points) >= 2
    assert c.list_models(limit=limits.MAX_PAGE, offset=limits.MAX_OFFSET).total == 1
    assert c.list_runs(limit=limits.MAX_PAGE, offset=limits.MAX_OFFSET).total == 1
    assert c.list_workers(limit=limits.MAX_PAGE, offset=limits.MAX_OFFSET).total == 1


def test_a_run_waiting_for_the_most_workers_is_stored_and_stopped(master_server, db_url):
    h = master_server(db_url)
    _, c = clients(h)
    run = c.start_run(limits.MAX_RUN_DURATION_S, min_workers=limits.MAX_WORKERS)
    assert run.state == pb.RUN_PENDING and run.config.min_workers == limits.MAX_WORKERS
    assert c.stop_run(run.config.run_id).state == pb.RUN_FINISHED


_REPORT = pb.ProgressReport
_MASTERS: dict[int, tuple[Any, FakeClock]] = {}
_NAMES = itertools.count()


@st.composite
def report_edges(draw: Any) -> tuple[int, int, int, int, float]:
    """A report's seq, images trained, images validated and epoch, each at its lower or upper edge."""
    pick = lambda name: draw(st.sampled_from([edge(_REPORT, name).lo, edge(_REPORT, name).hi]))  # noqa: E731
    acc = draw(st.sampled_from([edge(_REPORT, "val_accuracy").lo, edge(_REPORT, "val_accuracy").hi]))
    return pick("seq"), pick("images_trained"), pick("images_validated"), pick("epoch"), acc


@settings(max_examples=12, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(reports=st.lists(report_edges(), min_size=1, max_size=4),
       finish=st.sampled_from([None, 0.0, 1.0]), samples_at=st.sampled_from(["lo", "hi"]))
def test_edge_values_through_every_rpc_that_stores_them(master_server, small_graph, reports, finish, samples_at):
    """Each report at edge values, on a fresh model: stored and counted exactly, or refused
    with INVALID_ARGUMENT (an overflow) or FAILED_PRECONDITION (above the accepted peak), never a failed store."""
    key = id(master_server)  # one master for all of the examples of one run of the test
    if key not in _MASTERS or _MASTERS[key][0]._stopped:  # a stopped one: an earlier test's fixture
        clock = FakeClock()
        _MASTERS.clear()
        _MASTERS[key] = (master_server(clock=clock), clock)
    h, clock = _MASTERS[key]
    w, c = clients(h)
    try:
        wid = w.register(name=f"hyp-{next(_NAMES)}", host="h", accelerators=[Accelerator("X", 1 << 30, 1e15)]).worker_id
        if c.list_runs().total == 0:
            c.start_run(limits.MAX_RUN_DURATION_S)
        fc = count_flops(small_graph)
        mid = w.submit_model(wid, small_graph.to_json(), small_graph.hash(), 0, 1, HP).model_id
        stored: dict[int, tuple[int, int, float]] = {}
        for seq, trained, validated, epoch, acc in reports:
            clock.t += 1.0
            ops = fc.ops(trained, validated)
            try:
                ack = w.report_progress(wid, mid, seq, trained, validated, epoch, min(ops, limits.MAX_OPS_PER_REPORT),
                                        val_accuracy=acc)
            except Exception as exc:  # an ApiError: refused for size, or above the peak, nothing stored
                assert getattr(exc, "code", None) is not None, exc
                assert exc.code.name in ("INVALID_ARGUMENT", "FAILED_PRECONDITION"), exc
                assert ops > limits.MAX_OPS_PER_REPORT or ops > 1e15 * (1.0 + limits.CLOCK_SLACK_S), exc
                continue
            if seq in stored:
                assert ack.duplicate
            else:
                stored[seq] = (trained, validated, acc)
        sent = [ResourceSample(age_s=getattr(edge(pb.ResourceSample, "age_s"), samples_at), accelerator_index=0,
                               accelerator_util=getattr(edge(pb.ResourceSample, "accelerator_util"), samples_at),
                               accelerator_memory_used=getattr(edge(pb.ResourceSample, "accelerator_memory_used"),
                                                               samples_at),
                               memory_used=getattr(edge(pb.ResourceSample, "memory_used"), samples_at))]
        assert w.send_resource_samples(wid, sent) == 1
        w.finish_model(wid, mid, "done", best_accuracy=finish)
        m = next(m for m in c.list_models(limit=limits.MAX_PAGE).models if m.model_id == mid)
        assert m.images_trained == sum(t for t, _, _ in stored.values())
        assert m.images_validated == sum(v for _, v, _ in stored.values())
        accs = [a for _, _, a in stored.values()] + ([finish] if finish is not None else [])
        assert (m.best_accuracy if m.has_accuracy else None) == (max(accs) if accs else None)
    finally:
        w.close()
        c.close()
