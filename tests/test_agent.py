"""The worker agent's delivery of results: ordered, retried through outages, never stuck."""

from __future__ import annotations

import threading

import grpc
import pytest
import tenacity
from hypothesis import given, settings
from hypothesis import strategies as st

from aiperf.api.client import ApiError
from aiperf.states import ModelState, WorkerState
from worker.agent import Outbox, call_until_done, resource_samples
from worker.monitor import AcceleratorSample, ResourceSample


def test_outbox_retries_transient_errors_in_order(monkeypatch):
    monkeypatch.setattr("worker.outbox.RETRY_WAIT", tenacity.wait_none())
    sent: list[int] = []
    failures = {"left": 3}

    def call(n: int):
        def send() -> None:
            if n == 1 and failures["left"]:
                failures["left"] -= 1
                raise ApiError(grpc.StatusCode.UNAVAILABLE, "master restarting")
            sent.append(n)
        return send

    box = Outbox()
    for n in range(1, 5):
        box.put(f"report {n}", call(n))
    assert box.flush(10)
    box.close()
    assert sent == [1, 2, 3, 4], "the failed report is retried before the next one is sent"
    assert box.dropped == []


def test_call_until_done_retries_transient_errors_only_while_not_stopping(monkeypatch):
    monkeypatch.setattr("worker.outbox.RETRY_WAIT", tenacity.wait_none())
    stopping = threading.Event()
    errors = [ApiError(grpc.StatusCode.UNAVAILABLE, "down"), ApiError(grpc.StatusCode.DEADLINE_EXCEEDED, "slow")]
    retries: list[str] = []

    def flaky() -> str:
        if errors:
            raise errors.pop(0)
        return "registered"

    assert call_until_done(flaky, stopping, lambda exc, delay: retries.append(exc.code.name)) == "registered"
    assert retries == ["UNAVAILABLE", "DEADLINE_EXCEEDED"]

    def refused() -> None:
        raise ApiError(grpc.StatusCode.PERMISSION_DENIED, "bad token")

    with pytest.raises(ApiError, match="bad token"):
        call_until_done(refused, stopping, lambda exc, delay: retries.append("never"))

    def down() -> None:
        raise ApiError(grpc.StatusCode.UNAVAILABLE, "still down")

    stopping.set()
    with pytest.raises(ApiError, match="still down"):
        call_until_done(down, stopping, lambda exc, delay: retries.append("never"))
    assert "never" not in retries


def test_outbox_drops_permanent_errors_and_bugs_but_keeps_going():
    sent = []

    def refused() -> None:
        raise ApiError(grpc.StatusCode.FAILED_PRECONDITION, "model 3 was abandoned")

    def broken() -> None:
        raise TypeError("bad call")

    box = Outbox()
    box.put("refused", refused)
    box.put("broken", broken)
    box.put("fine", lambda: sent.append("fine"))
    assert box.flush(10)
    box.close()
    assert sent == ["fine"]
    assert [what for what, _ in box.dropped] == ["refused", "broken"]
    assert "abandoned" in box.dropped[0][1]


def test_outbox_close_waits_for_pending_calls():
    release = threading.Event()
    sent = []

    def slow() -> None:
        release.wait(5)
        sent.append("slow")

    box = Outbox()
    box.put("slow", slow)
    threading.Timer(0.2, release.set).start()
    box.close(timeout_s=10)
    assert sent == ["slow"]


def test_resource_samples_map_percentages_to_fractions():
    sample = ResourceSample(time=0.0, cpu_percent=50.0, memory_used_bytes=4 << 30,
                            memory_total_bytes=16 << 30, process_rss_bytes=1 << 30,
                            accelerators=(AcceleratorSample(0, "GPU", 75.0, 2 << 30, 80 << 30),))
    host, gpu = resource_samples(sample)
    assert host.accelerator_index == -1 and host.cpu_util == 0.5 and host.memory_used == 4 << 30
    assert gpu.accelerator_index == 0 and gpu.accelerator_util == 0.75
    assert gpu.accelerator_memory_used == 2 << 30
    assert host.age_s > 0


