"""The look-ahead (worker/lookahead.py): the next round prepared while one trains, handed over
only on the very basis it was prepared on, and the same children with it on or off."""

from __future__ import annotations

import math
import threading
import time

import numpy as np
import pytest

from aiperf.graph import INPUT, INSERTED, Graph, conv, dense, simple
from aiperf.hyperparameters import Hyperparameters
from aiperf.profiles import SMOKE
from aiperf.search import Candidate, HistoryEntry
from tests.support.master_clients import wait_for
from worker.lookahead import Basis, LookAhead, PlannedRound


class FakePrepared:
    def __init__(self, failure: str = "") -> None:
        self.compiled = None if failure else object()
        self.failure = failure
        self.released = False

    def release(self) -> None:
        self.released = True
        self.compiled = None


def tiny_graph() -> Graph:
    layers = [conv("c1", INPUT, 8, 3, 2), simple("b1", "batchnorm", "c1"), simple("r1", "relu", "b1"),
              conv("ins", "r1", 8, 3, tag=INSERTED), simple("b2", "batchnorm", "ins"), simple("r2", "relu", "b2"),
              simple("pool", "avgpool", "r2"), dense("fc", "pool", 10), simple("out", "softmax", "fc")]
    return Graph((32, 32, 3), 10, tuple(layers))


def basis(round_index: int, accuracy: float | None = None, run_id: int = 1) -> Basis:
    g = tiny_graph()
    return Basis.of(run_id, round_index, [HistoryEntry(1, g, accuracy, g.hash())], {})


def test_a_round_prepared_on_the_same_basis_is_handed_over_any_other_is_discarded_and_released():
    planned_on: list[tuple[Basis, str]] = []
    gate = threading.Event()

    def plan(b: Basis) -> PlannedRound:
        planned_on.append((b, threading.current_thread().name))
        gate.wait(10)
        return PlannedRound(b.key, Candidate(tiny_graph(), None), 0, Hyperparameters(32, 3), "default",
                            FakePrepared())

    with LookAhead(plan) as ahead:
        gate.set()
        ahead.start(basis(2))
        planned = ahead.take(basis(2))
        assert planned.ahead and planned.key == basis(2).key and (ahead.hits, ahead.misses) == (1, 0)
        assert planned_on[-1][1].startswith("lookahead"), "prepared on the look-ahead thread"

        # the history changed in a way that can change the child (an accuracy arrived): discarded
        gate.clear()
        ahead.start(basis(3))
        wait_for(lambda: len(planned_on) >= 2, 30, "the look-ahead thread to begin planning it", 0.01)
        first = planned_on[-1]
        gate.set()
        again = ahead.take(basis(3, accuracy=0.5))
        assert not again.ahead and again.key == basis(3, accuracy=0.5).key
        assert (ahead.hits, ahead.misses, ahead.discarded) == (1, 1, 1)
        assert first[0].key == basis(3).key and planned_on[-1][1] == threading.current_thread().name
        # another round index or run: discarded as well
        ahead.start(basis(4))
        assert ahead.take(basis(5)).key == basis(5).key
        ahead.start(basis(6))
        assert ahead.take(basis(6, run_id=2)).key[0] == 2
        assert ahead.discarded == 3 and ahead.hits == 1


def test_a_failed_or_out_of_memory_preparation_is_done_again_at_the_hand_over():
    calls: list[str] = []
    made: list[FakePrepared] = []

    def plan(b: Basis) -> PlannedRound:
        ahead = threading.current_thread().name.startswith("lookahead")
        calls.append("ahead" if ahead else "inline")
        if ahead and b.round_index == 2:
            raise RuntimeError("generator process died")
        made.append(FakePrepared("out of memory at batch size 32" if ahead else ""))
        return PlannedRound(b.key, Candidate(tiny_graph(), None), 0, Hyperparameters(32, 3), "default", made[-1])

    with LookAhead(plan) as ahead:
        ahead.start(basis(2))
        assert not ahead.take(basis(2)).failed  # the look-ahead raised: planned again
        ahead.start(basis(3))
        got = ahead.take(basis(3))  # out of memory while the previous round held memory: again
        assert not got.failed and not got.ahead
        assert made[-2].released, "the failed preparation was released"
    assert calls == ["ahead", "inline", "ahead", "inline"]
    assert (ahead.hits, ahead.misses, ahead.discarded) == (0, 2, 1)

    with LookAhead(plan, enabled=False) as off:
        off.start(basis(4))
        assert not off.take(basis(4)).ahead and off.misses == 1 and calls[-1] == "inline"


