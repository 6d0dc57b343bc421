"""A real master on a loopback port with a fake worker: lifecycle, lost workers,
idempotent reports, scores on the master's clock, every error status."""

from __future__ import annotations

import math
import shutil
import subprocess
import urllib.request
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from aiperf.api import aiperf_pb2 as pb
from aiperf.api import aiperf_pb2_grpc as pb_grpc
from aiperf.api.client import Accelerator, ApiError, ControlClient, NodeInventory, ResourceSample, WorkerClient
from aiperf.api.enums import MODEL_STATES
from aiperf.flops import count_flops
from aiperf.graph import with_inserted_kernel
from aiperf.hyperparameters import Hyperparameters
from aiperf.morphism import deeper_at, deeper_positions
from tests.support.fake_clock import FakeClock
from tests.support.master_clients import HP, clients, register, wait_for

# every test here runs twice: the master serving gRPC itself, and through two front ends
pytestmark = pytest.mark.also_frontends


def code_of(excinfo) -> grpc.StatusCode:
    return excinfo.value.code


def test_whole_lifecycle(master_server, small_graph, db_url):
    h = master_server(db_url)
    w, c = clients(h)
    wid = register(w)
    hb = w.heartbeat(wid)
    assert not hb.has_run and hb.worker_state == pb.WORKER_ALIVE

    run = c.start_run(600, profile="smoke", seed=42, precision="mixed_fp16", max_epochs_per_round=2, warmup_rounds=3)
    assert run.state == pb.RUN_RUNNING and run.config.seed == 42
    hb = w.heartbeat(wid)
    assert hb.has_run and hb.run.state == pb.RUN_RUNNING
    cfg = hb.run.config
    assert (cfg.profile, cfg.precision, cfg.warmup_rounds, cfg.limits.max_epochs_per_round) == (
        pb.PROFILE_SMOKE, pb.PRECISION_MIXED_FP16, 3, 2)
    assert cfg.min_running_time_s == 120 and hb.run.deadline == pytest.approx(hb.run.started_at + 600)

    # round 1: the initial architecture
    fc = count_flops(small_graph)
    sub = w.submit_model(wid, small_graph.to_json(), small_graph.hash(), 0, 1, HP)
    assert sub.state == pb.MODEL_TRAINING
    assert (sub.flops_per_train_image, sub.flops_per_eval_image) == (fc.train, fc.eval)
    ack = w.report_progress(wid, sub.model_id, 1, 3200, 0, 1, fc.ops(3200, 0))
    assert not ack.duplicate and ack.master_flops == fc.ops(3200, 0) and not ack.flops_mismatch
    ack = w.report_progress(wid, sub.model_id, 2, 0, 800, 1, fc.ops(0, 800), val_accuracy=0.42)
    assert ack.master_flops == fc.ops(0, 800) and ack.run_state == pb.RUN_RUNNING
    done = w.finish_model(wid, sub.model_id, "done", best_accuracy=0.42, predicted_accuracy=0.61)
    assert done.model.state == pb.MODEL_DONE

    # round 2: a child with a different kernel size for the inserted conv
    child = deeper_at(small_graph, deeper_positions(small_graph)[0])
    hp2 = Hyperparameters(64, 5)
    sub2 = w.submit_model(wid, child.to_json(), child.hash(), sub.model_id, 2, hp2)
    fc2 = count_flops(with_inserted_kernel(child, 5))
    assert sub2.flops_per_train_image == fc2.train != count_flops(child).train
    w.report_progress(wid, sub2.model_id, 1, 640, 160, 1, fc2.ops(640, 160), val_accuracy=0.30)
    w.finish_model(wid, sub2.model_id, "failed", reason="out of memory")

    hist = w.get_history(wid)
    assert [m.model_id for m in hist.models] == [sub.model_id, sub2.model_id]
    m1, m2 = hist.models
    assert (m1.parent_id, m1.round, m1.state, m1.best_accuracy, m1.predicted_accuracy) == (
        0, 1, pb.MODEL_DONE, pytest.approx(0.42), pytest.approx(0.61))
    assert m1.graph_hash == small_graph.hash() and m1.graph_json == small_graph.to_json()
    assert (m2.parent_id, m2.worker_id, m2.state, m2.reason) == (sub.model_id, wid, pb.MODEL_FAILED, "out of memory")
    assert (m2.hyperparameters.batch_size, m2.hyperparameters.kernel_size) == (64, 5)
    assert list(hist.ranked_model_ids) == [sub.model_id]
    unranked = w.get_history(wid, ranking=False)  # what the agent asks: the same models, no ranking
    assert list(unranked.models) == list(hist.models) and not unranked.ranked_model_ids
    assert [m.model_id for m in w.get_history(wid, since_model_id=sub.model_id).models] == [sub2.model_id]
    obs = w.get_hyperparameter_history(wid).observations
    assert [(o.model_id, o.round, o.hyperparameters.batch_size, round(o.accuracy, 6)) for o in obs] == [
        (sub.model_id, 1, 32, 0.61)]

    assert w.send_resource_samples(wid, [ResourceSample(age_s=1.0, accelerator_index=0, accelerator_util=0.9),
                                         ResourceSample(cpu_util=0.5, memory_used=1 << 30)]) == 2

    sb = c.scoreboard()
    total = fc.ops(3200, 800) + fc2.ops(640, 160)
    assert sb.total_ops == pytest.approx(total) and sb.worker_ops == pytest.approx(total)
    assert sb.provisional and sb.score == pytest.approx(sb.flops)
    assert sb.flops == pytest.approx(total / sb.elapsed_s, rel=0.2)
    assert sb.error == pytest.approx(0.58) and sb.best_accuracy == pytest.approx(0.42)
    assert sb.workers == 1 and sb.accelerators == 2 and sb.models_done == 1
    assert {MODEL_STATES[m.state]: m.count for m in sb.models}["failed"] == 1
    assert sb.images_trained == 3840 and sb.images_validated == 960
    assert sb.inventory[0].accelerators[0].model == "Tesla V100"
    assert {s.name: s.version for s in sb.inventory[0].software} == {"tensorflow": "2.21.0"}
    assert not sb.valid and "minimum 120 s" in sb.invalid_reason
    assert "aiperf" in {s.name for s in sb.master_software} and not sb.official

    stopped = c.stop_run()
    assert stopped.state == pb.RUN_FINISHED or stopped.state == pb.RUN_STOPPING
    wait_for(lambda: c.run_status().run.state == pb.RUN_FINISHED, what="run finished")
    st = c.run_status()
    assert st.run.stop_reason == "stopped on request" and st.workers_joined == 1
    with pytest.raises(ApiError) as e:
        w.report_progress(wid, sub2.model_id, 2, 1, 0, 1, fc2.ops(1, 0))
    assert code_of(e) == grpc.StatusCode.FAILED_PRECONDITION
    listed = c.list_models(state="done")
    assert listed.total == 1 and listed.models[0].graph_json == ""


