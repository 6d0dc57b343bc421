"""The grace a restarted master gives its workers (master/core/restart.py), on the Master and
store alone with a scripted clock: counted from when it serves, longer for a worker with an
open model, and the models of before ended after an outage longer than resume_outage_s."""

from __future__ import annotations

from pathlib import Path

import pytest

from master.core.master import Master
from master.core.requests import ModelSubmission
from master.core.restart import RESTART_GRACE_S
from master.store.records import WorkerInput
from master.store.sql.sql_store import SqlStore
from tests.support.fake_clock import FakeClock


def _life(url: str, clock: FakeClock, **kwargs: object) -> Master:
    return Master(SqlStore(url), heartbeat_interval_s=5.0, clock=clock, **kwargs)


def _first_life(url: str, clock: FakeClock, graph: object) -> tuple[int, int, int]:
    from aiperf.run_spec import RunSpec

    m = _life(url, clock)
    trainer = m.register(WorkerInput("trainer", "trainer", [], 1, 1, {}))
    idle = m.register(WorkerInput("idle", "idle", [], 1, 1, {}))
    m.start_run(RunSpec(duration_s=3600.0, profile="smoke"))
    model = m.submit_model(ModelSubmission(
        worker_id=trainer.worker.id, run_id=0, graph_json=graph.to_json(), graph_hash=graph.hash(), parent_id=0,
        round=1, batch_size=32, kernel_size=3), credential=trainer.credential)
    m.tick()
    m.close()
    m.store.close()
    return trainer.worker.id, idle.worker.id, model.id


@pytest.mark.parametrize("starting_s", [0.0, 20.0])
def test_the_grace_counts_from_serving_and_is_longer_with_an_open_model(tmp_path: Path, small_graph: object,
                                                                         starting_s: float) -> None:
    url = f"sqlite:///{tmp_path / 'm.db'}"
    clock = FakeClock()
    trainer, idle, mid = _first_life(url, clock, small_graph)
    clock.t += 45.0  # down 45 s
    m = _life(url, clock)
    clock.t += starting_s  # a slow start (migrations, front ends) before it serves
    m.serving()
    clock.t += 15.1  # 3 beats after serving: the idle worker is lost, the trainer is not
    m.tick()
    assert not m.is_alive(idle) and m.is_alive(trainer)
    clock.t += RESTART_GRACE_S - 15.1 - 0.2
    m.tick()
    assert m.is_alive(trainer) and m.store.get_model(mid).state == "training"
    clock.t += 0.4  # past its grace without a beat: lost, its model abandoned
    m.tick()
    assert not m.is_alive(trainer) and m.store.get_model(mid).state == "abandoned"


def test_a_beat_within_the_grace_keeps_the_model(tmp_path: Path, small_graph: object) -> None:
    url = f"sqlite:///{tmp_path / 'm.db'}"
    clock = FakeClock()
    trainer, _idle, mid = _first_life(url, clock, small_graph)
    clock.t += 90.0
    m = _life(url, clock)
    m.serving()
    clock.t += 2.0
    m._heartbeats.beat(trainer, clock.t)  # what its heartbeat does, once its credential is checked
    clock.t += 14.0
    m.tick()
    assert m.is_alive(trainer) and m.store.get_model(mid).state == "training"


def test_a_longer_outage_than_the_limit_ends_the_models_of_before(tmp_path: Path, small_graph: object) -> None:
    url = f"sqlite:///{tmp_path / 'm.db'}"
    clock = FakeClock()
    trainer, idle, mid = _first_life(url, clock, small_graph)
    clock.t += 601.0
    m = _life(url, clock, resume_outage_s=600.0)
    m.serving()
    model = m.store.get_model(mid)
    assert model.state == "abandoned" and model.reason == "master down 601 s, longer than the 600 s models wait"
    assert not m.is_alive(trainer) and m.is_alive(idle)