def test_a_discarded_preparation_still_running_is_released_when_it_ends():
    gate = threading.Event()
    made: list[FakePrepared] = []

    def plan(b: Basis) -> PlannedRound:
        if threading.current_thread().name.startswith("lookahead"):
            gate.wait(10)
        made.append(FakePrepared())
        return PlannedRound(b.key, Candidate(tiny_graph(), None), 0, Hyperparameters(32, 3), "default", made[-1])

    with LookAhead(plan) as ahead:
        ahead.start(basis(2))
        time.sleep(0.05)
        used = ahead.take(basis(2, accuracy=0.9)).prepared  # planned inline while the look-ahead waits
        gate.set()
        wait_for(lambda: len(made) == 2 and made[1].released, 10, "the stale preparation's release", 0.01)
    assert used is made[0] and not used.released
    assert made[1].released, "the stale preparation was released when it finished"


def test_basis_digest_names_the_snapshot():
    assert basis(2).key == basis(2).key
    assert basis(2).key != basis(2, accuracy=0.3).key != basis(2, accuracy=0.4).key
    assert basis(2).key[:2] == (1, 2)


# ---------------------------------------------------------------- real TensorFlow


class TinyDataset:
    image_size, num_classes, train_size, validation_size = 32, 10, 96, 32

    def __init__(self) -> None:
        rng = np.random.default_rng(0)
        self._x = rng.normal(size=(128, 32, 32, 3)).astype(np.float32)
        self._y = np.eye(10, dtype=np.float32)[rng.integers(0, 10, 128)]

    def train(self, batch_size: int, *, seed: int = 0):
        import tensorflow as tf

        ds = tf.data.Dataset.from_tensor_slices((self._x[:96], self._y[:96]))
        return ds.shuffle(96, seed=seed).batch(batch_size)

    def validation(self, batch_size: int):
        import tensorflow as tf

        return tf.data.Dataset.from_tensor_slices((self._x[96:], self._y[96:])).batch(batch_size)

    def train_steps(self, batch_size: int) -> int:
        return math.ceil(96 / batch_size)


@pytest.mark.slow
def test_a_round_prepared_on_the_look_ahead_thread_while_another_trains_trains_like_one_prepared_inline():
    pytest.importorskip("tensorflow")
    from worker.trainer import prepare_round, run_round

    data = TinyDataset()
    profile = SMOKE.__class__(**{**SMOKE.__dict__, "epochs_per_round": (2, 2)})
    hyper = Hyperparameters(32, 3)

    def plan(b: Basis) -> PlannedRound:
        prepared = prepare_round(tiny_graph(), hyper, data, profile, b.round_index, seed=b.round_index)
        return PlannedRound(b.key, Candidate(tiny_graph(), None), 0, hyper, "default", prepared)

    reports: list[int] = []
    with LookAhead(plan) as ahead:
        first = ahead.take(basis(1))
        ahead.start(basis(2))
        result_1 = run_round(first.prepared, on_progress=lambda p: reports.append(p.images_trained))
        second = ahead.take(basis(2))
        assert second.ahead and ahead.hits == 1
        assert second.prepared.timings["prepare"] > 0
        ahead_result = run_round(second.prepared, on_progress=lambda p: None)
    inline = run_round(plan(basis(2)).prepared, on_progress=lambda p: None)
    assert result_1.state == "done" and result_1.images_trained == 2 * 96 == sum(reports)
    assert ahead_result.images_trained == inline.images_trained == 2 * 96
    assert ahead_result.val_accuracies == pytest.approx(inline.val_accuracies, abs=1 / 32 + 1e-9), \
        "the same seeds give the same round, whichever thread prepared it"
    assert second.prepared.compiled is None, "a trained round releases its model"


