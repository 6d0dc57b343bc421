"""The worker's health endpoint (worker/health.py) served from a real agent
registered with a real master: 200 while its heartbeat loop turns, 503 once it
stops; the `aiperf worker --health-port` option; the drain summary on stop."""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
import urllib.error
import urllib.request

import pytest
from hypothesis import given
from hypothesis import strategies as st

from worker.health import HealthServer, is_healthy


def _get(port: int, path: str = "/healthz") -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        body = exc.read()
        return exc.code, json.loads(body) if exc.headers.get("Content-Type") == "application/json" else {}


@given(age=st.one_of(st.none(), st.floats(0, 1e6)), interval=st.floats(0.1, 3600), stale=st.floats(1, 3600),
       stopping=st.booleans())
def test_healthy_while_the_loop_turned_within_the_larger_of_the_limit_and_three_beats(age, interval, stale,
                                                                                     stopping):
    state = {"heartbeat_age_s": age, "heartbeat_interval_s": interval, "stopping": stopping}
    assert is_healthy(state, stale) == (stopping or age is None or age <= max(stale, 3 * interval))


def test_a_wedged_heartbeat_loop_answers_503():
    state = {"worker_id": 3, "heartbeat_age_s": 75.0, "heartbeat_interval_s": 5.0, "stopping": False}
    health = HealthServer(lambda: state, port=0, host="127.0.0.1", stale_after_s=60.0).start()
    try:
        code, body = _get(health.port)
        assert code == 503 and body["status"] == "stale" and body["worker_id"] == 3
        state["heartbeat_age_s"] = 4.0
        assert _get(health.port)[0] == 200
    finally:
        health.stop()


def test_health_follows_the_heartbeat_loop_of_a_registered_agent(master_server):
    from worker.agent import Agent, AgentConfig

    h = master_server(heartbeat_interval_s=0.1)
    agent = Agent(AgentConfig(master=h.address, token=h.worker_token, name="probe-me", measure_peak=False))
    health = HealthServer(agent.health_state, port=0, host="127.0.0.1", stale_after_s=0.5).start()
    try:
        code, body = _get(health.port)  # not registered yet: starting, healthy
        assert code == 200 and body["status"] == "ok" and body["heartbeat_age_s"] is None
        agent._register()
        beat = threading.Thread(target=agent._heartbeat_loop)
        beat.start()
        time.sleep(0.5)
        code, body = _get(health.port)
        assert code == 200 and body["worker_id"] == agent.worker_id and body["heartbeat_age_s"] < 0.5
        assert body["stopping"] is False
        assert _get(health.port, "/metrics")[0] == 404
        agent.stop(reason="SIGTERM")
        beat.join(5)
        time.sleep(0.7)  # the loop has ended: draining, still healthy (the grace period bounds it)
        code, body = _get(health.port)
        assert code == 200 and body["stopping"] is True
    finally:
        health.stop()
        agent.client.close()


def test_a_stopped_agent_logs_what_its_grace_period_got(master_server, caplog):
    from worker.agent import Agent, AgentConfig

    h = master_server()
    agent = Agent(AgentConfig(master=h.address, token=h.worker_token, name="drained", measure_peak=False))
    agent.stop(reason="SIGTERM")  # before the first run: run() registers, sees the stop, exits
    with caplog.at_level(logging.INFO, logger="worker.agent"):
        agent.run()
    assert "event=stopped reason=SIGTERM drain_s=" in caplog.text and "rounds=0" in caplog.text


def test_worker_health_port_taken_is_one_line(tmp_path):
    import os
    import subprocess
    import sys

    pytest.importorskip("tensorflow")
    with socket.socket() as busy:
        busy.bind(("", 0))
        busy.listen()
        port = busy.getsockname()[1]
        env = {k: v for k, v in os.environ.items() if not k.startswith("AIPERF_")}
        proc = subprocess.run([sys.executable, "-m", "aiperf_cli", "worker", "--master", "127.0.0.1:1", "--token", "t",
                               "--health-port", str(port), "--state-dir", str(tmp_path)],
                              env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == (f"aiperf: error: cannot serve the health endpoint on port {port}: "
                                   "Address already in use")