def test_a_run_closing_just_before_a_submission_is_a_normal_end_not_a_crash(master_server, small_graph):
    # The run stops between the agent's last heartbeat and its next submission:
    # the master refuses the model (FAILED_PRECONDITION) and the agent must treat
    # that as the end of its work on the run (a worker exiting with an error here
    # was a real failure at the end of timed runs).
    from aiperf.api.client import ControlClient
    from aiperf.hyperparameters import Hyperparameters
    from aiperf.search import Candidate
    from worker.agent import Agent, AgentConfig, _RunClosed
    from worker.lookahead import Basis, LookAhead, PlannedRound

    h = master_server(stop_grace_s=600.0)  # the run stays STOPPING
    with ControlClient(h.address, h.admin_token) as control:
        control.start_run(600, profile="smoke", seed=1)
        agent = Agent(AgentConfig(master=h.address, token=h.worker_token, name="racer"))
        try:
            agent._register()
            run = agent._wait_for_running_run()
            assert run is not None
            ctx = agent._context(run)
            control.stop_run(reason="deadline")

            released = []

            class Prepared:
                compiled = object()
                failure = ""

                def release(self) -> None:
                    released.append(True)

            def plan(basis: Basis) -> PlannedRound:
                return PlannedRound(basis.key, Candidate(graph=small_graph, parent_model_id=None), 0,
                                    Hyperparameters(32, 3), "default", Prepared())

            box = Outbox()
            try:
                # stopping, or already finished: the master's tick ends a stopping run with no
                # open model at once (every 1.25 s here), which may come before the submission
                with LookAhead(plan) as ahead, pytest.raises(_RunClosed, match="is (stopping|finished)"):
                    agent._round(ctx, box, ahead, Basis.of(ctx.run_id, 1, [], {}))
                assert ahead.misses == 1 and ahead.hits == 0, "nothing was prepared ahead: no model was created"
                assert released == [True], "the refused round's model is dropped"
            finally:
                box.close()
            assert control.list_models().total == 0, "nothing was created in the closed run"
        finally:
            agent.client.close()


# ---------------------------------------------------------------- identity: the credential file


def test_the_credential_file_is_private_and_keyed_by_master_and_name(tmp_path, caplog):
    import json
    import os

    from worker.credentials import MAX_FILE_BYTES, CredentialFile

    state = tmp_path / "state"
    kept = CredentialFile(state, "master:50051", "node-1")
    assert kept.load() == ""  # nothing kept yet
    kept.save(7, "s3cret")
    assert kept.path.parent == state and (state.stat().st_mode & 0o777) == 0o700
    assert (kept.path.stat().st_mode & 0o777) == 0o600
    assert json.loads(kept.path.read_text()) == {"master": "master:50051", "name": "node-1", "worker_id": 7,
                                                 "credential": "s3cret"}
    assert CredentialFile(state, "master:50051", "node-1").load() == "s3cret"
    kept.save(7, "rotated")  # replaced whole, still private
    assert kept.load() == "rotated" and (kept.path.stat().st_mode & 0o777) == 0o600
    assert [p.name for p in state.iterdir()] == [kept.path.name], "no temporary file left behind"
    # another master or another name: another file, nothing to present
    assert CredentialFile(state, "other:50051", "node-1").load() == ""
    assert CredentialFile(state, "master:50051", "node-2").load() == ""
    # a file that is not this worker's, or not a credential file at all, is ignored (and logged)
    other = CredentialFile(state, "master:50051", "node-3")
    for content in (kept.path.read_text(), "{not json", "[1, 2]", '{"master": "master:50051", "name": "node-3", '
                    '"credential": 5}', "x" * (MAX_FILE_BYTES + 1)):
        other.path.write_text(content)
        assert other.load() == "", content[:40]
    # readable by others: still used, with a warning
    os.chmod(kept.path, 0o644)
    with caplog.at_level("WARNING", logger="worker.state_file"):
        assert kept.load() == "rotated"
    assert "credential_file_open_to_others" in caplog.text


