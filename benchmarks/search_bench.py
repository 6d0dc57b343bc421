"""Architecture search speed on one core, for the official ResNet-50 (224×224, 1000 classes).

1. Children per second: one random morph + shape inference (Graph
   construction) + FLOP count + GP scoring against a 100-model history.
2. Selection time (`select_child`, default settings) with 100 and 1,000 models
   in a synthetic history (each model a random morph of an earlier one, random
   accuracies): cold (a fresh process: every distance computed) and warm (a
   generator process whose cache already holds all but the newest model).
   Target: under 2 s with 1,000 models.
3. Baseline, same run: the exact unbanded, unpruned distance matrix of the
   100-model history against the cache's (banded, lineage-pruned) one.

BLAS is pinned to one thread before numpy loads, so every figure is one core;
times are CPU seconds of this process (`time.process_time`), which a busy
shared machine disturbs far less than wall-clock time (printed alongside).
"""

from __future__ import annotations

import os

os.environ.update(OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")

import random
import statistics
import time

import numpy as np

from aiperf.distance import Descriptor, DistanceCache, Packed, bounded_rows, pairwise
from aiperf.flops import count_flops
from aiperf.gp import GaussianProcess
from aiperf.graph import Graph
from aiperf.morphism import morph_step
from aiperf.resnet import resnet50
from aiperf.search import HistoryEntry, select_child

TARGET_S = 2.0


def synthetic_history(base: Graph, n: int, seed: int = 0) -> list[HistoryEntry]:
    rng = random.Random(seed)
    graphs, hashes = [base], [base.hash()]
    while len(graphs) < n:
        k = rng.randrange(len(graphs))
        graphs.append(morph_step(graphs[k], rng, parent_hash=hashes[k]))
        hashes.append(graphs[-1].hash())
    return [HistoryEntry(i + 1, g, round(rng.uniform(0.5, 0.8), 4), h)
            for i, (g, h) in enumerate(zip(graphs, hashes))]


def children_per_second(history: list[HistoryEntry], count: int = 300) -> float:
    """Children per CPU second."""
    cache = DistanceCache()
    hashes = [e.hash for e in history]
    for e in history:
        cache.add(e.hash, e.graph)
    dist = cache.matrix(hashes)
    gp = GaussianProcess().fit(dist, np.array([e.accuracy for e in history]))
    others = cache.packed(hashes)
    rng = random.Random(1)
    start = time.process_time()
    for _ in range(count):
        k = rng.randrange(len(history))
        parent = history[k]
        child = morph_step(parent.graph, rng, parent_hash=parent.hash)  # includes shape inference
        count_flops(child)
        packed = Packed([Descriptor.of(child)])
        rows = bounded_rows(packed, Packed([cache.descriptor(parent.hash)]), dist[k], others)
        gp.predict(rows)
    return count / (time.process_time() - start)


def selection_times(base: Graph, history: list[HistoryEntry],
                    repeat: int = 3) -> tuple[float, float, float, float]:
    """Median (cold CPU, cold wall, warm CPU, warm wall) seconds."""
    cold, cold_wall = [], []
    for r in range(repeat):
        t, w = time.process_time(), time.perf_counter()
        select_child(history, seed=r, base=base)
        cold.append(time.process_time() - t)
        cold_wall.append(time.perf_counter() - w)
    # A generator process: its cache has seen the history up to the previous
    # selection; each selection brings one new model.
    cache = DistanceCache()
    select_child(history[:-repeat], seed=100, base=base, cache=cache)
    warm, warm_wall = [], []
    for r in range(repeat):
        t, w = time.process_time(), time.perf_counter()
        select_child(history[:len(history) - repeat + r + 1], seed=r, base=base, cache=cache)
        warm.append(time.process_time() - t)
        warm_wall.append(time.perf_counter() - w)
    med = statistics.median
    return med(cold), med(cold_wall), med(warm), med(warm_wall)


def main() -> None:
    base = resnet50()
    t = time.perf_counter()
    h100 = synthetic_history(base, 100)
    h1000 = h100 + synthetic_history(base, 1000, seed=0)[100:]
    print(f"synthetic histories built in {time.perf_counter() - t:.1f} s "
          f"(official ResNet-50: {len(base.layers)} layers, {base.num_params():,} parameters)")

    cps = children_per_second(h100)
    print(f"children per second per core (morph + shapes + FLOPs + GP score, 100 models): {cps:8.1f}")

    warm_by_size = {}
    for hist in (h100, h1000):
        cold, cold_wall, warm, warm_wall = selection_times(base, hist)
        warm_by_size[len(hist)] = warm
        verdict = "PASS" if warm < TARGET_S else "FAIL"
        print(f"select_child, {len(hist):5d} models: warm {warm:5.2f} s CPU ({warm_wall:5.2f} s wall; "
              f"target < {TARGET_S:.0f} s: {verdict}); cold {cold:5.2f} s CPU ({cold_wall:5.2f} s wall; "
              f"fresh process, every distance computed)")

    descs = [Descriptor.of(e.graph) for e in h100]
    ia, ib = np.triu_indices(len(descs), k=1)
    t = time.process_time()
    longest = max(len(d.widths) + len(d.skips) for d in descs)
    pairwise(Packed(descs), Packed(descs), ia, ib, cap=float(longest))  # a band as wide as the sequences
    exact_s = time.process_time() - t
    cache = DistanceCache()
    for e in h100:
        cache.add(e.hash, e.graph)
    t = time.process_time()
    cache.matrix([e.hash for e in h100])
    ours_s = time.process_time() - t
    print(f"100x100 distance matrix (CPU): exact unbanded {exact_s:6.2f} s, banded + lineage-pruned {ours_s:6.2f} s "
          f"({exact_s / ours_s:.1f}x)")
    print(f"RESULT select_child_warm_s_{len(h1000)}={warm_by_size[len(h1000)]:.3g} "
          f"distance_speedup_vs_exact={exact_s / ours_s:.3g}")


if __name__ == "__main__":
    main()