def test_reports_are_idempotent(master_server, small_graph, db_url):
    h = master_server(db_url)
    w, c = clients(h)
    wid = register(w)
    c.start_run(600, profile="smoke")
    fc = count_flops(small_graph)
    mid = w.submit_model(wid, small_graph.to_json(), small_graph.hash(), 0, 1, HP).model_id
    first = w.report_progress(wid, mid, 1, 1000, 0, 1, fc.ops(1000, 0))
    again = w.report_progress(wid, mid, 1, 1000, 0, 1, fc.ops(1000, 0))
    assert again.duplicate and again.master_flops == first.master_flops

    def backlog() -> list[bool]:  # a backlog after an outage, sent again whole
        return [w.report_progress(wid, mid, seq, 500, 0, 1, fc.ops(500, 0)).duplicate for seq in (1, 2, 3)]

    assert backlog() == [True, False, False]
    assert backlog() == [True, True, True]
    sb = c.scoreboard()
    assert sb.reports == 3 and sb.total_ops == pytest.approx(fc.ops(2000, 0)) and sb.images_trained == 2000


def test_flop_disagreement_is_flagged_and_invalidates(master_server, small_graph):
    h = master_server()
    w, c = clients(h)
    wid = register(w)
    c.start_run(600, profile="smoke")
    fc = count_flops(small_graph)
    mid = w.submit_model(wid, small_graph.to_json(), small_graph.hash(), 0, 1, HP).model_id
    ack = w.report_progress(wid, mid, 1, 1000, 0, 1, fc.ops(1000, 0) * 2)  # a worker claiming double
    assert ack.flops_mismatch and ack.master_flops == fc.ops(1000, 0)
    sb = c.scoreboard()
    assert sb.total_ops == pytest.approx(fc.ops(1000, 0))  # the claim never enters the score
    assert sb.flops_mismatch_reports == 1 and "worker FLOPs differ" in sb.invalid_reason


def test_scores_on_the_master_clock(master_server):
    from aiperf.resnet import resnet50

    clock = FakeClock()
    t0 = clock.t
    h = master_server(clock=clock, heartbeat_interval_s=10_000.0)
    w, c = clients(h)
    # two V100s an official run counts: table entries, with their UUIDs and a measured peak
    wid = w.register(name="node-1", host="node-1", cpus=16, memory_bytes=128 << 30,
                     accelerators=[Accelerator("Tesla V100", 32 << 30, 5e12, uuid=f"GPU-{i}") for i in range(2)]
                     ).worker_id
    c.start_run(3 * 3600, profile="official", seed=1)  # the official precision (mixed_fp16) and XLA
    small_graph = resnet50(input_size=224, channels=3, classes=1000, width=1.0)  # the official seed graph
    fc = count_flops(small_graph)
    imagenet = {"kind": "imagenet-tfrecord", "train_images": 1_281_167, "validation_images": 50_000,
                "num_classes": 1000, "image_size": 224, "fingerprint": "0" * 64}
    mid = w.submit_model(wid, small_graph.to_json(), small_graph.hash(), 0, 1, Hyperparameters(448, 3),
                         dataset=imagenet).model_id
    script = [  # (t - t0, images trained, images validated, accuracy)
        (1800, 100_000, 0, None),
        (3000, 100_000, 20_000, 0.60),
        (4500, 200_000, 0, None),
        (5400, 0, 20_000, 0.75),
    ]
    for seq, (dt, tr, va, acc) in enumerate(script, start=1):
        clock.t = t0 + dt
        w.report_progress(wid, mid, seq, tr, va, 1, fc.ops(tr, va), val_accuracy=acc)
    clock.t = t0 + 7200
    sb = c.scoreboard()
    f = [fc.train * 100_000, fc.train * 100_000 + fc.eval * 20_000, fc.train * 200_000, fc.eval * 20_000]
    cumulative = [sum(f[: i + 1]) for i in range(4)]
    # candidates after the hour: t=3600 (F=cum[1]), 4500 (cum[2]), 5400 (cum[3])
    candidates = {3600: cumulative[1] / 3600, 4500: cumulative[2] / 4500, 5400: cumulative[3] / 5400}
    best_t = max(candidates, key=candidates.get)
    assert not sb.provisional and sb.official
    assert sb.score == pytest.approx(candidates[best_t]) and sb.score_time_s == pytest.approx(best_t)
    assert sb.flops == pytest.approx(cumulative[3] / 7200)
    assert sb.elapsed_s == pytest.approx(7200)
    assert sb.error == pytest.approx(0.25)
    # regulated score and valid FLOPS: their own maxima along the time line (best accuracy by t)
    acc_at = {3600: 0.60, 4500: 0.60, 5400: 0.75}
    assert sb.regulated_score == pytest.approx(max(-math.log(1 - acc_at[t]) * v for t, v in candidates.items()))
    assert sb.valid_flops == pytest.approx(max(v * (acc_at[t] / 0.763) ** 5 for t, v in candidates.items()))
    assert sb.efficiency_vs_measured == pytest.approx(candidates[best_t] / (2 * 5e12))
    # Rmax/Rpeak: two V100s of no named variant are rated at the fastest one's float16 figure, the
    # V100S's "tensor performance" of 130 TFLOPS (NVIDIA V100 datasheet)
    assert sb.datasheet_peak_flops == pytest.approx(2 * 130e12) and not sb.efficiency_unknown_reason
    assert sb.efficiency == pytest.approx(candidates[best_t] / (2 * 130e12))
    # every other rule holds; an official run also needs its regulated-score model audited (it is still training)
    assert not sb.valid and sb.audit_status == "not audited" and sb.audit_model_id == mid
    assert sb.invalid_reason == (f"the model behind the regulated score (model {mid}) is not audited; "
                                 f"node audits: worker {wid} (node-1): no node audit of its drawn model {mid}")

    # deadline: the background thread moves the run to stopping, then finished once the model ends
    clock.t = t0 + 3 * 3600 + 1
    wait_for(lambda: c.run_status().run.state == pb.RUN_STOPPING, what="stopping at the deadline")
    assert w.heartbeat(wid).run.state == pb.RUN_STOPPING
    clock.t += 10
    w.report_progress(wid, mid, 5, 10_000, 0, 2, fc.ops(10_000, 0))  # after the deadline: kept, not scored
    w.finish_model(wid, mid, "done", best_accuracy=0.75)
    wait_for(lambda: c.run_status().run.state == pb.RUN_FINISHED, what="finished")
    final = c.scoreboard()
    assert final.run.stop_reason == "deadline reached"
    # the tick came 1 s late, the run stopped at its deadline all the same
    assert final.run.stopped_at == final.run.deadline and final.elapsed_s == pytest.approx(3 * 3600)
    assert final.total_ops == pytest.approx(cumulative[3])
    # an auditor on the workers' hardware timed the model's steps far above what the worker claimed
    c.record_audit(mid, verdict="passed", architecture_ok=True, audited_accuracy=0.75, validation_images=50_000,
                   audited_images_per_second=1e6, auditor_hardware="Tesla V100")
    # and on its node, the model drawn for it timed there, the node's two V100s as registered
    assert list(c.list_audits().node_audit_model_ids) == [mid]
    node = NodeInventory([Accelerator("Tesla V100", 32 << 30, uuid=f"GPU-{i}") for i in range(2)], "Xeon", 16)
    c.record_audit(mid, verdict="no checkpoint", architecture_ok=False, node=node,
                   audited_images_per_second=1e6, auditor_hardware="Tesla V100")
    audited = c.scoreboard()
    assert audited.valid and audited.invalid_reason == "" and audited.audit_status == "passed"