def test_the_agent_keeps_its_credential_and_gets_its_name_back(master_server, tmp_path, monkeypatch, caplog):
    import dataclasses
    import json
    import time

    from worker.agent import Agent, AgentConfig

    class Clock:
        t = 1_000_000.0

        def __call__(self) -> float:
            return self.t

    clock = Clock()
    h = master_server(clock=clock, heartbeat_interval_s=5.0, tick_s=3600.0)
    state = tmp_path / "state"
    cfg = AgentConfig(master=h.address, token=h.worker_token, name="keeper", state_dir=state, measure_peak=False)
    agents = [Agent(cfg)]
    try:
        first = agents[0]
        first._register()
        [path] = state.glob("credential-*.json")
        assert (path.stat().st_mode & 0o777) == 0o600
        kept = json.loads(path.read_text())
        assert kept["credential"] == first.client.credential(first.worker_id) and kept["worker_id"] == first.worker_id

        # restarted (a new process, the same state directory; silent for a heartbeat interval) while the
        # old one still counts as alive: its id back, and a new credential that replaced the kept one
        clock.t += 5.0
        agents.append(second := Agent(cfg))
        second._register()
        rotated = json.loads(path.read_text())
        assert second.worker_id == first.worker_id and rotated["worker_id"] == kept["worker_id"]
        assert rotated["credential"] == second.client.credential(second.worker_id) != kept["credential"]
        assert [p.name for p in state.iterdir()] == [path.name], "only the latest credential is kept"

        # a worker whose state directory was lost waits until the master marks the old one lost
        monkeypatch.setattr("worker.outbox.RETRY_WAIT", tenacity.wait_fixed(0.05))
        agents.append(third := Agent(dataclasses.replace(cfg, state_dir=tmp_path / "fresh")))
        waiting = threading.Thread(target=third._register)
        with caplog.at_level("WARNING", logger="worker.agent"):
            waiting.start()
            time.sleep(1.0)
            assert waiting.is_alive() and third.worker_id == 0
            assert "code=ALREADY_EXISTS" in caplog.text and "in use by a live worker" in caplog.text
            clock.t += 16  # 3 heartbeat intervals of silence
            h.master.tick()
            waiting.join(10)
        assert not waiting.is_alive() and third.worker_id == first.worker_id
        [fresh] = (tmp_path / "fresh").glob("credential-*.json")
        assert json.loads(fresh.read_text())["credential"] not in ("", kept["credential"])

        # the old process's credential is void now: its heartbeat loop sees PERMISSION_DENIED and tries
        # to register again, which waits (the name is held by the live third worker) until stopped
        first.heartbeat_interval_s = 0.05
        with caplog.at_level("WARNING", logger="worker.agent"):
            beat = threading.Thread(target=first._heartbeat_loop)
            beat.start()
            deadline = time.monotonic() + 10
            while not first._lost.is_set() and time.monotonic() < deadline:
                time.sleep(0.05)
            first.stop()
            beat.join(10)
        assert first._lost.is_set() and not beat.is_alive()
        assert "event=reregister code=PERMISSION_DENIED" in caplog.text
        assert third.client.heartbeat(third.worker_id).worker_state == WorkerState.ALIVE
    finally:
        for agent in agents:
            agent.client.close()


# ---------------------------------------------------------------- rounds, hyperparameters


def _agent(h, name: str, state_dir=None):
    from worker.agent import Agent, AgentConfig

    return Agent(AgentConfig(master=h.address, token=h.worker_token, name=name, state_dir=state_dir,
                             measure_peak=False))


def _close(*agents) -> None:
    for agent in agents:
        agent.client.close()


