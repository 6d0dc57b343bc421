"""Choice of the next child architecture (Auto-Keras / NNI network morphism style).

The run's history (all workers' models, real or predicted accuracy) is ranked
and explored by simulated annealing: a popped model or candidate is expanded
with probability exp(min((metric - best acquisition) / T, 1)), expansion makes
`n_neighbours` random one-step morphs, a Gaussian process over architectures
(edit-distance kernel) predicts each morph's accuracy, and the morph with the
best upper confidence bound mean + beta * std wins. The temperature falls
geometrically from 1 to `t_min` (Auto-Keras' 0.9 and 1e-4); the search also
stops after `max_candidates` scored morphs, which bounds a selection's time
(about 1 s of one core with 1,000 models, see benchmarks/search_bench.py).

The GP sees only (architecture, accuracy) pairs taken from the same history
entry, i.e. linked by model id. Entries without an accuracy (still training)
are not fitted but their hashes count as seen: a chosen child is never an
architecture already in the history (or in `exclude`).

Determinism: a `random.Random(seed)` drives every choice, history is ordered
by (accuracy, model id) and candidates by insertion, and acquisition values
are rounded before comparison so that last-bit floating-point differences
between machines cannot flip a choice.
"""

from __future__ import annotations

import hashlib
import heapq
import math
import random
from dataclasses import dataclass, field
from typing import Iterable, Sequence

import numpy as np

from aiperf.distance import CUTOFF, HORIZON, Descriptor, DistanceCache, Packed, bounded_rows
from aiperf.gp import GaussianProcess
from aiperf.graph import Graph
from aiperf.morphism import Limits, MorphismError, MorphSpace, morph_step, random_morph

UCB_BETA = 2.576  # Auto-Keras' default
N_NEIGHBOURS = 8
T_MIN = 1e-4
COOLING = 0.9
MAX_CANDIDATES = 320  # 40 expansions: keeps a selection with 1,000 models under 2 s
# Observation noise variance, in units of the accuracy spread: accuracies of
# short (and learning-curve-extrapolated) trainings vary between runs.
GP_NOISE = 0.1
_ROUND = 9  # decimals kept of acquisition values


@dataclass(frozen=True)
class HistoryEntry:
    """One model of the run: its architecture and its (real or predicted) accuracy.

    `graph_hash` may be given when known (the master stores it) to save
    recomputing it.
    """

    model_id: int
    graph: Graph
    accuracy: float | None = None
    graph_hash: str | None = None

    @property
    def hash(self) -> str:
        if self.graph_hash is None:
            digest = self.graph.hash()
            object.__setattr__(self, "graph_hash", digest)
            return digest
        return self.graph_hash


@dataclass(frozen=True)
class Candidate:
    """The chosen child. `parent_model_id` is the history model it was morphed from
    (None for the base graph itself); prediction fields are None without a fitted GP."""

    graph: Graph
    parent_model_id: int | None
    predicted_accuracy: float | None = None
    ucb: float | None = None

    @property
    def hash(self) -> str:
        return self.graph.hash()


def worker_seed(run_seed: int, worker_id: int) -> int:
    """A worker's seed, stable across machines and Python versions."""
    return derive_seed(run_seed, "worker", worker_id)


def derive_seed(*parts: object) -> int:
    """A 63-bit seed from any printable parts (sha256 of their repr)."""
    blob = repr(tuple(parts)).encode()
    return int.from_bytes(hashlib.sha256(blob).digest()[:8], "big") >> 1


@dataclass(order=True)
class _Node:
    priority: float  # -metric (heapq pops the smallest)
    order: int
    metric: float = field(compare=False)
    graph: Graph = field(compare=False)
    packed: Packed = field(compare=False)
    row: np.ndarray = field(compare=False)  # distance bounds to the fitted architectures
    root_id: int = field(compare=False)
    root_hash: str = field(compare=False)
    operations: tuple[str, ...] = field(compare=False, default=())
    mean: float = field(compare=False, default=math.nan)


@dataclass(frozen=True)
class SearchSettings:
    """How `select_child` searches: the GP's neighbours and noise, the upper confidence bound's
    beta, and the annealing's schedule and length (the defaults above)."""

    n_neighbours: int = N_NEIGHBOURS
    beta: float = UCB_BETA
    t_min: float = T_MIN
    cooling: float = COOLING
    max_candidates: int = MAX_CANDIDATES
    noise: float = GP_NOISE

    def __post_init__(self) -> None:
        if self.n_neighbours < 1 or not 0 < self.cooling < 1 or self.t_min <= 0 or self.max_candidates < 1:
            raise ValueError("n_neighbours and max_candidates must be >= 1, 0 < cooling < 1, t_min > 0")


