"""Graph -> keras.Model (Keras 3, on the TensorFlow or the JAX backend).

TensorFlow is imported inside the functions so that importing `aiperf` stays
light (the master never needs it). Keras layer names are the graph's layer
ids, so weights can be mapped back to the graph (weight transfer).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aiperf.graph import INPUT, Graph, with_inserted_kernel
from aiperf.layers import KINDS

if TYPE_CHECKING:  # pragma: no cover
    import keras


SEED_RANGE = 2**32  # initialiser seeds are taken modulo this


def build_model(graph: Graph, kernel_size: int | None = None, seed: int | None = None) -> "keras.Model":
    """Build an untrained model (He-normal init) computing `graph`.

    `kernel_size` is the hyperparameter for convs inserted by morphism; it is
    applied to the graph first so the network and the FLOP count agree.
    Layer n's initialiser is seeded with (seed + n) mod 2**32 (JAX's seeds are 32-bit; the
    worker's seeds are 64-bit). Each layer comes from its
    kind's `keras_layer` (`aiperf.layers`).
    """
    import keras

    graph = with_inserted_kernel(graph, kernel_size)
    tensors: dict[str, Any] = {INPUT: keras.Input(shape=graph.input_shape, name=INPUT)}
    for n, layer in enumerate(graph.layers):
        kind = KINDS[layer.type]
        ins = [tensors[i] for i in layer.inputs]
        keras_layer = kind.keras_layer(layer, None if seed is None else (seed + n) % SEED_RANGE)
        tensors[layer.id] = keras_layer(ins[0] if kind.single_input else ins)
    name = str(graph.meta.get("name") or "aiperf_model")
    return keras.Model(tensors[INPUT], tensors[graph.output.id], name=_safe_name(name))


def profiler_flops(model: "keras.Model", batch: int = 1) -> dict[str, int]:
    """Independent forward FLOP count by TensorFlow's profiler, per op type.

    The model is traced for one batch and its function graph profiled with
    `float_operation`; used to cross-check our counter. The profiler needs only
    the ops' shapes, which the traced graph knows (a variable read has its
    variable's shape): freezing the variables to constants first gave the same
    counts and took most of the time, copying every weight (a ResNet-50 at
    width 1.5: 53M) into the graph.
    """
    import tensorflow as tf

    spec = tf.TensorSpec([batch, *model.input_shape[1:]], tf.float32)
    g = tf.function(lambda x: model(x, training=False)).get_concrete_function(spec).graph
    op_of = {op.name: op.type for op in g.get_operations()}
    opts = (tf.compat.v1.profiler.ProfileOptionBuilder(
        tf.compat.v1.profiler.ProfileOptionBuilder.float_operation())
        .with_empty_output().build())
    # The per-node ("graph") view, summed by op type here: the profiler's
    # own "op" view mis-attributes some nodes.
    root = tf.compat.v1.profiler.profile(graph=g, run_meta=tf.compat.v1.RunMetadata(),
                                         cmd="graph", options=opts)
    totals: dict[str, int] = {}
    stack = list(root.children)
    while stack:
        node = stack.pop()
        stack.extend(node.children)
        if node.float_ops and node.name in op_of:
            op = op_of[node.name]
            totals[op] = totals.get(op, 0) + int(node.float_ops)
    return totals


def _safe_name(name: str) -> str:
    return "".join(c if c.isalnum() or c in "_-" else "_" for c in name)
