"""Edit distance between architectures (Auto-Keras style) and a cache of it.

An architecture is described by its main chain (the longest path counted in
weighted layers: conv and dense, see `aiperf.layers`) as a sequence of layer
widths, and by its skip connections as (source position, length, type) triples
ordered along the chain; type 1 means the skip goes through a weighted layer
(a projection conv). The distance is

    layer edit distance + skip edit distance

where both are sequence edit distances with unit insertion/deletion cost.
Layer substitution costs |a - b| / max(a, b) (Auto-Keras' layer distance);
skip substitution costs 1 between types, else
(|u_a - u_b| + |l_a - l_b|) / (max(u_a, u_b) + max(l_a, l_b)) (Auto-Keras'
skip distance). Auto-Keras matches skips with the Hungarian algorithm; here
they are matched in chain order, which makes both terms the same banded
dynamic programme, vectorised over many pairs at once. Both substitution
costs are metrics bounded by 1, so the distance is a metric.

Speed (a selection scores hundreds of candidates against up to thousands of
models):
- The GP kernel exp(-d²) is below 1.3e-4 beyond `CUTOFF` = 3, so distances
  are resolved only up to a `HORIZON` (= cutoff + 2): the alignment band has
  that half-width and the result is min(d, horizon).
- Triangle inequality: a child c of a parent p satisfies
  d(c, h) >= d(p, h) - d(p, c). Rows of distance *lower bounds* are kept for
  every model (exact below the horizon) and candidate (exact below the
  cutoff: only their kernel row is needed, and a narrow band is cheaper than
  better pruning of their own children); a pair is computed only when its
  bound is under the cutoff. History rows are filled in lineage order (graph
  meta "parent"), so a model morphed from a known one costs only the pairs
  its parent's row cannot rule out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from aiperf.graph import INPUT, Graph
from aiperf.layers import KINDS

CUTOFF = 3.0
HORIZON = CUTOFF + 2.0
_CHUNK = 8192  # pairs per vectorised block: keeps the band arrays in cache
_Cost = Callable[[np.ndarray, np.ndarray], np.ndarray]  # one edit operation's cost, pairwise
# The dynamic programme runs in float32 (a quarter faster than float64): distances
# are sums of a few dozen terms in [0, 1], exact to about 1e-6.


@dataclass(frozen=True)
class Descriptor:
    """What the edit distance sees of an architecture."""

    widths: np.ndarray  # (L,) float64, filters/units along the main chain
    skips: np.ndarray  # (S, 3) float64: source position, length, type (0 identity, 1 projection)

    @staticmethod
    def of(graph: Graph) -> "Descriptor":
        best: dict[str, int] = {INPUT: 0}
        pred: dict[str, str] = {}
        for layer in graph.layers:
            top = max(layer.inputs, key=lambda i: best[i])  # first of the longest: stable
            best[layer.id] = best[top] + (1 if KINDS[layer.type].weighted else 0)
            pred[layer.id] = top
        chain: set[str] = {INPUT}
        node = graph.output.id
        while node != INPUT:
            chain.add(node)
            node = pred[node]
        by_id = {l.id: l for l in graph.layers}
        widths: list[float] = []
        skips: list[tuple[int, int, int]] = []
        for layer in graph.layers:
            if layer.id not in chain:
                continue
            kind = KINDS[layer.type]
            if kind.weighted:
                widths.append(float(kind.width(layer)))
            elif kind.sums_inputs:
                v = best[layer.id]
                for i in layer.inputs:
                    if i == pred[layer.id]:
                        continue
                    projected = 0
                    while i not in chain:  # walk back along the branch to the chain
                        projected |= KINDS[by_id[i].type].weighted
                        i = by_id[i].inputs[0]
                    skips.append((best[i], v - best[i], projected))
        skips.sort(key=lambda s: (s[0] + s[1], s[0], s[2]))
        return Descriptor(np.asarray(widths, np.float64),
                          np.asarray(skips, np.float64).reshape(-1, 3))


class _Seqs:
    """Sequences padded into one array, with integer codes for fast equality tests."""

    def __init__(self, rows: Sequence[np.ndarray], width: int, codes: Sequence[np.ndarray]) -> None:
        self.n = np.array([len(r) for r in rows], np.intp)
        size = max(1, int(self.n.max(initial=0)))
        self.values = np.ones((len(rows), size, width), np.float32)
        self.codes = np.full((len(rows), size), -1, np.int64)  # left-aligned
        self.rcodes = np.full((len(rows), size), -1, np.int64)  # reversed: last element first
        for k, (r, c) in enumerate(zip(rows, codes)):
            if len(r):
                self.values[k, :len(r)] = r.reshape(len(r), width)
                self.codes[k, :len(r)] = c
                self.rcodes[k, :len(r)] = c[::-1]

    def take(self, idx: np.ndarray | slice) -> "_Seqs":
        out = _Seqs.__new__(_Seqs)
        out.n, out.values, out.codes, out.rcodes = self.n[idx], self.values[idx], self.codes[idx], self.rcodes[idx]
        return out


class Packed:
    """Descriptors padded into arrays, ready for vectorised distances."""

    def __init__(self, descs: Sequence[Descriptor]) -> None:
        # Widths and skip fields are integers: exact integer codes for equality.
        self.widths = _Seqs([d.widths for d in descs], 1, [d.widths.astype(np.int64) for d in descs])
        self.skips = _Seqs([d.skips for d in descs], 3,
                           [(d.skips.astype(np.int64) * np.array([1 << 40, 2, 1])).sum(axis=1)
                            for d in descs])

    def __len__(self) -> int:
        return len(self.widths.n)

    def subset(self, idx: np.ndarray | slice) -> "Packed":
        out = Packed.__new__(Packed)
        out.widths, out.skips = self.widths.take(idx), self.skips.take(idx)
        return out


def edit_distance(a: Descriptor, b: Descriptor, cap: float = HORIZON) -> float:
    """min(distance(a, b), cap) for one pair."""
    return float(pairwise(Packed([a]), Packed([b]), np.array([0]), np.array([0]), cap)[0])


def pairwise(pa: Packed, pb: Packed, ia: np.ndarray, ib: np.ndarray,
             cap: float = HORIZON) -> np.ndarray:
    """min(distance, cap) of the pairs (pa[ia[p]], pb[ib[p]])."""
    ia, ib = np.asarray(ia, np.intp), np.asarray(ib, np.intp)
    out = np.full(len(ia), cap, np.float64)
    # Lengths that differ by the cap or more already cost that much.
    live = np.flatnonzero((np.abs(pa.widths.n[ia] - pb.widths.n[ib]) < cap)
                          & (np.abs(pa.skips.n[ia] - pb.skips.n[ib]) < cap))
    for start in range(0, len(live), _CHUNK):
        sel = live[start:start + _CHUNK]
        a, b = ia[sel], ib[sel]
        # The skip term first: it is shorter and often already reaches the cap.
        d = _term(pa.skips, pb.skips, a, b, _skip_cost, np.full(len(sel), cap))
        rest = np.flatnonzero(d < cap)
        if len(rest):
            d[rest] += _term(pa.widths, pb.widths, a[rest], b[rest], _width_cost, cap - d[rest])
        out[sel] = np.minimum(d, cap)
    return out


def bounded_rows(children: Packed, parent: Packed, parent_row: np.ndarray | None,
                 others: Packed, cutoff: float = CUTOFF, horizon: float = HORIZON) -> np.ndarray:
    """Rows of distance lower bounds (exact below `horizon`) from each child to `others`.

    All children share one parent whose row `parent_row` (lower bounds to
    `others`, or None if unknown) prunes pairs that cannot come under `cutoff`.
    """
    n, m = len(children), len(others)
    rows = np.full((n, m), horizon, np.float64)
    if not n or not m:
        return rows
    if parent_row is None:
        need = np.ones((n, m), bool)
        bound = np.zeros((n, m))
    else:
        reach = 2.0 * horizon  # a capped delta would overstate the bound: resolve it further
        delta = pairwise(children, parent, np.arange(n), np.zeros(n, np.intp), reach)
        bound = parent_row[None, :] - delta[:, None]
        bound[delta >= reach] = 0.0
        need = bound < cutoff
    ic, io = np.nonzero(need)
    rows[ic, io] = pairwise(children, others, ic, io, horizon)
    rows[~need] = np.minimum(bound[~need], horizon)
    return rows


def kernel(d: np.ndarray, cutoff: float = CUTOFF) -> np.ndarray:
    """exp(-d²), zero from the cutoff on (beyond it distances are bounds only)."""
    return np.where(d < cutoff, np.exp(-np.square(np.minimum(d, cutoff))), 0.0)


class DistanceCache:
    """Distance lower bounds between architectures keyed by graph hash.

    Exact below the horizon. Grown incrementally: a generator process keeps one
    across selections, so a history that grows by one model costs one row, and
    a model whose parent is known costs only the pairs its parent's row cannot
    rule out.
    """

    def __init__(self, cutoff: float = CUTOFF, horizon: float = HORIZON) -> None:
        if not 0 < cutoff <= horizon:
            raise ValueError(f"need 0 < cutoff <= horizon, got {cutoff}, {horizon}")
        self.cutoff, self.horizon = cutoff, horizon
        self._index: dict[str, int] = {}
        self._descs: list[Descriptor] = []
        self._parents: list[str | None] = []
        self._matrix = np.zeros((0, 0), np.float64)
        self._done = 0  # rows of the matrix computed so far
        self._packed: Packed | None = None

    def __len__(self) -> int:
        return len(self._descs)

    def __contains__(self, graph_hash: str) -> bool:
        return graph_hash in self._index

    def add(self, graph_hash: str, graph: Graph) -> Descriptor:
        """Register an architecture (its row is computed on the next `matrix`)."""
        n = self._index.get(graph_hash)
        if n is not None:
            return self._descs[n]
        desc = Descriptor.of(graph)
        self._index[graph_hash] = len(self._descs)
        self._descs.append(desc)
        parent = graph.meta.get("parent") if isinstance(graph.meta, dict) else None
        self._parents.append(parent if isinstance(parent, str) else None)
        self._packed = None
        return desc

    def descriptor(self, graph_hash: str) -> Descriptor:
        return self._descs[self._index[graph_hash]]

    def matrix(self, hashes: Sequence[str]) -> np.ndarray:
        """Distance bounds among these (already added) architectures."""
        self._fill()
        idx = np.array([self._index[h] for h in hashes], np.intp)
        return self._matrix[np.ix_(idx, idx)]

    def packed(self, hashes: Sequence[str]) -> Packed:
        return Packed([self._descs[self._index[h]] for h in hashes])

    def _fill(self) -> None:
        n, done = len(self._descs), self._done
        if n == done:
            return
        if n > self._matrix.shape[0]:  # grow geometrically: amortised O(1) copies per row
            size = max(n, 2 * self._matrix.shape[0])
            grown = np.full((size, size), self.horizon, np.float64)
            grown[:done, :done] = self._matrix[:done, :done]
            self._matrix = grown
        self._matrix[np.arange(done, n), np.arange(done, n)] = 0.0
        if self._packed is None:
            self._packed = Packed(self._descs)
        finished = np.zeros(n, bool)
        finished[:done] = True
        pending = np.arange(done, n)
        parent = np.array([self._index.get(p, -1) if p else -1 for p in self._parents[done:]], np.intp)
        parent[parent == pending] = -1
        # Waves in lineage order: a row whose parent's row is complete is
        # pruned by it; rows wait while their parent is still pending.
        while len(pending):
            ready = (parent < 0) | finished[np.maximum(parent, 0)]
            if not ready.any():  # pragma: no cover - hashes cannot form a cycle
                ready[:] = True
            wave, refs = pending[ready], parent[ready]
            pending, parent = pending[~ready], parent[~ready]
            self._fill_wave(self._packed, wave, refs, np.flatnonzero(finished))
            finished[wave] = True
        self._done = n

    def _fill_wave(self, packed: Packed, wave: np.ndarray, refs: np.ndarray, olds: np.ndarray) -> None:
        """Rows of the models `wave` (parents `refs`, -1 when unknown) against the
        finished models `olds` and among themselves."""
        m = self._matrix
        # d(x, h) >= d(parent, h) - d(parent, x); a capped d(parent, x) would
        # overstate that bound, so it is resolved further and dropped if still capped.
        reach = 2.0 * self.horizon
        delta = np.full(len(wave), reach)
        has = refs >= 0
        if has.any():
            delta[has] = pairwise(packed, packed, wave[has], refs[has], reach)
        has &= delta < reach
        bound = np.zeros((len(wave), len(olds)))
        if has.any() and len(olds):
            bound[has] = m[np.ix_(refs[has], olds)] - delta[has, None]
        iw, io = np.nonzero(bound < self.cutoff)
        d = np.minimum(bound, self.horizon)
        d[iw, io] = pairwise(packed, packed, wave[iw], olds[io], self.horizon)
        m[np.ix_(wave, olds)] = d
        m[np.ix_(olds, wave)] = d.T
        # Pairs inside the wave: bounded through either one's parent, whose
        # distance to the other was just computed.
        ia, ib = np.triu_indices(len(wave), k=1)
        if not len(ia):
            return
        pair_bound = np.zeros(len(ia))
        for x, y in ((ia, ib), (ib, ia)):
            ok = has[x]
            pair_bound[ok] = np.maximum(pair_bound[ok], m[refs[x[ok]], wave[y[ok]]] - delta[x[ok]])
        need = np.flatnonzero(pair_bound < self.cutoff)
        d = np.minimum(pair_bound, self.horizon)
        d[need] = pairwise(packed, packed, wave[ia[need]], wave[ib[need]], self.horizon)
        m[wave[ia], wave[ib]] = d
        m[wave[ib], wave[ia]] = d


# ---------------------------------------------------------------------------
def _band_aligned(b: np.ndarray, T: int, length: int) -> np.ndarray:
    """b shifted so that the band of row i is the slice [i, i + 2T + 1): element j-1 of b."""
    out = np.ones((len(b), max(b.shape[1] + T + 1, length), b.shape[2]), np.float32)
    out[:, T + 1:T + 1 + b.shape[1]] = b
    return out


def _width_cost(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a: (P, 1, 1) one element per pair; b: (P, W, 1) the band. -> (P, W)."""
    a, b = a[..., 0], b[..., 0]
    cost: np.ndarray = np.abs(a - b) / np.maximum(a, b)
    return cost


