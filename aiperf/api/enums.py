"""Lower-case names of the API's enums, as the CLI, the store and JSON use them."""

from __future__ import annotations

from aiperf import precision
from aiperf.api import aiperf_pb2 as pb

API_VERSION: int = pb.API_VERSION_1

RUN_STATES: dict[int, str] = {
    pb.RUN_PENDING: "pending",
    pb.RUN_RUNNING: "running",
    pb.RUN_STOPPING: "stopping",
    pb.RUN_FINISHED: "finished",
    pb.RUN_ABORTED: "aborted",
}
MODEL_STATES: dict[int, str] = {
    pb.MODEL_QUEUED: "queued",
    pb.MODEL_TRAINING: "training",
    pb.MODEL_DONE: "done",
    pb.MODEL_FAILED: "failed",
    pb.MODEL_ABANDONED: "abandoned",
}
WORKER_STATES: dict[int, str] = {pb.WORKER_ALIVE: "alive", pb.WORKER_LOST: "lost"}
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

MODEL_STATE_NAMES: tuple[str, ...] = tuple(MODEL_STATES.values())  # in the API's order

# The groups of states the master's rules speak of (ordered, so that SQL built from them is stable).
ACTIVE_RUN_STATES: tuple[str, ...] = ("pending", "running", "stopping")  # a run that takes work
OVER_RUN_STATES: tuple[str, ...] = ("finished", "aborted")  # a run that refuses reports
OPEN_MODEL_STATES: tuple[str, ...] = ("queued", "training")  # a model that takes reports
FINISHED_MODEL_STATES: tuple[str, ...] = ("done", "failed")  # what a worker may finish a model as

