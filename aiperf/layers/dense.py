"""Fully connected layer (the classifier); it always has a bias."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from aiperf.layers.kind import LayerKind
from aiperf.layers.layer import GraphError, Layer, Shape
from aiperf.layers.transfer import (
    Origin,
    TransferContext,
    TransferError,
    matching_input,
    parent_arrays,
    replication_counts,
)


class Dense(LayerKind):
    name = "dense"
    attributes = ("units",)
    weighted = True

    def output_shape(self, layer: Layer, inputs: Sequence[Shape]) -> Shape:
        (x,) = inputs
        if len(x) != 1:
            raise GraphError(f"layer {layer.id!r} (dense) needs a flat input, got shape {x}")
        if layer.units <= 0:
            raise GraphError(f"layer {layer.id!r}: units must be positive, got {layer.units}")
        return (layer.units,)

    def num_params(self, layer: Layer, x: Shape) -> int:
        return x[-1] * layer.units + layer.units

    def flops(self, layer: Layer, x: Shape, out: Shape, reads_image: bool) -> tuple[int, int]:
        ci, co = x[0], out[0]
        return 2 * ci * co, 2 * (2 * ci * co + (ci + 1) * co)

    def keras_layer(self, layer: Layer, seed: int | None) -> Any:
        import keras

        return keras.layers.Dense(layer.units, kernel_initializer=keras.initializers.HeNormal(seed=seed),
                                  name=layer.id)

    def width(self, layer: Layer) -> int:
        return layer.units

    def inherit(self, layer: Layer, parent: Layer, inputs: Sequence[Origin], ctx: TransferContext) -> Origin:
        """A replicated input unit's weights are shared among its copies; the
        units themselves may not change (they are the classes)."""
        m_in = matching_input(layer, parent, inputs).channels(layer.id)
        kernel, bias = parent_arrays(ctx.parent_weights, layer.id, 2)
        if layer.units != kernel.shape[1]:
            raise TransferError(f"dense {layer.id!r}: units changed from {kernel.shape[1]} to {layer.units}")
        counts = replication_counts(m_in, kernel.shape[0], layer.id)
        ctx.out[layer.id] = [(kernel[m_in] / counts[m_in][:, None]).astype(np.float32), bias.astype(np.float32)]
        return Origin(layer.id, np.arange(layer.units))
