"""Weight transfer: a child with transferred weights computes its parent's function.

Parent and child are real Keras models (`build_model`); outputs are compared
in inference mode on random input, to 1e-4.
"""

from __future__ import annotations

import numpy as np
import pytest

from aiperf.graph import Graph
from aiperf.morphism import MorphSpace, deeper_at, random_morph, skip_add_at, skip_at, wider_at
from aiperf.resnet import resnet50
from aiperf.weight_transfer import TransferError, transfer_weights

keras = pytest.importorskip("keras")
from aiperf.keras_builder import build_model  # noqa: E402

pytestmark = pytest.mark.slow


def _x() -> np.ndarray:
    return np.random.default_rng(0).random((4, 32, 32, 3)).astype("float32")


def _trained_like(graph: Graph, kernel_size: int | None = None) -> tuple[keras.Model, dict]:
    """A model with He weights, non-trivial BN statistics and O(1) logits."""
    model = build_model(graph, kernel_size=kernel_size, seed=1)
    rng = np.random.default_rng(7)
    for layer in model.layers:
        ws = layer.get_weights()
        if len(ws) == 4:  # gamma, beta, mean, var
            layer.set_weights([rng.uniform(0.5, 1.5, ws[0].shape), rng.normal(0, 0.1, ws[1].shape),
                               rng.normal(0, 0.1, ws[2].shape), rng.uniform(0.5, 1.5, ws[3].shape)])
    logits = _logits(model, _x())
    dense = model.get_layer("predictions_dense")
    k, b = dense.get_weights()
    dense.set_weights([k * 4.0 / np.abs(logits).max(), b])
    return model, {l.name: l.get_weights() for l in model.layers if l.get_weights()}


def _logits(model: keras.Model, x: np.ndarray) -> np.ndarray:
    sub = keras.Model(model.input, model.get_layer("predictions_dense").output)
    return np.asarray(sub(x, training=False))


def _child_model(parent: Graph, weights: dict, child: Graph, kernel_size: int | None = None) -> keras.Model:
    model = build_model(child, kernel_size=kernel_size)
    new = transfer_weights(parent, weights, child, kernel_size=kernel_size)
    weighted = {l.name for l in model.layers if l.weights}
    assert set(new) == weighted  # every weighted layer gets weights, nothing extra
    for name, ws in new.items():
        model.get_layer(name).set_weights(ws)
    return model


def _assert_same_function(parent_model: keras.Model, child_model: keras.Model) -> None:
    x = _x()
    lp, lc = _logits(parent_model, x), _logits(child_model, x)
    assert np.abs(lp).max() > 1.0  # the comparison is not between saturated outputs
    np.testing.assert_allclose(lc, lp, atol=1e-4 * np.abs(lp).max(), rtol=0)
    np.testing.assert_allclose(np.asarray(child_model(x, training=False)),
                               np.asarray(parent_model(x, training=False)), atol=1e-4, rtol=0)


@pytest.fixture(scope="module")
def parent() -> tuple[Graph, keras.Model, dict]:
    g = resnet50(32, 3, 10, 0.25)
    model, weights = _trained_like(g)
    return g, model, weights


@pytest.mark.parametrize("make", [
    lambda g: deeper_at(g, "conv3_block2_out", kernel_size=3),
    lambda g: deeper_at(g, "conv2_block1_1_relu", kernel_size=5),
    lambda g: wider_at(g, "conv3_block1_2_conv", 13),  # 13 new units over 32: uneven replication
    lambda g: wider_at(g, "conv1_conv", 16),  # through BN, ReLU and max pool into two convs
    lambda g: skip_at(g, "conv3_block1_out", "conv3_block4_add"),  # identity shapes: BN gate
    lambda g: skip_at(g, "conv2_block2_out", "conv4_block3_add"),  # projection with stride 2
    lambda g: wider_at(g, "conv3_block1_2_conv", 32),  # the original's widen: doubled
    lambda g: wider_at(g, "conv1_conv", 16),  # doubled stem: into a max pool and two convs
    lambda g: skip_add_at(g, "conv3_block1_out", "conv3_block3_1_bn"),  # a new add, same size
    lambda g: skip_add_at(g, "conv2_block3_out", "conv4_block2_2_bn"),  # a new add, stride 4
    lambda g: skip_add_at(g, "conv2_block3_out", "conv3_block2_3_bn"),  # a new add before an add
    lambda g: skip_add_at(wider_at(g, "conv3_block1_2_conv", 32), "conv2_block3_out", "conv3_block2_1_bn"),
], ids=["deeper", "deeper-k5", "wider", "wider-stem", "skip-gate", "skip-projection", "wider-double",
        "wider-double-stem", "skip-new-add", "skip-new-add-stride", "skip-new-add-into-add", "double-then-new-add"])
