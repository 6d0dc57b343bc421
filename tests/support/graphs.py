"""Hand-built graphs shared by tests that must not depend on the morphism code."""

from __future__ import annotations

from dataclasses import replace

from aiperf.graph import INSERTED, Graph, conv, simple


def insert_block(base: Graph, after: str, prefix: str, filters: int, kernel: int) -> Graph:
    """`base` with conv(kernel, tagged inserted) + BN + ReLU after layer `after`, rewired."""
    layers = list(base.layers)
    at = next(n for n, l in enumerate(layers) if l.id == after)
    block = [conv(f"{prefix}_conv", after, filters, kernel, tag=INSERTED),
             simple(f"{prefix}_bn", "batchnorm", f"{prefix}_conv"),
             simple(f"{prefix}_relu", "relu", f"{prefix}_bn")]
    rest = [replace(l, inputs=tuple(f"{prefix}_relu" if i == after else i for i in l.inputs))
            for l in layers[at + 1:]]
    return base.with_layers(layers[: at + 1] + block + rest)
