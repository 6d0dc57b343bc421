"""Weight transfer: a child's initial weights that compute its parent's function.

Pure numpy. Weights are dicts keyed by layer id holding the arrays in Keras
`layer.get_weights()` order: conv [kernel(, bias)], batch norm [gamma, beta,
moving_mean, moving_var], dense [kernel, bias].

The child is compared with the parent layer by layer (morphism keeps layer
ids), tracking for every child tensor which parent tensor it equals and how its
channels map onto the parent's (widening replicates channels: child channel c
is parent channel ``map[c]``). From that:

- layers of the parent are copied; where their input was widened, the
  incoming weights of a replicated channel are divided by its replication
  count and new output units replicate old ones (Net2Net);
- an inserted conv (tag INSERTED) + BN + ReLU block is an identity in
  inference mode: centre-tap identity kernel, BN with mean 0, variance 1 and
  gamma = sqrt(1 + eps), and a ReLU on a tensor that is already non-negative;
- a skip branch ends in a BN with gamma = beta = 0, so it adds exactly zero;
  its 1×1 projection conv gets seeded He-normal weights (zero weights there
  would leave the branch without gradient).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Callable

import numpy as np

from aiperf.graph import INPUT, INSERTED, Graph, Layer, with_inserted_kernel
from aiperf.keras_builder import BN_EPSILON

Weights = dict[str, list[np.ndarray]]


class TransferError(ValueError):
    """The child is not a morph of the parent that weight transfer understands."""


@dataclass(frozen=True)
class _Tensor:
    """What a child tensor is in terms of the parent.

    src: the parent tensor it equals (channels permuted/replicated by `map`);
    None for a projection output whose value is not tied to the parent.
    zero: the tensor is identically zero (a fresh skip branch).
    """

    src: str | None
    map: np.ndarray | None
    zero: bool = False


def transfer_weights(parent: Graph, parent_weights: Weights, child: Graph, *,
                     kernel_size: int | None = None) -> Weights:
    """Weights for `child` (as built, after `with_inserted_kernel`) that make it
    compute the same function as `parent` with `parent_weights` in inference mode.

    `kernel_size`, when given, is applied to `child` first. Inherited inserted
    convs whose kernel size changed are zero-padded (exact) or centre-cropped.
    """
    child = with_inserted_kernel(child, kernel_size)
    parents = {l.id: l for l in parent.layers}
    consumers: dict[str, list[Layer]] = {l.id: [] for l in child.layers}
    for layer in child.layers:
        for i in dict.fromkeys(layer.inputs):
            if i != INPUT:
                consumers[i].append(layer)
    nonneg = _non_negative(parent)
    state: dict[str, _Tensor] = {INPUT: _Tensor(INPUT, np.arange(child.input_shape[-1]))}
    out: Weights = {}

    def channels(src: str) -> int:
        return parent.input_shape[-1] if src == INPUT else parent.shapes[src][-1]

    for layer in child.layers:
        ins = [state[i] for i in layer.inputs]
        p = parents.get(layer.id)
        if p is not None and p.type == layer.type:
            state[layer.id] = _inherited(layer, p, ins, parent_weights, out)
        else:
            state[layer.id] = _new(layer, ins, consumers[layer.id], nonneg, channels, out)
    return out


def _inherited(layer: Layer, p: Layer, ins: list[_Tensor], pw: Weights,
               out: Weights) -> _Tensor:
    lid = layer.id
    if layer.type == "add":
        live = [t for t in ins if not t.zero]
        if sorted(t.src or "" for t in live) != sorted(p.inputs):
            raise TransferError(f"add {lid!r}: child inputs do not match the parent's {list(p.inputs)}")
        first = live[0].map
        if any(not np.array_equal(t.map, first) for t in live[1:]):
            raise TransferError(f"add {lid!r}: its inputs were widened differently")
        return _Tensor(lid, first)
    (x,) = ins
    if x.zero or x.src != p.inputs[0]:
        raise TransferError(f"layer {lid!r} reads {x.src!r} in the child but {p.inputs[0]!r} in the parent")
    m_in = x.map
    if layer.type == "conv":
        kernel, *bias = _weights(pw, lid, 2 if p.use_bias else 1)
        cnt = _counts(m_in, kernel.shape[2], lid)
        m_out = np.arange(layer.filters) % kernel.shape[3]
        w = kernel[:, :, m_in][:, :, :, m_out] / cnt[m_in][None, None, :, None]
        ws = [_fit_kernel(w, layer.kernel)]
        if layer.use_bias:
            ws.append(bias[0][m_out] if bias else np.zeros(layer.filters, np.float32))
        out[lid] = [a.astype(np.float32) for a in ws]
        return _Tensor(lid, m_out)
    if layer.type == "batchnorm":
        out[lid] = [a[m_in].astype(np.float32) for a in _weights(pw, lid, 4)]
        return _Tensor(lid, m_in)
    if layer.type == "dense":
        kernel, bias = _weights(pw, lid, 2)
        if layer.units != kernel.shape[1]:
            raise TransferError(f"dense {lid!r}: units changed from {kernel.shape[1]} to {layer.units}")
        cnt = _counts(m_in, kernel.shape[0], lid)
        out[lid] = [(kernel[m_in] / cnt[m_in][:, None]).astype(np.float32), bias.astype(np.float32)]
        return _Tensor(lid, np.arange(layer.units))
    # relu, maxpool, avgpool, softmax: channel-wise, no weights
    return _Tensor(lid, m_in)


def _new(layer: Layer, ins: list[_Tensor], consumers: list[Layer], nonneg: set[str],
         channels: Callable[[str], int], out: Weights) -> _Tensor:
    lid = layer.id
    if len(ins) != 1 or ins[0].zero:
        raise TransferError(f"new layer {lid!r} ({layer.type}) has no function-preserving initialisation")
    (x,) = ins
    feeds_add = bool(consumers) and all(c.type == "add" for c in consumers)
    if layer.type == "conv" and layer.tag == INSERTED:
        if layer.stride != 1 or layer.padding != "same" or x.src is None:
            raise TransferError(f"inserted conv {lid!r} must be stride 1, 'same' and read a parent tensor")
        n = channels(x.src)
        cnt = _counts(x.map, n, lid)
        m_out = np.arange(layer.filters) % n
        if layer.filters < n:
            raise TransferError(f"inserted conv {lid!r} has fewer filters than the {n} channels it must keep")
        w = np.zeros((layer.kernel, layer.kernel, len(x.map), layer.filters), np.float32)
        c = layer.kernel // 2
        hit = x.map[:, None] == m_out[None, :]
        w[c, c] = hit / cnt[x.map][:, None]
        ws = [w] + ([np.zeros(layer.filters, np.float32)] if layer.use_bias else [])
        out[lid] = ws
        return _Tensor(x.src, m_out)
    if layer.type == "conv":  # skip projection: its BN zeroes it
        rng = np.random.default_rng(_layer_seed(lid))
        fan_in = layer.kernel * layer.kernel * len(x.map)
        w = rng.normal(0.0, np.sqrt(2.0 / fan_in), (layer.kernel, layer.kernel, len(x.map), layer.filters))
        ws = [w.astype(np.float32)] + ([np.zeros(layer.filters, np.float32)] if layer.use_bias else [])
        out[lid] = ws
        return _Tensor(None, None)
    if layer.type == "batchnorm":
        c = len(x.map) if x.map is not None else int(out[layer.inputs[0]][0].shape[-1])
        ones, zeros = np.ones(c, np.float32), np.zeros(c, np.float32)
        if feeds_add:  # the end of a skip branch: contributes zero
            out[lid] = [zeros.copy(), zeros.copy(), zeros.copy(), ones]
            return _Tensor(None, None, zero=True)
        if x.src is None:
            raise TransferError(f"new batch norm {lid!r} follows a projection but does not end a skip branch")
        gamma = np.full(c, np.sqrt(1.0 + BN_EPSILON), np.float32)
        out[lid] = [gamma, zeros.copy(), zeros.copy(), ones]
        return x
    if layer.type == "relu":
        if x.src is None or x.src not in nonneg:
            raise TransferError(f"new ReLU {lid!r} would change values: its input may be negative")
        return x
    raise TransferError(f"new layer {lid!r} ({layer.type}) has no function-preserving initialisation")


def _weights(pw: Weights, lid: str, n: int) -> list[np.ndarray]:
    ws = pw.get(lid)
    if ws is None or len(ws) != n:
        got = "none" if ws is None else f"{len(ws)} arrays"
        raise TransferError(f"parent weights for {lid!r}: expected {n} arrays, got {got}")
    return [np.asarray(a) for a in ws]


def _counts(m: np.ndarray, n: int, lid: str) -> np.ndarray:
    cnt = np.bincount(m, minlength=n)
    if len(cnt) != n or not np.all(cnt > 0):
        raise TransferError(f"layer {lid!r}: its input does not carry every parent channel")
    return cnt.astype(np.float32)


def _fit_kernel(w: np.ndarray, k: int) -> np.ndarray:
    """Zero-pad (exact for stride 1, 'same') or centre-crop a kernel to k×k."""
    kh = w.shape[0]
    if kh == k:
        return w
    if kh < k:
        p = (k - kh) // 2
        return np.pad(w, ((p, k - kh - p), (p, k - kh - p), (0, 0), (0, 0)))
    c = (kh - k) // 2
    return w[c:c + k, c:c + k]


def _non_negative(parent: Graph) -> set[str]:
    """Parent tensors that cannot be negative (ReLU outputs, max pools of them)."""
    out: set[str] = set()
    for layer in parent.layers:
        if layer.type == "relu" or (layer.type == "maxpool" and layer.inputs[0] in out):
            out.add(layer.id)
    return out


def _layer_seed(layer_id: str) -> int:
    return int.from_bytes(hashlib.sha256(layer_id.encode()).digest()[:8], "big")
