"""Descent by morphism: whether a graph is its declared parent changed by the search's own
operations (docs/spec.md, "Graphs from the search").

A child records the operations that made it from its parent (`meta["operations"]`, as
`aiperf.morphism` writes them). `check_descent` replays them on the parent with the
morphism functions themselves, within the profile's space (its widen fractions, whether a
skip may create an add, its kernel sizes), and compares the architecture it gets with the
child's (`Graph.hash`: layer ids and metadata aside). A graph no replay reaches (a chain of
1x1 convolutions, a dense tower, a hand-edited ResNet) is not from the search, whatever
its operations say. Pure: graphs in, a reason out.
"""

from __future__ import annotations

import re
from typing import Sequence

from aiperf.graph import Graph, GraphError
from aiperf.limits import MAX_LINEAGE_OPERATIONS
from aiperf.morphism import MorphismError, MorphSpace, deeper_at, skip_add_at, skip_at, wider_at

_ID = r"[^,()=]+"
_DEEPER = re.compile(rf"^deeper\(after=({_ID}),k=(\d+)\)$")
_WIDER = re.compile(rf"^wider\(conv=({_ID}),filters=(\d+)->(\d+)\)$")
_SKIP = re.compile(rf"^skip\(from=({_ID}),to=({_ID}),(?:identity|proj,stride=\d+)\)$")
_SKIP_ADD = re.compile(rf"^skip\(from=({_ID}),after=({_ID}),new_add,stride=\d+\)$")


class LineageError(ValueError):
    """The graph does not descend from its parent by the profile's operations."""


def operations_of(graph: Graph) -> list[str]:
    """The operations a graph records (none for a root); LineageError when malformed."""
    ops = graph.meta.get("operations", [])
    if not isinstance(ops, list) or not all(isinstance(op, str) for op in ops):
        raise LineageError("meta.operations must be a list of operation strings")
    if len(ops) > MAX_LINEAGE_OPERATIONS:
        raise LineageError(f"{len(ops)} operations exceed the bound of {MAX_LINEAGE_OPERATIONS}")
    return ops


def widen_amounts(filters: int, space: MorphSpace) -> set[int]:
    """The filters `wider` may add to a conv of `filters` in `space` (aiperf.morphism._widen_amount)."""
    return {max(1, int(filters * f)) for f in space.widen_fractions}


def _step(graph: Graph, op: str, space: MorphSpace, kernel_sizes: Sequence[int]) -> Graph:
    """One recorded operation applied to `graph` (MorphismError/GraphError/LineageError)."""
    if m := _DEEPER.match(op):
        k = int(m.group(2))
        if k not in kernel_sizes:
            raise LineageError(f"{op}: kernel {k} is not one of the profile's {tuple(kernel_sizes)}")
        return deeper_at(graph, m.group(1), k, parent_hash="")
    if m := _WIDER.match(op):
        conv_id, before, after = m.group(1), int(m.group(2)), int(m.group(3))
        layer = graph.layer(conv_id) if conv_id in {l.id for l in graph.layers} else None
        if layer is None or layer.filters != before:
            raise LineageError(f"{op}: the conv has {getattr(layer, 'filters', 'no')} filters, not {before}")
        if after - before not in widen_amounts(before, space):
            raise LineageError(f"{op}: adds {after - before} filters; the profile adds one of "
                               f"{sorted(widen_amounts(before, space))}")
        return wider_at(graph, conv_id, after - before, parent_hash="")
    if m := _SKIP.match(op):
        return skip_at(graph, m.group(1), m.group(2), parent_hash="")
    if m := _SKIP_ADD.match(op):
        if not space.skip_new_add:
            raise LineageError(f"{op}: the profile's skip joins existing adds only")
        return skip_add_at(graph, m.group(1), m.group(2), parent_hash="")
    raise LineageError(f"unknown operation {op[:80]!r}")


def check_descent(parent: Graph, child: Graph, space: MorphSpace, kernel_sizes: Sequence[int]) -> None:
    """LineageError (one line) unless replaying the child's operations on `parent` gives
    the child's architecture. No operations: the child must be the parent itself."""
    ops = operations_of(child)
    graph = parent
    for n, op in enumerate(ops, 1):
        try:
            graph = _step(graph, op, space, kernel_sizes)
        except (MorphismError, GraphError, KeyError) as exc:
            raise LineageError(f"operation {n} ({op[:80]}) does not apply to the graph before it: {exc}") from None
    if graph.hash() != child.hash():
        what = f"its {len(ops)} recorded operations" if ops else "no operation"
        raise LineageError(f"the graph is not its parent changed by {what}")