def test_lost_worker_and_its_model_abandoned_with_progress_kept(master_server, small_graph):
    clock = FakeClock()
    h = master_server(clock=clock, heartbeat_interval_s=5.0)
    w, c = clients(h)
    wid = register(w)
    other = register(w, "node-2")
    c.start_run(600, profile="smoke")
    fc = count_flops(small_graph)
    mid = w.submit_model(wid, small_graph.to_json(), small_graph.hash(), 0, 1, HP).model_id
    w.report_progress(wid, mid, 1, 512, 0, 1, fc.ops(512, 0))
    clock.t += 10
    w.heartbeat(other)  # node-2 keeps heartbeating, node-1 goes silent
    clock.t += 4
    h.master.tick()
    assert c.list_models(state="abandoned").total == 0  # 14 s < 3 intervals
    clock.t += 2
    h.master.tick()  # node-1 silent 16 s > 15 s
    [m] = c.list_models(state="abandoned").models
    assert m.model_id == mid and m.images_trained == 512 and m.reason == "worker lost"
    assert c.run_status().workers_alive == 1
    with pytest.raises(ApiError) as e:
        w.report_progress(wid, mid, 2, 512, 0, 1, fc.ops(512, 0))
    assert code_of(e) == grpc.StatusCode.FAILED_PRECONDITION and "abandoned" in e.value.details
    assert c.scoreboard().total_ops == pytest.approx(fc.ops(512, 0))  # what it reported still counts
    # it comes back: told once that it was lost, then alive again
    assert w.heartbeat(wid).worker_state == pb.WORKER_LOST
    assert w.heartbeat(wid).worker_state == pb.WORKER_ALIVE
    assert c.run_status().workers_alive == 2


def _two_workers_beating(master_server) -> tuple:
    """A master whose background tick waits (a fake clock, heartbeat 5 s) and two workers that
    registered, then beat 2 s later: (handle, clock, worker client, their ids, the registration time)."""
    clock = FakeClock()
    h = master_server(clock=clock, heartbeat_interval_s=5.0, tick_s=3600.0)
    w, _ = clients(h)
    wid, other = register(w), register(w, "node-2")
    registered = clock.t
    clock.t += 2
    w.heartbeat(wid)
    w.heartbeat(other)
    return h, clock, w, wid, other, registered


def test_heartbeats_are_written_lazily_but_a_lost_worker_keeps_its_last_beat(master_server):
    h, clock, w, wid, other, registered = _two_workers_beating(master_server)
    h.master.tick(flush=False)  # the background loop: not due yet, nothing written
    assert h.store.get_worker(wid).last_heartbeat == registered
    h.master.tick()  # an explicit tick (and a stopping master) writes them
    assert h.store.get_worker(wid).last_heartbeat == registered + 2
    clock.t += 1
    w.heartbeat(wid)  # node-1's last beat, kept in memory only
    clock.t += 16
    w.heartbeat(other)
    h.master.tick(flush=False)  # node-1 silent 16 s > 3 intervals: lost, stored with its real last beat
    worker = h.store.get_worker(wid)
    assert worker.state == "lost" and worker.last_heartbeat == registered + 3
    h.master.tick()  # a later write must not make it alive again
    assert h.store.get_worker(wid).state == "lost"
    assert h.store.get_worker(other).state == "alive"


def test_a_lost_worker_back_is_written_at_once_and_a_loss_writes_only_the_lost_workers_beat(master_server):
    """A restarted master reads the stored state: a worker back from lost must not wait for the
    flush period to be stored alive. Marking one worker lost writes its own last beat, not the
    fleet's (that would be a full flush at every loss)."""
    clock = FakeClock()
    h = master_server(clock=clock, heartbeat_interval_s=5.0, tick_s=3600.0)
    w, c = clients(h)
    c.start_run(600, profile="smoke")
    wid, other = register(w), register(w, "node-2")
    w.heartbeat(wid)
    w.heartbeat(other)
    h.master.tick()  # written; the next periodic flush is 5 s (monotonic) away
    flushed = clock.t
    clock.t += 16
    w.heartbeat(other)
    h.master.tick(flush=False)  # node-1 silent 16 s: lost
    assert h.store.get_worker(wid).state == "lost"
    assert h.store.get_worker(other).last_heartbeat == flushed, "node-2's beat waits for its flush"
    assert w.heartbeat(wid).worker_state == pb.WORKER_LOST  # told once; it is back
    inventory = {wi.name: wi.state for wi in c.scoreboard().inventory}
    assert inventory["node-1"] == pb.WORKER_ALIVE, "the scoreboard's workers: the master's memory"
    h.master.tick(flush=False)
    back = h.store.get_worker(wid)
    assert back.state == "alive" and back.last_heartbeat == clock.t
    assert h.store.get_worker(other).last_heartbeat == flushed


