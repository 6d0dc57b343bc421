"""Generator pool: real worker processes (spawn), buffering, dedup, reproducibility, shutdown."""

from __future__ import annotations

import multiprocessing.resource_tracker as resource_tracker
import os
import random
import time

import psutil
import pytest

from aiperf.graph import Graph
from aiperf.morphism import morph_step
from aiperf.resnet import resnet50
from aiperf.search import HistoryEntry, derive_seed, select_child
from worker.generator import GeneratorPool, default_workers

pytestmark = pytest.mark.slow
FAST = {"max_candidates": 48}  # a short annealing keeps each job well under a second


@pytest.fixture(scope="module")
def base() -> Graph:
    return resnet50(32, 3, 10, 0.25)


@pytest.fixture(scope="module")
def history(base: Graph) -> list[HistoryEntry]:
    rng = random.Random(0)
    graphs, hashes = [base], [base.hash()]
    for _ in range(14):
        k = rng.randrange(len(graphs))
        graphs.append(morph_step(graphs[k], rng, parent_hash=hashes[k]))
        hashes.append(graphs[-1].hash())
    return [HistoryEntry(i + 1, g, round(rng.uniform(0.4, 0.8), 3), h)
            for i, (g, h) in enumerate(zip(graphs, hashes))]


def _pool_processes(before: set[int]) -> set[int]:
    tracker = getattr(resource_tracker._resource_tracker, "_pid", None)  # lives as long as we do
    now = {p.pid for p in psutil.Process().children(recursive=True)}
    return now - before - {tracker}


def test_default_size_leaves_cpus_to_the_input_pipeline() -> None:
    cpus = len(os.sched_getaffinity(0))
    assert default_workers() == max(1, cpus - 1)
    assert default_workers(input_pipeline_cpus=2) == max(1, cpus - 2)
    assert default_workers(input_pipeline_cpus=10_000) == 1


def test_first_children_and_history_updates(base: Graph, history: list[HistoryEntry]) -> None:
    with GeneratorPool(base, seed=3, workers=2, buffer=2, **FAST) as pool:
        assert pool.pending == 2
        first = pool.take(timeout=60)
        assert pool.pending == 2  # refilled as soon as one is taken
        assert first.graph.hash() == base.hash() and first.parent_model_id is None
        second = pool.take(timeout=60)  # the base is taken: a morph of it, never the base again
        assert second.graph.hash() != base.hash()
        assert second.graph.meta["parent"] == base.hash()
        pool.update_history(history)
        seen = {e.hash for e in history} | {first.graph.hash(), second.graph.hash()}
        ids = {e.model_id for e in history}
        got = [pool.take(timeout=60) for _ in range(4)]
        hashes = [c.graph.hash() for c in got]
        assert len(set(hashes)) == 4 and not set(hashes) & seen
        # At least the children generated after the update come from the history.
        assert any(c.parent_model_id in ids and c.predicted_accuracy is not None for c in got)


def test_a_job_is_reproducible_from_its_seed(base: Graph, history: list[HistoryEntry]) -> None:
    with GeneratorPool(base, seed=11, workers=1, buffer=1, history=history, **FAST) as pool:
        got = pool.take(timeout=60)
    expected = select_child(history, derive_seed(11, "job", 0), base=base, **FAST)
    assert got.graph.to_json() == expected.graph.to_json()
    assert (got.parent_model_id, got.predicted_accuracy, got.ucb) == (
        expected.parent_model_id, expected.predicted_accuracy, expected.ucb)


def test_close_leaves_no_processes_and_refuses_further_use(base: Graph,
                                                           history: list[HistoryEntry]) -> None:
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    pool = GeneratorPool(base, seed=1, workers=2, buffer=3, history=history, **FAST)
    pool.take(timeout=60)
    workers = _pool_processes(before)
    assert len(workers) == 2
    start = time.monotonic()
    pool.close()  # with jobs still in flight
    assert time.monotonic() - start < 10
    assert not _pool_processes(before)
    with pytest.raises(RuntimeError, match="closed"):
        pool.take(timeout=1)
    pool.close()  # idempotent


def test_take_times_out(base: Graph, history: list[HistoryEntry]) -> None:
    with GeneratorPool(base, seed=2, workers=1, buffer=1, history=history) as pool:
        with pytest.raises(TimeoutError):
            pool.take(timeout=0.01)  # the process is still starting
