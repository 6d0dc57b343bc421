"""The `Layer` node of an architecture graph, its reserved names and `GraphError`."""

from __future__ import annotations

from dataclasses import dataclass

INPUT = "input"  # the reserved id of the image
# Tag that morphism puts on the convolutions it inserts: the kernel-size
# hyperparameter applies to exactly these (see `aiperf.graph.with_inserted_kernel`).
INSERTED = "inserted"
PADDINGS = ("same", "valid")

Shape = tuple[int, ...]

# Every attribute a layer may carry, with its JSON type (exact: a bool is not an int).
ATTRIBUTE_TYPES: dict[str, type] = {
    "kernel": int, "stride": int, "filters": int, "padding": str, "use_bias": bool, "units": int,
}


class GraphError(ValueError):
    """An inconsistent or malformed architecture; the message names the layer."""


@dataclass(frozen=True)
class Layer:
    """One node of the graph. Only the attributes its kind lists are meaningful
    (see `aiperf.layers.KINDS`)."""

    id: str
    type: str
    inputs: tuple[str, ...]
    kernel: int = 0  # conv, maxpool
    stride: int = 0  # conv, maxpool
    filters: int = 0  # conv
    padding: str = ""  # conv, maxpool
    use_bias: bool = False  # conv (dense always has a bias)
    units: int = 0  # dense
    tag: str = ""  # e.g. INSERTED