def test_a_loss_the_database_refused_is_detected_again_at_the_next_tick(master_server, monkeypatch):
    """A failed write of a loss (the database away for a moment) must not leave the worker
    lost in memory only: its model would never be abandoned and its row would say alive."""
    clock = FakeClock()
    h = master_server(clock=clock, heartbeat_interval_s=5.0, tick_s=3600.0)
    w, _ = clients(h)
    wid, other = register(w), register(w, "node-2")
    clock.t += 1
    w.heartbeat(wid)
    last = clock.t
    clock.t += 16
    w.heartbeat(other)
    mark = h.store.mark_workers_lost

    def refused(ids, now):
        raise RuntimeError("database unavailable")

    monkeypatch.setattr(h.store, "mark_workers_lost", refused)
    with pytest.raises(RuntimeError, match="unavailable"):
        h.master.tick(flush=False)
    assert h.store.get_worker(wid).state == "alive"
    monkeypatch.setattr(h.store, "mark_workers_lost", mark)
    h.master.tick(flush=False)  # the next tick
    worker = h.store.get_worker(wid)
    assert worker.state == "lost" and worker.last_heartbeat == last


def test_a_large_fleets_heartbeats_are_written_less_often(master_server, monkeypatch):
    """The flush writes at most FLUSH_ROWS_PER_S rows a second: here 0.25, so two workers' beats
    wait 8 s, not the 5 s of a small fleet (at the real 500: 10,000 workers every 20 s)."""
    import time

    import master.core.heartbeats as heartbeats

    monkeypatch.setattr(heartbeats, "FLUSH_ROWS_PER_S", 0.25)
    h, clock, w, wid, other, registered = _two_workers_beating(master_server)
    h.master._flushed_at = time.monotonic() - 6  # past a small fleet's 5 s
    h.master.tick(flush=False)
    assert h.store.get_worker(wid).last_heartbeat == registered
    h.master._flushed_at = time.monotonic() - 9  # past 2 beats / 0.25 a second
    h.master.tick(flush=False)
    assert h.store.get_worker(wid).last_heartbeat == registered + 2
    assert h.store.get_worker(other).last_heartbeat == registered + 2


def test_restarted_worker_gets_its_id_back_and_its_model_is_abandoned(master_server, small_graph):
    h = master_server()
    w, c = clients(h)
    wid = register(w)
    c.start_run(600, profile="smoke")
    mid = w.submit_model(wid, small_graph.to_json(), small_graph.hash(), 0, 1, HP).model_id
    reg = w.register(name="node-1", host="node-1")
    assert reg.worker_id == wid and list(reg.abandoned_model_ids) == [mid] and reg.has_run


def test_stop_grace_abandons_models_of_workers_that_do_not_finish(master_server, small_graph):
    h = master_server(stop_grace_s=0.3)
    w, c = clients(h)
    wid = register(w)
    c.start_run(600, profile="smoke")
    mid = w.submit_model(wid, small_graph.to_json(), small_graph.hash(), 0, 1, HP).model_id
    assert c.stop_run().state == pb.RUN_STOPPING
    wait_for(lambda: c.run_status().run.state == pb.RUN_FINISHED, what="finished after the grace")
    assert c.list_models(state="abandoned").models[0].model_id == mid


def test_pending_until_enough_workers_and_abort(master_server):
    h = master_server()
    w, c = clients(h)
    run = c.start_run(600, profile="smoke", min_workers=2)
    assert run.state == pb.RUN_PENDING and run.started_at == 0
    register(w, "a")
    register(w, "b")
    wait_for(lambda: c.run_status().run.state == pb.RUN_RUNNING, what="running with 2 workers")
    aborted = c.stop_run(abort=True, reason="operator")
    assert aborted.state == pb.RUN_ABORTED and aborted.stop_reason == "operator"


def test_master_restart_continues_the_run(master_server, small_graph, tmp_path):
    db = f"sqlite:///{tmp_path / 'restart.db'}"
    h = master_server(db)
    w, c = clients(h)
    wid = register(w)
    run_id = c.start_run(600, profile="smoke").config.run_id
    fc = count_flops(small_graph)
    mid = w.submit_model(wid, small_graph.to_json(), small_graph.hash(), 0, 1, HP).model_id
    w.report_progress(wid, mid, 1, 100, 0, 1, fc.ops(100, 0))
    h.stop()
    h2 = master_server(db)
    w2, c2 = clients(h2)
    w2.set_credential(wid, w.credential(wid))  # the same worker, reconnecting: the new master knows its credential
    assert w2.heartbeat(wid).run.config.run_id == run_id
    ack = w2.report_progress(wid, mid, 1, 100, 0, 1, fc.ops(100, 0))
    assert ack.duplicate  # remembered across the restart
    w2.report_progress(wid, mid, 2, 100, 0, 1, fc.ops(100, 0))
    sb = c2.scoreboard()
    assert sb.run.state == pb.RUN_RUNNING and sb.total_ops == pytest.approx(fc.ops(200, 0))


# ---------------------------------------------------------------- errors


def test_tokens(master_server):
    h = master_server()
    w_bad = WorkerClient(h.address, "nope", retries=0)
    with pytest.raises(ApiError) as e:
        w_bad.heartbeat(1)
    assert code_of(e) == grpc.StatusCode.UNAUTHENTICATED
    # the worker token does not open the control service
    with pytest.raises(ApiError) as e:
        ControlClient(h.address, h.worker_token, retries=0).run_status()
    assert code_of(e) == grpc.StatusCode.UNAUTHENTICATED
    # no metadata at all, also on the streaming method
    channel = grpc.insecure_channel(h.address)
    stub = pb_grpc.WorkerServiceStub(channel)
    with pytest.raises(grpc.RpcError) as e:
        stub.Register(pb.RegisterRequest(name="x"), timeout=5)
    assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
    with pytest.raises(grpc.RpcError) as e:
        next(stub.Connect(iter([pb.WorkerMessage(progress=pb.ProgressReport())]), timeout=5))
    assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
    # health needs no token
    health = health_pb2_grpc.HealthStub(channel)
    for service in ("", "aiperf.v1.WorkerService", "aiperf.v1.ControlService"):
        assert health.Check(health_pb2.HealthCheckRequest(service=service), timeout=5).status == \
            health_pb2.HealthCheckResponse.SERVING
    channel.close()
    w, _ = clients(h)
    assert register(w) >= 1  # nothing was registered by the refused call
    assert len(h.store.list_workers()) == 1


