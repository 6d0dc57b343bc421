"""Generator pool: real worker processes (spawn); a round's child is a pure function of
(seed, round, history snapshot), with or without prefetch; shutdown leaves no orphans."""

from __future__ import annotations

import multiprocessing.resource_tracker as resource_tracker
import os
import random
import time

import psutil
import pytest

from aiperf.graph import Graph
from aiperf.morphism import Limits, morph_step
from aiperf.resnet import resnet50
from aiperf.search import Candidate, HistoryEntry, SearchSettings, select_child
from worker.generator import GeneratorError, GeneratorPool, default_workers, round_seed, snapshot_digest, snapshot_rows

pytestmark = pytest.mark.slow
FAST = {"search": SearchSettings(max_candidates=48)}  # a short annealing keeps each job well under a second


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


def _accuracy(graph_hash: str) -> float:
    """A made-up but reproducible accuracy for a trained child."""
    return round(0.3 + int(graph_hash[:6], 16) / 0xFFFFFF * 0.5, 4)


def _agent_like_run(pool: GeneratorPool, rounds: int, *, prefetch: bool, noise: bool = False) -> list[Candidate]:
    """Rounds as the agent runs them: the child on the round's snapshot, the model created
    (open), optionally the next round prepared on that snapshot, then the model's accuracy
    arrives (so the prepared child is stale unless the model failed)."""
    snapshot: list[HistoryEntry] = []
    out = []
    for r in range(1, rounds + 1):
        if noise:  # preparations nobody asks for: they must change nothing
            pool.prepare(r + 5, snapshot)
        cand = pool.child(r, snapshot, timeout=120)
        out.append(cand)
        h = cand.graph.hash()
        open_entry = HistoryEntry(100 + r, cand.graph, None, h)
        if prefetch:
            pool.prepare(r + 1, snapshot + [open_entry])
        failed = r % 3 == 0  # every third model fails (OOM): its entry keeps no accuracy
        snapshot = snapshot + [open_entry if failed else HistoryEntry(100 + r, cand.graph, _accuracy(h), h)]
    return out


def test_default_size_leaves_cpus_to_the_input_pipeline() -> None:
    cpus = len(os.sched_getaffinity(0))
    assert default_workers() == max(1, cpus - 1)
    assert default_workers(input_pipeline_cpus=2) == max(1, cpus - 2)
    assert default_workers(input_pipeline_cpus=10_000) == 1


def test_same_seed_and_history_give_the_same_children_with_or_without_prefetch(base: Graph) -> None:
    # A seed repeats a run only if the child sequence is the same whatever the prefetching, the
    # number of processes, or the unrelated jobs the processes ran before (their distance caches
    # differ): each of those can otherwise make runs of one seed part after a few rounds.
    with GeneratorPool(base, seed=7, workers=2, **FAST) as pool:
        plain = _agent_like_run(pool, 7, prefetch=False)
        assert (pool.hits, pool.misses) == (0, 7)
    with GeneratorPool(base, seed=7, workers=2, **FAST) as pool:
        prefetched = _agent_like_run(pool, 7, prefetch=True, noise=True)
        # only after a failed model (rounds 3, 6) is the next snapshot the prepared one
        assert (pool.hits, pool.misses) == (2, 5)
    with GeneratorPool(base, seed=7, workers=1, **FAST) as pool:
        single = _agent_like_run(pool, 7, prefetch=True)
    assert [c.graph.to_json() for c in plain] == [c.graph.to_json() for c in prefetched] \
        == [c.graph.to_json() for c in single]
    assert [(c.parent_model_id, c.predicted_accuracy, c.ucb) for c in plain] == \
        [(c.parent_model_id, c.predicted_accuracy, c.ucb) for c in prefetched]
    assert plain[0].graph.hash() == base.hash() and len({c.graph.hash() for c in plain}) == 7
    with GeneratorPool(base, seed=8, workers=2, **FAST) as pool:
        other = _agent_like_run(pool, 7, prefetch=False)
    assert [c.graph.hash() for c in other] != [c.graph.hash() for c in plain]  # the seed matters


def test_a_round_child_is_select_child_on_the_round_seed(base: Graph, history: list[HistoryEntry]) -> None:
    with GeneratorPool(base, seed=11, workers=1, **FAST) as pool:
        got = pool.child(4, history, timeout=120)
        # the same snapshot given in another order and as fresh objects is the same snapshot
        again = pool.child(4, [HistoryEntry(e.model_id, e.graph, e.accuracy) for e in reversed(history)],
                           timeout=120)
    expected = select_child(history, round_seed(11, 4), base=base, settings=FAST["search"])
    for c in (got, again):
        assert c.graph.to_json() == expected.graph.to_json()
        assert (c.parent_model_id, c.predicted_accuracy, c.ucb) == (
            expected.parent_model_id, expected.predicted_accuracy, expected.ucb)
    assert expected.graph.hash() not in {e.hash for e in history}


def test_the_snapshot_digest_sees_every_accuracy_change(history: list[HistoryEntry]) -> None:
    rows = snapshot_rows(history)
    assert snapshot_digest(rows) == snapshot_digest(snapshot_rows(list(reversed(history))))
    changed = [HistoryEntry(e.model_id, e.graph, e.accuracy, e.hash) for e in history]
    changed[3] = HistoryEntry(changed[3].model_id, changed[3].graph, changed[3].accuracy + 1e-12, changed[3].hash)
    assert snapshot_digest(snapshot_rows(changed)) != snapshot_digest(rows)
    assert snapshot_digest(snapshot_rows(history[:-1])) != snapshot_digest(rows)


def test_a_failed_job_is_reported_and_retried_afresh(base: Graph) -> None:
    seen_base = [HistoryEntry(1, base, 0.5, base.hash())]
    with GeneratorPool(base, seed=1, workers=1, limits=Limits(max_layers=1), **FAST) as pool:
        with pytest.raises(GeneratorError, match="round 2's child failed: .*max_layers=1"):
            pool.child(2, seen_base, timeout=120)
        assert pool.prepared == []
        with pytest.raises(GeneratorError):
            pool.child(2, seen_base, timeout=120)


def test_close_leaves_no_processes_and_refuses_further_use(base: Graph,
                                                           history: list[HistoryEntry]) -> None:
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    pool = GeneratorPool(base, seed=1, workers=2, max_prepared=3, **FAST)
    pool.child(1, history, timeout=120)
    pool.prepare(2, history)
    pool.prepare(3, history[:5])
    workers = _pool_processes(before)
    assert len(workers) == 2
    start = time.monotonic()
    pool.close()  # with jobs still in flight
    assert time.monotonic() - start < 10
    assert not _pool_processes(before)
    with pytest.raises(RuntimeError, match="closed"):
        pool.child(2, history, timeout=1)
    pool.close()  # idempotent


def test_child_times_out_and_old_preparations_are_dropped(base: Graph, history: list[HistoryEntry]) -> None:
    with GeneratorPool(base, seed=2, workers=1, max_prepared=2) as pool:
        with pytest.raises(TimeoutError):
            pool.child(1, history, timeout=0.01)  # the process is still starting
        pool.prepare(2, history)
        pool.prepare(3, history)
        assert [r for r, _ in pool.prepared] == [2, 3]  # round 1's job was dropped for the newest two
        pool.child(3, history, timeout=120)
        assert pool.prepared == []  # this round's and earlier rounds' preparations are done with
        files = [n for n in os.listdir(pool._dir) if n.startswith("history-")]
        assert len(files) <= 1  # only an index a still-running dropped job may read
