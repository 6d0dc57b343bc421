"""Accuracy earned inside the window, through the real server: a checkpoint is accepted
once per model, with the finish of an open model of an open run; never attached later to
a model already DONE or FAILED (the late checkpoint that turned an invalid run valid)."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aiperf.api.client import ApiError
from tests.support.fake_clock import FakeClock
from tests.support.master_clients import HP, clients, register

URI = "file:///shared/ckpt/model.weights.h5"
SHA = hashlib.sha256(URI.encode()).hexdigest()


def _model(w, wid, graph) -> int:
    return w.submit_model(wid, graph.to_json(), graph.hash(), 0, 1, HP).model_id


def test_a_checkpoint_after_a_finish_without_one_is_refused_even_after_the_deadline(master_server, small_graph):
    clock = FakeClock()
    h = master_server(clock=clock, heartbeat_interval_s=10_000.0)
    w, c = clients(h)
    wid = register(w)
    c.start_run(600, profile="smoke")
    mid = _model(w, wid, small_graph)
    w.finish_model(wid, mid, "done", best_accuracy=0.45, predicted_accuracy=0.45)
    clock.t += 700  # past the deadline
    c.run_status()
    with pytest.raises(ApiError) as e:
        w.finish_model(wid, mid, "done", best_accuracy=0.45, checkpoint_uri=URI, checkpoint_sha256=SHA)
    assert e.value.code.name == "FAILED_PRECONDITION" and "accepted only with the finish" in e.value.details
    [m] = c.list_models().models
    assert m.checkpoint_uri == ""


@pytest.mark.parametrize("first", ["failed", "abandoned"])
def test_a_failed_or_abandoned_model_takes_no_checkpoint(master_server, small_graph, first):
    h = master_server()
    w, c = clients(h)
    wid = register(w)
    c.start_run(600, profile="smoke")
    mid = _model(w, wid, small_graph)
    if first == "failed":
        w.finish_model(wid, mid, "failed", reason="oom")
    else:
        register(w)  # the worker re-registers: its open model is abandoned
    with pytest.raises(ApiError) as e:
        w.finish_model(wid, mid, "done", best_accuracy=0.9, checkpoint_uri=URI, checkpoint_sha256=SHA)
    assert e.value.code.name == "FAILED_PRECONDITION"
    assert c.list_models().models[0].checkpoint_uri == ""


def test_the_honest_finish_with_its_checkpoint_is_idempotent(master_server, small_graph):
    h = master_server()
    w, c = clients(h)
    wid = register(w)
    c.start_run(600, profile="smoke")
    mid = _model(w, wid, small_graph)
    for _ in range(3):  # the reply was lost: resent as it was
        reply = w.finish_model(wid, mid, "done", best_accuracy=0.4, checkpoint_uri=URI, checkpoint_sha256=SHA)
        assert reply.model.checkpoint_uri == URI
    assert w.finish_model(wid, mid, "done", best_accuracy=0.4).model.checkpoint_uri == URI  # no checkpoint: same


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(first=st.sampled_from(["done", "failed"]), then_uri=st.sampled_from(["", URI, URI + ".2"]),
       then_state=st.sampled_from(["done", "failed"]))
def test_no_second_finish_adds_a_checkpoint(master_server, small_graph, first, then_uri, then_state):
    """Whatever the second finish, the checkpoint a model ends with is the one of its first finish."""
    h = master_server()
    w, c = clients(h)
    wid = register(w)
    c.start_run(600, profile="smoke")
    mid = _model(w, wid, small_graph)
    w.finish_model(wid, mid, first, best_accuracy=0.3 if first == "done" else None)
    kw = {"checkpoint_uri": then_uri, "checkpoint_sha256": SHA} if then_uri and then_state == "done" else {}
    try:
        w.finish_model(wid, mid, then_state, best_accuracy=0.9 if then_state == "done" else None, **kw)
    except ApiError as exc:
        assert exc.code.name == "FAILED_PRECONDITION"
    [m] = c.list_models().models
    assert m.checkpoint_uri == ""
    h.stop(grace_s=0)


def test_no_checkpoint_once_the_run_is_over(master_server, small_graph):
    """An aborted run's open models are abandoned with it: their weights come too late."""
    h = master_server()
    w, c = clients(h)
    wid = register(w)
    c.start_run(600, profile="smoke")
    mid = _model(w, wid, small_graph)
    c.stop_run(abort=True, reason="operator")
    with pytest.raises(ApiError) as e:
        w.finish_model(wid, mid, "done", best_accuracy=0.9, checkpoint_uri=URI, checkpoint_sha256=SHA)
    assert e.value.code.name == "FAILED_PRECONDITION"
    assert c.list_models().models[0].checkpoint_uri == ""
