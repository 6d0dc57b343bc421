"""What a submitted model must be: a graph from the search, with hyperparameters of the profile.

Checked at SubmitModel, before the model counts a FLOP: the graph fits the profile (input,
classes, kernel, parameter limit: run_rules.check_graph_fits); its batch size is one of the
profile's for the worker's accelerator memory (a batch of 256 in a profile whose choices are
16-128 trains a network the search never chose, at a utilisation it never reaches); and it
descends from its declared parent by the profile's morphism operations (aiperf/lineage.py),
the seed being the profile's ResNet-50. The graph, not its worker, defines the FLOPs counted
per image, so a graph outside the search (a chain of 1x1 convolutions, a dense tower) would
otherwise score more FLOPs per second than the benchmark's networks reach.
"""

from __future__ import annotations

import functools
from typing import Any, Protocol

from aiperf.graph import Graph
from aiperf.lineage import LineageError, check_descent
from aiperf.profiles import PROFILES, Profile
from master.core.requests import ModelSubmission
from master.core.run_rules import check_graph_fits, parse_graph
from master.store.errors import InvalidArgument, NotFound
from master.store.protocol import ModelStore, WorkerStore
from master.store.records import ModelRecord, RunRecord

TWINS_CHECKED = 8  # models of the parent's architecture a refused descent is tried from (the failure path only)


class SubmissionStore(ModelStore, WorkerStore, Protocol):
    """What the submission rules read: the parent model and the worker's inventory."""


@functools.lru_cache(maxsize=len(PROFILES))
def seed_graph(profile_name: str) -> Graph:
    """The profile's ResNet-50: the parent of every model submitted without one."""
    return PROFILES[profile_name].base_graph()


def batch_sizes(profile: Profile, accelerators: list[dict[str, Any]]) -> tuple[int, ...]:
    """The profile's batch sizes for the worker's smallest accelerator (the worker's own choice, worker/agent.py)."""
    memory = min((int(a.get("memory_bytes", 0)) for a in accelerators), default=0)
    return profile.for_accelerator_memory(memory).batch_sizes


def check_submission(store: SubmissionStore, run: RunRecord, sub: ModelSubmission, graph: Graph) -> None:
    """InvalidArgument (NotFound for a parent outside the run) unless the model is one the
    run's search could have produced."""
    profile = PROFILES[run.profile]
    check_graph_fits(run, graph, int(sub.kernel_size))
    worker = store.get_worker(sub.worker_id)
    allowed = batch_sizes(profile, worker.accelerators)
    if int(sub.batch_size) not in allowed:
        raise InvalidArgument(f"batch_size {sub.batch_size} is not one of the {run.profile} profile's "
                              f"{', '.join(map(str, allowed))} for this worker's accelerator memory")
    if sub.parent_id:
        parent_model = store.get_model(sub.parent_id)
        if parent_model.run_id != run.id:
            raise NotFound(f"parent model {sub.parent_id} not found in run {run.id}")
        parent = parse_graph(parent_model.graph_json)
    else:
        parent = seed_graph(run.profile)
    try:
        check_descent(parent, graph, profile.morph_space(), profile.kernel_sizes)
    except LineageError as exc:
        if not (sub.parent_id and _from_a_twin(store, run, parent_model, graph, profile)):
            of = f"model {sub.parent_id}" if sub.parent_id else f"the {run.profile} profile's ResNet-50"
            raise InvalidArgument(f"graph does not descend from {of}: {exc}") from None


def _from_a_twin(store: SubmissionStore, run: RunRecord, parent: ModelRecord, graph: Graph, profile: Profile) -> bool:
    """Whether the graph descends from another model of the parent's architecture: two workers can
    reach one architecture by operations in another order, its layers then named differently, and
    a worker's search morphs whichever of them it read first."""
    for twin in store.graphs_with_hash(run.id, parent.graph_hash, TWINS_CHECKED):
        try:
            check_descent(parse_graph(twin), graph, profile.morph_space(), profile.kernel_sizes)
            return True
        except LineageError:
            continue
    return False