def select_child(history: Sequence[HistoryEntry], seed: int, *, base: Graph,
                 kernel_size: int = 3, limits: Limits | None = None, exclude: Iterable[str] = (),
                 settings: SearchSettings = SearchSettings(), cache: DistanceCache | None = None,
                 space: MorphSpace | None = None) -> Candidate:
    """The next architecture to train.

    From a history without any accuracy this is `base` itself (or, once `base`
    is seen, a random morph of it). `cache` carries distances across calls
    (one per process); a fresh one is used when None; the result does not depend
    on what it holds. `space`: what morphs may do (default: the original's).
    """
    limits = limits or Limits()
    space = space or MorphSpace()
    seen = {e.hash for e in history} | set(exclude)
    fitted = _fit_set(history)
    if not fitted:
        return _from_base(base, history, seen, seed, kernel_size, limits, space)

    if cache is None:
        cache = DistanceCache(CUTOFF, HORIZON)
    gp, others = _fit(fitted, cache, settings.noise)
    heap = _history_nodes(fitted, cache)
    annealing = _Annealing(random.Random(seed), gp, others, cache.cutoff, seen, len(heap),
                           kernel_size, limits, settings.n_neighbours, settings.beta, space)
    best = annealing.run(heap, settings.t_min, settings.cooling, settings.max_candidates)
    if best is None:  # every morph was a duplicate: walk further from the best model
        top = fitted[0]
        return _fresh_morph(top.graph, top.hash, top.model_id, seen, seed, kernel_size, limits, space)
    node, h = best
    graph = node.graph.with_meta(name=f"{base.meta.get('name') or 'graph'}-{h[:12]}",
                                 parent=node.root_hash, operations=list(node.operations))
    predicted = round(min(1.0, max(0.0, node.mean)), _ROUND)  # an accuracy, whatever the GP says
    return Candidate(graph, node.root_id, predicted, node.metric)


def _history_nodes(fitted: Sequence[HistoryEntry], cache: DistanceCache) -> list[_Node]:
    """The fitted models as a heap of search nodes, their metric the accuracy."""
    dist = cache.matrix([e.hash for e in fitted])
    heap = [_Node(-float(e.accuracy), n, float(e.accuracy), e.graph,  # type: ignore[arg-type]
                  Packed([cache.descriptor(e.hash)]), dist[n], e.model_id, e.hash)
            for n, e in enumerate(fitted)]  # already ranked: best accuracy first
    heapq.heapify(heap)
    return heap


class _Annealing:
    """Simulated annealing over one-step morphs, scored by the GP's upper confidence bound."""

    def __init__(self, rng: random.Random, gp: GaussianProcess, others: Packed, cutoff: float,
                 seen: set[str], counter: int, kernel_size: int, limits: Limits,
                 n_neighbours: int, beta: float, space: MorphSpace) -> None:
        self.rng, self.gp, self.others, self.cutoff = rng, gp, others, cutoff
        self.seen, self.counter = seen, counter  # counter: insertion order, the heap's tie-break
        self.kernel_size, self.limits, self.n_neighbours, self.beta = kernel_size, limits, n_neighbours, beta
        self.space = space
        self.best_acq = -math.inf
        self.best: tuple[_Node, str] | None = None  # the best new candidate and its hash
        self.chosen: set[str] = set()

    def run(self, heap: list[_Node], t_min: float, cooling: float,
            max_candidates: int) -> tuple[_Node, str] | None:
        temperature, scored = 1.0, 0
        while heap and temperature > t_min and scored < max_candidates:
            node = heapq.heappop(heap)
            accept = math.exp(min((node.metric - self.best_acq) / temperature, 1.0))
            if round(accept, _ROUND) >= self.rng.random():
                scored += self._expand(node, heap)
            temperature *= cooling
        return self.best

    def _expand(self, node: _Node, heap: list[_Node]) -> int:
        """Push the scored morphs of `node` onto the heap; returns how many."""
        children: list[Graph] = []
        for _ in range(self.n_neighbours):
            try:
                children.append(morph_step(node.graph, self.rng, self.kernel_size, self.limits, parent_hash="",
                                           space=self.space))
            except MorphismError:
                break  # the node is at a limit: its other morphs would fail the same way
        if not children:
            return 0
        packed = Packed([Descriptor.of(c) for c in children])
        # Candidates need exact distances only below the cutoff (their
        # kernel row); a narrower band is cheaper than pruning their children.
        rows = bounded_rows(packed, node.packed, node.row, self.others, self.cutoff, self.cutoff)
        mean, std = self.gp.predict(rows)
        for c, child in enumerate(children):
            acq = round(float(mean[c] + self.beta * std[c]), _ROUND)
            new = _Node(-acq, self.counter, acq, child, packed.subset(slice(c, c + 1)), rows[c],
                        node.root_id, node.root_hash,
                        node.operations + tuple(child.meta["operations"]), float(mean[c]))
            self.counter += 1
            heapq.heappush(heap, new)
            if acq > self.best_acq:
                h = child.hash()  # hashing is costly: only for a new best
                if h not in self.seen and h not in self.chosen:
                    self.chosen.add(h)
                    self.best_acq, self.best = acq, (new, h)
        return len(children)


