"""`LayerKind`: the interface of one entry of the layer registry, and shape helpers.

A layer kind (conv, batch norm, ReLU, ...) is one `LayerKind` object in
`aiperf.layers.KINDS`. It holds everything the library knows about the kind:
which attributes a layer of it carries, its output shape and parameter count,
its forward and backward FLOPs, its Keras layer, how weight transfer
initialises it, what the edit distance sees of it and how widening flows
through it. The graph, the FLOP counter, the Keras builder, weight transfer,
the distance and morphism ask the registry instead of branching on the type
name, so a new kind is one new entry.
"""

from __future__ import annotations

import abc
import math
from typing import Any, Sequence

from aiperf.layers.layer import PADDINGS, GraphError, Layer, Shape
from aiperf.layers.transfer import Origin, TransferContext, TransferError, matching_input


class LayerKind(abc.ABC):
    """The knowledge about one kind of layer. Class attributes describe it;
    methods with a default body fit the kinds that do not override them."""

    name: str = ""
    attributes: tuple[str, ...] = ()  # Layer fields a layer of this kind carries, in JSON order
    single_input: bool = True  # False: reads two or more inputs (add)
    sums_inputs: bool = False  # the output is the sum of the inputs: their order does not matter
    # conv and dense: counted in the depth, they make up the main chain the edit
    # distance compares, and a skip branch through one is a projection.
    weighted: bool = False
    passes_widening: bool = False  # extra input channels flow through to the output
    absorbs_widening: bool = False  # extra input channels are absorbed by the weights

    # -- shape and size -------------------------------------------------
    @abc.abstractmethod
    def output_shape(self, layer: Layer, inputs: Sequence[Shape]) -> Shape:
        """The output shape; GraphError naming the layer when inputs or attributes
        do not fit. A single-input kind gets exactly one shape (the graph checks)."""

    def num_params(self, layer: Layer, x: Shape) -> int:
        """Parameters as Keras counts them, given the (first) input shape."""
        return 0

    @abc.abstractmethod
    def flops(self, layer: Layer, x: Shape, out: Shape, reads_image: bool) -> tuple[int, int]:
        """(forward, backward) operations per image (SPEC section 6).

        x: the (first) input shape; out: the output shape; reads_image: the
        layer reads the image itself, so no gradient flows to its input.
        """

    # -- Keras ------------------------------------------------------------
    @abc.abstractmethod
    def keras_layer(self, layer: Layer, seed: int | None) -> Any:
        """The Keras layer computing this layer, named by its id. Keras is imported
        inside, so the library imports without TensorFlow. `seed` seeds initialisers."""

    # -- edit distance ----------------------------------------------------
    def width(self, layer: Layer) -> int:
        """The width the edit distance compares along the main chain (weighted kinds)."""
        raise TypeError(f"a {self.name} layer has no width")

    # -- weight transfer --------------------------------------------------
    def non_negative(self, inputs_non_negative: Sequence[bool]) -> bool:
        """Whether the output cannot be negative, given which inputs cannot be."""
        return False

    def inherit(self, layer: Layer, parent: Layer, inputs: Sequence[Origin],
                ctx: TransferContext) -> Origin:
        """The child's copy of `parent`, with weights put in `ctx.out`. Default:
        a channel-wise layer without weights, which keeps its input's channel map."""
        return Origin(layer.id, matching_input(layer, parent, inputs).channel_map)

    def initialise(self, layer: Layer, x: Origin, ctx: TransferContext) -> Origin:
        """Weights for a layer the parent lacks, reading `x`, that keep the parent's
        function (put in `ctx.out`). Default: there are none."""
        raise TransferError(f"new layer {layer.id!r} ({layer.type}) has no function-preserving initialisation")

    def initialise_many(self, layer: Layer, inputs: Sequence[Origin], ctx: TransferContext) -> Origin:
        """As `initialise`, for a new layer of a kind that reads several inputs."""
        raise TransferError(f"new layer {layer.id!r} ({layer.type}) has no function-preserving initialisation")


def size(shape: Shape) -> int:
    """Number of elements of a tensor of this shape."""
    return math.prod(shape)


def check_window(layer: Layer, x: Shape) -> None:
    """The input rank, kernel, stride and padding a sliding window (conv, max pool) needs."""
    if len(x) != 3:
        raise GraphError(f"layer {layer.id!r} ({layer.type}) needs a H×W×C input, got shape {x}")
    if layer.kernel <= 0 or layer.stride <= 0:
        raise GraphError(f"layer {layer.id!r}: kernel and stride must be positive")
    if layer.padding not in PADDINGS:
        raise GraphError(f"layer {layer.id!r}: padding must be 'same' or 'valid', got {layer.padding!r}")


def window_shape(layer: Layer, x: Shape, channels: int) -> Shape:
    """Output shape of a checked sliding window with `channels` output channels."""
    h = _spatial_out(x[0], layer.kernel, layer.stride, layer.padding)
    w = _spatial_out(x[1], layer.kernel, layer.stride, layer.padding)
    if h <= 0 or w <= 0:
        raise GraphError(f"layer {layer.id!r}: kernel {layer.kernel} does not fit input {x[0]}×{x[1]}")
    return (h, w, channels)


def _spatial_out(size: int, kernel: int, stride: int, padding: str) -> int:
    if padding == "same":
        return math.ceil(size / stride)
    return (size - kernel) // stride + 1