# ---------------------------------------------------------------- the agent, a real master


@pytest.mark.slow
def test_the_agent_chooses_the_same_children_with_the_look_ahead_on_or_off(tmp_path):
    # a deterministic run: round 1's accuracy (which round 3's child depends on) repeats itself
    from benchmarks import idle_bench as bench
    from worker.backend import set_determinism

    try:
        on = bench.run_demo(10, True, tmp_path, seed=3, max_rounds=3, max_epochs=1, deterministic=True)
        off = bench.run_demo(10, False, tmp_path, seed=3, max_rounds=3, max_epochs=1, deterministic=True)
    finally:
        set_determinism(False)  # the process-wide switch the agent turned on
    assert [m[0] for m in on.models] == [1, 2, 3]
    assert on.models == off.models, "round, architecture and hyperparameters do not depend on the look-ahead"
    assert len({m[1] for m in on.models}) == 3
    # the master's timestamps: every model trained, and the share is a fraction of the window
    for res in (on, off):
        assert len(res.shares) == 1 and 0 < res.share < 1 and res.shares[0].models == 3
        assert len(res.gaps_s) == 2 and all(g > 0 for g in res.gaps_s)


class _Recorded(FakePrepared):
    def __init__(self, events: list, round_index: int) -> None:
        super().__init__()
        self.events, self.round_index = events, round_index

    def release(self) -> None:
        self.events.append(("released", self.round_index, threading.current_thread().name))
        super().release()


def test_a_trained_round_is_freed_at_the_next_hand_over_never_beside_a_planning():
    """Freeing a model's functions while another thread traces or trains waited seconds on
    TensorFlow's locks (and held up the next planning when queued on the look-ahead thread):
    the trained round is freed by `take`, once the round planned meanwhile is ready."""
    events: list = []
    gate = threading.Event()

    def plan(b: Basis) -> PlannedRound:
        events.append(("plan_begin", b.round_index))
        gate.wait(10)
        events.append(("plan_end", b.round_index))
        return PlannedRound(b.key, Candidate(tiny_graph(), None), 0, Hyperparameters(32, 3), "default",
                            _Recorded(events, b.round_index))

    with LookAhead(plan) as ahead:
        gate.set()
        ahead.start(basis(1))
        first = ahead.take(basis(1))
        gate.clear()
        ahead.start(basis(2))  # planned while round 1 trains
        ahead.dispose(first)  # round 1 trained
        time.sleep(0.2)
        assert not first.prepared.released, "not beside the planning under way"
        gate.set()
        second = ahead.take(basis(2))
        assert first.prepared.released and events.index(("plan_end", 2)) < events.index(
            ("released", 1, threading.current_thread().name)), "freed by the hand-over, after the planning"
        ahead.start(basis(3))
        ahead.dispose(second)
    assert second.prepared.released, "a trained round no hand-over followed: freed at close"
    with LookAhead(plan, enabled=False) as off:
        third = off.take(basis(4))
        off.dispose(third)
        assert third.prepared.released, "without the look-ahead: at once"


def test_the_heap_alive_when_rounds_begin_is_frozen_once_and_what_rounds_create_is_still_collected(monkeypatch):
    import gc
    import weakref

    import worker.lookahead
    from worker.lookahead import freeze_heap

    class Node:
        pass

    def scanned(obj: object) -> bool:
        return any(o is obj for o in gc.get_objects())

    monkeypatch.setattr(worker.lookahead, "_heap_frozen", False)
    try:
        long_lived = Node()
        freeze_heap()
        assert gc.get_freeze_count() > 0 and not scanned(long_lived), "frozen: out of the scans"
        cycle = Node()
        cycle.me = cycle  # garbage only a collection frees
        gone = weakref.ref(cycle)
        del cycle
        gc.collect()
        assert gone() is None
        later = Node()
        freeze_heap()  # a later run: nothing more is frozen (what is left of the run before may be garbage)
        assert scanned(later)
    finally:
        gc.unfreeze()
