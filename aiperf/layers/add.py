"""Element-wise sum of two or more tensors of one shape: the residual connection."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from aiperf.layers.kind import LayerKind, size
from aiperf.layers.layer import GraphError, Layer, Shape
from aiperf.layers.transfer import Origin, TransferContext, TransferError


class Add(LayerKind):
    name = "add"
    single_input = False
    sums_inputs = True

    def output_shape(self, layer: Layer, inputs: Sequence[Shape]) -> Shape:
        if len(inputs) < 2:
            raise GraphError(f"layer {layer.id!r} (add) needs at least two inputs")
        x = inputs[0]
        if any(s != x for s in inputs):
            raise GraphError(f"layer {layer.id!r} (add): shape mismatch {' vs '.join(map(str, inputs))}")
        return x

    def flops(self, layer: Layer, x: Shape, out: Shape, reads_image: bool) -> tuple[int, int]:
        # Keras sums n inputs with n - 1 additions per element: a skip into an
        # existing add makes a 3- or 4-input add (SPEC section 6).
        return (len(layer.inputs) - 1) * size(out), 0

    def keras_layer(self, layer: Layer, seed: int | None) -> Any:
        import keras

        return keras.layers.Add(name=layer.id)

    def inherit(self, layer: Layer, parent: Layer, inputs: Sequence[Origin], ctx: TransferContext) -> Origin:
        """The parent's inputs plus zero branches, all widened alike."""
        live = [t for t in inputs if not t.zero]
        if sorted(t.source or "" for t in live) != sorted(parent.inputs):
            raise TransferError(f"add {layer.id!r}: child inputs do not match the parent's {list(parent.inputs)}")
        first = live[0].channels(layer.id)
        if any(not np.array_equal(t.channels(layer.id), first) for t in live[1:]):
            raise TransferError(f"add {layer.id!r}: its inputs were widened differently")
        return Origin(layer.id, first)

    def initialise_many(self, layer: Layer, inputs: Sequence[Origin], ctx: TransferContext) -> Origin:
        """A new add of one parent tensor and zero branches (a skip that creates an
        add after a batch norm) is that tensor, channels and all."""
        live = [t for t in inputs if not t.zero]
        if len(live) != 1 or live[0].source is None:
            raise TransferError(f"new add {layer.id!r} must sum one parent tensor with zero branches, "
                                f"got {len(live)} non-zero inputs")
        return live[0]
