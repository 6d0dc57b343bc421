"""Weight transfer: a child's initial weights that compute its parent's function.

Pure numpy. Weights are dicts keyed by layer id holding the arrays in Keras
`layer.get_weights()` order: conv [kernel(, bias)], batch norm [gamma, beta,
moving_mean, moving_var], dense [kernel, bias].

The child is compared with the parent layer by layer (morphism keeps layer
ids), tracking for every child tensor which parent tensor it equals and how its
channels map onto the parent's (an `Origin`; widening replicates channels).
Each layer kind's entry in `aiperf.layers` does its part; together:

- layers of the parent are copied; where their input was widened, the
  incoming weights of a replicated channel are divided by its replication
  count and new output units replicate old ones (Net2Net);
- an inserted conv (tag INSERTED) + BN + ReLU block is an identity in
  inference mode: centre-tap identity kernel, BN with mean 0, variance 1 and
  gamma = sqrt(1 + eps), and a ReLU on a tensor that is already non-negative;
- a skip branch ends in a BN with gamma = beta = 0, so it adds exactly zero;
  its 1×1 projection conv gets seeded He-normal weights (zero weights there
  would leave the branch without gradient);
- a new add (a skip that creates one after a batch norm) sums one parent
  tensor with zero branches: it is that tensor.
"""

from __future__ import annotations

import numpy as np

from aiperf.graph import INPUT, INSERTED, Graph, Layer, with_inserted_kernel
from aiperf.layers import KINDS
from aiperf.layers.transfer import Origin, ParentWeights, TransferContext, TransferError, Weights

__all__ = ["TransferError", "Weights", "inherited_kernel_size", "transfer_weights"]


def inherited_kernel_size(parent: Graph, parent_kernel: int, chosen: int) -> int:
    """The kernel size of a child that inherits from `parent` trained at `parent_kernel`, when
    the search chose `chosen`: never smaller than the parent's when the parent has inserted
    convs. Zero-padding a kernel to a larger size is exact; centre-cropping it is not (a 7x7
    inserted conv cropped to 3x3 moved the logits by 3.8), and the point of inheriting is
    that the child starts from its parent's function (docs/spec.md, "Inheritance")."""
    if any(l.tag == INSERTED and l.type == "conv" for l in parent.layers):
        return max(chosen, parent_kernel)
    return chosen


def transfer_weights(parent: Graph, parent_weights: ParentWeights, child: Graph, *,
                     kernel_size: int | None = None) -> Weights:
    """Weights for `child` (as built, after `with_inserted_kernel`) that make it
    compute the same function as `parent` with `parent_weights` in inference mode.

    `kernel_size`, when given, is applied to `child` first. Inherited inserted
    convs whose kernel size changed are zero-padded (exact) or centre-cropped.
    """
    child = with_inserted_kernel(child, kernel_size)
    parents = {l.id: l for l in parent.layers}

    def channels(source: str) -> int:
        return parent.input_shape[-1] if source == INPUT else parent.shapes[source][-1]

    ctx = TransferContext(parent_weights, {}, channels, _non_negative(parent), _skip_ends(child))
    origins: dict[str, Origin] = {INPUT: Origin(INPUT, np.arange(child.input_shape[-1]))}
    for layer in child.layers:
        ins = [origins[i] for i in layer.inputs]
        kind = KINDS[layer.type]
        p = parents.get(layer.id)
        if p is not None and p.type == layer.type:
            origins[layer.id] = kind.inherit(layer, p, ins, ctx)
        elif not kind.single_input:
            origins[layer.id] = kind.initialise_many(layer, ins, ctx)
        elif ins[0].zero:
            raise TransferError(f"new layer {layer.id!r} ({layer.type}) has no function-preserving initialisation")
        else:
            origins[layer.id] = kind.initialise(layer, ins[0], ctx)
    return ctx.out


def _non_negative(parent: Graph) -> frozenset[str]:
    """Parent tensors that cannot be negative (ReLU outputs, max pools of them)."""
    out: set[str] = set()
    for layer in parent.layers:
        if KINDS[layer.type].non_negative([i in out for i in layer.inputs]):
            out.add(layer.id)
    return frozenset(out)


def _skip_ends(child: Graph) -> frozenset[str]:
    """Child layers read only by layers that sum their inputs: where a skip branch ends."""
    consumers: dict[str, list[Layer]] = {l.id: [] for l in child.layers}
    for layer in child.layers:
        for i in dict.fromkeys(layer.inputs):
            if i != INPUT:
                consumers[i].append(layer)
    return frozenset(lid for lid, cs in consumers.items() if cs and all(KINDS[c.type].sums_inputs for c in cs))
