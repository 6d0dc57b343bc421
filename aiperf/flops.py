"""Analytic FLOP counts per image (SPEC section 6, paper Tables I-III).

Weights: multiply-accumulate 2; add, subtract, multiply, compare 1; divide and
square root 4; exponential 8. Convolution biases are ignored, as the paper
does. A trained image costs forward + backward, a validated image forward.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from aiperf.graph import INPUT, Graph, Layer
from aiperf.layers import KINDS


@dataclass(frozen=True)
class LayerFlops:
    layer_id: str
    kind: str
    forward: int
    backward: int


@dataclass(frozen=True)
class FlopCount:
    """Per-image operation counts of one architecture."""

    forward: Mapping[str, int]  # per kind (in registry order), then "total"
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

    def to_dict(self) -> dict[str, Any]:
        return {"forward": dict(self.forward), "backward": dict(self.backward),
                "train": self.train, "eval": self.eval}


def layer_flops(graph: Graph, layer: Layer) -> LayerFlops:
    """Forward and backward counts of one layer (SPEC section 6; each kind's rule
    is its `flops` in `aiperf.layers`)."""
    x = graph.input_shape if layer.inputs[0] == INPUT else graph.shapes[layer.inputs[0]]
    forward, backward = KINDS[layer.type].flops(layer, x, graph.shapes[layer.id], layer.inputs == (INPUT,))
    return LayerFlops(layer.id, layer.type, forward, backward)


def count_flops(graph: Graph) -> FlopCount:
    """Per-image forward, backward, training and evaluation counts."""
    forward = dict.fromkeys(KINDS, 0)
    backward = dict.fromkeys(KINDS, 0)
    per_layer = []
    for layer in graph.layers:
        lf = layer_flops(graph, layer)
        forward[lf.kind] += lf.forward
        backward[lf.kind] += lf.backward
        per_layer.append(lf)
    forward["total"] = sum(forward.values())
    backward["total"] = sum(backward.values())
    return FlopCount(forward, backward, tuple(per_layer))
