"""Architecture graph: construction, shape checks, canonical JSON, hash, ResNet-50."""

import json

import pytest

from aiperf.graph import INPUT, INSERTED, Graph, GraphError, Layer, conv, dense, maxpool, simple, with_inserted_kernel
from aiperf.resnet import resnet50

# keras.applications.ResNet50(weights=None).count_params()
KERAS_RESNET50_PARAMS = 25_636_712


def tiny(extra: list[Layer] | None = None, head_input: str = "r1") -> Graph:
    layers = [
        conv("c1", INPUT, 8, 3),
        simple("b1", "batchnorm", "c1"),
        simple("r1", "relu", "b1"),
        *(extra or []),
        simple("gap", "avgpool", head_input),
        dense("fc", "gap", 4),
        simple("sm", "softmax", "fc"),
    ]
    return Graph((16, 16, 3), 4, tuple(layers))


def test_official_resnet50_matches_keras_parameter_count():
    g = resnet50()
    assert g.num_params() == KERAS_RESNET50_PARAMS
    assert g.input_shape == (224, 224, 3)
    assert g.shapes["conv1_relu"] == (112, 112, 64)
    assert g.shapes["pool1_pool"] == (56, 56, 64)
    # Keras layout: the stride sits on the first 1x1 conv of a block.
    assert g.layer("conv3_block1_1_conv").stride == 2 and g.layer("conv3_block1_1_conv").kernel == 1
    assert g.layer("conv3_block1_2_conv").stride == 1
    assert g.shapes["conv5_block3_out"] == (7, 7, 2048)
    assert g.depth() == 50
    assert sum(1 for l in g.layers if l.type == "add") == 16


def test_resnet50_parameters_and_width():
    g = resnet50(input_size=32, classes=10, width=0.25)
    assert g.shapes["predictions"] == (10,)
    assert g.shapes["conv2_block1_out"] == (8, 8, 64)
    assert g.num_params() < resnet50(input_size=32, classes=10).num_params() / 10
    with pytest.raises(ValueError, match="input_size"):
        resnet50(input_size=16)
    with pytest.raises(ValueError, match="width"):
        resnet50(width=0)


def test_shapes_are_inferred():
    g = tiny([maxpool("mp", "r1", 3, 2), conv("c2", "mp", 5, 3, stride=2, padding="valid")], "c2")
    assert g.shapes["mp"] == (8, 8, 8)
    assert g.shapes["c2"] == (3, 3, 5)
    assert g.shapes["gap"] == (5,)


@pytest.mark.parametrize("extra,head,message", [
    ([conv("c2", "r1", 6, 3), simple("a", "add", "r1", "c2")], "a", "'a'.*shape mismatch"),
    ([conv("c2", "r1", 8, 3)], "r1", "dangling layer 'c2'"),
    ([conv("c2", "nowhere", 8, 3)], "c2", "'c2' reads unknown layer 'nowhere'"),
    ([conv("c2", "r1", 0, 3)], "c2", "'c2': filters must be positive"),
    ([conv("c2", "r1", 8, 0)], "c2", "'c2': kernel and stride must be positive"),
    ([conv("c2", "r1", 8, 17, padding="valid")], "c2", "'c2': kernel 17 does not fit"),
    ([conv("c1", "r1", 8, 3)], "c1", "duplicate layer id 'c1'"),
    ([dense("d", "r1", 3)], "d", "'d' \\(dense\\) needs a flat input"),
])
def test_inconsistent_graphs_name_the_layer(extra, head, message):
    with pytest.raises(GraphError, match=message):
        tiny(extra, head)


def test_cycle_is_rejected_with_layer_name():
    layers = (
        conv("c1", INPUT, 8, 3), simple("a", "add", "c1", "c2"), conv("c2", "a", 8, 3),
        simple("gap", "avgpool", "c2"), dense("fc", "gap", 4), simple("sm", "softmax", "fc"),
    )
    with pytest.raises(GraphError, match="cycle through layer 'a'"):
        Graph((16, 16, 3), 4, layers)


def test_output_must_match_class_count():
    with pytest.raises(GraphError, match="expected \\(5,\\)"):
        Graph((16, 16, 3), 5, tiny().layers)


def test_json_round_trips_exactly():
    g = resnet50(input_size=64, classes=10, width=0.5)
    text = g.to_json()
    back = Graph.from_json(text)
    assert back == g
    assert back.to_json() == text
    assert back.meta == g.meta
    # Canonical: keys sorted, no whitespace.
    assert text == json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"))


