"""The workers of `SqlStore`: registration, heartbeats, credentials, lost workers, and each
worker's row in a run (its inventory, dataset and refused reports).

A mixin, so that master/store/sql/sql_store.py keeps its size: `SqlStore` gets the worker
methods of `master.store.protocol.Store` from here, on its own sessions and locks.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Sequence

from sqlalchemy import Engine, select, update
from sqlalchemy.orm import Session

from aiperf.states import OPEN_MODEL_STATES, WorkerState
from master.store.errors import NotFound
from master.store.records import RunWorker, WorkerInput, WorkerRecord
from master.store.sql.progress import ProgressSql
from master.store.sql.tables import ModelRow, ProgressRow, RunWorkerRow, WorkerRow

HEARTBEAT_CHUNK = 256  # workers per heartbeat-flush transaction
HEARTBEAT_CHUNK_PAUSE_S = 0.002  # between them (SQLite): the progress writer's commits go first


def _worker(w: WorkerRow) -> WorkerRecord:
    return WorkerRecord(
        id=w.id, name=w.name, host=w.host, accelerators=list(w.accelerators), cpus=w.cpus,
        memory_bytes=w.memory_bytes, software=dict(w.software), state=WorkerState(w.state),
        registered_at=w.registered_at, last_heartbeat=w.last_heartbeat, cpu=dict(w.cpu or {}),
        backend=w.backend or "tensorflow",
    )


class WorkerSql:
    """Worker methods over the store's `_write`/`_read` sessions and its write and heartbeat locks."""

    _write: Any
    _read: Any
    _get_run: Any
    _abandon: Callable[..., list[int]]
    _write_lock: threading.RLock
    _heartbeat_lock: Any
    _sql: ProgressSql
    engine: Engine

    def register_worker(self, info: WorkerInput, now: float,
                        credential_hash: str | None = None) -> tuple[WorkerRecord, list[int]]:
        with self._write() as s:
            row = s.scalars(select(WorkerRow).where(WorkerRow.name == info.name).with_for_update()).first()
            abandoned: list[int] = []
            if row is None:
                row = WorkerRow(name=info.name, registered_at=now)
                s.add(row)
            else:
                abandoned = self._abandon(s, ModelRow.worker_id == row.id, now, "worker restarted")
            row.host = info.host
            row.accelerators = [dict(a) for a in info.accelerators]
            row.cpus = info.cpus
            row.memory_bytes = info.memory_bytes
            row.software = dict(info.software)
            row.cpu = dict(info.cpu) or None
            row.backend = info.backend
            row.state = WorkerState.ALIVE
            row.last_heartbeat = now
            if credential_hash is not None:
                row.credential_hash = credential_hash
            s.flush()
            return _worker(row), abandoned

    def get_worker(self, worker_id: int) -> WorkerRecord:
        with self._read() as s:
            row = s.get(WorkerRow, worker_id)
            if row is None:
                raise NotFound(f"worker {worker_id} not found; register first")
            return _worker(row)

    def worker_by_name(self, name: str) -> WorkerRecord | None:
        with self._read() as s:
            row = s.scalars(select(WorkerRow).where(WorkerRow.name == name)).first()
            return _worker(row) if row is not None else None

    def worker_credential_hash(self, worker_id: int) -> str | None:
        with self._read() as s:
            row = s.execute(select(WorkerRow.id, WorkerRow.credential_hash).where(WorkerRow.id == worker_id)).first()
            if row is None:
                raise NotFound(f"worker {worker_id} not found; register first")
            digest: str | None = row[1]
            return digest

    def list_workers(self, state: str | None = None) -> list[WorkerRecord]:
        with self._read() as s:
            stmt = select(WorkerRow).order_by(WorkerRow.id)
            if state:
                stmt = stmt.where(WorkerRow.state == state)
            return [_worker(w) for w in s.scalars(stmt)]

    def open_models_by_worker(self) -> dict[int, tuple[int, int]]:
        with self._read() as s:
            rows = s.execute(select(ModelRow.worker_id, ModelRow.id, ModelRow.run_id)
                             .where(ModelRow.state.in_(OPEN_MODEL_STATES)).order_by(ModelRow.id)).all()
        return {int(w): (int(m), int(r)) for w, m, r in rows}  # ascending ids: the newest wins

    def record_heartbeats(self, beats: dict[int, float]) -> None:
        if not beats:
            return
        # In chunks, each its own short transaction: one transaction for thousands of
        # workers would hold SQLite's write lock long enough to delay the progress writes.
        # Ordered by worker id, so concurrent flushes lock rows in the same order.
        items = sorted(beats.items())
        shared = self._heartbeat_lock is self._write_lock
        for k in range(0, len(items), HEARTBEAT_CHUNK):
            if k and shared:  # a lock released and taken back at once is seldom handed over: let a waiting write in
                time.sleep(HEARTBEAT_CHUNK_PAUSE_S)
            with self._heartbeat_lock, self.engine.begin() as conn:
                self._sql.write_heartbeats(conn, items[k:k + HEARTBEAT_CHUNK])

    def set_credential_hash(self, worker_id: int, digest: str) -> None:
        with self._write(changes_models=False) as s:
            s.execute(update(WorkerRow).where(WorkerRow.id == worker_id).values(credential_hash=digest))

    def mark_workers_lost(self, worker_ids: Sequence[int], now: float, reason: str = "worker lost") -> list[int]:
        if not worker_ids:
            return []
        with self._heartbeat_lock, self._write() as s:
            s.execute(update(WorkerRow).where(WorkerRow.id.in_(list(worker_ids))).values(state=WorkerState.LOST))
            return self._abandon(s, ModelRow.worker_id.in_(list(worker_ids)), now, reason)

    def join_run(self, run_id: int, worker_id: int, now: float) -> bool:
        # a run_workers row: every worker joins at a run's start, and their reports must not
        # read their models back each time
        with self._write(changes_models=False) as s:
            return self._joined_row(s, run_id, worker_id, now)[1]

    def _joined_row(self, s: Session, run_id: int, worker_id: int, now: float) -> tuple[RunWorkerRow, bool]:
        """The worker's row in the run, created (with its inventory now) when missing."""
        row = s.get(RunWorkerRow, (run_id, worker_id))
        if row is not None:
            return row, False
        self._get_run(s, run_id)
        w = s.get(WorkerRow, worker_id)
        if w is None:
            raise NotFound(f"worker {worker_id} not found")
        inventory = {
            "host": w.host, "accelerators": list(w.accelerators), "cpus": w.cpus,
            "memory_bytes": w.memory_bytes, "software": dict(w.software), "cpu": dict(w.cpu or {}),
            "backend": w.backend or "tensorflow",
        }
        row = RunWorkerRow(run_id=run_id, worker_id=worker_id, joined_at=now, inventory=inventory,
                           implausible_reports=0)
        s.add(row)
        return row, True

    def record_dataset(self, run_id: int, worker_id: int, dataset: dict[str, Any], now: float) -> None:
        with self._write() as s:
            self._joined_row(s, run_id, worker_id, now)[0].dataset = dict(dataset)

    def add_implausible_reports(self, counts: dict[tuple[int, int], int], now: float) -> None:
        if not counts:
            return
        with self._write() as s:
            for (run_id, worker_id), n in sorted(counts.items()):
                row = self._joined_row(s, run_id, worker_id, now)[0]
                row.implausible_reports = (row.implausible_reports or 0) + n

    def worker_run_ops(self, run_id: int, worker_id: int) -> int:
        with self._read() as s:
            ops = s.scalars(select(ProgressRow.master_flops).where(
                ProgressRow.run_id == run_id, ProgressRow.worker_id == worker_id))
            return sum(int(v) for v in ops)  # in Python: SQLite's SUM fails on overflow

    def run_workers(self, run_id: int) -> list[RunWorker]:
        with self._read() as s:
            rows = s.execute(
                select(RunWorkerRow, WorkerRow)
                .join(WorkerRow, WorkerRow.id == RunWorkerRow.worker_id)
                .where(RunWorkerRow.run_id == run_id)
                .order_by(RunWorkerRow.worker_id)
            ).all()
            return [RunWorker(_worker(w), rw.joined_at, dict(rw.inventory),
                              dict(rw.dataset) if rw.dataset is not None else None, int(rw.implausible_reports or 0))
                    for rw, w in rows]
