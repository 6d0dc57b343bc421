"""The digest of a model's weights (docs/spec.md, "Weights from outside the run").

A worker reports it at each epoch's end and for its checkpoint; an auditor computes it
from a checkpoint file or from the weights a seed gives. It is a function of the arrays
alone, not of how a file stores them (an HDF5 file's layout and metadata vary between
writers), so the live model, its checkpoint and a rebuilt model agree when their values
do: SHA-256 over each layer id in sorted order, then each of its arrays' shape and its
values as little-endian float32 (the variables' dtype under every precision policy).
"""

from __future__ import annotations

import hashlib
from typing import Any, Mapping, Sequence

import numpy as np


def weights_digest(weights: Mapping[str, Sequence[Any]]) -> str:
    """SHA-256 in lowercase hex of {layer id: arrays} (the form `worker.rounds.layer_weights` gives)."""
    digest = hashlib.sha256()
    for layer_id in sorted(weights):
        arrays = weights[layer_id]
        digest.update(f"{layer_id}\0{len(arrays)}\0".encode())
        for array in arrays:
            values = np.ascontiguousarray(np.asarray(array), dtype="<f4")
            digest.update(repr(tuple(int(n) for n in values.shape)).encode())
            digest.update(values.tobytes())
    return digest.hexdigest()
