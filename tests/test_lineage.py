"""Graphs from the search: the pure descent check (aiperf/lineage.py) and the master's
rules at SubmitModel through the real server (descent from the declared parent, the seed
ResNet-50 for none, batch and kernel in the profile's sets)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aiperf.api.client import ApiError
from aiperf.graph import Graph, conv, dense, simple
from aiperf.hyperparameters import Hyperparameters
from aiperf.lineage import LineageError, check_descent
from aiperf.morphism import MorphSpace, deeper_at, morph_step, random_morph, wider_at, wider_positions
from aiperf.profiles import OFFICIAL, SMOKE
from tests.support.master_clients import HP, clients, register

SPACE = SMOKE.morph_space()


def _search_child(parent: Graph, seed: int, steps: int) -> Graph:
    """A child as the search makes it (random morphs of the profile's space), through JSON."""
    child = random_morph(parent, seed, steps=steps, kernel_size=3, space=SPACE)
    return Graph.from_json(child.to_json())


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**31), steps=st.integers(1, 12))
def test_every_child_of_the_search_descends_from_its_parent(seed, steps):
    base = SMOKE.base_graph()
    check_descent(base, _search_child(base, seed, steps), SPACE, SMOKE.kernel_sizes)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**31), steps=st.integers(1, 6), extra=st.integers(1, 64))
def test_a_child_edited_after_its_morphs_does_not_descend(seed, steps, extra):
    """One widened conv more than its operations say: refused."""
    base = SMOKE.base_graph()
    child = _search_child(base, seed, steps)
    pos = wider_positions(child)[seed % len(wider_positions(child))]
    edited = wider_at(child, pos, extra).with_meta(operations=child.meta.get("operations", []))
    with pytest.raises(LineageError, match="not its parent changed by"):
        check_descent(base, edited, SPACE, SMOKE.kernel_sizes)


def test_operations_outside_the_profiles_space_are_refused():
    base = SMOKE.base_graph()
    pos = wider_positions(base)[0]
    doubled = wider_at(base, pos, base.layer(pos).filters)  # the original's doubling; smoke adds 25-50%
    with pytest.raises(LineageError, match="the profile adds one of"):
        check_descent(base, doubled, SPACE, SMOKE.kernel_sizes)
    check_descent(base, doubled, MorphSpace(), SMOKE.kernel_sizes)  # the original's space allows it
    relu = next(l.id for l in base.layers if l.type == "relu")
    with pytest.raises(LineageError, match="kernel 9"):
        check_descent(base, deeper_at(base, relu, 9), SPACE, SMOKE.kernel_sizes)


def test_forged_graphs_do_not_descend():
    base = SMOKE.base_graph()
    layers = [conv("c0", "input", 64, 1)] + [conv(f"c{i}", f"c{i - 1}", 64, 1) for i in range(1, 40)]
    layers += [simple("gap", "avgpool", "c39"), dense("fc", "gap", 10), simple("out", "softmax", "fc")]
    chain = Graph(base.input_shape, 10, tuple(layers), {"operations": []})
    with pytest.raises(LineageError, match="no operation"):
        check_descent(base, chain, SPACE, SMOKE.kernel_sizes)
    lying = chain.with_meta(operations=["deeper(after=conv1_relu,k=3)"])  # operations that make something else
    with pytest.raises(LineageError):
        check_descent(base, lying, SPACE, SMOKE.kernel_sizes)
    for bad in (["rm -rf"], "deeper", [1, 2], ["deeper(after=nope,k=3)"]):
        with pytest.raises(LineageError):
            check_descent(base, base.with_meta(operations=bad), SPACE, SMOKE.kernel_sizes)
    with pytest.raises(LineageError, match="exceed the bound"):
        check_descent(base, base.with_meta(operations=["wider(conv=a,filters=1->2)"] * 300), SPACE, (3,))


@settings(max_examples=40, deadline=None)
@given(ops=st.lists(st.text(max_size=60), max_size=5))
def test_any_recorded_operations_give_a_lineage_error_or_the_child(ops):
    base = SMOKE.base_graph()
    try:
        check_descent(base, base.with_meta(operations=ops), SPACE, SMOKE.kernel_sizes)
    except LineageError:
        return
    assert not ops  # only the seed itself, with no operations, is the seed


# ---------------------------------------------------------------- through the server

def _run(master_server, profile: str = "smoke"):
    h = master_server()
    w, c = clients(h)
    wid = register(w)
    c.start_run(3600, profile=profile)
    return w, c, wid


def _submit(w, wid, g: Graph, parent: int = 0, hp=HP) -> int:
    return w.submit_model(wid, g.to_json(), g.hash(), parent, 1, hp).model_id


