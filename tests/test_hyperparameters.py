"""Hyperparameters: one type, one validator, one dict form."""

import dataclasses

import numpy as np
import pytest

from aiperf.graph import INSERTED, GraphError, with_inserted_kernel
from aiperf.hyperparameters import (
    MAX_KERNEL_SIZE,
    HyperparameterError,
    Hyperparameters,
    check_batch_size,
    check_kernel_size,
)
from aiperf.morphism import MorphismError, deeper_at, random_morph
from aiperf.resnet import resnet50


def test_dict_form_round_trips():
    h = Hyperparameters(batch_size=448, kernel_size=5)
    assert h.to_dict() == {"batch_size": 448, "kernel_size": 5}
    assert Hyperparameters.from_dict(h.to_dict()) == h


def test_frozen_and_hashable():
    h = Hyperparameters(32, 3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        h.batch_size = 64  # type: ignore[misc]
    assert len({h, Hyperparameters(32, 3), Hyperparameters(32, 5)}) == 2


def test_numpy_integers_become_ints():
    h = Hyperparameters(np.int64(64), np.int32(7))
    assert type(h.batch_size) is int and type(h.kernel_size) is int and h == Hyperparameters(64, 7)


@pytest.mark.parametrize("k", [0, -3, 2, 4, MAX_KERNEL_SIZE + 2, True, 3.0, "3", None])
def test_kernel_size_rule(k):
    with pytest.raises(HyperparameterError, match="kernel_size must be an odd integer"):
        check_kernel_size(k)
    with pytest.raises(HyperparameterError):
        Hyperparameters(32, k)


@pytest.mark.parametrize("b", [0, -1, 1.5, False, "32"])
def test_batch_size_rule(b):
    with pytest.raises(HyperparameterError, match="batch_size must be a positive integer"):
        check_batch_size(b)


def test_limits_of_the_rule_are_accepted():
    assert check_kernel_size(1) == 1 and check_kernel_size(MAX_KERNEL_SIZE) == MAX_KERNEL_SIZE
    assert check_batch_size(1) == 1


@pytest.mark.parametrize("data,message", [
    ({"batch_size": 32}, "missing hyperparameter"),
    ({"batch_size": 32, "kernel_size": 3, "lr": 0.1}, "unknown hyperparameter"),
    ([32, 3], "must be an object"),
    ({"batch_size": 32, "kernel_size": 4}, "kernel_size"),
])
def test_from_dict_names_the_fault(data, message):
    with pytest.raises(HyperparameterError, match=message):
        Hyperparameters.from_dict(data)


def test_graph_and_morphism_apply_the_same_rule():
    # The rule is the library's one validator, seen through each module's own error type.
    g = resnet50(32, 3, 10, 0.125)
    child = deeper_at(g, "conv3_block1_out", kernel_size=MAX_KERNEL_SIZE)
    assert [l.kernel for l in child.layers if l.tag == INSERTED] == [MAX_KERNEL_SIZE]
    for bad in (4, MAX_KERNEL_SIZE + 2):
        with pytest.raises(GraphError, match="kernel_size must be an odd integer"):
            with_inserted_kernel(child, bad)
        with pytest.raises(MorphismError, match="kernel_size must be an odd integer"):
            random_morph(g, seed=3, kernel_size=bad)
        with pytest.raises(MorphismError, match="kernel_size must be an odd integer"):
            deeper_at(g, "conv3_block1_out", kernel_size=bad)