def test_the_round_counter_counts_the_models_the_master_created(master_server, small_graph, tmp_path, monkeypatch):
    from aiperf.api.client import ControlClient
    from aiperf.hyperparameters import Hyperparameters
    from aiperf.morphism import deeper_at

    h = master_server()
    other_graph = deeper_at(small_graph, "conv2_block1_out")
    hyper = Hyperparameters(32, 3)
    with ControlClient(h.address, h.admin_token) as control:
        control.start_run(600, profile="smoke", seed=1)
    agent = _agent(h, "counter", tmp_path / "state")
    agents = [agent]
    try:
        agent._register()
        assert agent._snapshot() == [] and agent._next_round() == 1
        first = agent._submit(small_graph, 0, 1, hyper)
        assert first and len(agent._snapshot()) == 1 and agent._next_round() == 2
        # a submission the master never received created nothing: round 2 is still to come
        with monkeypatch.context() as m:
            def down(*args, **kwargs):
                raise ApiError(grpc.StatusCode.UNAVAILABLE, "master restarting")

            m.setattr(agent.client, "submit_model", down)
            m.setattr("worker.agent.time.sleep", lambda s: None)
            assert agent._submit(other_graph, first, 2, hyper) is None
        agent._snapshot()
        assert agent._next_round() == 2
        second = agent._submit(other_graph, first, 2, hyper)
        # another worker's models are not this worker's rounds
        stranger = _agent(h, "stranger")
        agents.append(stranger)
        stranger._register()
        assert stranger._submit(deeper_at(small_graph, "conv3_block1_out"), 0, 1, hyper)
        agent._snapshot()
        assert agent._next_round() == 3
        # restarted: the master abandons the earlier life's open models, which still count
        again = _agent(h, "counter", tmp_path / "state")
        agents.append(again)
        again._register()
        assert again.worker_id == agent.worker_id
        again._snapshot()
        assert again._next_round() == 3
        assert {again._history[first].state, again._history[second].state} == {ModelState.ABANDONED}
    finally:
        _close(*agents)


def test_warmup_reuses_the_parents_hyperparameters_and_failures_reach_tpe(master_server, small_graph):
    import dataclasses

    from aiperf.api.client import ControlClient
    from aiperf.hpo import Tuner
    from aiperf.hyperparameters import Hyperparameters
    from aiperf.morphism import deeper_at
    from worker.agent import Outbox
    from worker.round_choice import tpe_observations
    from worker.trainer import TrainResult

    h = master_server()
    with ControlClient(h.address, h.admin_token) as control:
        control.start_run(600, profile="smoke", seed=1, warmup_rounds=2)
    agent = _agent(h, "tuner")
    try:
        agent._register()
        run = agent._wait_for_running_run()
        ctx = agent._context(run)
        graphs = [small_graph] + [deeper_at(small_graph, r) for r in
                                  ("conv2_block1_out", "conv2_block2_out", "conv3_block1_out", "conv3_block2_out")]
        ids = [agent._submit(g, 0, n + 1, Hyperparameters(b, k)) for n, (g, (b, k)) in
               enumerate(zip(graphs, [(64, 5), (128, 7), (16, 3), (32, 3), (32, 5)]))]
        result = TrainResult("done", (0.5, 0.6), 2, 100, 10, 1, 0.6, 0.65)
        box = Outbox()
        agent._finish(box, ids[0], 1, result)  # done: its accuracy
        agent._finish(box, ids[1], 2, dataclasses.replace(  # failed on its own: a failure for TPE
            result, state="failed", val_accuracies=(), best_val_accuracy=None, predicted_accuracy=None,
            reason="out of memory at batch size 128 per accelerator"))
        agent._finish(box, ids[2], 3, dataclasses.replace(  # cut by a stop: says nothing
            result, state="stopped", val_accuracies=(), best_val_accuracy=None, predicted_accuracy=None,
            reason="stop requested"))
        box.close()  # ids[3] is still training; ids[4] too
        agent._snapshot()
        cut = agent._history[ids[2]]  # "cut", not "failed", wherever the model is shown
        assert cut.state == ModelState.CUT and cut.reason == "stop requested"

        obs = tpe_observations(agent._history.values())
        assert obs == [(Hyperparameters(64, 5), 0.65), (Hyperparameters(128, 7), 0.0)]
        tuner = Tuner(ctx.profile, obs)
        assert (Hyperparameters(128, 7), 1e-6) in tuner.observations  # NNI drops a plain 0

        # warm-up: the parent's hyperparameters (a done parent), else the defaults
        assert agent._hyperparameters(ctx, 1, ids[0], agent._history) == (Hyperparameters(64, 5), "parent")
        assert agent._hyperparameters(ctx, 2, ids[1], agent._history) == (ctx.profile.default_hyperparameters(), "default")
        assert agent._hyperparameters(ctx, 2, 0, agent._history) == (ctx.profile.default_hyperparameters(), "default")
        no_inherit = dataclasses.replace(ctx, profile=dataclasses.replace(ctx.profile, warmup_from_parent=False))
        assert agent._hyperparameters(no_inherit, 1, ids[0], agent._history)[1] == "default"
        # after warm-up: TPE on the same observations, the same proposal for the same seed
        hyper, source = agent._hyperparameters(ctx, 3, ids[0], agent._history)
        assert source == "tpe" and hyper in {Hyperparameters(b, k) for b in ctx.profile.batch_sizes
                                             for k in ctx.profile.kernel_sizes}
        assert agent._hyperparameters(ctx, 3, ids[0], agent._history) == (hyper, "tpe")
    finally:
        _close(agent)


