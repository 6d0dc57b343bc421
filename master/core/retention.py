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
from typing import Protocol, Sequence

from aiperf.retention import DEFAULT_KEEP_CHECKPOINTS, RecordHolders, checkpoints_to_delete
from aiperf.states import ModelState
from master.core.requests import ModelFinish
from master.store.errors import InvalidArgument
from master.store.protocol import ModelStore, ProgressStore, RetentionStore
from master.store.records import ProgressInput, ProgressResult, RunRecord

log = logging.getLogger(__name__)


def check_checkpoint(fin: ModelFinish) -> None:
    """A finish carries both checkpoint fields or neither, and only a done model has one."""
    if bool(fin.checkpoint_uri) != bool(fin.checkpoint_sha256):
        raise InvalidArgument("checkpoint_uri and checkpoint_sha256 go together: give both or neither")
    if fin.checkpoint_uri and fin.state != ModelState.DONE:
        raise InvalidArgument(f"a {fin.state} model has no checkpoint: only MODEL_DONE carries checkpoint_uri")


def check_inheritance(parent_id: int, inherited_from: int) -> None:
    """A child inherits from its own parent or from nothing."""
    if inherited_from and inherited_from != parent_id:
        raise InvalidArgument(f"inherited_from must be 0 or the parent_id ({parent_id}), got {inherited_from}")


def take_back(store: RetentionStore, fin: ModelFinish) -> None:
    """The checkpoints the finishing worker could not delete are recorded as stored, with the
    error, and never let go again (the file is still there: an operator removes it)."""
    if not fin.undeleted:
        return
    restored = store.restore_checkpoints(fin.worker_id, fin.undeleted)
    for model_id, error in fin.undeleted:
        log.warning("event=checkpoint_not_deleted worker_id=%d model_id=%d recorded_stored=%s error=%r",
                    fin.worker_id, model_id, model_id in restored, error)


class _ReleaseStore(RetentionStore, ModelStore, Protocol):
    """What release_checkpoints reads: the checkpoints stored and the ranked DONE models."""


def keep_checkpoints(run: RunRecord) -> int:
    return int(run.config.get("keep_checkpoints", DEFAULT_KEEP_CHECKPOINTS))


class AccuracyRecords:
    """Each run's accuracy record holders (`aiperf.retention.RecordHolders`): read from the store
    once per run, then folded from every report the progress writer commits (`committed`, on
    its thread) and every best accuracy a FinishModel adds to the time line, so that a
    FinishModel does not read the run's whole time line. The first read runs outside the lock
    (reports committed meanwhile wait in `_reading` and are folded after it). Thread-safe."""

    def __init__(self, store: ProgressStore) -> None:
        self._store = store
        self._lock = threading.Lock()
        self._runs: dict[int, RecordHolders] = {}
        self._reading: dict[int, list[tuple[int, float, float]]] = {}  # run -> (model, accuracy, t) meanwhile

    def holders(self, run_id: int) -> frozenset[int]:
        with self._lock:
            if run_id in self._runs:
                return self._runs[run_id].holders
            self._reading.setdefault(run_id, [])
        fold = RecordHolders()
        for model_id, accuracy, t in self._store.accuracy_reports(run_id):  # may take a while: not under the lock
            fold.add(model_id, accuracy, t)
        with self._lock:
            for model_id, accuracy, t in self._reading.pop(run_id, []):
                fold.add(model_id, accuracy, t)
            return self._runs.setdefault(run_id, fold).holders  # a concurrent first read may have won

    def add(self, run_id: int, model_id: int, accuracy: float, t: float) -> None:
        """A recorded accuracy, received at `t` (a run not read yet reads it from the store when first asked)."""
        with self._lock:
            if run_id in self._runs:
                self._runs[run_id].add(model_id, accuracy, t)
            elif run_id in self._reading:
                self._reading[run_id].append((model_id, accuracy, t))

    def committed(self, items: Sequence[ProgressInput], results: Sequence[ProgressResult]) -> None:
        """The progress writer's hook: fold the accuracies of the reports it has just recorded
        (not those refused or resent), whether or not their callers are still waiting."""
        for item, result in zip(items, results):
            if item.val_accuracy is not None and result.run_id and result.error is None and not result.duplicate:
                self.add(result.run_id, item.model_id, item.val_accuracy, item.t)


def release_checkpoints(store: _ReleaseStore, run: RunRecord, worker_id: int,
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
