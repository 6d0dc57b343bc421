"""The vocabulary of weight transfer that every layer kind uses (see `aiperf.weight_transfer`).

Weights are dicts keyed by layer id holding the arrays in Keras
`layer.get_weights()` order. An `Origin` says what a child tensor is in terms
of the parent: which parent tensor it equals, with its channels mapped
(widening replicates channels: child channel c is parent channel
``channel_map[c]``).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from aiperf.layers.layer import Layer

Weights = dict[str, list[np.ndarray]]
ParentWeights = Mapping[str, Sequence[Any]]  # only read: a checkpoint's or a model's arrays


class TransferError(ValueError):
    """The child is not a morph of the parent that weight transfer understands."""


@dataclass(frozen=True)
class Origin:
    """What a child tensor is in terms of the parent.

    source: the parent tensor it equals (channels permuted/replicated by
    `channel_map`); None for a projection output whose value is not tied to
    the parent. zero: the tensor is identically zero (a fresh skip branch).
    """

    source: str | None
    channel_map: np.ndarray | None
    zero: bool = False

    def channels(self, layer_id: str) -> np.ndarray:
        """`channel_map`, for a layer whose weights follow the channels it reads."""
        if self.channel_map is None:
            raise TransferError(f"layer {layer_id!r} reads a tensor not tied to the parent's channels")
        return self.channel_map


@dataclass(frozen=True)
class TransferContext:
    """What a layer kind may consult while transferring one child."""

    parent_weights: ParentWeights
    out: Weights  # the child's weights, filled layer by layer in graph order
    parent_channels: Callable[[str], int]  # channel count of a parent tensor
    parent_non_negative: frozenset[str]  # parent tensors that cannot be negative
    skip_ends: frozenset[str]  # child layers whose consumers all sum their inputs


def matching_input(layer: Layer, parent: Layer, inputs: Sequence[Origin]) -> Origin:
    """The one input of `layer`, checked to be the input its parent copy reads."""
    (x,) = inputs
    if x.zero or x.source != parent.inputs[0]:
        raise TransferError(f"layer {layer.id!r} reads {x.source!r} in the child "
                            f"but {parent.inputs[0]!r} in the parent")
    return x


def parent_arrays(weights: ParentWeights, layer_id: str, n: int) -> list[np.ndarray]:
    """The `n` weight arrays of parent layer `layer_id`."""
    arrays = weights.get(layer_id)
    if arrays is None or len(arrays) != n:
        got = "none" if arrays is None else f"{len(arrays)} arrays"
        raise TransferError(f"parent weights for {layer_id!r}: expected {n} arrays, got {got}")
    return [np.asarray(a) for a in arrays]


def replication_counts(channel_map: np.ndarray, n: int, layer_id: str) -> np.ndarray:
    """How many child channels replicate each of the `n` parent channels (all >= 1)."""
    counts = np.bincount(channel_map, minlength=n)
    if len(counts) != n or not np.all(counts > 0):
        raise TransferError(f"layer {layer_id!r}: its input does not carry every parent channel")
    return counts.astype(np.float32)


def fit_kernel(w: np.ndarray, k: int) -> np.ndarray:
    """Zero-pad (exact for stride 1, 'same') or centre-crop a kernel to k×k."""
    kh = w.shape[0]
    if kh == k:
        return w
    if kh < k:
        p = (k - kh) // 2
        return np.pad(w, ((p, k - kh - p), (p, k - kh - p), (0, 0), (0, 0)))
    c = (kh - k) // 2
    return w[c:c + k, c:c + k]


def layer_seed(layer_id: str) -> int:
    """A seed for a new layer's random weights, stable across machines."""
    return int.from_bytes(hashlib.sha256(layer_id.encode()).digest()[:8], "big")
