"""Accelerators with identities: one chip, one live worker.

A worker registers each accelerator with the UUID and PCI bus id NVML reports for it. A
UUID names one chip: eight workers on one H100 node registering the same GPU would each
claim its peak (8x the budget, 8x the score). So a Register whose accelerators repeat a
UUID is INVALID_ARGUMENT, and a UUID held by another live worker is ALREADY_EXISTS naming
that worker (the worker registering again under its own name keeps its chips). A lost
worker's chips are free again. An accelerator without a UUID (a framework listed it, no
NVML) is accepted here; an official run does not count it (master/core/officiality.py).
Who holds a UUID is kept in memory, built from the stored workers at start; the Master
calls `check` and `registered` under its register lock.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

from master.store.errors import AlreadyExists, InvalidArgument
from master.store.records import WorkerInput, WorkerRecord


def uuids_of(accelerators: Iterable[dict[str, Any]]) -> list[str]:
    return [str(a["uuid"]) for a in accelerators if a.get("uuid")]


class DeviceOwners:
    """accelerator UUID -> the worker that registered it last."""

    def __init__(self, workers: Iterable[WorkerRecord]) -> None:
        self._owner: dict[str, int] = {}
        self._held: dict[int, list[str]] = {}
        for w in workers:
            self.registered(w.id, w)

    def check(self, info: WorkerInput, worker_id: int | None, is_alive: Callable[[int], bool]) -> None:
        """InvalidArgument for a UUID twice in `info`; AlreadyExists for one another live worker
        holds (`worker_id`: the id the registering worker gets back, None for a new one)."""
        seen: set[str] = set()
        for uuid in uuids_of(info.accelerators):
            if uuid in seen:
                raise InvalidArgument(f"accelerator {uuid} is listed twice: one chip is one accelerator")
            seen.add(uuid)
            owner = self._owner.get(uuid)
            if owner is not None and owner != worker_id and is_alive(owner):
                raise AlreadyExists(f"accelerator {uuid} is registered by live worker {owner}")

    def registered(self, worker_id: int, info: WorkerInput) -> None:
        for uuid in self._held.pop(worker_id, []):
            if self._owner.get(uuid) == worker_id:
                del self._owner[uuid]
        held = uuids_of(info.accelerators)
        for uuid in held:
            self._owner[uuid] = worker_id
        if held:
            self._held[worker_id] = held