def test_a_deterministic_run_turns_tensorflow_op_determinism_on_and_back_off():
    from tensorflow.python.framework.config import is_op_determinism_enabled

    from worker.backend import set_determinism

    try:
        set_determinism(True)
        assert is_op_determinism_enabled()
        set_determinism(False)
        assert not is_op_determinism_enabled()
    finally:
        set_determinism(False)


def test_a_round_out_of_memory_lowers_the_batch_sizes_of_the_rounds_after(caplog):
    from aiperf.profiles import SMOKE
    from worker.rounds import OOM_REASON_PREFIX, profile_after_out_of_memory

    assert "out of memory at batch size 128 per accelerator".startswith(OOM_REASON_PREFIX)
    with caplog.at_level("WARNING", logger="worker.rounds"):
        profile = profile_after_out_of_memory(SMOKE, 128)  # the smoke sizes 16-128: at most 115 kept
    # the default, 32, is not raised to the largest size kept: 128's failure says nothing about 64
    assert profile.batch_sizes == (16, 32, 64) and profile.default_hyperparameters().batch_size == 32
    assert "event=batch_sizes_lowered failed_batch=128 batch_size=32 largest=64" in caplog.text
    assert profile_after_out_of_memory(SMOKE, 64, fits=20).default_hyperparameters().batch_size == 16
    profile = profile_after_out_of_memory(profile_after_out_of_memory(profile, 64), 32)
    assert profile.batch_sizes == (16,)
    with caplog.at_level("ERROR", logger="worker.rounds"):
        assert profile_after_out_of_memory(profile, 16) is profile  # nothing smaller: kept, and said
    assert "event=no_batch_size_fits failed_batch=16" in caplog.text


def test_after_out_of_memory_on_an_h200_the_batch_steps_a_tenth_down():
    from aiperf.profiles import OFFICIAL
    from worker.rounds import batch_sizes_after_out_of_memory as after

    # 140 GiB: the original's 12-14 images per GiB give 1680-1960 in steps of 8
    h200 = OFFICIAL.for_accelerator_memory(140 * 2**30)
    assert (min(h200.batch_sizes), h200.batch_size) == (1680, 1960)
    assert after(h200.batch_sizes, 1960) == tuple(range(1680, 1761, 8))
    assert after(tuple(range(1680, 1761, 8)), 1760) == (1680,)  # nothing at most 1584: the smallest below
    assert after((1680,), 1680) is None
    # with a memory plan's estimate (1,700 fit): one step to a size that fits, not two
    assert after(h200.batch_sizes, 1960, fits=1700) == tuple(range(1680, 1697, 8))
    assert after(h200.batch_sizes, 1960, fits=1000) == (1680,)  # below every size: the smallest


@settings(max_examples=200, deadline=None)
@given(sizes=st.lists(st.integers(1, 4096), min_size=1, max_size=40, unique=True), failed=st.integers(1, 8192),
       fits=st.one_of(st.none(), st.integers(0, 8192)), pick=st.integers(0, 39))