def _skip_cost(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Auto-Keras' skip distance; 1 between an identity and a projection skip."""
    ua, la, ta = a[..., 0], a[..., 1], a[..., 2]
    ub, lb, tb = b[..., 0], b[..., 1], b[..., 2]
    num = np.abs(ua - ub)
    num += np.abs(la - lb)
    den = np.maximum(ua, ub)
    den += np.maximum(la, lb)
    num /= np.maximum(den, 1.0)  # lengths are >= 1: the guard never binds
    cost: np.ndarray = np.maximum(num, np.abs(ta - tb))  # the cost is <= 1, so this is "1 if types differ"
    return cost


def _term(sa: _Seqs, sb: _Seqs, ia: np.ndarray, ib: np.ndarray, cost: _Cost,
          cap: np.ndarray) -> np.ndarray:
    """min(edit distance, cap) of sequence pairs (sa[ia[p]], sb[ib[p]]).

    Each pair's common prefix and suffix are dropped first (exact: a zero-cost
    match of equal first or last elements is part of some optimal alignment).
    """
    la, lb = sa.n[ia], sb.n[ib]
    short = np.minimum(la, lb)
    n = int(short.max(initial=0))
    pre = np.zeros(len(ia), np.intp)
    suf = np.zeros(len(ia), np.intp)
    if n:
        k = np.arange(n)
        eq = (sa.codes[ia, :n] == sb.codes[ib, :n]) & (k < short[:, None])
        pre = np.argmin(np.pad(eq, ((0, 0), (0, 1))), axis=1)  # first mismatch
        eq = (sa.rcodes[ia, :n] == sb.rcodes[ib, :n]) & (k < (short - pre)[:, None])
        suf = np.argmin(np.pad(eq, ((0, 0), (0, 1))), axis=1)
    na, nb = la - pre - suf, lb - pre - suf
    ka = np.arange(max(1, int(na.max(initial=0))))
    kb = np.arange(max(1, int(nb.max(initial=0))))
    a = sa.values[ia[:, None], np.minimum(pre[:, None] + ka, sa.values.shape[1] - 1)]
    b = sb.values[ib[:, None], np.minimum(pre[:, None] + kb, sb.values.shape[1] - 1)]
    return _banded(a, na, b, nb, cost, cap)


def _banded(a: np.ndarray, la: np.ndarray, b: np.ndarray, lb: np.ndarray, cost: _Cost,
            cap: float | np.ndarray) -> np.ndarray:
    """min(edit distance, cap) for each pair (a[p][:la[p]], b[p][:lb[p]]).

    Rows run over a, the band over offsets j - i in [-T, T] with T = ceil(max cap):
    an alignment leaving the band has more than T insertions or deletions.
    Cells left of column 0 hold the cap, which is absorbing once values are
    capped; cells right of lb[p] are never read by cells at or left of it, so
    they need no masking. A pair whose band row has reached its cap is
    finished early.
    """
    P = len(la)
    capv: np.ndarray = np.broadcast_to(np.asarray(cap, np.float64), (P,)).copy()
    if P == 0:
        return capv
    # Exact when one side is empty; the cap when lengths differ by the cap or more.
    gap = np.abs(la - lb).astype(np.float64)
    res: np.ndarray = np.minimum(gap, capv)
    live = np.flatnonzero((la > 0) & (lb > 0) & (gap < capv))
    if not len(live):
        return res
    T = int(np.ceil(capv[live].max()))
    W = 2 * T + 1
    off = np.arange(W, dtype=np.float32) - T  # j - i
    la, lb, cap2 = la[live], lb[live], capv[live][:, None].astype(np.float32)
    a = a[live]
    b = _band_aligned(b[live], T, int(la.max()) + W)
    rows = np.arange(len(live))  # positions in a and b of the pairs still running
    prev = np.minimum(np.where(off >= 0, off, np.inf)[None, :], cap2)  # row 0: f[0][j] = j
    i = 0
    while len(live):
        i += 1
        t = cost(a[rows, i - 1][:, None, :], b[rows, i:i + W])  # substitution, (P, W)
        t += prev  # diagonal move
        np.minimum(t[:, :-1], prev[:, 1:] + 1.0, out=t[:, :-1])  # vertical move
        left = T - i  # band column of j == 0
        if left >= 0:
            t[:, left] = i
            t[:, :left] = np.inf
        # Horizontal moves: f[k] = min over k' <= k of t[k'] + (k - k').
        t -= off
        f = np.minimum.accumulate(t, axis=1)
        f += off
        np.minimum(f, cap2, out=f)
        finished = la == i
        if finished.any():
            done = np.flatnonzero(finished)
            k = lb[done] - i + T
            inside = (k >= 0) & (k < W)
            val = cap2[done, 0].copy()
            val[inside] = f[done[inside], k[inside]]
            res[live[done]] = val
        keep = ~finished & (f.min(axis=1) < cap2[:, 0])
        if not keep.all():
            gone = ~finished & ~keep
            res[live[gone]] = cap2[gone, 0]
            live, rows, la, lb, cap2, f = live[keep], rows[keep], la[keep], lb[keep], cap2[keep], f[keep]
        prev = f
    return res
