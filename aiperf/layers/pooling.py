"""Pooling: max pooling over a window, and global average pooling to a flat vector."""

from __future__ import annotations

from typing import Any, Sequence

from aiperf.layers.kind import LayerKind, check_window, size, window_shape
from aiperf.layers.layer import GraphError, Layer, Shape


class MaxPool(LayerKind):
    name = "maxpool"
    attributes = ("kernel", "stride", "padding")
    passes_widening = True

    def output_shape(self, layer: Layer, inputs: Sequence[Shape]) -> Shape:
        (x,) = inputs
        check_window(layer, x)
        return window_shape(layer, x, x[2])

    def flops(self, layer: Layer, x: Shape, out: Shape, reads_image: bool) -> tuple[int, int]:
        return layer.kernel * layer.kernel * size(out), 0

    def keras_layer(self, layer: Layer, seed: int | None) -> Any:
        import keras

        return keras.layers.MaxPooling2D(layer.kernel, strides=layer.stride, padding=layer.padding, name=layer.id)

    def non_negative(self, inputs_non_negative: Sequence[bool]) -> bool:
        return inputs_non_negative[0]


class AvgPool(LayerKind):
    """Global average pooling: H×W×C to C. Widening stops here: the classifier
    after it cannot absorb extra channels."""

    name = "avgpool"

    def output_shape(self, layer: Layer, inputs: Sequence[Shape]) -> Shape:
        (x,) = inputs
        if len(x) != 3:
            raise GraphError(f"layer {layer.id!r} (avgpool) needs a H×W×C input, got shape {x}")
        return (x[2],)

    def flops(self, layer: Layer, x: Shape, out: Shape, reads_image: bool) -> tuple[int, int]:
        return size(x), 0

    def keras_layer(self, layer: Layer, seed: int | None) -> Any:
        import keras

        return keras.layers.GlobalAveragePooling2D(name=layer.id)