def test_hash_equal_for_equal_architectures_and_ignores_ids_and_meta():
    g = tiny()
    renamed = Graph(g.input_shape, g.num_classes, tuple(
        Layer(l.id.upper(), l.type, tuple(i if i == INPUT else i.upper() for i in l.inputs),
              l.kernel, l.stride, l.filters, l.padding, l.use_bias, l.units, l.tag)
        for l in reversed(g.layers)), {"name": "other"})
    assert renamed.hash() == g.hash()
    assert g.with_meta(name="x").hash() == g.hash()


def test_hash_differs_for_different_architectures():
    hashes = {
        tiny().hash(),
        tiny([conv("c2", "r1", 8, 3)], "c2").hash(),
        tiny([conv("c2", "r1", 8, 5)], "c2").hash(),
        tiny([conv("c2", "r1", 9, 3)], "c2").hash(),
        tiny([conv("c2", "r1", 8, 3, stride=2)], "c2").hash(),
        tiny([conv("c2", "r1", 8, 3, tag=INSERTED)], "c2").hash(),
        # One conv read twice vs two identical convs: different parameter counts.
        tiny([conv("c2", "r1", 8, 3), simple("a", "add", "c2", "c2")], "a").hash(),
        tiny([conv("c2", "r1", 8, 3), conv("c3", "r1", 8, 3), simple("a", "add", "c2", "c3")], "a").hash(),
        Graph((32, 32, 3), 4, tiny().layers).hash(),
    }
    assert len(hashes) == 9
    assert resnet50().hash() != resnet50(width=0.5).hash()


@pytest.mark.parametrize("text,message", [
    ("{not json", "not valid JSON"),
    ("[]", "must be an object"),
    ('{"format": "other"}', "not an AIPerf graph"),
    ('{"format": "aiperf.graph", "version": 2}', "unsupported graph version 2"),
    ('{"format": "aiperf.graph", "version": 1}', "lacks 'input_shape'"),
    ('{"format": "aiperf.graph", "version": 1, "input_shape": [8,8,3], "num_classes": 2, "layers": {}}',
     "'layers' must be a list"),
    ('{"format": "aiperf.graph", "version": 1, "input_shape": [8,8,3], "num_classes": 2, "layers": [{"id": "x"}]}',
     "layer 'x': unknown type None"),
    ('{"format": "aiperf.graph", "version": 1, "input_shape": [8,8,3], "num_classes": 2,'
     ' "layers": [{"id": "x", "type": ["conv"]}]}',
     "layer 'x': unknown type \\['conv'\\]"),
    ('{"format": "aiperf.graph", "version": 1, "input_shape": [8,8,3], "num_classes": 2,'
     ' "layers": [{"id": "c", "type": "conv", "inputs": ["input"], "kernel": 3}]}',
     "layer 'c': missing field 'stride'"),
    ('{"format": "aiperf.graph", "version": 1, "input_shape": [8,8,3], "num_classes": 2,'
     ' "layers": [{"id": "c", "type": "conv", "inputs": ["input"], "kernel": "3", "stride": 1,'
     ' "filters": 2, "padding": "same", "use_bias": true}]}',
     "field 'kernel' must be int"),
    ('{"format": "aiperf.graph", "version": 1, "input_shape": [8,8], "num_classes": 2, "layers": []}',
     "input_shape must be three integers"),
    ('{"format": "aiperf.graph", "version": 1, "input_shape": [8,8,3], "num_classes": 2, "layers": [], "x": 1}',
     "unknown key"),
])
def test_malformed_json_raises_clear_graph_error(text, message):
    with pytest.raises(GraphError, match=message):
        Graph.from_json(text)


def test_inserted_kernel_hyperparameter_changes_only_inserted_convs():
    g = tiny([conv("c2", "r1", 8, 3, tag=INSERTED), simple("b2", "batchnorm", "c2"),
              simple("r2", "relu", "b2")], "r2")
    g5 = with_inserted_kernel(g, 5)
    assert g5.layer("c2").kernel == 5
    assert g5.layer("c1").kernel == 3
    assert g5.num_params() > g.num_params()
    assert with_inserted_kernel(g, None) is g
    with pytest.raises(GraphError, match="kernel_size"):
        with_inserted_kernel(g, 4)
