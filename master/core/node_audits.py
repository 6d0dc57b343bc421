"""Node audits: every worker's claims checked on its own node (docs/spec.md, "Node audits").

The audit of the best models' weights reaches only the leaders, and only DONE models; a
worker whose models are mediocre, or that lets them all end FAILED, reported at its
datasheet cap unseen. So the master draws, for every worker that submitted a model, one
of its models at random among all of them whatever their state (timing needs the graph,
batch and precision, not the weights), from a secret it keeps with the run and shows only
to the auditor (ListAudits, admin token): `draw`, `plan`. The auditor on that worker's
node (`aiperf audit --node`) times the model's steps there and sends the node's
inventory as NVML reports it; the master compares it with what the worker registered
(`inventory_check`). An official run is valid only when every worker's drawn model has a
node audit whose throughput passed and whose inventory matches (`node_audit_reasons`):
"different hardware", "not timed", a differing inventory and a missing node audit are
failures. Pure functions of records; master/core/audits.py applies them.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any, Iterable, Sequence

from aiperf import audit as rule
from aiperf import peaks
from master.store.records import AuditRecord, RunRecord, RunWorker

MATCHES = "matches"
SECRET_KEY = "audit_secret"  # the run's config entry (never sent to a worker: conversions.run_info)


def keyed_number(secret: str, message: str) -> int:
    """The 64-bit number HMAC-SHA256 of `message` under `secret` begins with: one no one without
    the secret can foresee (the node audits' draws, the models' initialisation seeds)."""
    return int.from_bytes(hmac.new(secret.encode(), message.encode(), hashlib.sha256).digest()[:8], "big")


def draw(secret: str, run_id: int, worker_id: int, model_ids: Sequence[int]) -> int:
    """One of `model_ids` (ascending), chosen by HMAC-SHA256 of the run and worker under `secret`."""
    return sorted(model_ids)[keyed_number(secret, f"{run_id}:{worker_id}") % len(model_ids)]


def plan(run: RunRecord, owners: Iterable[tuple[int, int]]) -> dict[int, int]:
    """{worker id: its drawn model id} over the run's (model id, worker id) pairs; {} for a run
    recorded without a secret (before node audits)."""
    secret = str(run.config.get(SECRET_KEY, ""))
    if not secret:
        return {}
    by_worker: dict[int, list[int]] = {}
    for model_id, worker_id in owners:
        by_worker.setdefault(worker_id, []).append(model_id)
    return {w: draw(secret, run.id, w, ids) for w, ids in sorted(by_worker.items())}


def _name(model: str) -> str:
    sheet = peaks.datasheet_of(model) if model.isascii() else None
    return sheet.name if sheet is not None else peaks.normalise(model)


def inventory_check(registered: dict[str, Any], node_accelerators: Sequence[dict[str, Any]], node_cpu_model: str,
                    node_cpus: int) -> str:
    """MATCHES, or "differs: ..." naming the first difference: every accelerator the worker
    registered must be on the node, by its UUID, with the same model (its datasheet entry, or
    its canonical name); a worker without accelerators must name the node's CPU model and
    count. A node may hold other workers' accelerators too."""
    accelerators = registered.get("accelerators", [])
    if not accelerators:
        cpu = str(registered.get("cpu", {}).get("model", ""))
        if peaks.normalise(cpu) != peaks.normalise(node_cpu_model) or not node_cpu_model:
            return f"differs: registered CPU {cpu!r}, the node has {node_cpu_model!r}"
        if int(registered.get("cpus", 0)) != node_cpus:
            return f"differs: registered {registered.get('cpus', 0)} CPUs, the node has {node_cpus}"
        return MATCHES
    on_node = {str(a.get("uuid", "")): str(a.get("model", "")) for a in node_accelerators if a.get("uuid")}
    for i, a in enumerate(accelerators):
        uuid = str(a.get("uuid", ""))
        if not uuid:
            return f"differs: accelerator {i} was registered without a UUID"
        if uuid not in on_node:
            return (f"differs: accelerator {i} ({uuid[:64]}) is not on the node "
                    f"({len(accelerators)} registered, {len(node_accelerators)} on the node)")
        if _name(str(a.get("model", ""))) != _name(on_node[uuid]):
            return f"differs: accelerator {i} registered as {a.get('model')!r}, the node says {on_node[uuid]!r}"
    return MATCHES


def node_audit_reasons(drawn: dict[int, int], audits: Sequence[AuditRecord],
                       joined: Sequence[RunWorker]) -> tuple[list[str], list[str]]:
    """Why the run's node audits do not make it valid, as (missing, failed), both [] when they do:
    for every worker with a drawn model, the latest node audit of that model passed its throughput
    and inventory checks; missing: no node audit of it yet."""
    latest = {a.model_id: a for a in audits if a.node_audit}  # oldest first: the last one stays
    names = {rw.worker.id: rw.worker.name for rw in joined}
    missing: list[str] = []
    failed: list[str] = []
    for worker_id, model_id in sorted(drawn.items()):
        who = f"worker {worker_id} ({names.get(worker_id, '?')})"
        a = latest.get(model_id)
        if a is None:
            missing.append(f"{who}: no node audit of its drawn model {model_id}")
        elif a.throughput != rule.PASSED:
            failed.append(f"{who}: the node audit of model {model_id} is {a.throughput or rule.NOT_TIMED}")
        elif a.inventory != MATCHES:
            failed.append(f"{who}: the node's inventory {a.inventory or 'was not sent'}")
    return missing, failed