def test_the_master_accepts_the_search_and_refuses_the_rest(master_server):
    w, c, wid = _run(master_server)
    base = SMOKE.base_graph()
    root = _submit(w, wid, base)
    child = _search_child(base, 7, 3)
    mid = _submit(w, wid, child, root)
    grandchild = Graph.from_json(morph_step(child, random.Random(1), 3, space=SPACE).to_json())
    _submit(w, wid, grandchild, mid)
    _submit(w, wid, child)  # no parent: from the seed, by the same operations
    with pytest.raises(ApiError) as e:  # the grandchild's one operation does not lead from the seed
        _submit(w, wid, grandchild)
    assert e.value.code.name == "INVALID_ARGUMENT" and "does not descend from the smoke profile's ResNet-50" in e.value.details
    with pytest.raises(ApiError) as e:  # nor from its grandparent
        _submit(w, wid, grandchild, root)
    assert e.value.code.name == "INVALID_ARGUMENT" and f"does not descend from model {root}" in e.value.details
    wide = wider_at(base, wider_positions(base)[0], 1).with_meta(operations=[])  # an edit it does not record
    with pytest.raises(ApiError) as e:
        _submit(w, wid, wide)
    assert e.value.code.name == "INVALID_ARGUMENT"
    assert len(c.list_models().models) == 4  # the accepted ones, nothing else


@pytest.mark.parametrize("hp, what", [(Hyperparameters(256, 3), "batch_size 256"),
                                      (Hyperparameters(8, 3), "batch_size 8"),
                                      (Hyperparameters(32, 9), "kernel_size 9")])
def test_hyperparameters_outside_the_profile_are_refused(master_server, hp, what):
    w, c, wid = _run(master_server)
    with pytest.raises(ApiError) as e:
        _submit(w, wid, SMOKE.base_graph(), hp=hp)
    assert e.value.code.name == "INVALID_ARGUMENT" and what in e.value.details


def test_official_batch_sizes_follow_the_accelerator_memory(master_server):
    from aiperf.api.client import Accelerator

    h = master_server()
    w, c = clients(h)
    wid = w.register(name="h100", host="h100", accelerators=[Accelerator("NVIDIA H100 80GB HBM3", 80 << 30, 0.0)]
                     ).worker_id
    c.start_run(3600, profile="official")
    sizes = OFFICIAL.for_accelerator_memory(80 << 30).batch_sizes
    base = OFFICIAL.base_graph()
    _submit(w, wid, base, hp=Hyperparameters(sizes[-1], 3))
    with pytest.raises(ApiError) as e:
        _submit(w, wid, base, hp=Hyperparameters(sizes[-1] + 1, 3))
    assert e.value.code.name == "INVALID_ARGUMENT"


@settings(max_examples=6, deadline=None)
@given(seed=st.integers(0, 2**31))
def test_the_searchs_own_choice_descends_from_the_model_it_names(seed):
    """What the worker submits: `select_child` over a history with accuracies (the annealing's
    several steps from a history model), through JSON, checked against that model's graph."""
    from aiperf.search import HistoryEntry, SearchSettings, select_child

    base = SMOKE.base_graph()
    first = _search_child(base, seed, 1)
    second = _search_child(first, seed + 1, 2)
    history = [HistoryEntry(1, base, 0.3), HistoryEntry(2, first, 0.5), HistoryEntry(3, second, 0.4)]
    graphs = {1: base, 2: first, 3: second}
    cand = select_child(history, seed, base=base, kernel_size=3, space=SPACE, settings=SearchSettings(max_candidates=24))
    child = Graph.from_json(cand.graph.to_json())
    parent = graphs[cand.parent_model_id] if cand.parent_model_id else base
    check_descent(parent, child, SPACE, SMOKE.kernel_sizes)


@settings(max_examples=5, deadline=None)
@given(seed=st.integers(0, 2**31), steps=st.integers(1, 4))
def test_official_children_descend_in_the_official_space(seed, steps):
    base = OFFICIAL.base_graph()
    space = OFFICIAL.morph_space()
    child = Graph.from_json(random_morph(base, seed, steps=steps, kernel_size=3, space=space).to_json())
    check_descent(base, child, space, OFFICIAL.kernel_sizes)


def test_a_child_of_a_twin_architecture_is_accepted(master_server):
    """Two workers reach one architecture by operations in another order (layer names differ);
    a child morphed from one twin, declared under the other, descends all the same."""
    w, c, wid = _run(master_server)
    base = SMOKE.base_graph()
    relus = [l.id for l in base.layers if l.type == "relu"]
    a, b = (f"deeper(after={relus[i]},k=3)" for i in (2, 5))
    one = deeper_at(deeper_at(base, relus[2], 3), relus[5], 3).with_meta(operations=[a, b])
    other = deeper_at(deeper_at(base, relus[5], 3), relus[2], 3).with_meta(operations=[b, a])
    assert one.hash() == other.hash() and [l.id for l in one.layers] != [l.id for l in other.layers]
    first = _submit(w, wid, one)
    _submit(w, wid, other)
    child = Graph.from_json(deeper_at(other, "m2_relu", 5).to_json())  # morphed from the second twin
    with pytest.raises(LineageError):  # replayed on the first twin's names, it is another network
        check_descent(one, child, SPACE, SMOKE.kernel_sizes)
    _submit(w, wid, child, first)  # declared under the first: accepted through its twin
    assert len(c.list_models().models) == 3
