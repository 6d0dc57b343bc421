"""The API's enums mapped to the names the CLI, the store and JSON use: the states
(aiperf/states.py), profiles and precisions."""

from __future__ import annotations

from typing import Mapping, TypeVar, cast

from aiperf import precision
from aiperf.api import aiperf_pb2 as pb
from aiperf.states import ModelState, RunState, WorkerState

API_VERSION: pb.ApiVersion = pb.API_VERSION_1

# The wire value of each state: RUN_<NAME>, MODEL_<NAME>, WORKER_<NAME>.
RUN_STATES: dict[int, RunState] = {pb.RunState.Value(f"RUN_{s.name}"): s for s in RunState}
MODEL_STATES: dict[int, ModelState] = {pb.ModelState.Value(f"MODEL_{s.name}"): s for s in ModelState}
WORKER_STATES: dict[int, WorkerState] = {pb.WorkerState.Value(f"WORKER_{s.name}"): s for s in WorkerState}
PROFILES: dict[int, str] = {pb.PROFILE_OFFICIAL: "official", pb.PROFILE_SMOKE: "smoke"}
# The frameworks a worker trains with (Keras 3's backends); the first is the default.
BACKENDS: dict[int, str] = {pb.BACKEND_TENSORFLOW: "tensorflow", pb.BACKEND_JAX: "jax"}
# The wire value of each precision of the one table (aiperf.precision): PRECISION_<NAME>.
PRECISIONS: dict[int, str] = {pb.Precision.Value(f"PRECISION_{name.upper()}"): name for name in precision.PRECISIONS}


_E = TypeVar("_E", bound=int)


def _inverse(d: Mapping[int, str], _enum: type[_E]) -> dict[str, _E]:
    # protoc's .pyi types a message's enum field as the enum's class; the values are its ints
    return {v: cast(_E, k) for k, v in d.items()}


RUN_STATE_VALUES = _inverse(RUN_STATES, pb.RunState)
MODEL_STATE_VALUES = _inverse(MODEL_STATES, pb.ModelState)
WORKER_STATE_VALUES = _inverse(WORKER_STATES, pb.WorkerState)
PROFILE_VALUES = _inverse(PROFILES, pb.Profile)
BACKEND_VALUES = _inverse(BACKENDS, pb.Backend)
PRECISION_VALUES = _inverse(PRECISIONS, pb.Precision)
