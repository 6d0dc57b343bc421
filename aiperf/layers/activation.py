"""Element-wise activations: ReLU, and the softmax that ends the classifier."""

from __future__ import annotations

from typing import Any, Sequence

from aiperf.layers.kind import LayerKind, size
from aiperf.layers.layer import GraphError, Layer, Shape
from aiperf.layers.transfer import Origin, TransferContext, TransferError

SOFTMAX_PER_CLASS = 21  # Table III: 2.10E04 for 1000 classes


class Relu(LayerKind):
    name = "relu"
    passes_widening = True

    def output_shape(self, layer: Layer, inputs: Sequence[Shape]) -> Shape:
        return inputs[0]

    def flops(self, layer: Layer, x: Shape, out: Shape, reads_image: bool) -> tuple[int, int]:
        return size(out), 0

    def keras_layer(self, layer: Layer, seed: int | None) -> Any:
        import keras

        return keras.layers.Activation("relu", name=layer.id)

    def non_negative(self, inputs_non_negative: Sequence[bool]) -> bool:
        return True

    def initialise(self, layer: Layer, x: Origin, ctx: TransferContext) -> Origin:
        """An identity on a tensor that cannot be negative."""
        if x.source is None or x.source not in ctx.parent_non_negative:
            raise TransferError(f"new ReLU {layer.id!r} would change values: its input may be negative")
        return x


class Softmax(LayerKind):
    name = "softmax"

    def output_shape(self, layer: Layer, inputs: Sequence[Shape]) -> Shape:
        (x,) = inputs
        if len(x) != 1:
            raise GraphError(f"layer {layer.id!r} (softmax) needs a flat input, got shape {x}")
        return x

    def flops(self, layer: Layer, x: Shape, out: Shape, reads_image: bool) -> tuple[int, int]:
        return SOFTMAX_PER_CLASS * out[0], 0

    def keras_layer(self, layer: Layer, seed: int | None) -> Any:
        import keras

        # float32 whatever the policy: mixed precision keeps a stable loss.
        return keras.layers.Activation("softmax", dtype="float32", name=layer.id)
