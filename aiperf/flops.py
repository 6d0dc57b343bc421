"""Analytic FLOP counts per image (SPEC section 6, paper Tables I-III).

Weights: multiply-accumulate 2; add, subtract, multiply, compare 1; divide and
square root 4; exponential 8. Convolution biases are ignored, as the paper
does. A trained image costs forward + backward, a validated image forward.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from aiperf.graph import INPUT, Graph, Layer

KINDS = ("conv", "dense", "batchnorm", "relu", "maxpool", "avgpool", "add", "softmax")
SOFTMAX_PER_CLASS = 21  # Table III: 2.10E04 for 1000 classes
BATCHNORM_BACKWARD = 36  # Table I: a constant per layer


@dataclass(frozen=True)
class LayerFlops:
    layer_id: str
    kind: str
    forward: int
    backward: int


@dataclass(frozen=True)
class FlopCount:
    """Per-image operation counts of one architecture."""

    forward: Mapping[str, int]  # per kind, plus "total"
    backward: Mapping[str, int]
    layers: tuple[LayerFlops, ...] = field(repr=False)

    @property
    def train(self) -> int:
        """Operations per trained image (forward + backward)."""
        return self.forward["total"] + self.backward["total"]

    @property
    def eval(self) -> int:
        """Operations per validated image (forward only)."""
        return self.forward["total"]

    def ops(self, images_trained: int, images_validated: int) -> int:
        """Operations for the images actually processed."""
        if images_trained < 0 or images_validated < 0:
            raise ValueError("image counts must be non-negative")
        return self.train * images_trained + self.eval * images_validated

    def to_dict(self) -> dict:
        return {"forward": dict(self.forward), "backward": dict(self.backward),
                "train": self.train, "eval": self.eval}


def layer_flops(graph: Graph, layer: Layer, first_conv: bool = False) -> LayerFlops:
    """Forward and backward counts of one layer (SPEC section 6)."""
    x = graph.input_shape if layer.inputs[0] == INPUT else graph.shapes[layer.inputs[0]]
    out = graph.shapes[layer.id]
    t = layer.type
    fwd = bwd = 0
    if t == "conv":
        k2ci = layer.kernel * layer.kernel * x[2]
        macs = k2ci * out[0] * out[1] * out[2]
        fwd = 2 * macs
        weight_grad = k2ci * out[2]
        # The first conv needs no gradient with respect to its input (the image).
        bwd = 2 * ((1 if first_conv else 2) * macs + weight_grad)
    elif t == "dense":
        ci, co = x[0], out[0]
        fwd = 2 * ci * co
        bwd = 2 * (2 * ci * co + (ci + 1) * co)
    elif t == "batchnorm":
        fwd = 7 * _size(out)
        bwd = BATCHNORM_BACKWARD
    elif t in ("relu", "add"):
        fwd = _size(out)
    elif t == "maxpool":
        fwd = layer.kernel * layer.kernel * _size(out)
    elif t == "avgpool":
        fwd = _size(x)
    elif t == "softmax":
        fwd = SOFTMAX_PER_CLASS * out[0]
    return LayerFlops(layer.id, t, fwd, bwd)


def count_flops(graph: Graph) -> FlopCount:
    """Per-image forward, backward, training and evaluation counts."""
    forward = dict.fromkeys(KINDS, 0)
    backward = dict.fromkeys(KINDS, 0)
    per_layer = []
    for layer in graph.layers:
        first = layer.type == "conv" and layer.inputs == (INPUT,)
        lf = layer_flops(graph, layer, first_conv=first)
        forward[lf.kind] += lf.forward
        backward[lf.kind] += lf.backward
        per_layer.append(lf)
    forward["total"] = sum(forward[k] for k in KINDS)
    backward["total"] = sum(backward[k] for k in KINDS)
    return FlopCount(forward, backward, tuple(per_layer))


def _size(shape: tuple[int, ...]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n