def test_after_out_of_memory_only_smaller_batches_are_kept(sizes, failed, fits, pick):
    import dataclasses

    from aiperf.profiles import SMOKE
    from worker.rounds import batch_sizes_after_out_of_memory as after
    from worker.rounds import profile_after_out_of_memory

    default = sizes[pick % len(sizes)]

    kept = after(sizes, failed, fits)
    if kept is None:
        assert min(sizes) >= failed
        return
    profile = profile_after_out_of_memory(dataclasses.replace(SMOKE, batch_sizes=tuple(sorted(sizes)),
                                                              batch_size=default), failed, fits)
    assert profile.batch_sizes == kept and profile.batch_size in kept  # a profile the check accepts
    assert profile.batch_size == min(default, max(kept))  # lowered when above what is kept, never raised
    assert set(kept) <= set(sizes) and max(kept) < failed and list(kept) == sorted(kept)
    allowed = {b for b in sizes if b * 10 <= failed * 9 and (fits is None or b <= fits)}
    if allowed:
        assert set(kept) == allowed
    else:
        assert kept == (min(b for b in sizes if b < failed),)


class _Prepared:
    """A prepared round as worker.trainer.prepare_round returns it; compiled None: it failed."""

    def __init__(self, batch_size: int, fits: int | None) -> None:
        self.batch_size, self.released = batch_size, False
        self.compiled = object() if fits is None else None
        self.batch_size_that_fits = fits

    def release(self) -> None:
        self.released = True

    def start_from_seed(self, seed: int) -> None:
        self.seed = seed


def test_replanning_lowers_only_after_a_memory_plan_refused_and_always_lowers():
    from aiperf.profiles import SMOKE
    from worker.round_choice import replanned_profile

    assert replanned_profile(SMOKE, 128, _Prepared(128, None)) is None  # it fits
    runtime_oom = _Prepared(128, None)
    runtime_oom.compiled = None  # out of memory while running: no plan's estimate, nothing to choose again
    assert replanned_profile(SMOKE, 128, runtime_oom) is None
    assert replanned_profile(SMOKE, 128, _Prepared(128, 40)).batch_sizes == (16, 32)
    assert replanned_profile(SMOKE, 16, _Prepared(16, 0)) is None  # nothing smaller is left: goes ahead, fails


@settings(max_examples=200, deadline=None)
@given(sizes=st.lists(st.integers(1, 4096), min_size=1, max_size=40, unique=True),
       fits=st.lists(st.integers(0, 8192), min_size=1, max_size=60))
def test_replanning_ends_with_a_size_below_every_refused_one(sizes, fits):
    import dataclasses

    from aiperf.profiles import SMOKE
    from worker.round_choice import replanned_profile

    profile = dataclasses.replace(SMOKE, batch_sizes=tuple(sorted(sizes)), batch_size=max(sizes))
    refused = []
    for estimate in fits:  # each try refused by its plan with this estimate, until nothing smaller is left
        lowered = replanned_profile(profile, profile.batch_size, _Prepared(profile.batch_size, estimate))
        if lowered is None:
            assert profile.batch_size == min(sizes)  # the smallest is always kept: it is where tries end
            break
        refused.append(profile.batch_size)
        assert set(lowered.batch_sizes) <= set(sizes) and lowered.batch_size < min(refused)
        profile = lowered
    assert len(refused) < len(sizes)


def test_a_round_its_memory_plan_refuses_is_chosen_again_before_it_is_submitted(master_server, small_graph,
                                                                                monkeypatch):
    """A plan's out of memory is known before SubmitModel: no model is created at the size that
    cannot fit; the round goes at the largest size under the plan's estimate, and so do the rounds after."""
    from aiperf.api.client import ControlClient
    from aiperf.hyperparameters import Hyperparameters
    from aiperf.morphism import deeper_at
    from aiperf.search import Candidate
    from worker.agent import Outbox
    from worker.trainer import TrainResult

    tried: list[_Prepared] = []

    def prepare(graph, hyper, dataset, profile, round_index, **kwargs):
        tried.append(_Prepared(hyper.batch_size, 40 if hyper.batch_size > 40 else None))
        return tried[-1]

    class Pool:
        def child(self, round_index, entries, timeout=None):
            return Candidate(deeper_at(small_graph, "conv2_block1_out"), first)

    class Ahead:  # the look-ahead's interface, planning at the hand-over
        def take(self, basis):
            return agent._plan(ctx, None, Pool(), basis)

        def start(self, basis): ...

        def dispose(self, planned): ...

    monkeypatch.setattr("worker.trainer.prepare_round", prepare)
    h = master_server()
    with ControlClient(h.address, h.admin_token) as control:
        control.start_run(600, profile="smoke", seed=1, warmup_rounds=2)
    agent = _agent(h, "replanned")
    box = Outbox()
    try:
        agent._register()
        ctx = agent._context(agent._wait_for_running_run())
        assert ctx.profile.batch_sizes == (16, 32, 64, 128)
        first = agent._submit(small_graph, 0, 1, Hyperparameters(64, 5))
        agent._finish(box, first, 1, TrainResult("done", (0.5, 0.6), 2, 100, 10, 1, 0.6, 0.65))
        monkeypatch.setattr(agent, "_train", lambda *args, **kwargs: TrainResult(
            "done", (0.5,), 1, 100, 10, 1, 0.5, 0.5))
        agent._round(ctx, box, Ahead(), agent._basis(ctx, box))
        # warm-up: the parent's 64 refused by the plan (fits 40), released; the default of (16, 32) taken
        assert [(p.batch_size, p.released) for p in tried] == [(64, True), (32, False)]
        assert ctx.profile.batch_sizes == (16, 32)
        box.close()
        agent._snapshot()
        assert sorted((m.round, m.hyperparameters.batch_size) for m in agent._history.values()) == [(1, 64), (2, 32)]
    finally:
        box.close()
        _close(agent)


