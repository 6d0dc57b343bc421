"""Weights from outside the run (docs/spec.md): the master's initialisation seed at SubmitModel
(master/core/weight_lineage.py), the worker's start from it (worker/weight_seed.py), the
weight digests its epoch reports carry, stamped by the master, and the checkpoint that must be
one of them: through the real gRPC server, and on the TensorFlow backend at a tiny shape."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aiperf.api import aiperf_pb2 as pb
from aiperf.api.client import ApiError
from aiperf.flops import count_flops
from aiperf.graph import with_inserted_kernel
from aiperf.hyperparameters import Hyperparameters
from aiperf.profiles import OFFICIAL
from aiperf.states import ModelState, RunState
from aiperf.weight_digest import weights_digest
from master.core import node_audits, weight_lineage
from master.core.requests import ModelFinish
from master.store.errors import FailedPrecondition
from master.store.records import RunRecord
from tests.support.master_clients import IMAGENET, clients, register
from tests.support.master_clients import h100s as _gpus

HP = Hyperparameters(32, 3)


def _digest(n: int) -> str:
    return hashlib.sha256(f"weights {n}".encode()).hexdigest()


def _smoke(master_server, small_graph, models: int = 1):
    h = master_server()
    w, c = clients(h)
    wid = register(w)
    c.start_run(600, profile="smoke", seed=1)
    subs = [w.submit_model(wid, small_graph.to_json(), small_graph.hash(), 0, r + 1, HP) for r in range(models)]
    return h, w, c, wid, subs


def _report(w, wid: int, mid: int, graph, seq: int, epoch: int, digest: str = "", acc: float | None = 0.3):
    flops = count_flops(with_inserted_kernel(graph, HP.kernel_size)).ops(10, 10)
    return w.report_progress(wid, mid, seq, 10, 10, epoch, flops, val_accuracy=acc, weights_sha256=digest)


def _finish(w, wid: int, mid: int, weights_sha256: str = ""):
    uri = f"file:///s/run-1/model-{mid}.weights.h5"
    return w.finish_model(wid, mid, "done", best_accuracy=0.3, predicted_accuracy=0.3, checkpoint_uri=uri,
                          checkpoint_sha256=hashlib.sha256(uri.encode()).hexdigest(),
                          checkpoint_weights_sha256=weights_sha256)


# ---------------------------------------------------------------- the seed


def _run(secret: str, run_id: int = 1) -> RunRecord:
    return RunRecord(profile="smoke", seed=1, duration_s=600.0, precision="fp32",
                     config={node_audits.SECRET_KEY: secret} if secret else {}, software={}, id=run_id,
                     state=RunState.RUNNING, created_at=0.0, started_at=0.0, deadline=600.0, stopped_at=None,
                     finished_at=None, stop_reason="")


@given(st.integers(1, 2**63 - 1), st.integers(1, 2**63 - 1))
@settings(max_examples=50, deadline=None)
def test_the_seed_is_a_function_of_the_secret_run_and_model(a, b):
    run = _run("s" * 32)
    assert weight_lineage.init_seed(run, a) == weight_lineage.init_seed(run, a)
    assert 1 <= weight_lineage.init_seed(run, a) < 2**63
    if a != b:
        assert weight_lineage.init_seed(run, a) != weight_lineage.init_seed(run, b)
    assert weight_lineage.init_seed(_run("t" * 32), a) != weight_lineage.init_seed(run, a)
    assert weight_lineage.init_seed(_run("s" * 32, run_id=2), a) != weight_lineage.init_seed(run, a)


def test_a_run_recorded_without_a_secret_hands_out_no_seed():
    assert weight_lineage.init_seed(_run(""), 7) == 0


def test_submit_model_hands_out_a_seed_per_model_that_the_worker_cannot_foresee(master_server, small_graph):
    _, _, _, _, subs = _smoke(master_server, small_graph, models=3)
    seeds = [s.init_seed for s in subs]
    assert all(s > 0 for s in seeds) and len(set(seeds)) == 3
    # a second run's secret is another: the same model ids would get other seeds
    assert weight_lineage.init_seed(_run("a" * 32), subs[0].model_id) != weight_lineage.init_seed(
        _run("b" * 32), subs[0].model_id)


# ---------------------------------------------------------------- digests and the checkpoint


def test_a_checkpoint_must_be_a_digest_an_epoch_report_carried(master_server, small_graph):
    h, w, c, wid, [sub] = _smoke(master_server, small_graph)
    mid = sub.model_id
    _report(w, wid, mid, small_graph, 1, 1, "", acc=None)  # mid-epoch: no digest
    _report(w, wid, mid, small_graph, 2, 1, _digest(1))
    _report(w, wid, mid, small_graph, 3, 2, _digest(2))
    with pytest.raises(ApiError) as e:
        _finish(w, wid, mid, _digest(3))  # weights no report showed: from elsewhere
    assert e.value.code.name == "FAILED_PRECONDITION" and "none of the 2 digests" in e.value.details
    assert c.list_models().models[0].state == pb.MODEL_TRAINING  # the refusal changed nothing
    reply = _finish(w, wid, mid, _digest(1))  # the best epoch's weights need not be the last
    assert reply.model.checkpoint_uri.endswith(f"model-{mid}.weights.h5")
    # the stamps are the master's: each digest with its epoch and the report's receipt time
    stamped = h.master.store.stamped_digests(mid)
    assert [(e_, d) for e_, _, d in stamped] == [(1, _digest(1)), (2, _digest(2))]
    assert all(0 < t <= h.master.clock() for _, t, _ in stamped)


def test_a_smoke_checkpoint_without_a_digest_is_taken_an_official_one_is_refused(master_server, small_graph):
    _, w, _, wid, [sub] = _smoke(master_server, small_graph)
    assert _finish(w, wid, sub.model_id).model.checkpoint_uri  # the demo's and hand-written clients' way
    h = master_server()
    w, c = clients(h)
    wid = w.register(name="h", host="h", cpus=8, accelerators=_gpus("GPU-1")).worker_id
    c.start_run(7200, profile="official")
    g = OFFICIAL.base_graph()
    batch = OFFICIAL.for_accelerator_memory(80 << 30).batch_size
    mid = w.submit_model(wid, g.to_json(), g.hash(), 0, 1, Hyperparameters(batch, 3),
                         dataset=IMAGENET).model_id
    with pytest.raises(ApiError) as e:
        _finish(w, wid, mid)
    assert e.value.code.name == "FAILED_PRECONDITION" and "checkpoint_weights_sha256" in e.value.details
    flops = count_flops(with_inserted_kernel(g, 3)).ops(batch, 0)
    w.report_progress(wid, mid, 1, batch, 0, 1, flops, val_accuracy=0.01, weights_sha256=_digest(1))
    assert _finish(w, wid, mid, _digest(1)).model.checkpoint_uri


@given(st.text(max_size=80))
@settings(max_examples=30, deadline=None)
def test_a_weights_digest_is_empty_or_64_lowercase_hex(text):
    from aiperf.api import bounds

    ok = text == "" or (len(text) == 64 and set(text) <= set("0123456789abcdef"))
    for message in (pb.ProgressReport(worker_id=1, model_id=1, seq=1, weights_sha256=text),
                    pb.FinishModelRequest(worker_id=1, model_id=1, state=pb.MODEL_DONE,
                                          checkpoint_weights_sha256=text)):
        try:
            bounds.check(message)
            assert ok
        except bounds.BoundsError:
            assert not ok


def test_a_malformed_digest_is_invalid_argument_through_the_server(master_server, small_graph):
    _, w, _, wid, [sub] = _smoke(master_server, small_graph)
    with pytest.raises(ApiError) as e:
        _report(w, wid, sub.model_id, small_graph, 1, 1, "Z" * 64)
    assert e.value.code.name == "INVALID_ARGUMENT"


class _Stamps:
    """A store of one model with stamped digests (the check's reads)."""

    def __init__(self, run: RunRecord, stamped: list[tuple[int, float, str]]) -> None:
        self.run, self.stamped = run, stamped

    def get_model(self, model_id: int):
        from types import SimpleNamespace

        return SimpleNamespace(id=model_id, run_id=self.run.id, worker_id=1, state=ModelState.TRAINING)

    def get_run(self, run_id: int) -> RunRecord:
        return self.run

    def stamped_digests(self, model_id: int):
        return self.stamped


@given(st.floats(0.0, 1200.0), st.floats(0.0, 1200.0), st.booleans())
@settings(max_examples=60, deadline=None)
def test_only_a_digest_stamped_inside_the_window_counts(stamped_at, stop_at, stopped):
    from dataclasses import replace

    run = replace(_run("s" * 32), stopped_at=stop_at if stopped else None)
    end = min(stop_at, 600.0) if stopped else 600.0
    fin = ModelFinish(worker_id=1, model_id=5, state=ModelState.DONE, checkpoint_uri="file:///c",
                      checkpoint_sha256="0" * 64, checkpoint_weights_sha256=_digest(1))
    store = _Stamps(run, [(1, stamped_at, _digest(1))])
    if stamped_at <= end:
        weight_lineage.check_checkpoint(store, fin)
    else:
        with pytest.raises(FailedPrecondition):
            weight_lineage.check_checkpoint(store, fin)


# ---------------------------------------------------------------- the worker's start, TensorFlow at a tiny shape


@pytest.fixture(scope="module")
def tiny():
    pytest.importorskip("tensorflow")
    from tests.support.graphs import tiny_graph
    from tests.support.training import TinyDataset

    return tiny_graph(), TinyDataset(n_train=40, n_val=16)


def test_same_seed_same_weights_other_seed_other_weights(tiny):
    from worker.weight_seed import seed_weights

    graph, _ = tiny
    a, b, other = (seed_weights(graph, 5, s) for s in (123456789012, 123456789012, 123456789013))
    assert weights_digest(a) == weights_digest(b)
    assert weights_digest(a) != weights_digest(other)
    assert all(np.array_equal(x, y) for k in a for x, y in zip(a[k], b[k]))
    assert not np.array_equal(a["c1"][0], other["c1"][0])  # the seed reaches every initialiser, not a label


def test_a_prepared_round_starts_from_the_masters_seed_and_keeps_what_it_inherited(tiny):
    from tests.support.training import PROFILE
    from worker.trainer import prepare_round
    from worker.weight_seed import seed_weights

    graph, data = tiny
    inherited = {"fc": [np.full((8, 10), 0.5, np.float32), np.zeros(10, np.float32)]}
    prepared = prepare_round(graph, HP, data, PROFILE, 1, seed=99, epochs=1, initial_weights=inherited)
    try:
        before = prepared.compiled.weights()
        prepared.start_from_seed(2**62 + 7)
        after = prepared.compiled.weights()
        expected = seed_weights(graph, HP.kernel_size, 2**62 + 7)
        assert weights_digest({k: v for k, v in after.items() if k != "fc"}) == weights_digest(
            {k: v for k, v in expected.items() if k != "fc"})
        assert np.array_equal(after["fc"][0], inherited["fc"][0])  # the parent's layer stays
        assert not np.array_equal(before["c1"][0], after["c1"][0])  # the worker's own seed is gone
        prepared.start_from_seed(0)  # a master from before seeds: nothing changes
        assert weights_digest(prepared.compiled.weights()) == weights_digest(after)
    finally:
        prepared.release()


def test_each_epoch_end_reports_the_digest_of_the_weights_then(tiny):
    from tests.support.training import PROFILE
    from worker.trainer import prepare_round, run_round

    graph, data = tiny
    prepared = prepare_round(graph, HP, data, PROFILE, 1, seed=3, epochs=2)
    prepared.start_from_seed(11)
    reports, kept = [], []
    result = run_round(prepared, on_progress=reports.append, should_stop=lambda: False, progress_interval_s=0.0,
                       phase_reports=False, on_weights=kept.append)
    ends = [r for r in reports if r.epoch_end]
    assert result.epochs == 2 and [r.epoch for r in ends] == [1, 2]
    assert all(len(r.weights_sha256) == 64 for r in ends) and ends[0].weights_sha256 != ends[1].weights_sha256
    assert not any(r.weights_sha256 for r in reports if not r.epoch_end)
    # the checkpoint's weights are the best epoch's: their digest is the one that epoch's report carried
    best = int(np.argmax(result.val_accuracies))
    assert weights_digest(kept[-1]) == ends[best].weights_sha256


# ---------------------------------------------------------------- the first epoch re-trained from the seed


@given(st.floats(0.0, 1.0), st.floats(0.0, 1.0), st.integers(1, 100_000))
@settings(max_examples=100, deadline=None)
def test_a_first_epoch_short_of_its_report_by_more_than_the_tolerance_is_not_earned(reported, retrained, images):
    from aiperf import audit as rule

    v = rule.retrain_verdict(reported, retrained, images)
    assert v == (rule.PASSED if retrained >= reported - rule.retrain_tolerance(images) else rule.NOT_EARNED)
    assert rule.retrain_verdict(None, retrained, images) == rule.PASSED  # no first-epoch claim
    assert rule.retrain_verdict(reported, float("nan"), images) == rule.NOT_EARNED


@pytest.mark.parametrize("images, tolerance", [(50_000, 0.0595), (1_000, 0.1171), (360, 0.1618)])
def test_the_retraining_tolerance_is_sgd_spread_plus_three_standard_errors(images, tolerance):
    from aiperf import audit as rule

    assert rule.retrain_tolerance(images) == pytest.approx(tolerance, abs=5e-5)  # the figures docs/spec.md gives


def test_the_audit_compares_the_retrained_first_epoch_with_the_report(master_server, small_graph):
    h, w, c, wid, subs = _smoke(master_server, small_graph, models=2)
    for sub in subs:
        _report(w, wid, sub.model_id, small_graph, 1, 1, _digest(sub.model_id), acc=0.7)
        _finish(w, wid, sub.model_id, _digest(sub.model_id))
    listed = {m.model_id: m for m in c.list_models().models}
    assert [listed[s.model_id].init_seed for s in subs] == [s.init_seed for s in subs]  # the auditor's seed
    honest, liar = subs
    ok = c.record_audit(honest.model_id, verdict="passed", architecture_ok=True, audited_accuracy=0.7,
                        validation_images=360, retrained_accuracy=0.68)
    assert ok.verdict != "not earned in the run" and "epoch 1 re-trained from the seed: 0.6800" in ok.detail
    caught = c.record_audit(liar.model_id, verdict="passed", architecture_ok=True, audited_accuracy=0.7,
                            validation_images=360, retrained_accuracy=0.3, detail="the auditor's words")
    assert caught.verdict == "not earned in the run"
    assert caught.detail.startswith("epoch 1 re-trained from the seed: 0.3000, reported 0.7000")
    assert caught.detail.endswith("the auditor's words")
    for bad in ({"verdict": "no checkpoint", "architecture_ok": False},  # weights not read
                {"verdict": "passed", "architecture_ok": True, "audited_accuracy": 0.7}):  # no images
        with pytest.raises(ApiError) as e:
            c.record_audit(liar.model_id, retrained_accuracy=0.5, **bad)
        assert e.value.code.name == "INVALID_ARGUMENT"


def test_a_node_audit_sends_no_retrained_accuracy(master_server, small_graph):
    from aiperf.api.client import NodeInventory

    _, _, c, _, [sub] = _smoke(master_server, small_graph)
    with pytest.raises(ApiError) as e:
        c.record_audit(sub.model_id, verdict="no checkpoint", architecture_ok=False, retrained_accuracy=0.5,
                       node=NodeInventory((), "cpu", 2))
    assert e.value.code.name == "INVALID_ARGUMENT"


def test_the_auditor_retrains_the_first_epoch_as_the_worker_trained_it(tiny):
    from aiperf import audit as rule
    from aiperf.api import aiperf_pb2 as pb_
    from tests.support.training import PROFILE
    from worker.audit import Retraining
    from worker.trainer import prepare_round, run_round

    graph, data = tiny
    seed = 2**40 + 3
    # the data order the auditor uses too (a real worker's differs: the tolerance's noise, aiperf/audit.py)
    prepared = prepare_round(graph, HP, data, PROFILE, 1, seed=seed, epochs=2)
    prepared.start_from_seed(seed)
    reports = []
    run_round(prepared, on_progress=reports.append, should_stop=lambda: False, progress_interval_s=0.0,
              phase_reports=False)
    worker_first = next(r.val_accuracy for r in reports if r.epoch_end)
    model = pb_.Model(model_id=1, round=1, graph_json=graph.to_json(), init_seed=seed,
                      hyperparameters=pb_.Hyperparameters(batch_size=HP.batch_size, kernel_size=HP.kernel_size))
    retrained = Retraining(PROFILE, max_epochs_per_round=2).first_epoch(model, "fp32", data)
    assert retrained is not None and abs(retrained - worker_first) <= rule.retrain_tolerance(data.validation_size)
    inherited = pb_.Model(model_id=2, round=1, graph_json=graph.to_json(), init_seed=seed, inherited_from=1,
                          hyperparameters=pb_.Hyperparameters(batch_size=HP.batch_size, kernel_size=HP.kernel_size))
    assert Retraining(PROFILE).first_epoch(inherited, "fp32", data) is None  # its start is its parent's
