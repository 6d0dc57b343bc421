"""The rules a progress report meets against its model's state, applied to a batch.

Pure: the store hands in working copies of the models' state (read from the
database or its cache, see SqlStore.add_progress) and the (model, seq) pairs
already recorded; this decides each report's fate, updates the copies and
returns the rows to insert. A report on another worker's model is
PERMISSION_DENIED here (inside the store's write transaction, as FinishModel's
check in SqlStore.finish_model).
"""

from __future__ import annotations

from typing import Any, Sequence

from aiperf.states import OPEN_MODEL_STATES, OVER_RUN_STATES, ModelState
from master.store.errors import FailedPrecondition, InvalidArgument, NotFound, PermissionDenied, ResendNotRecorded
from master.store.records import INT64_MAX, ProgressInput, ProgressResult


def apply_reports(
    items: Sequence[ProgressInput], models: dict[int, dict[str, Any]],
    seen: dict[tuple[int, int], tuple[int, bool]], results: list[ProgressResult],
) -> list[dict[str, Any]]:
    """Rows to insert; updates the working copies and appends one result per item."""
    rows: list[dict[str, Any]] = []
    for it in items:
        m = models.get(it.model_id)
        if m is None:
            results.append(ProgressResult(it.model_id, it.seq, error=NotFound(f"model {it.model_id} not found")))
            continue
        if m["worker_id"] != it.worker_id:
            results.append(ProgressResult(it.model_id, it.seq, error=PermissionDenied(
                f"model {it.model_id} belongs to worker {m['worker_id']}, not {it.worker_id}")))
            continue
        key = (it.model_id, it.seq)
        if key in seen:
            mf, mm = seen[key]
            results.append(ProgressResult(it.model_id, it.seq, duplicate=True, master_flops=mf,
                                          flops_mismatch=bool(mm), model_state=m["state"]))
            continue
        if it.resent:  # no budget was spent on it: only a duplicate may pass
            results.append(ProgressResult(it.model_id, it.seq, model_state=m["state"], error=ResendNotRecorded(
                f"report {it.seq} of model {it.model_id} was not recorded before")))
            continue
        if m["state"] not in OPEN_MODEL_STATES:
            results.append(ProgressResult(it.model_id, it.seq, model_state=m["state"], error=FailedPrecondition(
                f"model {it.model_id} is {m['state']}; no more reports")))
            continue
        if m["run_state"] in OVER_RUN_STATES:
            results.append(ProgressResult(it.model_id, it.seq, model_state=m["state"], error=FailedPrecondition(
                f"run {m['run_id']} is {m['run_state']}")))
            continue
        too_big = report_overflow(it, m)
        if too_big:
            results.append(ProgressResult(it.model_id, it.seq, model_state=m["state"],
                                          error=InvalidArgument(too_big)))
            continue
        rows.append({
            "run_id": m["run_id"], "model_id": it.model_id, "worker_id": it.worker_id, "seq": it.seq,
            "t": it.t, "epoch": it.epoch, "images_trained": it.images_trained,
            "images_validated": it.images_validated, "accuracy": it.val_accuracy,  # the column's name
            "worker_flops": it.worker_flops, "master_flops": it.master_flops,
            "flops_mismatch": it.flops_mismatch, "weights_sha256": it.weights_sha256,
        })
        seen[key] = (it.master_flops, it.flops_mismatch)
        m["max_seq"] = max(m["max_seq"], it.seq)
        if m["state"] == ModelState.QUEUED:
            m["state"] = ModelState.TRAINING
            m["started_at"] = it.t
        m["images_trained"] += it.images_trained
        m["images_validated"] += it.images_validated
        m["epochs"] = max(m["epochs"], it.epoch)
        if it.val_accuracy is not None and (m["best_accuracy"] is None or it.val_accuracy > m["best_accuracy"]):
            m["best_accuracy"] = it.val_accuracy
        m["changed"] = True
        results.append(ProgressResult(it.model_id, it.seq, master_flops=it.master_flops,
                                      flops_mismatch=it.flops_mismatch, model_state=m["state"], run_id=m["run_id"]))
    return rows


def report_overflow(it: ProgressInput, model: dict[str, Any]) -> str:
    """Why the report cannot be stored without overflowing a 64-bit column ("" when it can):
    its own figures, or its model's running image totals with it."""
    trained, validated = model["images_trained"] + it.images_trained, model["images_validated"] + it.images_validated
    if (0 <= it.images_trained and 0 <= it.images_validated and trained <= INT64_MAX and validated <= INT64_MAX
            and 0 <= it.master_flops <= INT64_MAX and 0 <= it.worker_flops <= INT64_MAX):
        return ""  # the hot path: one comparison chain per report
    figures = {"images_trained": it.images_trained, "images_validated": it.images_validated,
               "master_flops": it.master_flops, "worker_flops": it.worker_flops,
               "the model's images_trained total": trained, "the model's images_validated total": validated}
    name, value = next((k, v) for k, v in figures.items() if not 0 <= v <= INT64_MAX)
    return f"model {it.model_id} report {it.seq}: {name} = {value} is outside [0, 2^63-1]"