def test_invalid_arguments_write_nothing(master_server, small_graph):
    h = master_server()
    w, c = clients(h)
    wid = register(w)
    other = register(w, "node-2")

    def status(fn, *args, **kwargs) -> grpc.StatusCode:
        with pytest.raises(ApiError) as e:
            fn(*args, **kwargs)
        assert e.value.details, "a status needs a message"
        return e.value.code

    I, N, F, P = (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND,
                  grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.PERMISSION_DENIED)
    js, hs = small_graph.to_json(), small_graph.hash()
    assert status(w.submit_model, wid, js, hs, 0, 1, HP) == F  # no run yet
    assert status(c.start_run, 1800, profile="official") == I  # official needs >= 1 h
    assert status(c.start_run, -5, profile="smoke") == I
    assert status(c.scoreboard) == N and status(c.run_status, 7) == N and status(c.stop_run) == F
    c.start_run(600, profile="smoke")
    assert status(c.start_run, 600, profile="smoke") == F  # one active run
    assert status(c.scoreboard, 999) == N
    assert status(w.heartbeat, 999) == N
    assert status(w.submit_model, wid, "{not json", hs, 0, 1, HP) == I
    assert status(w.submit_model, wid, '{"version": 99}', hs, 0, 1, HP) == I
    assert status(w.submit_model, wid, js, "0" * 64, 0, 1, HP) == I  # hash mismatch
    # raw messages: the typed client would refuse these before sending
    assert status(w.submit_model, wid, js, hs, 0, 1, pb.Hyperparameters(batch_size=0, kernel_size=3)) == I
    assert status(w.submit_model, wid, js, hs, 0, 1, pb.Hyperparameters(batch_size=8, kernel_size=4)) == I
    assert status(w.submit_model, wid, js, hs, 12345, 1, HP) == N  # unknown parent
    assert status(w.submit_model, 999, js, hs, 0, 1, HP) == N  # unknown worker
    assert c.list_models().total == 0

    fc = count_flops(small_graph)
    mid = w.submit_model(wid, js, hs, 0, 1, HP).model_id
    assert status(w.report_progress, wid, mid, 1, -1, 0, 1, 0) == I  # negative images
    assert status(w.report_progress, wid, mid, 1, 0, -5, 1, 0) == I
    assert status(w.report_progress, wid, mid, 0, 1, 0, 1, fc.ops(1, 0)) == I  # seq 0
    assert status(w.report_progress, wid, mid, 1, 1, 0, 1, fc.ops(1, 0), val_accuracy=1.5) == I
    assert status(w.report_progress, wid, 999, 1, 1, 0, 1, 0) == N  # unknown model
    assert status(w.report_progress, other, mid, 1, 1, 0, 1, fc.ops(1, 0)) == P  # another worker's model
    assert status(w.finish_model, other, mid, "done", 0.5) == P
    assert status(w.finish_model, wid, mid, "done", 1.5) == I
    w.report_progress(wid, mid, 1, 10, 0, 1, fc.ops(10, 0))
    assert status(w.report_progress, wid, mid, 2, -1, 0, 1, 0) == I
    assert c.scoreboard().reports == 1  # the valid report was kept, the invalid one refused
    assert status(w.send_resource_samples, wid, [ResourceSample(cpu_util=2.0)]) == I
    assert h.store.resource_samples() == []
    m = c.list_models().models[0]
    assert m.images_trained == 10 and m.state == pb.MODEL_TRAINING


def test_round_and_model_limits(master_server, small_graph):
    h = master_server()
    w, c = clients(h)
    wid = register(w)
    c.start_run(600, profile="smoke", max_models=1, max_rounds_per_worker=3)
    js, hs = small_graph.to_json(), small_graph.hash()
    with pytest.raises(ApiError) as e:
        w.submit_model(wid, js, hs, 0, 4, HP)
    assert code_of(e) == grpc.StatusCode.FAILED_PRECONDITION
    w.submit_model(wid, js, hs, 0, 1, HP)
    with pytest.raises(ApiError) as e:
        w.submit_model(wid, js, hs, 0, 2, HP)
    assert code_of(e) == grpc.StatusCode.FAILED_PRECONDITION and "limit of 1 models" in e.value.details


def test_metrics_endpoint(master_server, small_graph):
    h = master_server(metrics_port=0)
    w, c = clients(h)
    wid = register(w)
    c.start_run(600, profile="smoke")
    fc = count_flops(small_graph)
    mid = w.submit_model(wid, small_graph.to_json(), small_graph.hash(), 0, 1, HP).model_id
    for seq in (1, 2, 2):
        w.report_progress(wid, mid, seq, 100, 0, 1, fc.ops(100, 0))
    h.master.tick()
    text = urllib.request.urlopen(f"http://127.0.0.1:{h.metrics_port}/metrics", timeout=5).read().decode()
    assert "aiperf_progress_reports_total 2.0" in text
    assert "aiperf_progress_reports_duplicate_total 1.0" in text
    assert "aiperf_workers_alive 1.0" in text
    assert 'aiperf_models{state="training"} 1.0' in text
    flops_line = next(l for l in text.splitlines() if l.startswith("aiperf_current_flops "))
    assert float(flops_line.split()[1]) > 0
    run_id = c.scoreboard(0).run.config.run_id
    labels = f'{{profile="smoke",run_id="{run_id}"}}'
    ops = float(next(l for l in text.splitlines() if l.startswith(f"aiperf_run_operations{labels}")).split()[1])
    assert ops == fc.ops(200, 0)  # the two counted reports, not the retried one
    elapsed = float(next(l for l in text.splitlines() if l.startswith(f"aiperf_run_elapsed_seconds{labels}")).split()[1])
    run_flops = float(next(l for l in text.splitlines() if l.startswith(f"aiperf_run_flops{labels}")).split()[1])
    assert elapsed > 0 and run_flops > 0
    assert "process_resident_memory_bytes" in text and "python_info" in text


