"""Hand-built graphs shared by tests (insert_block and tiny_graph do not depend on the morphism
code; tiny_resnet50 is a morphism's child)."""

from __future__ import annotations

from dataclasses import replace

from aiperf.graph import INPUT, INSERTED, Graph, conv, dense, simple


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


def tiny_graph() -> Graph:
    """A few layers (fast to trace) with one inserted conv: stem, inserted block, head."""
    layers = [conv("c1", INPUT, 8, 3, 2), simple("b1", "batchnorm", "c1"), simple("r1", "relu", "b1"),
              conv("ins", "r1", 8, 3, tag=INSERTED), simple("b2", "batchnorm", "ins"), simple("r2", "relu", "b2"),
              simple("pool", "avgpool", "r2"), dense("fc", "pool", 10), simple("out", "softmax", "fc")]
    return Graph((32, 32, 3), 10, tuple(layers))


def tiny_resnet50() -> Graph:
    """A 32x32, 10-class ResNet-50 at width 1/8 with one inserted conv, so its kernel size matters."""
    from aiperf.morphism import deeper_at, deeper_positions
    from aiperf.resnet import resnet50

    base = resnet50(input_size=32, channels=3, classes=10, width=0.125)
    return deeper_at(base, deeper_positions(base)[3], kernel_size=3)
