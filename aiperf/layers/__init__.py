"""The registry of layer kinds: one `LayerKind` entry per kind (fvcore's
operator-to-handler table, for layers).

`KINDS` maps a layer's ``type`` to its entry. Its order is the canonical order
of kinds (FLOP tables list kinds in it). To add a kind: write a `LayerKind`
subclass (see `aiperf.layers.kind`) and add an instance here; a new attribute
also needs a field on `Layer` and its JSON type in `ATTRIBUTE_TYPES`.
"""

from __future__ import annotations

from aiperf.layers.activation import Relu, Softmax
from aiperf.layers.add import Add
from aiperf.layers.batchnorm import BatchNorm
from aiperf.layers.conv import Conv
from aiperf.layers.dense import Dense
from aiperf.layers.kind import LayerKind
from aiperf.layers.layer import Layer
from aiperf.layers.pooling import AvgPool, MaxPool

KINDS: dict[str, LayerKind] = {kind.name: kind for kind in (
    Conv(), Dense(), BatchNorm(), Relu(), MaxPool(), AvgPool(), Add(), Softmax(),
)}


def kind_of(layer: Layer) -> LayerKind:
    """The registry entry of a layer's type (the graph rejects unknown types)."""
    return KINDS[layer.type]