def test_generated_tokens_are_written_once(tmp_path):
    from master.rpc.tokens import load_tokens

    t1 = load_tokens(tmp_path, env={})
    assert set(t1.generated) == {"worker", "admin"} and t1.worker != t1.admin
    assert (tmp_path / "worker.token").stat().st_mode & 0o777 == 0o600
    t2 = load_tokens(tmp_path, env={})
    assert (t2.worker, t2.admin, t2.generated) == (t1.worker, t1.admin, {})
    t3 = load_tokens(tmp_path, env={"AIPERF_TOKEN": "w-env", "AIPERF_ADMIN_TOKEN": "a-env"})
    assert (t3.worker, t3.admin) == ("w-env", "a-env")


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl not installed")
def test_tls(master_server, tmp_path: Path):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
         "-days", "1", "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
        check=True, capture_output=True,
    )
    h = master_server(tls_cert=cert, tls_key=key)
    c = ControlClient(f"localhost:{h.port}", h.admin_token, root_certificates=cert.read_bytes(), retries=0)
    assert c.start_run(600, profile="smoke").state == pb.RUN_RUNNING
    plain = ControlClient(f"localhost:{h.port}", h.admin_token, retries=0, timeout_s=2)
    with pytest.raises(ApiError) as e:
        plain.run_status()
    assert code_of(e) == grpc.StatusCode.UNAVAILABLE


# ---------------------------------------------------------------- Connect stream


def test_connect_stream_carries_heartbeats_and_reports(master_server, small_graph, db_url):
    h = master_server(db_url)
    w, c = clients(h)
    wid = register(w)
    c.start_run(600, profile="smoke")
    fc = count_flops(small_graph)
    mid = w.submit_model(wid, small_graph.to_json(), small_graph.hash(), 0, 1, HP).model_id
    with w.connect() as s:
        hb = s.heartbeat(wid, mid)
        assert hb.has_run and hb.run.state == pb.RUN_RUNNING and hb.worker_state == pb.WORKER_ALIVE
        first = s.report_progress(wid, mid, 1, 1000, 0, 1, fc.ops(1000, 0))
        assert not first.duplicate and first.master_flops == fc.ops(1000, 0)
        assert s.report_progress(wid, mid, 1, 1000, 0, 1, fc.ops(1000, 0)).duplicate  # a resent report
        # refused messages answer with the status of the refusal and leave the stream open
        with pytest.raises(ApiError) as e:
            s.report_progress(wid, mid, 2, -5, 0, 1, 0)
        assert code_of(e) == grpc.StatusCode.INVALID_ARGUMENT and "progress.images_trained: must be in 0.." in e.value.details
        with pytest.raises(ApiError) as e:
            s.heartbeat(wid + 1000)
        assert code_of(e) == grpc.StatusCode.NOT_FOUND
        other = register(w, "node-2")
        with pytest.raises(ApiError) as e:
            s.report_progress(other, mid, 2, 10, 0, 1, fc.ops(10, 0))
        assert code_of(e) == grpc.StatusCode.PERMISSION_DENIED
        ack = s.report_progress(wid, mid, 2, 500, 100, 1, fc.ops(500, 100), val_accuracy=0.3)
        assert not ack.duplicate and ack.model_state == pb.MODEL_TRAINING
    # another stream (the client's own) sees what this one recorded, and nothing it refused
    assert w.report_progress(wid, mid, 2, 500, 100, 1, fc.ops(500, 100)).duplicate
    sb = c.scoreboard()
    assert sb.reports == 2 and sb.images_trained == 1500 and sb.total_ops == pytest.approx(fc.ops(1500, 100))


def test_connect_needs_the_worker_token(master_server):
    h = master_server()
    for token in ("nope", h.admin_token):
        with WorkerClient(h.address, token, retries=0).connect() as s, pytest.raises(ApiError) as e:
            s.heartbeat(1)
        assert code_of(e) == grpc.StatusCode.UNAUTHENTICATED


def test_connect_stream_survives_a_master_restart(master_server, small_graph, tmp_path):
    db = f"sqlite:///{tmp_path / 'restart.db'}"
    h = master_server(db)
    w, c = clients(h)
    wid = register(w)
    c.start_run(600, profile="smoke")
    fc = count_flops(small_graph)
    mid = w.submit_model(wid, small_graph.to_json(), small_graph.hash(), 0, 1, HP).model_id
    port = h.port
    sender = WorkerClient(h.address, h.worker_token, retries=20)
    sender.set_credential(wid, w.credential(wid))
    s = sender.connect()
    s.report_progress(wid, mid, 1, 100, 0, 1, fc.ops(100, 0))
    h.stop()
    h2 = master_server(db, port=port)
    # the broken stream fails the next call over to a new stream on the new master
    assert s.report_progress(wid, mid, 2, 100, 0, 1, fc.ops(100, 0)).master_flops == fc.ops(100, 0)
    assert s.heartbeat(wid).worker_state == pb.WORKER_ALIVE
    s.close()
    assert ControlClient(h2.address, h2.admin_token).scoreboard().images_trained == 200


def test_efficiency_uses_the_gemm_peak_of_the_runs_compute_type(master_server, small_graph):
    clock = FakeClock()
    t0 = clock.t
    h = master_server(clock=clock, heartbeat_interval_s=10_000.0)
    w, c = clients(h)
    by_dtype = {"float32": 1e10, "float16": 4e10, "bfloat16": 3e10}
    a = w.register(name="a", host="a", accelerators=[Accelerator("H100", 80 << 30, 0.0, by_dtype)] * 2).worker_id
    # an older worker that knows only one figure: used for any precision
    b = w.register(name="b", host="b", accelerators=[Accelerator("V100", 32 << 30, 2e10)]).worker_id
    c.start_run(600, profile="smoke", precision="mixed_fp16")
    fc = count_flops(small_graph)
    mids = {wid: w.submit_model(wid, small_graph.to_json(), small_graph.hash(), 0, 1, HP).model_id for wid in (a, b)}
    clock.t = t0 + 150  # both models trained for 150 s: within their workers' accepted peaks
    for wid, mid in mids.items():
        w.report_progress(wid, mid, 1, 5000, 500, 1, fc.ops(5000, 500), val_accuracy=0.5)
    clock.t = t0 + 300
    sb = c.scoreboard()
    peak = 2 * 4e10 + 2e10  # float16 for the mixed_fp16 run
    assert sb.score > 0 and sb.peak_flops == pytest.approx(peak)
    assert sb.efficiency_vs_measured == pytest.approx(sb.score / peak)
    # the datasheet's float16 figures: H100 SXM 1,979 TFLOPS with sparsity (989.5 dense), V100S 130 TFLOPS
    assert sb.datasheet_peak_flops == pytest.approx(2 * 989.5e12 + 130e12)
    assert sb.efficiency == pytest.approx(sb.score / (2 * 989.5e12 + 130e12))
    inv = {wi.name: wi for wi in c.scoreboard().inventory}
    assert dict(inv["a"].accelerators[0].peak_flops_by_dtype) == by_dtype
    assert sb.peak_verdict == "checked"  # every rate is within its datasheet (H100 SXM, V100)


