"""Architecture graph: a pure-Python DAG of layers with shape inference.

An architecture is a list of layers, each naming its inputs by id; the reserved
id ``input`` is the image. Construction sorts the layers topologically, infers
every shape and rejects inconsistent graphs with a `GraphError` naming the
layer. The canonical JSON form is versioned and round-trips exactly; the
content hash ignores layer ids and metadata, so two equal architectures hash
equal however their layers are named.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Mapping

FORMAT = "aiperf.graph"
VERSION = 1
INPUT = "input"

LAYER_TYPES = ("conv", "batchnorm", "relu", "add", "maxpool", "avgpool", "dense", "softmax")
PADDINGS = ("same", "valid")
# Tag that morphism puts on the convolutions it inserts: the kernel-size
# hyperparameter applies to exactly these (see `with_inserted_kernel`).
INSERTED = "inserted"

Shape = tuple[int, ...]


class GraphError(ValueError):
    """An inconsistent or malformed architecture; the message names the layer."""


@dataclass(frozen=True)
class Layer:
    """One node of the graph. Only the fields of its type are meaningful."""

    id: str
    type: str
    inputs: tuple[str, ...]
    kernel: int = 0  # conv, maxpool
    stride: int = 0  # conv, maxpool
    filters: int = 0  # conv
    padding: str = ""  # conv, maxpool
    use_bias: bool = False  # conv, dense (dense always has a bias)
    units: int = 0  # dense
    tag: str = ""  # e.g. INSERTED

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"id": self.id, "type": self.type, "inputs": list(self.inputs)}
        if self.type == "conv":
            d.update(kernel=self.kernel, stride=self.stride, filters=self.filters,
                     padding=self.padding, use_bias=self.use_bias)
        elif self.type == "maxpool":
            d.update(kernel=self.kernel, stride=self.stride, padding=self.padding)
        elif self.type == "dense":
            d.update(units=self.units)
        if self.tag:
            d["tag"] = self.tag
        return d

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> "Layer":
        if not isinstance(d, Mapping):
            raise GraphError(f"layer entry must be an object, got {type(d).__name__}")
        lid = d.get("id")
        if not isinstance(lid, str) or not lid:
            raise GraphError(f"layer without a valid 'id': {dict(d)!r:.120}")
        ltype = d.get("type")
        if ltype not in LAYER_TYPES:
            raise GraphError(f"layer {lid!r}: unknown type {ltype!r} (expected one of {', '.join(LAYER_TYPES)})")
        inputs = d.get("inputs")
        if not isinstance(inputs, list) or not all(isinstance(i, str) for i in inputs):
            raise GraphError(f"layer {lid!r}: 'inputs' must be a list of layer ids")
        allowed = {"id", "type", "inputs", "tag"} | set(_FIELDS[ltype])
        unknown = set(d) - allowed
        if unknown:
            raise GraphError(f"layer {lid!r}: unknown field(s) {', '.join(sorted(unknown))} for type {ltype}")
        kwargs: dict[str, Any] = {}
        for name in _FIELDS[ltype]:
            if name not in d:
                raise GraphError(f"layer {lid!r}: missing field {name!r} for type {ltype}")
            value = d[name]
            expected = bool if name == "use_bias" else (str if name == "padding" else int)
            if type(value) is not expected:  # bool is an int subclass: be exact
                raise GraphError(f"layer {lid!r}: field {name!r} must be {expected.__name__}, got {value!r}")
            kwargs[name] = value
        tag = d.get("tag", "")
        if not isinstance(tag, str):
            raise GraphError(f"layer {lid!r}: 'tag' must be a string")
        return Layer(id=lid, type=ltype, inputs=tuple(inputs), tag=tag, **kwargs)


_FIELDS: dict[str, tuple[str, ...]] = {
    "conv": ("kernel", "stride", "filters", "padding", "use_bias"),
    "maxpool": ("kernel", "stride", "padding"),
    "dense": ("units",),
    "batchnorm": (),
    "relu": (),
    "add": (),
    "avgpool": (),
    "softmax": (),
}


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


def _spatial_out(size: int, kernel: int, stride: int, padding: str) -> int:
    if padding == "same":
        return math.ceil(size / stride)
    return (size - kernel) // stride + 1


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
        total = 0
        for layer in self.layers:
            (in_shape, *_) = self.input_shapes(layer) or [()]
            if layer.type == "conv":
                total += layer.kernel * layer.kernel * in_shape[-1] * layer.filters
                total += layer.filters if layer.use_bias else 0
            elif layer.type == "batchnorm":
                total += 4 * in_shape[-1]
            elif layer.type == "dense":
                total += in_shape[-1] * layer.units + layer.units
        return total

    def depth(self) -> int:
        """Longest path in weighted layers (conv and dense) from input to output."""
        best: dict[str, int] = {INPUT: 0}
        for layer in self.layers:
            d = max(best[i] for i in layer.inputs)
            best[layer.id] = d + (1 if layer.type in ("conv", "dense") else 0)
        return best[self.output.id]

    # -- serialisation ----------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": VERSION,
            "input_shape": list(self.input_shape),
            "num_classes": self.num_classes,
            "layers": [l.to_dict() for l in self.layers],
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
        layers = tuple(Layer.from_dict(d) for d in data["layers"])
        return Graph(tuple(data["input_shape"]), data["num_classes"], layers, data.get("meta") or {})

    def hash(self) -> str:
        """Content hash of the architecture, independent of layer ids and metadata."""
        sig: dict[str, str] = {INPUT: "input"}
        for layer in self.layers:
            attrs = {k: v for k, v in layer.to_dict().items() if k not in ("id", "inputs")}
            ins = [sig[i] for i in layer.inputs]
            if layer.type == "add":  # commutative
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
    if not isinstance(kernel_size, int) or kernel_size <= 0 or kernel_size % 2 == 0:
        raise GraphError(f"kernel_size must be a positive odd integer, got {kernel_size!r}")
    if not any(l.tag == INSERTED and l.kernel != kernel_size for l in graph.layers):
        return graph
    layers = [replace(l, kernel=kernel_size) if l.tag == INSERTED and l.type == "conv" else l
              for l in graph.layers]
    return Graph(graph.input_shape, graph.num_classes, tuple(layers), graph.meta)


# ---------------------------------------------------------------------------
def _check_meta(meta: Any) -> dict[str, Any]:
    if not isinstance(meta, Mapping):
        raise GraphError("'meta' must be an object")
    meta = dict(meta)
    try:
        json.dumps(meta, sort_keys=True)
    except (TypeError, ValueError) as exc:
        raise GraphError(f"'meta' must be JSON-serialisable: {exc}") from None
    return meta


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
    shapes: dict[str, Shape] = {}

    def shape_of(i: str) -> Shape:
        return graph.input_shape if i == INPUT else shapes[i]

    for layer in graph.layers:
        ins = [shape_of(i) for i in layer.inputs]
        t, lid = layer.type, layer.id
        if t != "add" and len(ins) != 1:
            raise GraphError(f"layer {lid!r} ({t}) takes exactly one input, got {len(ins)}")
        x = ins[0]
        if t in ("conv", "maxpool"):
            if len(x) != 3:
                raise GraphError(f"layer {lid!r} ({t}) needs a H×W×C input, got shape {x}")
            if layer.kernel <= 0 or layer.stride <= 0:
                raise GraphError(f"layer {lid!r}: kernel and stride must be positive")
            if layer.padding not in PADDINGS:
                raise GraphError(f"layer {lid!r}: padding must be 'same' or 'valid', got {layer.padding!r}")
            if t == "conv" and layer.filters <= 0:
                raise GraphError(f"layer {lid!r}: filters must be positive, got {layer.filters}")
            h = _spatial_out(x[0], layer.kernel, layer.stride, layer.padding)
            w = _spatial_out(x[1], layer.kernel, layer.stride, layer.padding)
            if h <= 0 or w <= 0:
                raise GraphError(f"layer {lid!r}: kernel {layer.kernel} does not fit input {x[0]}×{x[1]}")
            shapes[lid] = (h, w, layer.filters if t == "conv" else x[2])
        elif t in ("batchnorm", "relu"):
            shapes[lid] = x
        elif t == "add":
            if len(ins) < 2:
                raise GraphError(f"layer {lid!r} (add) needs at least two inputs")
            if any(s != x for s in ins):
                raise GraphError(f"layer {lid!r} (add): shape mismatch {' vs '.join(map(str, ins))}")
            shapes[lid] = x
        elif t == "avgpool":
            if len(x) != 3:
                raise GraphError(f"layer {lid!r} (avgpool) needs a H×W×C input, got shape {x}")
            shapes[lid] = (x[2],)
        elif t == "dense":
            if len(x) != 1:
                raise GraphError(f"layer {lid!r} (dense) needs a flat input, got shape {x}")
            if layer.units <= 0:
                raise GraphError(f"layer {lid!r}: units must be positive, got {layer.units}")
            shapes[lid] = (layer.units,)
        elif t == "softmax":
            if len(x) != 1:
                raise GraphError(f"layer {lid!r} (softmax) needs a flat input, got shape {x}")
            shapes[lid] = x
    out = graph.layers[-1]
    if shapes[out.id] != (graph.num_classes,):
        raise GraphError(f"output layer {out.id!r} has shape {shapes[out.id]}, expected ({graph.num_classes},)")
    return shapes
