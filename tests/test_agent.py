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