def predict(history: Sequence[HistoryEntry], graphs: Sequence[Graph], *, noise: float = GP_NOISE,
            cache: DistanceCache | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The GP's mean and standard deviation of accuracy for `graphs`, fitted on
    the history entries that have an accuracy."""
    fitted = _fit_set(history)
    if not fitted:
        raise ValueError("no history entry has an accuracy: nothing to fit")
    if cache is None:
        cache = DistanceCache(CUTOFF, HORIZON)
    gp, others = _fit(fitted, cache, noise)
    packed = Packed([Descriptor.of(g) for g in graphs])
    rows = bounded_rows(packed, packed, None, others, cache.cutoff, cache.horizon)
    return gp.predict(rows)


def _fit(fitted: Sequence[HistoryEntry], cache: DistanceCache,
         noise: float) -> tuple[GaussianProcess, Packed]:
    hashes = [e.hash for e in fitted]
    for e in fitted:
        cache.add(e.hash, e.graph)
    y = np.array([e.accuracy for e in fitted], np.float64)
    gp = GaussianProcess(noise=noise, cutoff=cache.cutoff).fit(cache.matrix(hashes), y)
    return gp, cache.packed(hashes)


def _fit_set(history: Sequence[HistoryEntry]) -> list[HistoryEntry]:
    """Entries with an accuracy, one per architecture (its best accuracy, lowest model id),
    ranked best first (ties: lower model id). An architecture trained more than once (its
    trials, each with other hyperparameters) counts by its best trial, as the original
    reported the best of an architecture's trials to its search."""
    groups: dict[str, list[HistoryEntry]] = {}
    for e in sorted(history, key=lambda e: e.model_id):
        if e.accuracy is None:
            continue
        if not math.isfinite(e.accuracy):
            raise ValueError(f"model {e.model_id}: accuracy must be finite, got {e.accuracy}")
        groups.setdefault(e.hash, []).append(e)
    out = [HistoryEntry(g[0].model_id, g[0].graph, max(x.accuracy for x in g), h)  # type: ignore[type-var]
           for h, g in groups.items()]
    out.sort(key=lambda e: (-e.accuracy, e.model_id))  # type: ignore[operator]
    return out


def _from_base(base: Graph, history: Sequence[HistoryEntry], seen: set[str], seed: int,
               kernel_size: int, limits: Limits, space: MorphSpace) -> Candidate:
    base_hash = base.hash()
    if base_hash not in seen:
        return Candidate(base, None)
    base_id = min((e.model_id for e in history if e.hash == base_hash), default=None)
    return _fresh_morph(base, base_hash, base_id, seen, seed, kernel_size, limits, space)


def _fresh_morph(graph: Graph, graph_hash: str, model_id: int | None, seen: set[str], seed: int,
                 kernel_size: int, limits: Limits, space: MorphSpace, attempts: int = 64) -> Candidate:
    """A random morph of `graph` not in `seen` (more steps when one step keeps colliding)."""
    for n in range(attempts):
        child = random_morph(graph, derive_seed(seed, "fresh", n), steps=1 + n // 8,
                             kernel_size=kernel_size, limits=limits, space=space)
        if child.hash() not in seen:
            return Candidate(child.with_meta(parent=graph_hash), model_id)
    raise MorphismError(f"no new architecture found in {attempts} random morphs")
