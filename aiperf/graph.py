"""Architecture graph: a pure-Python DAG of layers with shape inference.

An architecture is a list of layers, each naming its inputs by id; the reserved
id ``input`` is the image. Construction sorts the layers topologically, infers
every shape and rejects inconsistent graphs with a `GraphError` naming the
layer. The canonical JSON form is versioned and round-trips exactly; the
content hash ignores layer ids and metadata, so two equal architectures hash
equal however their layers are named. What a layer of each type carries and
how its shape follows from its inputs is the type's entry in `aiperf.layers`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Mapping

from aiperf.hyperparameters import HyperparameterError, check_kernel_size
from aiperf.layers import KINDS
from aiperf.layers.layer import ATTRIBUTE_TYPES, INPUT, INSERTED, PADDINGS, GraphError, Layer, Shape

__all__ = [
    "FORMAT", "VERSION", "INPUT", "INSERTED", "PADDINGS", "Shape", "GraphError", "Layer",
    "Graph", "conv", "simple", "maxpool", "dense", "layer_to_dict", "layer_from_dict", "with_inserted_kernel",
]

FORMAT = "aiperf.graph"
VERSION = 1


def layer_to_dict(layer: Layer) -> dict[str, Any]:
    """JSON form of a layer: id, type, inputs, the attributes of its kind, tag if any."""
    d: dict[str, Any] = {"id": layer.id, "type": layer.type, "inputs": list(layer.inputs)}
    for name in KINDS[layer.type].attributes:
        d[name] = getattr(layer, name)
    if layer.tag:
        d["tag"] = layer.tag
    return d


def layer_from_dict(d: Mapping[str, Any]) -> Layer:
    """Inverse of `layer_to_dict`; GraphError naming the layer and the field at fault."""
    if not isinstance(d, Mapping):
        raise GraphError(f"layer entry must be an object, got {type(d).__name__}")
    lid = d.get("id")
    if not isinstance(lid, str) or not lid:
        raise GraphError(f"layer without a valid 'id': {dict(d)!r:.120}")
    ltype = d.get("type")
    if not isinstance(ltype, str) or ltype not in KINDS:
        raise GraphError(f"layer {lid!r}: unknown type {ltype!r} (expected one of {', '.join(KINDS)})")
    inputs = d.get("inputs")
    if not isinstance(inputs, list) or not all(isinstance(i, str) for i in inputs):
        raise GraphError(f"layer {lid!r}: 'inputs' must be a list of layer ids")
    attributes = KINDS[ltype].attributes
    unknown = set(d) - {"id", "type", "inputs", "tag"} - set(attributes)
    if unknown:
        raise GraphError(f"layer {lid!r}: unknown field(s) {', '.join(sorted(unknown))} for type {ltype}")
    kwargs: dict[str, Any] = {}
    for name in attributes:
        if name not in d:
            raise GraphError(f"layer {lid!r}: missing field {name!r} for type {ltype}")
        expected = ATTRIBUTE_TYPES[name]
        if type(d[name]) is not expected:  # bool is an int subclass: be exact
            raise GraphError(f"layer {lid!r}: field {name!r} must be {expected.__name__}, got {d[name]!r}")
        kwargs[name] = d[name]
    tag = d.get("tag", "")
    if not isinstance(tag, str):
        raise GraphError(f"layer {lid!r}: 'tag' must be a string")
    return Layer(id=lid, type=ltype, inputs=tuple(inputs), tag=tag, **kwargs)


def conv(id: str, input: str, filters: int, kernel: int, stride: int = 1,
         padding: str = "same", use_bias: bool = True, tag: str = "") -> Layer:
    return Layer(id, "conv", (input,), kernel=kernel, stride=stride, filters=filters,
                 padding=padding, use_bias=use_bias, tag=tag)


def simple(id: str, type: str, *inputs: str) -> Layer:
    """A layer without attributes: batchnorm, relu, add, avgpool, softmax."""
    return Layer(id, type, tuple(inputs))


def maxpool(id: str, input: str, kernel: int, stride: int, padding: str = "same") -> Layer:
    return Layer(id, "maxpool", (input,), kernel=kernel, stride=stride, padding=padding)


def dense(id: str, input: str, units: int) -> Layer:
    return Layer(id, "dense", (input,), units=units)


@dataclass(frozen=True)
class Graph:
    """An immutable, validated architecture. Use the constructor or `from_json`."""

    input_shape: tuple[int, int, int]
    num_classes: int
    layers: tuple[Layer, ...]
    meta: Mapping[str, Any] = field(default_factory=dict, compare=False)
    shapes: Mapping[str, Shape] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        shape = tuple(self.input_shape)
        if len(shape) != 3 or not all(isinstance(s, int) and not isinstance(s, bool) for s in shape):
            raise GraphError(f"input_shape must be three integers (H, W, C), got {self.input_shape!r}")
        if min(shape) <= 0:
            raise GraphError(f"input_shape must be positive, got {shape}")
        if not isinstance(self.num_classes, int) or self.num_classes <= 0:
            raise GraphError(f"num_classes must be a positive integer, got {self.num_classes!r}")
        object.__setattr__(self, "input_shape", shape)
        object.__setattr__(self, "layers", _toposort(tuple(self.layers)))
        object.__setattr__(self, "meta", _check_meta(self.meta))
        object.__setattr__(self, "shapes", _infer_shapes(self))

    # -- access -----------------------------------------------------------
    def layer(self, layer_id: str) -> Layer:
        for layer in self.layers:
            if layer.id == layer_id:
                return layer
        raise KeyError(layer_id)

    def input_shapes(self, layer: Layer) -> list[Shape]:
        return [self.input_shape if i == INPUT else self.shapes[i] for i in layer.inputs]

    def consumers(self, layer_id: str) -> list[Layer]:
        return [l for l in self.layers if layer_id in l.inputs]

    @property
    def output(self) -> Layer:
        return self.layers[-1]

    # -- derived numbers ----------------------------------------------------
    def num_params(self) -> int:
        """Parameters as Keras counts them (BN: 4 per channel, incl. moving stats)."""
        return sum(KINDS[l.type].num_params(l, self.input_shapes(l)[0]) for l in self.layers)

    def depth(self) -> int:
        """Longest path in weighted layers (conv and dense) from input to output."""
        best: dict[str, int] = {INPUT: 0}
        for layer in self.layers:
            d = max(best[i] for i in layer.inputs)
            best[layer.id] = d + (1 if KINDS[layer.type].weighted else 0)
        return best[self.output.id]

    # -- serialisation ----------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": VERSION,
            "input_shape": list(self.input_shape),
            "num_classes": self.num_classes,
            "layers": [layer_to_dict(l) for l in self.layers],
            "meta": dict(self.meta),
        }

    def to_json(self, indent: int | None = None) -> str:
        """Canonical JSON: sorted keys, fixed separators, layers in canonical order."""
        if indent is None:
            return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        return json.dumps(self.to_dict(), sort_keys=True, indent=indent)

    @staticmethod
    def from_json(text: str | bytes) -> "Graph":
        try:
            data = json.loads(text)
        except (json.JSONDecodeError, UnicodeDecodeError, TypeError) as exc:
            raise GraphError(f"not valid JSON: {exc}") from None
        return Graph.from_dict(data)

    @staticmethod
    def from_dict(data: Any) -> "Graph":
        if not isinstance(data, dict):
            raise GraphError("graph JSON must be an object")
        if data.get("format") != FORMAT:
            raise GraphError(f"not an AIPerf graph: 'format' is {data.get('format')!r}, expected {FORMAT!r}")
        version = data.get("version")
        if version != VERSION:
            raise GraphError(f"unsupported graph version {version!r} (this AIPerf reads version {VERSION})")
        for key in ("input_shape", "num_classes", "layers"):
            if key not in data:
                raise GraphError(f"graph JSON lacks {key!r}")
        unknown = set(data) - {"format", "version", "input_shape", "num_classes", "layers", "meta"}
        if unknown:
            raise GraphError(f"graph JSON has unknown key(s) {', '.join(sorted(unknown))}")
        if not isinstance(data["layers"], list):
            raise GraphError("'layers' must be a list")
        if not isinstance(data["input_shape"], list):
            raise GraphError("'input_shape' must be a list of three integers")
        layers = tuple(layer_from_dict(d) for d in data["layers"])
        return Graph(tuple(data["input_shape"]), data["num_classes"], layers, data.get("meta") or {})

    def hash(self) -> str:
        """Content hash of the architecture, independent of layer ids and metadata."""
        sig: dict[str, str] = {INPUT: "input"}
        for layer in self.layers:
            attrs = {k: v for k, v in layer_to_dict(layer).items() if k not in ("id", "inputs")}
            ins = [sig[i] for i in layer.inputs]
            if KINDS[layer.type].sums_inputs:  # the order of summed inputs does not matter
                ins.sort()
            blob = json.dumps([attrs, ins], sort_keys=True, separators=(",", ":"))
            sig[layer.id] = hashlib.sha256(blob.encode()).hexdigest()
        # The output signature encodes the DAG as a tree; the multiset of node
        # signatures tells apart graphs that share a node from ones that copy it.
        body = json.dumps({
            "input_shape": list(self.input_shape),
            "num_classes": self.num_classes,
            "output": sig[self.output.id],
            "nodes": sorted(sig[l.id] for l in self.layers),
        }, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(body.encode()).hexdigest()

    # -- editing (returns new graphs) ------------------------------------
    def with_layers(self, layers: Iterable[Layer], **meta: Any) -> "Graph":
        """A new graph with these layers; `meta` entries update the metadata."""
        new_meta = dict(self.meta)
        new_meta.update(meta)
        return Graph(self.input_shape, self.num_classes, tuple(layers), new_meta)

    def with_meta(self, **meta: Any) -> "Graph":
        return self.with_layers(self.layers, **meta)


def with_inserted_kernel(graph: Graph, kernel_size: int | None) -> Graph:
    """Apply the kernel-size hyperparameter to every conv that morphism inserted.

    The trained network and the master's FLOP count both go through this, so
    the hyperparameter changes both (the original code changed only the count).
    """
    if kernel_size is None:
        return graph
    try:
        kernel_size = check_kernel_size(kernel_size)
    except HyperparameterError as exc:
        raise GraphError(str(exc)) from None
    if not any(l.tag == INSERTED and l.kernel != kernel_size for l in graph.layers):
        return graph
    layers = [replace(l, kernel=kernel_size) if l.tag == INSERTED and l.type == "conv" else l
              for l in graph.layers]
    return Graph(graph.input_shape, graph.num_classes, tuple(layers), graph.meta)


# ---------------------------------------------------------------------------
def _check_meta(meta: Any) -> dict[str, Any]:
    if not isinstance(meta, Mapping):
        raise GraphError("'meta' must be an object")
    checked: dict[str, Any] = dict(meta)
    try:
        json.dumps(checked, sort_keys=True)
    except (TypeError, ValueError) as exc:
        raise GraphError(f"'meta' must be JSON-serialisable: {exc}") from None
    return checked


def _toposort(layers: tuple[Layer, ...]) -> tuple[Layer, ...]:
    """Kahn's algorithm; ties broken by the given order so output is stable."""
    if not layers:
        raise GraphError("graph has no layers")
    by_id: dict[str, Layer] = {}
    for layer in layers:
        if layer.id == INPUT:
            raise GraphError(f"layer id {INPUT!r} is reserved for the image input")
        if layer.id in by_id:
            raise GraphError(f"duplicate layer id {layer.id!r}")
        by_id[layer.id] = layer
    for layer in layers:
        if not layer.inputs:
            raise GraphError(f"layer {layer.id!r} has no inputs")
        for i in layer.inputs:
            if i != INPUT and i not in by_id:
                raise GraphError(f"layer {layer.id!r} reads unknown layer {i!r}")
    position = {l.id: n for n, l in enumerate(layers)}
    pending = {l.id: len({i for i in l.inputs if i != INPUT}) for l in layers}
    consumers: dict[str, list[str]] = {l.id: [] for l in layers}
    for layer in layers:
        for i in set(layer.inputs):
            if i != INPUT:
                consumers[i].append(layer.id)
    ready = sorted((lid for lid, n in pending.items() if n == 0), key=position.__getitem__)
    order: list[Layer] = []
    while ready:
        lid = ready.pop(0)
        order.append(by_id[lid])
        for c in consumers[lid]:
            pending[c] -= 1
            if pending[c] == 0:
                ready.append(c)
                ready.sort(key=position.__getitem__)
    if len(order) != len(layers):
        stuck = sorted((lid for lid, n in pending.items() if n > 0), key=position.__getitem__)
        raise GraphError(f"cycle through layer {stuck[0]!r}")
    sinks = [l.id for l in order if not consumers[l.id]]
    if len(sinks) > 1:
        dangling = [s for s in sinks if s != order[-1].id] or sinks[:-1]
        raise GraphError(f"dangling layer {dangling[0]!r}: its output is never used")
    if sinks[0] != order[-1].id:  # pragma: no cover - Kahn puts the only sink last
        raise GraphError(f"output layer {sinks[0]!r} is not last")
    return tuple(order)


def _infer_shapes(graph: Graph) -> dict[str, Shape]:
    shapes: dict[str, Shape] = {INPUT: graph.input_shape}
    for layer in graph.layers:
        kind = KINDS.get(layer.type)
        if kind is None:
            raise GraphError(f"layer {layer.id!r}: unknown type {layer.type!r} (expected one of {', '.join(KINDS)})")
        ins = [shapes[i] for i in layer.inputs]
        if kind.single_input and len(ins) != 1:
            raise GraphError(f"layer {layer.id!r} ({layer.type}) takes exactly one input, got {len(ins)}")
        shapes[layer.id] = kind.output_shape(layer, ins)
    del shapes[INPUT]
    out = graph.layers[-1]
    if shapes[out.id] != (graph.num_classes,):
        raise GraphError(f"output layer {out.id!r} has shape {shapes[out.id]}, expected ({graph.num_classes},)")
    return shapes
