"""The API's enums mapped to the names the CLI, the store and JSON use: the states
(aiperf/states.py), profiles and precisions."""

from __future__ import annotations

from aiperf import precision
from aiperf.api import aiperf_pb2 as pb
from aiperf.states import ModelState, RunState, WorkerState

API_VERSION: int = pb.API_VERSION_1

# The wire value of each state: RUN_<NAME>, MODEL_<NAME>, WORKER_<NAME>.
RUN_STATES: dict[int, RunState] = {pb.RunState.Value(f"RUN_{s.name}"): s for s in RunState}
MODEL_STATES: dict[int, ModelState] = {pb.ModelState.Value(f"MODEL_{s.name}"): s for s in ModelState}
WORKER_STATES: dict[int, WorkerState] = {pb.WorkerState.Value(f"WORKER_{s.name}"): s for s in WorkerState}
PROFILES: dict[int, str] = {pb.PROFILE_OFFICIAL: "official", pb.PROFILE_SMOKE: "smoke"}
# The frameworks a worker trains with (Keras 3's backends); the first is the default.
BACKENDS: dict[int, str] = {pb.BACKEND_TENSORFLOW: "tensorflow", pb.BACKEND_JAX: "jax"}
# The wire value of each precision of the one table (aiperf.precision): PRECISION_<NAME>.
PRECISIONS: dict[int, str] = {pb.Precision.Value(f"PRECISION_{name.upper()}"): name for name in precision.PRECISIONS}


def _inverse(d: dict[int, str]) -> dict[str, int]:
    return {v: k for k, v in d.items()}


RUN_STATE_VALUES = _inverse(RUN_STATES)
MODEL_STATE_VALUES = _inverse(MODEL_STATES)
WORKER_STATE_VALUES = _inverse(WORKER_STATES)
PROFILE_VALUES = _inverse(PROFILES)
BACKEND_VALUES = _inverse(BACKENDS)
PRECISION_VALUES = _inverse(PRECISIONS)
