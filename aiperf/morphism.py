"""Network morphism: deeper, wider and skip operations on an architecture graph.

Each operation returns a new `Graph` (the parent is untouched) whose metadata
records the parent hash and the operations applied. The operations are chosen
so that a child can compute the same function as its parent (see
`aiperf.weight_transfer`):

- *deeper* inserts conv(k×k, channels preserved, stride 1) + BN + ReLU after a
  ReLU; the conv is tagged `INSERTED` so the kernel-size hyperparameter
  reaches it. Its input is non-negative, so the new ReLU can be an identity.
- *wider* adds filters to a conv whose output, through BN/ReLU/max pool only,
  reaches convolutions (which absorb the extra channels). A conv whose output
  feeds an add (the residual stream, the last conv) is never widened: the
  whole stream would have to change with it. How many filters it adds is the
  space's choice: the original doubles the conv, the smoke profile adds 25-50%.
- *skip* connects an earlier ReLU to a later add through a 1×1 conv + BN
  projection (stride as needed) where shapes differ, and through a BN alone
  where they match; or, where the space allows it (the original's skip),
  creates a new add after a batch norm of the main chain, summing it with a
  1×1 conv + BN projection of an earlier ReLU. Either way the branch ends in
  a BN that starts with a zero scale, so it adds nothing until training moves it.

Randomness comes from a `random.Random` the caller seeds; positions are
enumerated in the graph's canonical order, so the same seed gives the same
child on any machine.
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass, replace
from functools import partial
from typing import Callable, Sequence

from aiperf.graph import INPUT, INSERTED, Graph, GraphError, Layer, Shape, conv, simple
from aiperf.hyperparameters import HyperparameterError, check_kernel_size
from aiperf.layers import KINDS

OPERATIONS = ("deeper", "wider", "skip")

_NEW_ID = re.compile(r"^m(\d+)_")


class MorphismError(ValueError):
    """No operation can be applied (no valid position, or a limit would be crossed)."""


@dataclass(frozen=True)
class MorphSpace:
    """What the random operations may do (a profile's choice, SPEC section 4).

    `widen_fractions`: `wider` adds the conv's filter count times one of these
    (1.0 doubles it, as the original's `to_wider_graph`). `skip_new_add`: `skip`
    may also create a new add after a main-chain batch norm (the original's
    `to_skip_connection_graph2`), besides joining an existing add.
    The default is the original's space.
    """

    widen_fractions: tuple[float, ...] = (1.0,)
    skip_new_add: bool = True

    def __post_init__(self) -> None:
        fractions = tuple(self.widen_fractions)
        if not fractions or not all(isinstance(f, (int, float)) and not isinstance(f, bool)
                                    and math.isfinite(f) and f > 0 for f in fractions):
            raise ValueError(f"widen_fractions must be positive numbers, got {self.widen_fractions!r}")
        object.__setattr__(self, "widen_fractions", tuple(float(f) for f in fractions))


# The kernel size the parameter limit is checked at by default: the largest
# kernel TPE may give inserted convs (both profiles search 3, 5 and 7). A child
# is generated before its kernel size is chosen, so it must fit at any of them.
LIMIT_KERNEL_SIZE = 7


@dataclass(frozen=True)
class Limits:
    """Upper bounds a child must respect.

    `kernel_size`: the parameters are counted with every inserted conv at this
    kernel size (SPEC section 6); parameters grow with the kernel, so checking at
    the largest kernel a run may train keeps every choice within `max_params`.
    None counts the graph as it stands.
    """

    max_layers: int = 500
    max_params: int = 60_000_000
    kernel_size: int | None = LIMIT_KERNEL_SIZE

    def __post_init__(self) -> None:
        if self.max_layers <= 0 or self.max_params <= 0:
            raise ValueError(f"limits must be positive, got {self}")
        if self.kernel_size is not None:
            try:
                check_kernel_size(self.kernel_size)
            except HyperparameterError as exc:
                raise ValueError(f"limits: {exc}") from None

    def violation(self, graph: Graph, kernel_size: int | None = None) -> str | None:
        """A one-line reason when `graph` crosses a limit, else None. The
        parameters are counted at `kernel_size` when given (the kernel actually
        trained), else at the limits' own kernel size."""
        n = len(graph.layers)
        if n > self.max_layers:
            return f"child would have {n} layers, over the limit max_layers={self.max_layers}"
        k = kernel_size if kernel_size is not None else self.kernel_size
        p = params_at_kernel(graph, k)
        if p > self.max_params:
            at = f" (inserted convs at kernel size {k})" if k is not None else ""
            return f"child would have {p} parameters, over the limit max_params={self.max_params}{at}"
        return None


def params_at_kernel(graph: Graph, kernel_size: int | None) -> int:
    """Parameters of `graph` with every inserted conv at `kernel_size` (None: as is).

    Equals ``with_inserted_kernel(graph, kernel_size).num_params()``: a
    parameter count depends on kernels and channel counts only, never on
    spatial sizes, so no new graph is built (this runs for every candidate).
    """
    if kernel_size is None:
        return graph.num_params()
    k = check_kernel_size(kernel_size)
    total = 0
    for layer in graph.layers:
        if layer.tag == INSERTED and layer.type == "conv" and layer.kernel != k:
            layer = replace(layer, kernel=k)
        total += KINDS[layer.type].num_params(layer, graph.input_shapes(layer)[0])
    return total


# ---------------------------------------------------------------------------
# Positions: every place an operation may be applied, in canonical order.

def deeper_positions(graph: Graph) -> list[str]:
    """ReLUs after which a conv + BN + ReLU block can be inserted."""
    return [l.id for l in graph.layers if l.type == "relu"]


def wider_positions(graph: Graph) -> list[str]:
    """Convs whose extra filters are absorbed by downstream convs only."""
    consumers = _consumers(graph)
    return [l.id for l in graph.layers if l.type == "conv" and _channel_closure(l.id, consumers) is not None]


def skip_positions(graph: Graph) -> list[tuple[str, str, int]]:
    """(source ReLU, target add, projection stride; 0 = no conv needed) triples."""
    order = {l.id: n for n, l in enumerate(graph.layers)}
    relus = [l for l in graph.layers if l.type == "relu"]
    adds = [l for l in graph.layers if l.type == "add"]
    by_id = {l.id: l for l in graph.layers}
    out: list[tuple[str, str, int]] = []
    for add in adds:
        sources = {_skip_source(i, by_id) for i in add.inputs}
        dst = graph.shapes[add.id]
        for relu in relus:
            if order[relu.id] >= order[add.id] or relu.id in sources:
                continue
            src = graph.shapes[relu.id]
            if src == dst:
                out.append((relu.id, add.id, 0))
                continue
            stride = _projection_stride(src, dst)
            if stride:
                out.append((relu.id, add.id, stride))
    return out


def add_skip_positions(graph: Graph) -> list[tuple[str, str, int]]:
    """(source ReLU, main-chain batch norm, projection stride) triples where `skip_add_at` applies.

    Targets are the batch norms of the main chain (the longest path in conv and
    dense layers, the chain the edit distance compares), as in the original;
    a ReLU already joined to a target's add is not offered again.
    """
    order = {l.id: n for n, l in enumerate(graph.layers)}
    chain = main_chain(graph)
    by_id = {l.id: l for l in graph.layers}
    consumers = _consumers(graph)
    relus = [(order[l.id], l.id, graph.shapes[l.id]) for l in graph.layers if l.type == "relu"]
    strides: dict[tuple[Shape, Shape], int] = {}  # a few distinct shapes: compute each pair once
    out: list[tuple[str, str, int]] = []
    for bn in graph.layers:
        if bn.type != "batchnorm" or bn.id not in chain:
            continue
        joined = {_skip_source(i, by_id) for c in consumers[bn.id] if c.type == "add" for i in c.inputs}
        dst, at = graph.shapes[bn.id], order[bn.id]
        for n, relu_id, src in relus:
            if n >= at:
                break  # relus are in graph order
            if relu_id in joined:
                continue
            stride = strides.get((src, dst))
            if stride is None:
                stride = strides[(src, dst)] = _projection_stride(src, dst)
            if stride:
                out.append((relu_id, bn.id, stride))
    return out


def main_chain(graph: Graph) -> set[str]:
    """Layers on the longest path, counted in weighted layers (conv, dense), from the
    input to the output; among equally long inputs the first. The same chain as
    `aiperf.distance.Descriptor`'s."""
    best: dict[str, int] = {INPUT: 0}
    pred: dict[str, str] = {}
    for layer in graph.layers:
        top = max(layer.inputs, key=lambda i: best[i])
        best[layer.id] = best[top] + (1 if KINDS[layer.type].weighted else 0)
        pred[layer.id] = top
    chain: set[str] = set()
    node = graph.output.id
    while node != INPUT:
        chain.add(node)
        node = pred[node]
    return chain


# ---------------------------------------------------------------------------
# Operations at a given position.

def deeper_at(graph: Graph, relu_id: str, kernel_size: int = 3, *,
              parent_hash: str | None = None) -> Graph:
    """Insert conv(k×k) + BN + ReLU after ReLU `relu_id`; its consumers read the new ReLU."""
    _check_kernel(kernel_size)
    relu = _get(graph, relu_id, "relu")
    n = _next_index(graph)
    cid, bid, rid = f"m{n}_conv", f"m{n}_bn", f"m{n}_relu"
    channels = graph.shapes[relu.id][-1]
    block = [conv(cid, relu.id, channels, kernel_size, 1, "same", use_bias=False, tag=INSERTED),
             simple(bid, "batchnorm", cid), simple(rid, "relu", bid)]
    layers: list[Layer] = []
    for layer in graph.layers:
        if relu.id in layer.inputs:
            layer = replace(layer, inputs=tuple(rid if i == relu.id else i for i in layer.inputs))
        layers.append(layer)
        if layer.id == relu.id:
            layers.extend(block)
    return _child(graph, layers, f"deeper(after={relu.id},k={kernel_size})", parent_hash)


def wider_at(graph: Graph, conv_id: str, extra: int, *,
             parent_hash: str | None = None) -> Graph:
    """Add `extra` filters to conv `conv_id` (downstream convs read more channels)."""
    layer = _get(graph, conv_id, "conv")
    if _channel_closure(conv_id, _consumers(graph)) is None:
        raise MorphismError(f"conv {conv_id!r} cannot be widened: its output reaches an add or the classifier")
    if extra <= 0:
        raise MorphismError(f"wider needs a positive number of extra filters, got {extra}")
    new = replace(layer, filters=layer.filters + extra)
    layers = [new if l.id == conv_id else l for l in graph.layers]
    return _child(graph, layers, f"wider(conv={conv_id},filters={layer.filters}->{new.filters})",
                  parent_hash)


def skip_at(graph: Graph, relu_id: str, add_id: str, *,
            parent_hash: str | None = None) -> Graph:
    """Connect ReLU `relu_id` to add `add_id` through a zero-scaled projection."""
    relu = _get(graph, relu_id, "relu")
    add = _get(graph, add_id, "add")
    order = {l.id: n for n, l in enumerate(graph.layers)}
    if order[relu.id] >= order[add.id]:
        raise MorphismError(f"skip source {relu_id!r} must come before target {add_id!r}")
    src, dst = graph.shapes[relu.id], graph.shapes[add.id]
    n = _next_index(graph)
    if src == dst:
        new = [simple(f"m{n}_skip_bn", "batchnorm", relu.id)]
        detail = "identity"
    else:
        stride = _projection_stride(src, dst)
        if not stride:
            raise MorphismError(f"no 1x1 projection maps {relu_id!r} {src} onto {add_id!r} {dst}")
        new = [conv(f"m{n}_skip_conv", relu.id, dst[-1], 1, stride, "same", use_bias=False),
               simple(f"m{n}_skip_bn", "batchnorm", f"m{n}_skip_conv")]
        detail = f"proj,stride={stride}"
    layers: list[Layer] = []
    for layer in graph.layers:
        if layer.id == add.id:
            layer = replace(layer, inputs=layer.inputs + (new[-1].id,))
        layers.append(layer)
        if layer.id == relu.id:
            layers.extend(new)
    return _child(graph, layers, f"skip(from={relu.id},to={add.id},{detail})", parent_hash)


def skip_add_at(graph: Graph, relu_id: str, bn_id: str, *,
                parent_hash: str | None = None) -> Graph:
    """A new add after batch norm `bn_id` summing it with a 1×1 conv + BN projection
    of the earlier ReLU `relu_id`; the batch norm's consumers read the add."""
    relu = _get(graph, relu_id, "relu")
    bn = _get(graph, bn_id, "batchnorm")
    order = {l.id: n for n, l in enumerate(graph.layers)}
    if order[relu.id] >= order[bn.id]:
        raise MorphismError(f"skip source {relu_id!r} must come before target {bn_id!r}")
    src, dst = graph.shapes[relu.id], graph.shapes[bn.id]
    stride = _projection_stride(src, dst)
    if not stride:
        raise MorphismError(f"no 1x1 projection maps {relu_id!r} {src} onto {bn_id!r} {dst}")
    n = _next_index(graph)
    cid, pid, aid = f"m{n}_skip_conv", f"m{n}_skip_bn", f"m{n}_skip_add"
    branch = [conv(cid, relu.id, dst[-1], 1, stride, "same", use_bias=False), simple(pid, "batchnorm", cid)]
    layers: list[Layer] = []
    for layer in graph.layers:
        if bn.id in layer.inputs:
            layer = replace(layer, inputs=tuple(aid if i == bn.id else i for i in layer.inputs))
        layers.append(layer)
        if layer.id == relu.id:
            layers.extend(branch)
        if layer.id == bn.id:
            layers.append(simple(aid, "add", bn.id, pid))
    return _child(graph, layers, f"skip(from={relu.id},after={bn.id},new_add,stride={stride})", parent_hash)


# ---------------------------------------------------------------------------
# Random operations (the public contract used by search and the CLI).

def deeper(graph: Graph, rng: random.Random, kernel_size: int = 3) -> Graph:
    """Insert a conv + BN + ReLU block after a random ReLU."""
    positions = deeper_positions(graph)
    if not positions:
        raise MorphismError("deeper: the graph has no ReLU to insert after")
    return deeper_at(graph, rng.choice(positions), kernel_size)


def wider(graph: Graph, rng: random.Random, space: MorphSpace | None = None) -> Graph:
    """Widen a random conv of the main path (never one feeding the residual stream)."""
    positions = wider_positions(graph)
    if not positions:
        raise MorphismError("wider: the graph has no conv whose width can change")
    conv_id = rng.choice(positions)
    fractions = (space or MorphSpace()).widen_fractions
    return wider_at(graph, conv_id, _widen_amount(graph.layer(conv_id).filters, rng, fractions))


def skip(graph: Graph, rng: random.Random, space: MorphSpace | None = None) -> Graph:
    """Add a residual connection from a random earlier ReLU: into a later add, or
    (where `space` allows) through a new add after a main-chain batch norm."""
    positions = _skip_choices(graph, space or MorphSpace())
    if not positions:
        raise MorphismError("skip: no (ReLU, later add or batch norm) pair can be connected")
    relu_id, target, _, new_add = rng.choice(positions)
    return skip_add_at(graph, relu_id, target) if new_add else skip_at(graph, relu_id, target)


def random_morph(graph: Graph, seed: int, steps: int = 1, kernel_size: int = 3,
                 limits: Limits | None = None, space: MorphSpace | None = None) -> Graph:
    """Apply `steps` random operations; the same arguments give the same child.

    When an operation at a position would cross a limit, other positions and
    other operations are tried; `MorphismError` names the limit when none fits.
    """
    if not isinstance(steps, int) or steps < 1:
        raise MorphismError(f"steps must be a positive integer, got {steps!r}")
    _check_kernel(kernel_size)
    rng = random.Random(_int_seed(seed))
    child = graph
    operations: list[str] = []
    for _ in range(steps):
        # Intermediate parents are not recorded: skip hashing them.
        child = morph_step(child, rng, kernel_size, limits, parent_hash="", space=space)
        operations.extend(child.meta["operations"])
    name = f"{graph.meta.get('name') or 'graph'}+{steps}m"
    return child.with_meta(name=name, parent=graph.hash(), operations=operations)


def morph_step(graph: Graph, rng: random.Random, kernel_size: int = 3,
               limits: Limits | None = None, *, parent_hash: str | None = None,
               space: MorphSpace | None = None) -> Graph:
    """One random operation of `space` (default: the original's) within `limits`,
    trying alternatives before refusing."""
    limits = limits or Limits()
    space = space or MorphSpace()
    ops = list(OPERATIONS)
    rng.shuffle(ops)
    refusal: str | None = None
    base_layers = len(graph.layers)
    for op in ops:
        attempts = _attempts(graph, op, rng, kernel_size, parent_hash, space)
        for added_layers, make in attempts:
            if base_layers + added_layers > limits.max_layers:
                refusal = refusal or (f"child would have {base_layers + added_layers} layers, "
                                      f"over the limit max_layers={limits.max_layers}")
                continue  # a position that adds fewer layers may still fit
            child = make()
            reason = limits.violation(child)
            if reason is None:
                return child
            refusal = refusal or reason
    raise MorphismError(refusal or "no morphism operation applies to this graph")


# ---------------------------------------------------------------------------
def _attempts(graph: Graph, op: str, rng: random.Random, kernel_size: int,
              parent_hash: str | None, space: MorphSpace) -> list[tuple[int, Callable[[], Graph]]]:
    """Shuffled (layers added, builder) pairs for every position of `op`."""
    out: list[tuple[int, Callable[[], Graph]]] = []
    if op == "deeper":
        positions = deeper_positions(graph)
        rng.shuffle(positions)
        out = [(3, partial(deeper_at, graph, p, kernel_size, parent_hash=parent_hash)) for p in positions]
    elif op == "wider":
        positions = wider_positions(graph)
        rng.shuffle(positions)
        for p in positions:
            extra = _widen_amount(graph.layer(p).filters, rng, space.widen_fractions)
            out.append((0, partial(wider_at, graph, p, extra, parent_hash=parent_hash)))
    else:
        choices = _skip_choices(graph, space)
        rng.shuffle(choices)
        for r, t, s, new_add in choices:
            if new_add:  # projection conv, its BN and the add
                out.append((3, partial(skip_add_at, graph, r, t, parent_hash=parent_hash)))
            else:  # a BN gate, or a projection conv and its BN
                out.append((2 if s else 1, partial(skip_at, graph, r, t, parent_hash=parent_hash)))
    return out


def _skip_choices(graph: Graph, space: MorphSpace) -> list[tuple[str, str, int, bool]]:
    """(source, target, stride, new add?) for every skip `space` allows, joins first."""
    out = [(r, a, s, False) for r, a, s in skip_positions(graph)]
    if space.skip_new_add:
        out += [(r, b, s, True) for r, b, s in add_skip_positions(graph)]
    return out


def _widen_amount(filters: int, rng: random.Random, fractions: Sequence[float]) -> int:
    return max(1, int(filters * rng.choice(fractions)))


def _child(parent: Graph, layers: Sequence[Layer], operation: str,
           parent_hash: str | None) -> Graph:
    # Hashing costs more than the edit itself: callers that know the parent's
    # hash (or will overwrite it) pass it in.
    if parent_hash is None:
        parent_hash = parent.hash()
    name = f"{parent.meta.get('name') or 'graph'}+m"
    try:
        return parent.with_layers(layers, name=name, parent=parent_hash, operations=[operation])
    except GraphError as exc:  # pragma: no cover - positions are pre-validated
        raise MorphismError(f"{operation} gives an invalid graph: {exc}") from exc


def _get(graph: Graph, layer_id: str, layer_type: str) -> Layer:
    try:
        layer = graph.layer(layer_id)
    except KeyError:
        raise MorphismError(f"no layer {layer_id!r} in the graph") from None
    if layer.type != layer_type:
        raise MorphismError(f"layer {layer_id!r} is a {layer.type}, expected a {layer_type}")
    return layer


def _next_index(graph: Graph) -> int:
    """1 + the largest n of existing 'm<n>_' ids: new ids are unique and deterministic."""
    best = 0
    for layer in graph.layers:
        m = _NEW_ID.match(layer.id)
        if m:
            best = max(best, int(m.group(1)))
    return best + 1


def _consumers(graph: Graph) -> dict[str, list[Layer]]:
    out: dict[str, list[Layer]] = {l.id: [] for l in graph.layers}
    for layer in graph.layers:
        for i in dict.fromkeys(layer.inputs):
            if i != INPUT:
                out[i].append(layer)
    return out


def _channel_closure(conv_id: str, consumers: dict[str, list[Layer]]) -> list[str] | None:
    """Layers whose channel count follows conv `conv_id`, or None if a layer that
    neither passes nor absorbs extra channels (an add, the classifier's pool) or
    a dead end makes widening impossible."""
    seen: list[str] = []
    stack = [conv_id]
    absorbed = False
    while stack:
        lid = stack.pop()
        for c in consumers[lid]:
            kind = KINDS[c.type]
            if kind.absorbs_widening:
                absorbed = True
            elif kind.passes_widening:
                if c.id not in seen:
                    seen.append(c.id)
                    stack.append(c.id)
            else:
                return None
    return seen if absorbed else None


def _skip_source(layer_id: str, by_id: dict[str, Layer]) -> str:
    """The ReLU behind an add input, looking through a skip projection."""
    lid = layer_id
    for _ in range(2):
        layer = by_id.get(lid)
        if layer is None or layer.type not in ("batchnorm", "conv"):
            break
        lid = layer.inputs[0]
    return lid


def _projection_stride(src: tuple[int, ...], dst: tuple[int, ...]) -> int:
    """Smallest stride s with ceil(src/s) == dst spatially; 0 when none exists."""
    if src[0] < dst[0] or src[1] < dst[1]:
        return 0
    for s in range(1, max(src[0], src[1]) + 1):
        if math.ceil(src[0] / s) == dst[0] and math.ceil(src[1] / s) == dst[1]:
            return s
    return 0


def _check_kernel(k: int) -> None:
    try:
        check_kernel_size(k)
    except HyperparameterError as exc:
        raise MorphismError(str(exc)) from None


def _int_seed(seed: int) -> int:
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise MorphismError(f"seed must be an integer, got {seed!r}")
    return seed
