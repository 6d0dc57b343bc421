"""The registry of layer kinds: one `LayerKind` entry per kind (fvcore's
operator-to-handler table, for layers).

`KINDS` maps a layer's ``type`` to its entry; its order is the order of the
per-kind rows of a FLOP count. To add a kind, write a `LayerKind` subclass
(see `aiperf.layers.kind`) and add an instance here. A kind with a new
attribute also needs that field on `Layer` and its JSON type in
`ATTRIBUTE_TYPES` (`aiperf.layers.layer`).
"""

from __future__ import annotations

from aiperf.layers.activation import Relu, Softmax
from aiperf.layers.add import Add
from aiperf.layers.batchnorm import BatchNorm
from aiperf.layers.conv import Conv
from aiperf.layers.dense import Dense
from aiperf.layers.kind import LayerKind
from aiperf.layers.pooling import AvgPool, MaxPool

__all__ = ["KINDS", "LayerKind"]

KINDS: dict[str, LayerKind] = {kind.name: kind for kind in (
    Conv(), Dense(), BatchNorm(), Relu(), MaxPool(), AvgPool(), Add(), Softmax(),
)}