def test_after_warmup_an_architecture_trains_twice_the_parents_then_tpes(master_server, small_graph, monkeypatch):
    """The original's maxTPEsearchNum 2: after warm-up a worker's round trains a new architecture
    with its parent's hyperparameters, the next round the same architecture with TPE's."""
    import dataclasses

    from aiperf.api.client import ControlClient
    from aiperf.hyperparameters import Hyperparameters
    from aiperf.morphism import deeper_at
    from aiperf.search import Candidate
    from worker.agent import Outbox
    from worker.trainer import TrainResult

    class Pool:  # the generator pool's interface: the next new architecture
        def __init__(self, graphs):
            self.graphs, self.asked = list(graphs), []

        def child(self, round_index, entries, timeout=None):
            self.asked.append(round_index)
            return self.graphs.pop(0)

    monkeypatch.setattr("worker.trainer.prepare_round", lambda *args, **kwargs: None)  # no model: choices only
    h = master_server()
    with ControlClient(h.address, h.admin_token) as control:
        control.start_run(600, profile="smoke", seed=1, warmup_rounds=1)
    agent = _agent(h, "trials")
    box = Outbox()
    try:
        agent._register()
        ctx = agent._context(agent._wait_for_running_run())
        ctx = dataclasses.replace(ctx, profile=dataclasses.replace(ctx.profile, trials_per_architecture=2))
        first = agent._submit(small_graph, 0, 1, Hyperparameters(64, 5))
        agent._finish(box, first, 1, TrainResult("done", (0.5, 0.6), 2, 100, 10, 1, 0.6, 0.65))
        a, b = deeper_at(small_graph, "conv2_block1_out"), deeper_at(small_graph, "conv3_block1_out")
        pool = Pool([Candidate(a, first), Candidate(b, first)])
        planned = []
        for round_index in (2, 3, 4):
            basis = agent._basis(ctx, box)
            assert basis.round_index == round_index
            p = agent._plan(ctx, None, pool, basis)
            planned.append(p)
            assert agent._submit(p.graph, p.parent_id, round_index, p.hyper)
        # round 2: a new architecture (the pool's) with its parent's hyperparameters
        assert planned[0].graph.hash() == a.hash() and planned[0].parent_id == first
        assert (planned[0].hyper, planned[0].source) == (Hyperparameters(64, 5), "parent")
        # round 3: the same architecture and parent again, not asked of the pool, TPE's hyperparameters
        assert planned[1].graph.hash() == a.hash() and planned[1].parent_id == first and planned[1].source == "tpe"
        # round 4: the next new architecture
        assert planned[2].graph.hash() == b.hash() and pool.asked == [2, 4] and planned[2].source == "parent"
        agent._snapshot()
        assert [m.graph_hash for m in sorted(agent._history.values(), key=lambda m: m.round)][1:] == [
            a.hash(), a.hash(), b.hash()]
    finally:
        box.close()
        _close(agent)