def test_claimed_peaks_are_checked_against_the_datasheet(master_server, small_graph):
    """A peak of 1e18 is refused by the request's bounds; 5e15 for one H100 is
    capped at the datasheet's dense figure + 5%
    (NVIDIA H100 datasheet: FP16 1,979 TFLOPS with sparsity, 989.5 dense); a model
    the table does not know is taken as measured and labelled "unverified peak"."""
    clock = FakeClock()
    t0 = clock.t
    h = master_server(clock=clock, heartbeat_interval_s=10_000.0)
    w, c = clients(h)
    with pytest.raises(ApiError, match="peak_flops_by_dtype.*got 1e\\+18"):
        w.register(name="liar", host="liar", accelerators=[Accelerator("NVIDIA H100 80GB HBM3", 80 << 30, 0.0,
                                                                       {"float16": 1e18})])
    liar = w.register(name="liar", host="liar",
                      accelerators=[Accelerator("NVIDIA H100 80GB HBM3", 80 << 30, 0.0, {"float16": 5e15})]).worker_id
    c.start_run(600, profile="smoke", precision="mixed_fp16")
    fc = count_flops(small_graph)
    mid = w.submit_model(liar, small_graph.to_json(), small_graph.hash(), 0, 1, HP).model_id
    clock.t = t0 + 150
    w.report_progress(liar, mid, 1, 5000, 500, 1, fc.ops(5000, 500), val_accuracy=0.5)
    clock.t = t0 + 300
    sb = c.scoreboard()
    capped = 989.5e12 * 1.05
    assert sb.peak_flops == pytest.approx(capped) and sb.peak_verdict == "capped"
    assert sb.efficiency_vs_measured == pytest.approx(sb.score / capped)
    assert sb.efficiency == pytest.approx(sb.score / 989.5e12)  # the claim does not move the datasheet
    # the claim itself stays on record, next to what was accepted
    assert dict(c.scoreboard().inventory[0].accelerators[0].peak_flops_by_dtype) == {"float16": 5e15}

    other = w.register(name="odd", host="odd",
                       accelerators=[Accelerator("Acme Tensor 9000", 1 << 30, 0.0, {"float16": 5e14})]).worker_id
    mid = w.submit_model(other, small_graph.to_json(), small_graph.hash(), 0, 1, HP).model_id
    clock.t = t0 + 400
    w.report_progress(other, mid, 1, 5000, 500, 1, fc.ops(5000, 500), val_accuracy=0.5)
    sb = c.scoreboard()
    assert sb.peak_flops == pytest.approx(capped + 5e14) and sb.peak_verdict == "unverified peak"
    # an accelerator the table does not know: no datasheet efficiency for the run, and why
    assert sb.efficiency == 0.0 and sb.datasheet_peak_flops == 0.0 and sb.efficiency_vs_measured > 0
    assert sb.efficiency_unknown_reason == "no datasheet entry for Acme Tensor 9000"


@pytest.mark.parametrize("by_dtype, message", [
    ({"float64": 1e10}, "unknown compute type 'float64'"),
    ({"float16": -1.0}, "accelerators[0].peak_flops_by_dtype['float16']: must be a finite number in [0, "),
    ({"float16": math.inf}, "accelerators[0].peak_flops_by_dtype['float16']: must be a finite number in [0, "),
])
def test_bad_gemm_peaks_are_refused(master_server, by_dtype, message):
    h = master_server()
    w, _ = clients(h)
    with pytest.raises(ApiError) as e:
        w.register(name="x", host="x", accelerators=[Accelerator("H100", 80 << 30, 0.0, by_dtype)])
    assert code_of(e) == grpc.StatusCode.INVALID_ARGUMENT and message in e.value.details


def test_timeline_of_a_run(master_server, small_graph):
    clock = FakeClock()
    t0 = clock.t
    h = master_server(clock=clock, heartbeat_interval_s=10_000.0)
    w, c = clients(h)
    wid = register(w)
    c.start_run(600, profile="smoke")
    fc = count_flops(small_graph)
    mid = w.submit_model(wid, small_graph.to_json(), small_graph.hash(), 0, 1, HP).model_id
    for seq, (dt, trained, acc) in enumerate([(30, 1000, None), (60, 1000, 0.4), (90, 2000, 0.55)], start=1):
        clock.t = t0 + dt
        w.report_progress(wid, mid, seq, trained, 0, 1, fc.ops(trained, 0), val_accuracy=acc)
    w.send_resource_samples(wid, [ResourceSample(age_s=10, accelerator_index=0, accelerator_util=0.8,
                                                 accelerator_memory_used=4 << 30),
                                  ResourceSample(age_s=10, cpu_util=0.5, memory_used=8 << 30)])
    clock.t = t0 + 100
    tl = c.timeline(buckets=10)
    assert tl.run.state == pb.RUN_RUNNING
    assert [(p.elapsed_s, p.ops) for p in tl.points] == [(30, fc.ops(1000, 0)), (60, fc.ops(2000, 0)),
                                                          (90, fc.ops(4000, 0))]
    assert tl.points[2].flops == pytest.approx(fc.ops(4000, 0) / 90)
    assert [p.has_accuracy for p in tl.points] == [False, True, True]
    assert tl.points[2].best_accuracy == pytest.approx(0.55)
    (r,) = tl.resources  # both samples at t0 + 80: one bucket of [80, 90)
    assert r.elapsed_s == pytest.approx(90) and r.accelerator_util == pytest.approx(0.8)
    assert r.cpu_util == pytest.approx(0.5) and r.memory_used == 8 << 30
    assert len(c.timeline(max_points=2).points) == 2
    with pytest.raises(ApiError) as e:
        c.timeline(run_id=999)
    assert code_of(e) == grpc.StatusCode.NOT_FOUND
    with pytest.raises(ApiError) as e:
        c.timeline(buckets=10**6)
    assert code_of(e) == grpc.StatusCode.INVALID_ARGUMENT


# ---------------------------------------------------------------- the Master without gRPC


