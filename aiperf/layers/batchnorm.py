"""Batch normalisation over the channel axis."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from aiperf.layers.kind import LayerKind, size
from aiperf.layers.layer import Layer, Shape
from aiperf.layers.transfer import Origin, TransferContext, TransferError, matching_input, parent_arrays

# keras.applications.ResNet50 uses this epsilon; matching it keeps our graph
# numerically interchangeable with the reference model.
BN_EPSILON = 1.001e-5
BATCHNORM_BACKWARD = 36  # Table I: backward operations, a constant per layer


class BatchNorm(LayerKind):
    name = "batchnorm"
    passes_widening = True

    def output_shape(self, layer: Layer, inputs: Sequence[Shape]) -> Shape:
        return inputs[0]

    def num_params(self, layer: Layer, x: Shape) -> int:
        return 4 * x[-1]  # gamma, beta and the two moving statistics, as Keras counts them

    def flops(self, layer: Layer, x: Shape, out: Shape, reads_image: bool) -> tuple[int, int]:
        return 7 * size(out), BATCHNORM_BACKWARD

    def keras_layer(self, layer: Layer, seed: int | None) -> Any:
        import keras

        return keras.layers.BatchNormalization(axis=-1, epsilon=BN_EPSILON, name=layer.id)

    def inherit(self, layer: Layer, parent: Layer, inputs: Sequence[Origin], ctx: TransferContext) -> Origin:
        m_in = matching_input(layer, parent, inputs).channel_map
        ctx.out[layer.id] = [a[m_in].astype(np.float32) for a in parent_arrays(ctx.parent_weights, layer.id, 4)]
        return Origin(layer.id, m_in)

    def initialise(self, layer: Layer, x: Origin, ctx: TransferContext) -> Origin:
        """At the end of a skip branch: gamma = beta = 0, the branch adds zero.
        Elsewhere an identity in inference mode: mean 0, variance 1, gamma = sqrt(1 + eps)."""
        if x.channel_map is not None:
            c = len(x.channel_map)
        else:  # after a projection conv: as many channels as its filters
            c = int(ctx.out[layer.inputs[0]][0].shape[-1])
        ones, zeros = np.ones(c, np.float32), np.zeros(c, np.float32)
        if layer.id in ctx.skip_ends:
            ctx.out[layer.id] = [zeros.copy(), zeros.copy(), zeros.copy(), ones]
            return Origin(None, None, zero=True)
        if x.source is None:
            raise TransferError(f"new batch norm {layer.id!r} follows a projection but does not end a skip branch")
        gamma = np.full(c, np.sqrt(1.0 + BN_EPSILON), np.float32)
        ctx.out[layer.id] = [gamma, zeros.copy(), zeros.copy(), ones]
        return x
