"""Network morphism: validity, metadata, determinism, limits, kernel-size reach."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aiperf.flops import count_flops
from aiperf.graph import INSERTED, Graph, with_inserted_kernel
from aiperf.morphism import (
    LIMIT_KERNEL_SIZE,
    Limits,
    MorphismError,
    add_skip_positions,
    deeper,
    deeper_at,
    main_chain,
    params_at_kernel,
    random_morph,
    skip,
    skip_add_at,
    skip_at,
    skip_positions,
    wider,
    wider_at,
    wider_positions,
)
from aiperf.profiles import PROFILES
from aiperf.resnet import resnet50


@pytest.fixture(scope="module")
def official() -> Graph:
    return resnet50()


@pytest.fixture(scope="module")
def small() -> Graph:
    return resnet50(32, 3, 10, 0.25)


def _roundtrip(g: Graph) -> Graph:
    back = Graph.from_json(g.to_json())
    assert back.to_json() == g.to_json()
    return back


def test_deeper_inserts_identity_shaped_block_with_inserted_tag(official: Graph) -> None:
    child = deeper_at(official, "conv3_block2_out", kernel_size=5)
    assert len(child.layers) == len(official.layers) + 3
    new = [l for l in child.layers if l.id not in {p.id for p in official.layers}]
    assert [l.type for l in new] == ["conv", "batchnorm", "relu"]
    conv = new[0]
    assert conv.tag == INSERTED and conv.kernel == 5 and conv.stride == 1
    assert conv.filters == official.shapes["conv3_block2_out"][-1]
    assert child.shapes[new[2].id] == official.shapes["conv3_block2_out"]
    # Every former consumer of the ReLU now reads the new block.
    for layer in official.consumers("conv3_block2_out"):
        assert new[2].id in child.layer(layer.id).inputs
    assert child.meta["parent"] == official.hash()
    assert child.meta["operations"] == ["deeper(after=conv3_block2_out,k=5)"]
    assert official.layer("conv3_block3_1_conv").inputs == ("conv3_block2_out",)  # parent untouched
    _roundtrip(child)


def test_kernel_size_hyperparameter_changes_inserted_conv_and_flops(official: Graph) -> None:
    child = deeper_at(official, "conv4_block1_out", kernel_size=3)
    k3, k7 = with_inserted_kernel(child, 3), with_inserted_kernel(child, 7)
    conv = [l for l in k7.layers if l.tag == INSERTED][0]
    assert conv.kernel == 7
    c = official.shapes["conv4_block1_out"]  # 14x14x1024
    diff = count_flops(k7).forward["conv"] - count_flops(k3).forward["conv"]
    assert diff == 2 * c[0] * c[1] * c[2] * c[2] * (49 - 9)  # MACs count 2
    # Only inserted convs change: the ResNet's own 3x3 convs keep their kernel.
    assert k7.layer("conv4_block2_2_conv").kernel == 3


def test_wider_targets_inner_bottleneck_convs_and_patches_downstream(official: Graph) -> None:
    positions = wider_positions(official)
    assert "conv2_block1_1_conv" in positions and "conv5_block3_2_conv" in positions
    # Convs feeding an add (3rd conv of a block, shortcut projections) are never widened.
    assert not any(p.endswith(("_3_conv", "_0_conv")) for p in positions)
    child = wider_at(official, "conv3_block2_2_conv", 64)
    assert child.layer("conv3_block2_2_conv").filters == 128 + 64
    assert child.shapes["conv3_block2_2_bn"] == (28, 28, 192)
    extra = 64 * (3 * 3 * 128 + 1 + 4) + 64 * 512  # conv, bias, BN, next conv's inputs
    assert child.num_params() == official.num_params() + extra
    with pytest.raises(MorphismError, match="cannot be widened"):
        wider_at(official, "conv3_block2_3_conv", 8)


def test_skip_uses_projection_only_where_shapes_differ(official: Graph) -> None:
    same = skip_at(official, "conv3_block1_out", "conv3_block3_add")
    new = [l for l in same.layers if l.id not in {p.id for p in official.layers}]
    assert [l.type for l in new] == ["batchnorm"]  # zero-initialisable gate, no conv
    assert new[0].id in same.layer("conv3_block3_add").inputs
    proj = skip_at(official, "conv2_block3_out", "conv4_block2_add")
    new = [l for l in proj.layers if l.id not in {p.id for p in official.layers}]
    assert [l.type for l in new] == ["conv", "batchnorm"]
    assert new[0].kernel == 1 and new[0].stride == 4 and new[0].filters == 1024
    assert new[0].tag != INSERTED  # the kernel-size hyperparameter leaves projections alone
    assert proj.meta["operations"] == ["skip(from=conv2_block3_out,to=conv4_block2_add,proj,stride=4)"]
    for relu, add, _ in skip_positions(official):  # sources always precede targets
        assert [l.id for l in official.layers].index(relu) < [l.id for l in official.layers].index(add)


def test_random_ops_give_valid_children_with_unique_ids(small: Graph) -> None:
    rng = random.Random(0)
    g = small
    for n in range(12):
        g = [deeper, wider, skip][n % 3](g, rng) if n % 3 != 0 else deeper(g, rng, kernel_size=3)
        ids = [l.id for l in g.layers]
        assert len(ids) == len(set(ids))
        _roundtrip(g)
    assert g.hash() != small.hash()


def test_random_morph_is_deterministic_and_records_lineage(official: Graph) -> None:
    a = random_morph(official, seed=42, steps=4, kernel_size=5)
    b = random_morph(Graph.from_json(official.to_json()), seed=42, steps=4, kernel_size=5)
    assert a.to_json() == b.to_json()
    assert a.meta["parent"] == official.hash()
    assert len(a.meta["operations"]) == 4
    assert all(op.split("(")[0] in ("deeper", "wider", "skip") for op in a.meta["operations"])
    assert random_morph(official, seed=43, steps=4).hash() != a.hash()


def test_new_layer_ids_are_deterministic_and_do_not_collide(small: Graph) -> None:
    child = random_morph(small, seed=5, steps=6)
    new = sorted({l.id.split("_")[0] for l in child.layers if l.id.startswith("m")})
    assert new == [f"m{n}" for n in range(1, len(new) + 1)]


def test_limits_refuse_clearly_and_try_other_operations(small: Graph) -> None:
    n, p = len(small.layers), small.num_params()
    # No layer to spare: whatever op is drawn first, random_morph falls back to wider.
    for seed in range(6):
        child = random_morph(small, seed=seed, limits=Limits(max_layers=n, max_params=10**9))
        assert len(child.layers) == n
        assert child.meta["operations"][0].startswith("wider")
    # One layer to spare: identity skips (a single BN) fit too, 3-layer deeper never does.
    for seed in range(6):
        child = random_morph(small, seed=seed, limits=Limits(max_layers=n + 1, max_params=10**9))
        assert child.meta["operations"][0].startswith(("wider", "skip"))
    with pytest.raises(MorphismError, match=r"over the limit max_(layers|params)="):
        random_morph(small, seed=1, limits=Limits(max_layers=n, max_params=p))
    with pytest.raises(MorphismError, match=rf"parameters, over the limit max_params={p}"):
        random_morph(small, seed=1, limits=Limits(max_layers=10**6, max_params=p))


def test_bad_arguments_are_refused(small: Graph) -> None:
    with pytest.raises(MorphismError, match="kernel_size"):
        random_morph(small, seed=1, kernel_size=4)
    with pytest.raises(MorphismError, match="steps"):
        random_morph(small, seed=1, steps=0)
    with pytest.raises(MorphismError, match="no layer"):
        deeper_at(small, "nope")
    with pytest.raises(MorphismError, match="is a conv"):
        deeper_at(small, "conv1_conv")


def test_parameter_limit_is_checked_at_the_kernel_size_trained(official: Graph) -> None:
    # The limit holds at the kernel the child trains with: checked at kernel 3 alone, a child
    # under 60M parameters there could train at kernel 7 above it.
    # One inserted 1024->1024 conv after a 14x14x1024 ReLU: 9·1024² weights at kernel 3,
    # 49·1024² at kernel 7, plus its BN's 4·1024.
    child = deeper_at(official, "conv4_block1_out", kernel_size=3)
    base = official.num_params()
    assert child.num_params() == base + 9 * 1024 * 1024 + 4 * 1024 < 60_000_000
    at7 = base + 49 * 1024 * 1024 + 4 * 1024
    assert params_at_kernel(child, 7) == at7 == with_inserted_kernel(child, 7).num_params() > 60_000_000
    limits = Limits()
    assert limits.kernel_size == LIMIT_KERNEL_SIZE == max(max(p.kernel_sizes) for p in PROFILES.values())
    assert limits.violation(child) == (f"child would have {at7} parameters, over the limit "
                                       "max_params=60000000 (inserted convs at kernel size 7)")
    assert limits.violation(child, kernel_size=5) is None  # the kernel actually trained, when known
    assert Limits(kernel_size=3).violation(child) is None
    assert Limits(kernel_size=None).violation(child) is None  # the graph as it stands (kernel 3)
    with pytest.raises(ValueError, match="kernel_size"):
        Limits(kernel_size=4)


def test_generated_children_fit_the_limit_at_every_kernel_size(official: Graph) -> None:
    # Whatever kernel TPE later picks from {3, 5, 7}, the child stays within max_params.
    limits = Limits()
    for seed in range(4):
        child = random_morph(official, seed=seed, steps=3, limits=limits)
        for k in (3, 5, 7):
            assert with_inserted_kernel(child, k).num_params() <= limits.max_params


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10**6), steps=st.integers(1, 4), k=st.sampled_from([1, 3, 5, 7, 9]))
def test_params_at_kernel_equals_rebuilding_the_graph(small: Graph, seed: int, steps: int, k: int) -> None:
    child = random_morph(small, seed=seed, steps=steps, limits=Limits(max_params=10**9))
    assert params_at_kernel(child, k) == with_inserted_kernel(child, k).num_params()
    assert params_at_kernel(child, None) == child.num_params()


# ---------------------------------------------------------------- the original's space


def test_skip_may_create_a_new_add_after_a_main_chain_batch_norm(official: Graph) -> None:
    # The original's to_skip_connection_graph2: ReLU -> 1x1 conv + BN -> a new add after a BN.
    child = skip_add_at(official, "conv3_block1_out", "conv3_block3_1_bn")
    new = [l for l in child.layers if l.id not in {p.id for p in official.layers}]
    assert [l.type for l in new] == ["conv", "batchnorm", "add"]
    proj, gate, add = new
    assert (proj.kernel, proj.stride, proj.filters, proj.inputs) == (1, 1, 128, ("conv3_block1_out",))
    assert proj.tag != INSERTED  # the kernel-size hyperparameter leaves projections alone
    assert gate.inputs == (proj.id,) and add.inputs == ("conv3_block3_1_bn", gate.id)
    assert child.layer("conv3_block3_1_relu").inputs == (add.id,)  # the BN's consumer reads the add
    assert child.shapes[add.id] == official.shapes["conv3_block3_1_bn"] == (28, 28, 128)
    assert child.meta["operations"] == ["skip(from=conv3_block1_out,after=conv3_block3_1_bn,new_add,stride=1)"]
    # Parameters and FLOPs (SPEC section 6): conv 2·K²·C_i·H·W·C_o, BN 7·H·W·C, a 2-input add H·W·C.
    assert child.num_params() == official.num_params() + 512 * 128 + 4 * 128
    before, after = count_flops(official).forward, count_flops(child).forward
    assert after["conv"] - before["conv"] == 2 * 512 * 28 * 28 * 128
    assert after["batchnorm"] - before["batchnorm"] == 7 * 28 * 28 * 128
    assert after["add"] - before["add"] == 28 * 28 * 128
    _roundtrip(child)


def test_new_add_projection_strides_down_to_a_later_stage(official: Graph) -> None:
    child = skip_add_at(official, "conv2_block3_out", "conv4_block2_2_bn")  # 56x56x256 -> 14x14x256
    proj = child.layer("m1_skip_conv")
    assert (proj.stride, proj.filters) == (4, 256)
    assert child.shapes["m1_skip_add"] == (14, 14, 256)
    with pytest.raises(MorphismError, match="must come before"):
        skip_add_at(official, "conv4_block2_out", "conv3_block1_1_bn")
    with pytest.raises(MorphismError, match="is a conv"):
        skip_add_at(official, "conv2_block3_out", "conv4_block2_2_conv")


def test_new_add_targets_are_main_chain_batch_norms_only(official: Graph) -> None:
    chain = main_chain(official)
    targets = {b for _, b, _ in add_skip_positions(official)}
    bns = {l.id for l in official.layers if l.type == "batchnorm"}
    assert targets == bns & chain - {"conv1_bn"}  # the stem BN has no ReLU before it
    assert "conv2_block1_0_bn" not in targets  # a shortcut projection is off the main chain
    order = [l.id for l in official.layers]
    assert all(order.index(r) < order.index(b) for r, b, _ in add_skip_positions(official))
    child = skip_add_at(official, "conv2_block3_out", "conv4_block2_2_bn")
    again = {(r, b) for r, b, _ in add_skip_positions(child)}
    assert ("conv2_block3_out", "conv4_block2_2_bn") not in again  # that pair is joined already
    assert ("conv2_block2_out", "conv4_block2_2_bn") in again  # another source still may be
    assert "m1_skip_bn" not in {b for _, b in again}  # a skip branch is not the main chain


def test_widen_doubles_in_the_original_space_and_smoke_keeps_smaller_steps(official: Graph) -> None:
    from aiperf.morphism import MorphSpace
    from aiperf.profiles import OFFICIAL, SMOKE

    assert OFFICIAL.morph_space() == MorphSpace() == MorphSpace((1.0,), True)
    assert SMOKE.morph_space() == MorphSpace((0.25, 0.5), True)
    for seed in range(8):
        rng = random.Random(seed)
        child = wider(official, rng, OFFICIAL.morph_space())
        [op] = child.meta["operations"]
        before, after = (int(x) for x in op.split("filters=")[1].rstrip(")").split("->"))
        assert after == 2 * before
        child = wider(official, random.Random(seed), SMOKE.morph_space())
        before, after = (int(x) for x in child.meta["operations"][0].split("filters=")[1].rstrip(")").split("->"))
        assert after - before in (before // 4, before // 2)
    with pytest.raises(ValueError, match="widen_fractions"):
        MorphSpace((0.0,))
    with pytest.raises(ValueError, match="widen_fractions"):
        MorphSpace(())


def test_the_space_decides_whether_skips_create_adds(small: Graph) -> None:
    from aiperf.morphism import MorphSpace

    joins_only = MorphSpace((1.0,), skip_new_add=False)
    made = {"join": 0, "new_add": 0}
    for seed in range(40):
        for space in (MorphSpace(), joins_only):
            op = skip(small, random.Random(seed), space).meta["operations"][0]
            kind = "new_add" if "new_add" in op else "join"
            assert space.skip_new_add or kind == "join"
            made[kind] += space.skip_new_add
    assert made["new_add"] > 0 and made["join"] > 0  # the original's space offers both


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10**6), steps=st.integers(1, 5))
def test_random_children_in_the_original_space_are_valid(small: Graph, seed: int, steps: int) -> None:
    child = random_morph(small, seed=seed, steps=steps, limits=Limits(max_params=10**9))
    ids = [l.id for l in child.layers]
    assert len(ids) == len(set(ids)) and child.shapes[child.output.id] == (10,)
    assert _roundtrip(child).hash() == child.hash()
    assert random_morph(small, seed=seed, steps=steps, limits=Limits(max_params=10**9)).hash() == child.hash()