def test_the_master_takes_and_returns_plain_types(small_graph, tmp_path):
    import asyncio

    from aiperf.run_spec import RunSpec
    from master.core.master import Master
    from master.core.requests import ModelSubmission, ProgressReport
    from master.store.errors import PermissionDenied
    from master.store.records import WorkerInput
    from master.store.sql.sql_store import SqlStore

    clock = FakeClock()
    store = SqlStore(f"sqlite:///{tmp_path / 'plain.db'}")
    m = Master(store, clock=clock)
    try:
        node = WorkerInput(name="", host="node-1", accelerators=[{"model": "V100", "peak_flops": 1e10}], cpus=4,
                           memory_bytes=1, software={})
        reg = m.register(node)
        wid, key = reg.worker.id, reg.credential
        assert key not in repr(reg)  # the secret stays out of log lines
        other_reg = m.register(WorkerInput("node-2", "", [], 1, 1, {}))
        other = other_reg.worker
        assert other.host == "node-2"  # a missing name or host defaults to the other
        run = m.start_run(RunSpec(duration_s=600))
        model = m.submit_model(ModelSubmission(wid, 0, small_graph.to_json(), small_graph.hash(), 0, 1, 32, 3),
                               credential=key)
    finally:
        m.close()
    # a fresh Master (empty FLOP cache) counts with the FLOPs stored with the model
    m = Master(store, clock=clock)
    try:
        clock.t += 30
        ack = asyncio.run(m.report_progress(ProgressReport(wid, model.id, 1, 1, 1000, 0, None, 0), credential=key))
        assert ack.master_flops == 1000 * model.flops_per_train_image and ack.flops_mismatch
        with pytest.raises(PermissionDenied, match=f"model {model.id} belongs to worker {wid}"):
            # the store checks whose model it is
            asyncio.run(m.report_progress(ProgressReport(other.id, model.id, 2, 1, 10, 0, None, 0),
                                          credential=other_reg.credential))
        with pytest.raises(PermissionDenied, match=f"worker {other.id}: the credential is not"):
            # a fresh Master knows the credentials (from the store) and checks them first
            asyncio.run(m.report_progress(ProgressReport(other.id, model.id, 2, 1, 10, 0, None, 0), credential=key))
        sb = m.scoreboard(0)
        assert sb.run.id == run.id and sb.result.total_ops == 1000 * model.flops_per_train_image
        assert sb.accelerators == 1 and sb.workers_alive == 1 and sb.model_counts == {"training": 1}
        assert sb.peak_flops == pytest.approx(1e10) and sb.best_model_id is None
    finally:
        m.close()
        store.close()


def test_reports_above_the_accepted_peak_are_refused_and_counted(master_server, small_graph):
    """A worker's reports are bounded by its accepted peak (the run's compute type,
    capped at the datasheet): a report over it is FAILED_PRECONDITION naming the
    worker and the rate, counted on the scoreboard, and the score never exceeds
    the sum of accepted peaks."""
    clock = FakeClock()
    t0 = clock.t
    h = master_server(clock=clock, heartbeat_interval_s=10_000.0)
    w, c = clients(h)
    peak = 1e12  # float16, well under an H100's datasheet: checked, accepted as measured
    wid = w.register(name="n", host="n", accelerators=[Accelerator("NVIDIA H100 80GB HBM3", 80 << 30, 0.0,
                                                                   {"float16": peak})]).worker_id
    c.start_run(600, profile="smoke", precision="mixed_fp16")
    fc = count_flops(small_graph)
    mid = w.submit_model(wid, small_graph.to_json(), small_graph.hash(), 0, 1, HP).model_id
    clock.t = t0 + 12
    fits = int(peak * 12 / fc.train)  # what the peak allows in 12 s
    too_many = int(peak * (12 + 5) / fc.train) + 1  # beyond the peak and the 5 s clock slack
    with pytest.raises(ApiError) as excinfo:
        w.report_progress(wid, mid, 1, too_many, 0, 1, fc.ops(too_many, 0))
    assert excinfo.value.code == grpc.StatusCode.FAILED_PRECONDITION
    assert f"worker {wid} claims " in excinfo.value.details and "over 12.0 s, above its accepted peak 1e+12 ops/s" \
        in excinfo.value.details
    w.report_progress(wid, mid, 2, fits, 0, 1, fc.ops(fits, 0), val_accuracy=0.5)
    clock.t += 1
    for seq in range(3, 8):  # a flood of reports one second later, each claiming 8 s of peak work
        with pytest.raises(ApiError, match="above its accepted peak"):
            w.report_progress(wid, mid, seq, int(peak * 8 / fc.train), 0, 1, fc.ops(int(peak * 8 / fc.train), 0))
    clock.t = t0 + 300
    sb = c.scoreboard()
    assert sb.implausible_reports == 6 and sb.peak_flops == pytest.approx(peak)
    assert 0 < sb.flops <= sb.peak_flops and sb.score <= sb.peak_flops


def test_a_graph_must_fit_the_runs_profile(master_server, small_graph):
    """The smoke profile trains 32x32x3 images of 10 classes with kernels 3, 5, 7
    (aiperf/profiles.py); a graph or kernel outside it is INVALID_ARGUMENT naming
    the mismatch, before anything is recorded."""
    from aiperf.resnet import resnet50

    h = master_server()
    w, c = clients(h)
    wid = register(w)
    c.start_run(600, profile="smoke")
    big = resnet50(input_size=512, channels=3, classes=10, width=0.25)
    wrong_classes = resnet50(input_size=32, channels=3, classes=1000, width=0.25)
    huge = resnet50(input_size=32, channels=3, classes=10, width=2.0)  # ~94M parameters at kernel 3
    cases = [
        (big, 3, "graph input 512x512x3 with 10 classes does not match the smoke profile's 32x32x3 with 10 classes"),
        (wrong_classes, 3, "graph input 32x32x3 with 1000 classes does not match"),
        (huge, 3, "over the limit max_params=60000000"),
        (small_graph, 9, "kernel_size 9 is not one of the smoke profile's 3, 5, 7"),
    ]
    for graph, k, message in cases:
        with pytest.raises(ApiError) as excinfo:
            w.submit_model(wid, graph.to_json(), graph.hash(), 0, 1, Hyperparameters(32, k))
        assert excinfo.value.code == grpc.StatusCode.INVALID_ARGUMENT and message in excinfo.value.details
    assert c.list_models().total == 0
    fits = w.submit_model(wid, small_graph.to_json(), small_graph.hash(), 0, 1, Hyperparameters(32, 7))
    assert fits.model_id > 0
