"""Selection: edit distance, distance cache, GP, simulated annealing + UCB."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys

import numpy as np
import pytest

from aiperf.distance import CUTOFF, HORIZON, Descriptor, DistanceCache, Packed, bounded_rows, edit_distance, pairwise
from aiperf.gp import GaussianProcess
from aiperf.graph import Graph
from aiperf.morphism import Limits, MorphSpace, deeper_at, morph_step, random_morph, skip_at, wider_at
from aiperf.resnet import resnet50
from aiperf.search import HistoryEntry, SearchSettings, derive_seed, predict, select_child, worker_seed


@pytest.fixture(scope="module")
def base() -> Graph:
    return resnet50(32, 3, 10, 0.25)


@pytest.fixture(scope="module")
def tree(base: Graph) -> list[Graph]:
    """60 architectures, each one random morph of an earlier one (meta parent set); small
    steps (widen 25-50%, skips into existing adds) keep near relatives near."""
    rng = random.Random(0)
    small_steps = MorphSpace((0.25, 0.5), skip_new_add=False)
    graphs, hashes = [base], [base.hash()]
    for _ in range(59):
        k = rng.randrange(len(graphs))
        graphs.append(morph_step(graphs[k], rng, parent_hash=hashes[k], space=small_steps))
        hashes.append(graphs[-1].hash())
    return graphs


def _reference(a, b, cost) -> float:
    """Textbook O(n·m) edit distance, unit insertions and deletions."""
    f = np.zeros((len(a) + 1, len(b) + 1))
    f[:, 0] = np.arange(len(a) + 1)
    f[0, :] = np.arange(len(b) + 1)
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            f[i, j] = min(f[i - 1, j] + 1, f[i, j - 1] + 1, f[i - 1, j - 1] + cost(a[i - 1], b[j - 1]))
    return float(f[-1, -1])


def _width_cost(x: float, y: float) -> float:
    return abs(x - y) / max(x, y)


def _skip_cost(x, y) -> float:  # Auto-Keras' skip_connection_distance
    if x[2] != y[2]:
        return 1.0
    return (abs(x[0] - y[0]) + abs(x[1] - y[1])) / (max(x[0], y[0]) + max(x[1], y[1]))


# -- edit distance ------------------------------------------------------------
def test_descriptor_of_resnet50(base: Graph) -> None:
    d = Descriptor.of(resnet50())
    # Main chain: stem conv, 16 blocks x 3 convs, dense; shortcut projections are off-chain.
    assert len(d.widths) == 1 + 16 * 3 + 1
    assert list(d.widths[:4]) == [64, 64, 64, 256] and d.widths[-1] == 1000
    assert len(d.skips) == 16
    assert list(d.skips[0]) == [1, 3, 1]  # first block: projected shortcut over 3 convs
    assert list(d.skips[1]) == [4, 3, 0]  # then identity shortcuts
    assert sum(s[2] for s in d.skips) == 4


def test_one_operation_moves_the_distance_by_its_auto_keras_cost(base: Graph) -> None:
    d0 = Descriptor.of(base)
    assert edit_distance(d0, d0) == 0.0
    wider = Descriptor.of(wider_at(base, "conv3_block2_2_conv", 16))  # 32 -> 48 filters
    assert edit_distance(d0, wider) == pytest.approx(16 / 48)
    skip = Descriptor.of(skip_at(base, "conv2_block1_out", "conv3_block2_add"))
    assert edit_distance(d0, skip) == pytest.approx(1.0)  # one more skip, layers unchanged
    deeper = Descriptor.of(deeper_at(base, "conv5_block2_out"))
    # One more layer; the last shortcut now starts after the new conv (position 46 -> 47,
    # still 3 convs long): Auto-Keras' skip cost |46-47| / (47 + 3).
    assert edit_distance(d0, deeper) == pytest.approx(1.0 + 1 / 50)


def test_vectorised_distance_equals_the_textbook_one_below_the_cap(tree: list[Graph]) -> None:
    descs = [Descriptor.of(g) for g in tree[:30]]
    ia, ib = np.triu_indices(len(descs), k=1)
    for cap in (CUTOFF, HORIZON, 50.0):
        got = pairwise(Packed(descs), Packed(descs), ia, ib, cap)
        for n in range(0, len(ia), 7):
            a, b = descs[ia[n]], descs[ib[n]]
            ref = (_reference(list(a.widths), list(b.widths), _width_cost)
                   + _reference([tuple(s) for s in a.skips], [tuple(s) for s in b.skips], _skip_cost))
            assert got[n] == pytest.approx(min(ref, cap), abs=1e-5)  # float32 arithmetic
    assert (got > HORIZON).any()  # the uncapped run did see distant pairs


def test_cache_rows_are_exact_below_cutoff_and_lower_bounds_above(tree: list[Graph]) -> None:
    hashes = [g.hash() for g in tree]
    cache = DistanceCache()
    for h, g in zip(hashes[:40], tree[:40]):
        cache.add(h, g)
    cache.matrix(hashes[:40])
    for h, g in zip(hashes, tree):  # incremental growth
        cache.add(h, g)
    m = cache.matrix(hashes)
    full = Packed([Descriptor.of(g) for g in tree])
    ia, ib = np.triu_indices(len(tree), k=1)
    exact = pairwise(full, full, ia, ib, 50.0)
    bounds = m[ia, ib]
    assert np.all(bounds <= exact + 1e-5)
    close = exact < CUTOFF
    assert close.sum() > 20
    np.testing.assert_allclose(bounds[close], exact[close], atol=1e-5)
    assert np.all(bounds[~close] >= CUTOFF - 1e-5)
    np.testing.assert_array_equal(m, m.T)


def test_children_rows_pruned_by_their_parent_are_exact_below_cutoff(tree: list[Graph]) -> None:
    hashes = [g.hash() for g in tree]
    cache = DistanceCache()
    for h, g in zip(hashes, tree):
        cache.add(h, g)
    m = cache.matrix(hashes)
    others = cache.packed(hashes)
    rng = random.Random(3)
    parent = 7
    children = [morph_step(tree[parent], rng, parent_hash="") for _ in range(8)]
    packed = Packed([Descriptor.of(c) for c in children])
    exact = np.array([[edit_distance(Descriptor.of(c), Descriptor.of(g), 50.0) for g in tree]
                      for c in children])
    for cap, row in ((HORIZON, m[parent]), (CUTOFF, np.minimum(m[parent], CUTOFF)), (CUTOFF, None)):
        rows = bounded_rows(packed, cache.packed([hashes[parent]]), row, others, CUTOFF, cap)
        assert np.all(rows <= exact + 1e-5)
        close = exact < CUTOFF
        np.testing.assert_allclose(rows[close], exact[close], atol=1e-5)
        assert np.all(rows[~close] >= CUTOFF - 1e-5)
    assert close.any()


# -- Gaussian process -------------------------------------------------------------
def test_gp_interpolates_observations_and_is_uncertain_far_away() -> None:
    d = np.array([[0.0, 0.5, 5.0], [0.5, 0.0, 5.0], [5.0, 5.0, 0.0]])
    y = np.array([0.7, 0.72, 0.3])
    gp = GaussianProcess(noise=1e-4).fit(d, y)
    mean, std = gp.predict(d)
    np.testing.assert_allclose(mean, y, atol=1e-3)
    assert np.all(std < 0.01)
    mean, std = gp.predict(np.array([[5.0, 5.0, 5.0]]))  # unrelated to everything seen
    assert mean[0] == pytest.approx(y.mean()) and std[0] == pytest.approx(y.std())


def test_gp_is_fitted_on_accuracies_of_the_same_model_id(tree: list[Graph]) -> None:
    a, b, c = tree[0], tree[5], tree[9]
    history = [HistoryEntry(10, a, 0.9), HistoryEntry(11, b, 0.2), HistoryEntry(12, c, None)]
    mean, _ = predict(history, [a, b])
    assert mean[0] > 0.8 and mean[1] < 0.3  # not swapped, not averaged
    # A model without an accuracy does not move the fit.
    mean2, _ = predict(history[:2], [a, b])
    np.testing.assert_allclose(mean, mean2)
    # Listing order does not matter: pairs are linked by model id, not position.
    mean3, _ = predict(history[::-1], [a, b])
    np.testing.assert_allclose(mean, mean3)


# -- selection ------------------------------------------------------------------
# Fewer annealing expansions than the default keep these tests quick; the
# default budget is exercised by benchmarks/search_bench.py.
FAST = {"settings": SearchSettings(max_candidates=64)}


def _history(tree: list[Graph], n: int, seed: int = 1) -> list[HistoryEntry]:
    rng = random.Random(seed)
    return [HistoryEntry(i + 1, g, round(rng.uniform(0.4, 0.8), 4)) for i, g in enumerate(tree[:n])]


def test_empty_history_gives_the_base_then_a_morph_of_it(base: Graph) -> None:
    first = select_child([], seed=1, base=base, **FAST)
    assert first.graph.hash() == base.hash() and first.parent_model_id is None
    # The base is being trained (no accuracy yet): the next worker gets a morph of it.
    training = [HistoryEntry(7, base, None)]
    second = select_child(training, seed=1, base=base, **FAST)
    assert second.graph.hash() != base.hash()
    assert second.graph.meta["parent"] == base.hash() and second.parent_model_id == 7
    third = select_child([], seed=1, base=base, exclude=[base.hash()])
    assert third.graph.hash() != base.hash()


def test_selection_is_seeded_and_independent_of_history_order(tree: list[Graph], base: Graph) -> None:
    history = _history(tree, 40)
    a = select_child(history, seed=5, base=base, **FAST)
    b = select_child(list(reversed(history)), seed=5, base=base, **FAST)
    assert a.graph.to_json() == b.graph.to_json()
    assert (a.parent_model_id, a.predicted_accuracy, a.ucb) == (b.parent_model_id, b.predicted_accuracy, b.ucb)
    others = {select_child(history, seed=s, base=base, **FAST).graph.hash() for s in range(6, 10)}
    assert len(others | {a.graph.hash()}) > 1


def test_child_is_new_and_records_its_lineage(tree: list[Graph], base: Graph) -> None:
    history = _history(tree, 40)
    seen = {e.hash for e in history}
    cand = select_child(history, seed=3, base=base, **FAST)
    assert cand.graph.hash() not in seen
    by_id = {e.model_id: e for e in history}
    parent = by_id[cand.parent_model_id]
    assert cand.graph.meta["parent"] == parent.hash
    assert cand.graph.meta["operations"]
    assert 0.0 <= cand.predicted_accuracy <= 1.0 and cand.ucb >= cand.predicted_accuracy - 1e-9
    # Replaying the recorded operations' count from the parent gives the child's size class.
    assert len(cand.graph.layers) >= len(parent.graph.layers)
    # Excluding the choice yields another new architecture.
    again = select_child(history, seed=3, base=base, exclude=[cand.graph.hash()], **FAST)
    assert again.graph.hash() not in seen | {cand.graph.hash()}


def test_models_still_training_count_as_seen(tree: list[Graph], base: Graph) -> None:
    history = _history(tree, 30)
    first = select_child(history, seed=4, base=base, **FAST)
    pending = history + [HistoryEntry(99, first.graph, None)]
    second = select_child(pending, seed=4, base=base, **FAST)
    assert second.graph.hash() != first.graph.hash()


def test_children_respect_limits(tree: list[Graph], base: Graph) -> None:
    history = _history(tree, 20)
    biggest = max(len(e.graph.layers) for e in history)
    limits = Limits(max_layers=biggest + 1, max_params=10**9)
    for seed in range(3):
        cand = select_child(history, seed=seed, base=base, limits=limits, **FAST)
        assert len(cand.graph.layers) <= biggest + 1


def test_cache_reuse_does_not_change_the_choice(tree: list[Graph], base: Graph) -> None:
    history = _history(tree, 50)
    cache = DistanceCache()
    select_child(history[:30], seed=2, base=base, cache=cache, **FAST)  # warms part of it
    warm = select_child(history, seed=2, base=base, cache=cache, **FAST)
    cold = select_child(history, seed=2, base=base, **FAST)
    assert warm.graph.to_json() == cold.graph.to_json()


def test_seeds_are_stable_across_processes() -> None:
    assert worker_seed(1, 0) != worker_seed(1, 1) != worker_seed(2, 1)
    assert worker_seed(1, 0) == worker_seed(1, 0) and 0 <= worker_seed(1, 0) < 2**63
    code = "from aiperf.search import worker_seed, derive_seed; print(worker_seed(1, 0), derive_seed(3, 'job', 4))"
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.split() == [str(worker_seed(1, 0)), str(derive_seed(3, "job", 4))]


def test_selection_is_identical_in_another_process(tree: list[Graph], base: Graph) -> None:
    history = _history(tree, 25)
    here = select_child(history, seed=8, base=base, **FAST).graph.to_json()
    payload = json.dumps([[e.model_id, e.graph.to_json(), e.accuracy] for e in history])
    code = (
        "import json, sys\n"
        "from aiperf.graph import Graph\n"
        "from aiperf.resnet import resnet50\n"
        "from aiperf.search import HistoryEntry, SearchSettings, select_child\n"
        "rows = json.loads(sys.stdin.read())\n"
        "h = [HistoryEntry(i, Graph.from_json(g), a) for i, g, a in rows]\n"
        "print(select_child(h, seed=8, base=resnet50(32, 3, 10, 0.25), settings=SearchSettings(max_candidates=64)).graph.to_json())\n")
    env = {**os.environ, "PYTHONHASHSEED": "999"}  # different set/dict hashing
    out = subprocess.run([sys.executable, "-c", code], input=payload, capture_output=True, text=True,
                         env=env, check=True)
    assert out.stdout.strip() == here


def test_random_morph_of_selected_child_keeps_working(tree: list[Graph], base: Graph) -> None:
    cand = select_child(_history(tree, 10), seed=1, base=base, **FAST)
    child = random_morph(cand.graph, seed=1, steps=2)
    assert child.meta["parent"] == cand.graph.hash()


def test_an_architecture_trained_twice_counts_by_its_best_trial(tree: list[Graph]) -> None:
    # the original reported the best of an architecture's trials (maxTPEsearchNum) to its search
    from aiperf.search import _fit_set

    a, b = tree[0], tree[5]
    history = [HistoryEntry(1, a, 0.2), HistoryEntry(2, b, 0.5), HistoryEntry(3, a, 0.8), HistoryEntry(4, a, None)]
    fitted = _fit_set(history)
    assert [(e.model_id, e.accuracy) for e in fitted] == [(1, 0.8), (2, 0.5)]


@pytest.mark.parametrize("bad", [{"n_neighbours": 0}, {"cooling": 1.0}, {"cooling": 0.0}, {"t_min": 0.0},
                                 {"max_candidates": 0}])
def test_search_settings_outside_their_ranges_are_refused(bad):
    with pytest.raises(ValueError, match="n_neighbours and max_candidates"):
        SearchSettings(**bad)
    assert SearchSettings().max_candidates == 320  # the defaults: the module's constants
