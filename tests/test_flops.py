"""FLOP counter against the paper's golden numbers (SPEC section 6, Tables III and VII)."""

import pytest

from aiperf.flops import count_flops
from aiperf.graph import INPUT, Graph, conv, dense, simple
from aiperf.resnet import resnet50
from tests.support.graphs import insert_block

IMAGENET_TRAIN = 1_281_167
IMAGENET_VAL = 50_000

# Table III, ResNet-50 (Keras layout) at 224x224, 1000 classes, per image.
TABLE_III_FORWARD = {
    "conv": 7.71e9, "dense": 4.10e6, "batchnorm": 7.41e7, "relu": 9.08e6, "maxpool": 1.81e6,
    "avgpool": 1.00e5, "add": 5.52e6, "softmax": 2.10e4, "total": 7.81e9,
}


def sig3(x: float) -> str:
    return f"{x:.2e}"


@pytest.fixture(scope="module")
def official():
    return count_flops(resnet50())


@pytest.mark.parametrize("kind", sorted(TABLE_III_FORWARD))
def test_table_iii_forward_rows(official, kind):
    assert sig3(official.forward[kind]) == sig3(TABLE_III_FORWARD[kind])


def test_table_iii_backward_and_training(official):
    assert sig3(official.backward["total"]) == "1.52e+10"
    assert sig3(official.train) == "2.31e+10"
    assert official.eval == official.forward["total"]


def test_table_vii_per_epoch(official):
    assert sig3(official.ops(IMAGENET_TRAIN, 0)) == "2.95e+16"
    assert sig3(official.ops(0, IMAGENET_VAL)) == "3.90e+14"


def test_formulas_on_a_hand_computed_graph():
    # 8x8x3 input; conv 3x3 s1 same -> 8x8x4; BN; ReLU; conv 1x1 -> 8x8x4; add; GAP; dense 4->2; softmax
    g = Graph((8, 8, 3), 2, (
        conv("c1", INPUT, 4, 3), simple("b1", "batchnorm", "c1"), simple("r1", "relu", "b1"),
        conv("c2", "r1", 4, 1), simple("a", "add", "r1", "c2"), simple("gap", "avgpool", "a"),
        dense("fc", "gap", 2), simple("sm", "softmax", "fc"),
    ))
    fc = count_flops(g)
    c1 = 2 * 9 * 3 * 8 * 8 * 4
    c2 = 2 * 1 * 4 * 8 * 8 * 4
    assert fc.forward["conv"] == c1 + c2
    assert fc.forward["batchnorm"] == 7 * 8 * 8 * 4
    assert fc.forward["relu"] == 8 * 8 * 4
    assert fc.forward["add"] == 8 * 8 * 4
    assert fc.forward["avgpool"] == 8 * 8 * 4
    assert fc.forward["dense"] == 2 * 4 * 2
    assert fc.forward["softmax"] == 21 * 2
    # First conv: no input gradient. Others: input + weight gradients.
    assert fc.backward["conv"] == 2 * (9 * 3 * 8 * 8 * 4 + 9 * 3 * 4) + 2 * (2 * 4 * 8 * 8 * 4 + 4 * 4)
    assert fc.backward["dense"] == 2 * (2 * 4 * 2 + 5 * 2)
    assert fc.backward["batchnorm"] == 36
    assert fc.backward["relu"] == fc.backward["add"] == fc.backward["softmax"] == 0
    assert fc.train == fc.forward["total"] + fc.backward["total"]
    assert fc.ops(10, 3) == 10 * fc.train + 3 * fc.eval
    with pytest.raises(ValueError):
        fc.ops(-1, 0)


def test_inserted_kernel_changes_flops():
    from aiperf.graph import with_inserted_kernel

    g = insert_block(resnet50(input_size=32, classes=10, width=0.25), "conv2_block1_out", "m", 64, 3)
    f3 = count_flops(with_inserted_kernel(g, 3)).forward["conv"]
    f7 = count_flops(with_inserted_kernel(g, 7)).forward["conv"]
    assert f7 - f3 == 2 * (49 - 9) * 64 * 8 * 8 * 64


def test_resnet50_adds_are_two_input_and_match_table_iii_exactly(official):
    # 16 two-input adds: 3 at 56x56x256, 4 at 28x28x512, 6 at 14x14x1024, 3 at 7x7x2048.
    exact = 3 * 56 * 56 * 256 + 4 * 28 * 28 * 512 + 6 * 14 * 14 * 1024 + 3 * 7 * 7 * 2048
    assert official.forward["add"] == exact == 5_519_360  # Table III: 5.52E06


def test_an_n_input_add_counts_n_minus_1_additions_per_element():
    # The golden case: a skip into conv4_block5_add makes it a 3-input add,
    # one more 14x14x1024 addition than plain ResNet-50: 5,519,360 + 200,704.
    from aiperf.morphism import skip_at

    child = skip_at(resnet50(), "conv4_block2_out", "conv4_block5_add")
    assert len(child.layer("conv4_block5_add").inputs) == 3
    assert count_flops(child).forward["add"] == 5_720_064
    # A second skip into the same add: 4 inputs, 3 additions per element.
    four = skip_at(child, "conv4_block3_out", "conv4_block5_add")
    assert count_flops(four).forward["add"] == 5_519_360 + 2 * 200_704
    assert count_flops(four).backward["add"] == 0


def test_hand_built_three_input_add():
    g = Graph((4, 4, 2), 2, (
        conv("c1", INPUT, 2, 1), conv("c2", INPUT, 2, 3), simple("a", "add", "c1", "c2", "c1"),
        simple("gap", "avgpool", "a"), dense("fc", "gap", 2), simple("sm", "softmax", "fc"),
    ))
    assert count_flops(g).forward["add"] == 2 * 4 * 4 * 2
