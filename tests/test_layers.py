"""The registry of layer kinds: every kind is complete, and a new kind is one entry."""

from __future__ import annotations

import random
import subprocess
import sys
from typing import Any, Sequence

import pytest

from aiperf.distance import Descriptor
from aiperf.flops import count_flops
from aiperf.graph import INPUT, Graph, GraphError, conv, dense, simple
from aiperf.layers import KINDS, LayerKind
from aiperf.layers.kind import size
from aiperf.layers.layer import ATTRIBUTE_TYPES, Layer, Shape
from aiperf.morphism import morph_step, wider_positions


def test_every_kind_is_consistent():
    assert list(KINDS) == ["conv", "dense", "batchnorm", "relu", "maxpool", "avgpool", "add", "softmax"]
    for name, kind in KINDS.items():
        assert kind.name == name
        assert set(kind.attributes) <= set(ATTRIBUTE_TYPES)
        assert not (kind.sums_inputs and kind.single_input)
        assert not (kind.passes_widening and kind.absorbs_widening)
    assert [n for n, k in KINDS.items() if k.weighted] == ["conv", "dense"]
    assert KINDS["conv"].width(conv("c", INPUT, 7, 3)) == 7 and KINDS["dense"].width(dense("d", "x", 5)) == 5
    with pytest.raises(TypeError, match="relu layer has no width"):
        KINDS["relu"].width(simple("r", "relu", "x"))


def test_a_kind_without_its_rules_cannot_be_made():
    class Half(LayerKind):
        name = "half"

        def output_shape(self, layer: Layer, inputs: Sequence[Shape]) -> Shape:
            return inputs[0]

    with pytest.raises(TypeError, match="abstract"):
        Half()  # type: ignore[abstract]


class Scale(LayerKind):
    """A test kind: multiply by a constant, channel by channel."""

    name = "scale"
    passes_widening = True

    def output_shape(self, layer: Layer, inputs: Sequence[Shape]) -> Shape:
        return inputs[0]

    def flops(self, layer: Layer, x: Shape, out: Shape, reads_image: bool) -> tuple[int, int]:
        return size(out), size(out)

    def keras_layer(self, layer: Layer, seed: int | None) -> Any:  # pragma: no cover - no Keras here
        raise AssertionError("not built in this test")


def _with_scale() -> Graph:
    return Graph((8, 8, 3), 2, (
        conv("c1", INPUT, 4, 3), simple("s", "scale", "c1"), simple("r1", "relu", "s"),
        conv("c2", "r1", 4, 3), simple("r2", "relu", "c2"), simple("gap", "avgpool", "r2"),
        dense("fc", "gap", 2), simple("sm", "softmax", "fc"),
    ))


def test_a_new_kind_is_one_registry_entry(monkeypatch):
    with pytest.raises(GraphError, match="layer 's': unknown type 'scale'"):
        _with_scale()
    monkeypatch.setitem(KINDS, "scale", Scale())
    g = _with_scale()
    assert g.shapes["s"] == (8, 8, 4)
    assert Graph.from_json(g.to_json()) == g and Graph.from_json(g.to_json()).hash() == g.hash()
    fc = count_flops(g)
    assert fc.forward["scale"] == fc.backward["scale"] == 8 * 8 * 4
    assert fc.forward["total"] == sum(v for k, v in fc.forward.items() if k != "total")
    assert g.num_params() == (9 * 3 * 4 + 4) + (9 * 4 * 4 + 4) + (4 * 2 + 2)
    assert Descriptor.of(g).widths.tolist() == [4.0, 4.0, 2.0]
    # Widening flows through the new kind because its entry says so.
    assert wider_positions(g) == ["c1"]
    assert morph_step(g, random.Random(0)).layer("s").type == "scale"


def test_the_library_imports_without_tensorflow():
    code = ("import sys, aiperf.layers, aiperf.graph, aiperf.flops, aiperf.keras_builder, aiperf.weight_transfer, "
            "aiperf.search, aiperf.precision, aiperf.hyperparameters; assert 'tensorflow' not in sys.modules "
            "and 'keras' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)
