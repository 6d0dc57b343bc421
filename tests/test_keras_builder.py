"""Keras builder and the independent FLOP cross-check with TensorFlow's profiler."""

import numpy as np
import pytest

from aiperf.flops import count_flops
from aiperf.graph import INPUT, Graph, conv, dense, maxpool, simple, with_inserted_kernel
from aiperf.resnet import resnet50

keras = pytest.importorskip("keras")
from aiperf.keras_builder import build_model, profiler_flops  # noqa: E402
from tests.support.graphs import insert_block  # noqa: E402

KERAS_RESNET50_PARAMS = 25_636_712


def agree(ours: int, theirs: int, tol: float = 0.01) -> bool:
    return abs(ours - theirs) <= tol * ours


@pytest.fixture(scope="module")
def official_model():
    return build_model(resnet50())


def test_official_graph_builds_and_runs_forward(official_model):
    assert official_model.count_params() == KERAS_RESNET50_PARAMS
    x = np.random.default_rng(0).random((2, 224, 224, 3), dtype=np.float32)
    y = np.asarray(official_model(x, training=False))
    assert y.shape == (2, 1000)
    np.testing.assert_allclose(y.sum(axis=1), 1.0, rtol=1e-4)


def test_layer_names_are_graph_ids(official_model):
    g = resnet50()
    names = {l.name for l in official_model.layers} - {INPUT}
    assert names == {l.id for l in g.layers}
    assert official_model.get_layer("conv3_block1_1_conv").strides == (2, 2)


def test_profiler_agrees_on_official_resnet50(official_model):
    prof = profiler_flops(official_model)
    fc = count_flops(resnet50())
    assert agree(fc.forward["conv"], prof["Conv2D"])
    assert agree(fc.forward["dense"], prof["MatMul"])


def _variant_extra_block() -> Graph:
    return insert_block(resnet50(input_size=64, classes=10, width=0.5), "conv3_block2_out", "x", 256, 5)


def _variant_kernels() -> Graph:
    return Graph((48, 48, 3), 7, (
        conv("c1", INPUT, 16, 5, stride=2), simple("b1", "batchnorm", "c1"), simple("r1", "relu", "b1"),
        maxpool("p1", "r1", 3, 2), conv("c2", "p1", 24, 7), simple("b2", "batchnorm", "c2"),
        simple("r2", "relu", "b2"), conv("c3", "r2", 24, 1, stride=2, padding="valid"),
        simple("r3", "relu", "c3"), simple("g", "avgpool", "r3"), dense("d", "g", 7),
        simple("s", "softmax", "d"),
    ))


@pytest.mark.parametrize("make", [
    lambda: resnet50(input_size=64, classes=10, width=0.5),
    lambda: resnet50(input_size=96, classes=100, width=1.5),
    _variant_extra_block,
    lambda: with_inserted_kernel(_variant_extra_block(), 7),
    _variant_kernels,
], ids=["width0.5", "width1.5", "extra-block", "extra-block-k7", "kernels-5-7-1"])
def test_profiler_agrees_on_variants(make):
    g = make()
    prof = profiler_flops(build_model(g))
    fc = count_flops(g)
    assert agree(fc.forward["conv"], prof["Conv2D"])
    assert agree(fc.forward["dense"], prof["MatMul"])


def test_kernel_size_hyperparameter_reaches_the_network():
    g = _variant_extra_block()
    m3, m7 = build_model(g, kernel_size=3), build_model(g, kernel_size=7)
    assert m3.get_layer("x_conv").kernel_size == (3, 3)
    assert m7.get_layer("x_conv").kernel_size == (7, 7)
    assert m7.count_params() == with_inserted_kernel(g, 7).num_params()


def test_reduced_graph_trains_one_epoch():
    g = resnet50(input_size=32, classes=10, width=0.25)
    model = build_model(g, seed=1)
    assert model.count_params() == g.num_params()
    rng = np.random.default_rng(0)
    x = rng.random((16, 32, 32, 3), dtype=np.float32)
    y = keras.utils.to_categorical(rng.integers(0, 10, 16), 10)
    model.compile(optimizer=keras.optimizers.SGD(0.01, momentum=0.9), loss="categorical_crossentropy",
                  metrics=["accuracy"])
    before = [w.copy() for w in model.get_layer("conv1_conv").get_weights()]
    hist = model.fit(x, y, batch_size=8, epochs=1, verbose=0)
    assert np.isfinite(hist.history["loss"][0])
    after = model.get_layer("conv1_conv").get_weights()
    assert not np.allclose(before[0], after[0])