def test_each_operation_preserves_the_function(parent, make) -> None:
    g, model, weights = parent
    child = make(g)
    _assert_same_function(model, _child_model(g, weights, child))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_chains_of_five_random_operations_preserve_the_function(parent, seed) -> None:
    g, model, weights = parent
    child = random_morph(g, seed=seed, steps=5)
    assert len(child.meta["operations"]) == 5
    _assert_same_function(model, _child_model(g, weights, child))


@pytest.mark.parametrize("seed", [3, 4, 5])
def test_chains_in_the_original_space_preserve_the_function(parent, seed) -> None:
    # Doubling widens and new-add skips, chained (the official profile's space).
    g, model, weights = parent
    child = random_morph(g, seed=seed, steps=6, space=MorphSpace())
    _assert_same_function(model, _child_model(g, weights, child))


def test_a_new_add_is_checked_to_sum_one_parent_tensor(parent) -> None:
    g, _, weights = parent
    child = skip_add_at(g, "conv3_block1_out", "conv3_block3_1_bn")
    gamma, beta, _, _ = transfer_weights(g, weights, child)["m1_skip_bn"]
    assert not gamma.any() and not beta.any()  # the new branch adds exactly zero
    # A new add of two live tensors (x + x) has no function-preserving initialisation.
    import dataclasses

    from aiperf.graph import simple

    layers = []
    for layer in g.layers:
        if layer.id == "conv3_block3_1_relu":
            layers.append(simple("m9_bad_add", "add", "conv3_block3_1_bn", "conv3_block3_1_bn"))
            layer = dataclasses.replace(layer, inputs=("m9_bad_add",))
        layers.append(layer)
    with pytest.raises(TransferError, match="new add 'm9_bad_add' must sum one parent tensor"):
        transfer_weights(g, weights, g.with_layers(layers))


def test_inherited_inserted_conv_follows_a_larger_kernel_size() -> None:
    g = deeper_at(resnet50(32, 3, 10, 0.25), "conv3_block1_out", kernel_size=3)
    model, weights = _trained_like(g, kernel_size=3)
    child = random_morph(g, seed=11, steps=2, kernel_size=5)
    # The child is built with kernel size 5: the parent's 3x3 inserted kernel is zero-padded.
    _assert_same_function(model, _child_model(g, weights, child, kernel_size=5))


def test_new_weights_have_the_documented_form(parent) -> None:
    g, _, weights = parent
    child = skip_at(deeper_at(g, "conv4_block1_out"), "conv2_block3_out", "conv4_block2_add")
    new = transfer_weights(g, weights, child)
    kernel = new["m1_conv"][0]
    centre = kernel[1, 1]
    np.testing.assert_array_equal(centre, np.eye(centre.shape[0], dtype=np.float32))
    assert not kernel[0].any() and not kernel[2].any()
    gamma, beta, mean, var = new["m2_skip_bn"]
    assert not gamma.any() and not beta.any()  # the skip branch adds exactly zero
    assert np.abs(new["m2_skip_conv"][0]).sum() > 0  # but its conv can still learn
    np.testing.assert_array_equal(new["conv4_block2_1_conv"][0], weights["conv4_block2_1_conv"][0])


def test_graphs_that_are_not_parent_and_child_are_refused(parent) -> None:
    g, _, weights = parent
    deeper_g = deeper_at(g, "conv3_block2_out")
    # Reversed roles: the "child" lacks the parent's block, its convs read other tensors.
    with pytest.raises(TransferError, match="reads"):
        transfer_weights(deeper_g, {**weights, "m1_conv": [np.zeros((3, 3, 128, 128))],
                                    "m1_bn": [np.ones(128)] * 4}, g)
    with pytest.raises(TransferError, match="parent weights for 'conv1_conv'"):
        transfer_weights(g, {k: v for k, v in weights.items() if k != "conv1_conv"}, deeper_g)
