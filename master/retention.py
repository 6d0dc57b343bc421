"""The master's side of checkpoint retention: apply `aiperf.retention` to a run and
hand a worker the checkpoints of its own that may go (docs/spec.md, "Checkpoints").

Only the master knows every model's rank and state, so it decides; only the
worker that wrote a checkpoint can reach its store (a local directory by
default), so that worker deletes. The master answers each FinishModel with the
finishing worker's checkpoints that retention no longer keeps and records them
as deleted in the same call: a worker that fails to delete one leaves a file
behind (it logs it), never a record that points at nothing it will keep.
"""

from __future__ import annotations

import logging
import threading

from aiperf.retention import DEFAULT_KEEP_CHECKPOINTS, RecordHolders, checkpoints_to_delete
from master.domain import ModelFinish
from master.store import InvalidArgument, RunRecord, Store

log = logging.getLogger(__name__)


def check_checkpoint(fin: ModelFinish) -> None:
    """A finish carries both checkpoint fields or neither, and only a done model has one."""
    if bool(fin.checkpoint_uri) != bool(fin.checkpoint_sha256):
        raise InvalidArgument("checkpoint_uri and checkpoint_sha256 go together: give both or neither")
    if fin.checkpoint_uri and fin.state != "done":
        raise InvalidArgument(f"a {fin.state} model has no checkpoint: only MODEL_DONE carries checkpoint_uri")


def check_inheritance(parent_id: int, inherited_from: int) -> None:
    """A child inherits from its own parent or from nothing."""
    if inherited_from and inherited_from != parent_id:
        raise InvalidArgument(f"inherited_from must be 0 or the parent_id ({parent_id}), got {inherited_from}")


def take_back(store: Store, fin: ModelFinish) -> None:
    """The checkpoints the finishing worker could not delete are recorded as stored, with the
    error, and never let go again (the file is still there: an operator removes it)."""
    if not fin.undeleted:
        return
    restored = store.restore_checkpoints(fin.worker_id, fin.undeleted)
    for model_id, error in fin.undeleted:
        log.warning("event=checkpoint_not_deleted worker_id=%d model_id=%d recorded_stored=%s error=%r",
                    fin.worker_id, model_id, model_id in restored, error)


def keep_checkpoints(run: RunRecord) -> int:
    return int(run.config.get("keep_checkpoints", DEFAULT_KEEP_CHECKPOINTS))


class AccuracyRecords:
    """Each run's accuracy record holders (`aiperf.retention.RecordHolders`), read from the
    store once per run and then folded report by report as the master records them, so that
    a FinishModel does not read the run's whole time line. Thread-safe."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._lock = threading.Lock()
        self._runs: dict[int, RecordHolders] = {}

    def holders(self, run_id: int) -> frozenset[int]:
        with self._lock:  # held while reading: a report recorded meanwhile is folded after the read
            if run_id not in self._runs:
                fold = RecordHolders()
                for model_id, accuracy in self._store.accuracy_reports(run_id):
                    fold.add(model_id, accuracy)
                self._runs[run_id] = fold
            return frozenset(self._runs[run_id].holders)

    def add(self, run_id: int, model_id: int, accuracy: float) -> None:
        """A recorded accuracy (a run not read yet reads it from the store when first asked)."""
        with self._lock:
            if run_id in self._runs:
                self._runs[run_id].add(model_id, accuracy)


def release_checkpoints(store: Store, run: RunRecord, worker_id: int,
                        records: AccuracyRecords) -> list[tuple[int, str]]:
    """(model id, URI) of `worker_id`'s checkpoints in `run` that retention lets go, now
    recorded as deleted; the worker deletes them from its store. Reads the models holding a
    checkpoint or open, and the top `keep` ranked: not the run's history."""
    stored = store.stored_checkpoints(run.id)
    keep = keep_checkpoints(run)
    top = store.ranked_done_ids(run.id, limit=keep) if keep > 0 else []
    doomed = set(checkpoints_to_delete([m for m, _, _ in stored], top, keep, records.holders(run.id)))
    mine = [(m.model_id, uri) for m, owner, uri in stored if owner == worker_id and m.model_id in doomed]
    if mine:
        store.mark_checkpoints_deleted([mid for mid, _ in mine])
        log.info("event=checkpoints_released run_id=%d worker_id=%d models=%s", run.id, worker_id,
                 [mid for mid, _ in mine])
    return mine
