"""The worker agent's delivery of results: ordered, retried through outages, never stuck."""

from __future__ import annotations

import threading

import grpc
import pytest

from aiperf.api.client import ApiError
from worker.agent import Outbox, call_until_done, resource_samples
from worker.monitor import AcceleratorSample, ResourceSample


def test_outbox_retries_transient_errors_in_order(monkeypatch):
    monkeypatch.setattr("worker.agent.backoff_delays", lambda: iter([0.0] * 100))
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
    monkeypatch.setattr("worker.agent.backoff_delays", lambda: iter([0.0] * 100))
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
    from aiperf.search import Candidate
    from worker.agent import Agent, AgentConfig, _RunClosed

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

            class OneCandidate:
                def take(self, timeout: float) -> Candidate:
                    return Candidate(graph=small_graph, parent_model_id=None)

            box = Outbox()
            try:
                with pytest.raises(_RunClosed, match="stopping"):
                    agent._round(ctx, None, OneCandidate(), box, 1)
            finally:
                box.close()
            assert control.list_models().total == 0, "nothing was created in the closed run"
        finally:
            agent.stream.close()
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
    with caplog.at_level("WARNING", logger="worker.credentials"):
        assert kept.load() == "rotated"
    assert "credential_file_open_to_others" in caplog.text


def test_the_agent_keeps_its_credential_and_gets_its_name_back(master_server, tmp_path, monkeypatch, caplog):
    import dataclasses
    import json
    import time

    from aiperf.api import aiperf_pb2 as pb
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

        # restarted (a new process, the same state directory) while the old one still counts as alive
        agents.append(second := Agent(cfg))
        second._register()
        assert second.worker_id == first.worker_id and json.loads(path.read_text()) == kept

        # a worker whose state directory was lost waits until the master marks the old one lost
        monkeypatch.setattr("worker.agent.backoff_delays", lambda: iter([0.05] * 10_000))
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
        assert third.stream.heartbeat(third.worker_id).worker_state == pb.WORKER_ALIVE
    finally:
        for agent in agents:
            agent.stream.close()
            agent.client.close()
