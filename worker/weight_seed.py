"""A model's start from the master's initialisation seed (docs/spec.md, "Weights from outside the run").

The master hands out a seed with each model at SubmitModel (master/core/weight_lineage.py).
The worker prepares a round before it submits it (worker/lookahead.py), so the round's
model is built first with the worker's own seed; `start_from_seed` then gives every layer
the round did not inherit the weights `aiperf.keras_builder.build_model` gives with the
master's seed, before the first step. The seed ResNet-50 and every model trained from
scratch thus start from weights no worker could know before the master created the model;
an inherited child keeps its parent's layers and the transfer's, and its other layers (the
ones a morphism added that the transfer left to the initialiser) come from the seed too.

`seed_weights` is what an auditor recomputes: the model's epoch-0 weights, from its
recorded graph, kernel size and seed alone, on the backend the worker trained on (Keras's
seeded initialisers draw the same values for the same seed on one backend; TensorFlow and
JAX draw different ones).
"""

from __future__ import annotations

import logging
from typing import Any, Collection

from aiperf.graph import Graph

log = logging.getLogger(__name__)


def seed_weights(graph: Graph, kernel_size: int | None, init_seed: int) -> dict[str, list[Any]]:
    """{layer id: arrays} of the untrained model of `graph` at `kernel_size` built with `init_seed`."""
    import keras

    from aiperf.keras_builder import build_model
    from worker.rounds import layer_weights

    previous = keras.config.dtype_policy()
    try:
        keras.config.set_dtype_policy("float32")  # the variables' dtype under every policy
        return layer_weights(build_model(graph, kernel_size=kernel_size, seed=init_seed))
    finally:
        keras.config.set_dtype_policy(previous)


def start_from_seed(compiled: Any, graph: Graph, init_seed: int, inherited: Collection[str] = ()) -> int:
    """Load the seed's weights into the round's `compiled` model (a `worker.rounds.CompiledRound`
    of `graph`, its kernel inserted) for every layer not in `inherited`; returns how many layers
    were set. Seed 0: a master from before seeds, nothing changes."""
    if not init_seed or compiled is None:
        return 0
    keep = set(inherited)
    weights = {k: v for k, v in seed_weights(graph, None, init_seed).items() if k not in keep}
    compiled.load_weights(weights)
    log.info("event=start_from_seed layers=%d inherited=%d", len(weights), len(keep))
    return len(weights)
