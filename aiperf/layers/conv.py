"""2-D convolution: the only kind with a kernel-size hyperparameter (on inserted convs)."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from aiperf.layers.kind import LayerKind, check_window, window_shape
from aiperf.layers.layer import INSERTED, GraphError, Layer, Shape
from aiperf.layers.transfer import (
    Origin,
    TransferContext,
    TransferError,
    fit_kernel,
    layer_seed,
    matching_input,
    parent_arrays,
    replication_counts,
)


class Conv(LayerKind):
    name = "conv"
    attributes = ("kernel", "stride", "filters", "padding", "use_bias")
    weighted = True
    absorbs_widening = True

    def output_shape(self, layer: Layer, inputs: Sequence[Shape]) -> Shape:
        (x,) = inputs
        check_window(layer, x)
        if layer.filters <= 0:
            raise GraphError(f"layer {layer.id!r}: filters must be positive, got {layer.filters}")
        return window_shape(layer, x, layer.filters)

    def num_params(self, layer: Layer, x: Shape) -> int:
        return layer.kernel * layer.kernel * x[-1] * layer.filters + (layer.filters if layer.use_bias else 0)

    def flops(self, layer: Layer, x: Shape, out: Shape, reads_image: bool) -> tuple[int, int]:
        # Biases are ignored, as the paper does.
        k2ci = layer.kernel * layer.kernel * x[2]
        macs = k2ci * out[0] * out[1] * out[2]
        weight_grad = k2ci * out[2]
        # The first conv needs no gradient with respect to its input (the image).
        return 2 * macs, 2 * ((1 if reads_image else 2) * macs + weight_grad)

    def keras_layer(self, layer: Layer, seed: int | None) -> Any:
        import keras

        return keras.layers.Conv2D(layer.filters, layer.kernel, strides=layer.stride, padding=layer.padding,
                                   use_bias=layer.use_bias, kernel_initializer=keras.initializers.HeNormal(seed=seed),
                                   name=layer.id)

    def width(self, layer: Layer) -> int:
        return layer.filters

    def inherit(self, layer: Layer, parent: Layer, inputs: Sequence[Origin], ctx: TransferContext) -> Origin:
        """Net2Net: a replicated input channel's weights are shared among its copies;
        new filters replicate old ones; an inserted kernel follows the kernel size."""
        m_in = matching_input(layer, parent, inputs).channels(layer.id)
        kernel, *bias = parent_arrays(ctx.parent_weights, layer.id, 2 if parent.use_bias else 1)
        counts = replication_counts(m_in, kernel.shape[2], layer.id)
        m_out = np.arange(layer.filters) % kernel.shape[3]
        w = kernel[:, :, m_in][:, :, :, m_out] / counts[m_in][None, None, :, None]
        arrays = [fit_kernel(w, layer.kernel)]
        if layer.use_bias:
            arrays.append(bias[0][m_out] if bias else np.zeros(layer.filters, np.float32))
        ctx.out[layer.id] = [a.astype(np.float32) for a in arrays]
        return Origin(layer.id, m_out)

    def initialise(self, layer: Layer, x: Origin, ctx: TransferContext) -> Origin:
        if layer.tag == INSERTED:
            return _identity(layer, x, ctx)
        return _projection(layer, x, ctx)


def _identity(layer: Layer, x: Origin, ctx: TransferContext) -> Origin:
    """An inserted conv: a centre-tap identity kernel (channels stay as they are)."""
    if layer.stride != 1 or layer.padding != "same" or x.source is None:
        raise TransferError(f"inserted conv {layer.id!r} must be stride 1, 'same' and read a parent tensor")
    n = ctx.parent_channels(x.source)
    m_in = x.channels(layer.id)
    counts = replication_counts(m_in, n, layer.id)
    m_out = np.arange(layer.filters) % n
    if layer.filters < n:
        raise TransferError(f"inserted conv {layer.id!r} has fewer filters than the {n} channels it must keep")
    w = np.zeros((layer.kernel, layer.kernel, len(m_in), layer.filters), np.float32)
    c = layer.kernel // 2
    hit = m_in[:, None] == m_out[None, :]
    w[c, c] = hit / counts[m_in][:, None]
    ctx.out[layer.id] = [w] + _zero_bias(layer)
    return Origin(x.source, m_out)


def _projection(layer: Layer, x: Origin, ctx: TransferContext) -> Origin:
    """A skip projection: seeded He-normal weights (zero weights would leave the
    branch without gradient); the batch norm after it zeroes the branch."""
    rng = np.random.default_rng(layer_seed(layer.id))
    c_in = len(x.channels(layer.id))
    fan_in = layer.kernel * layer.kernel * c_in
    w = rng.normal(0.0, np.sqrt(2.0 / fan_in), (layer.kernel, layer.kernel, c_in, layer.filters))
    ctx.out[layer.id] = [w.astype(np.float32)] + _zero_bias(layer)
    return Origin(None, None)


def _zero_bias(layer: Layer) -> list[np.ndarray]:
    return [np.zeros(layer.filters, np.float32)] if layer.use_bias else []
