"""The audits table of `SqlStore` (master/store/sql/tables.py AuditRow; migrations 0006, 0012),
and the look-ups of models that audits and submissions make (the owners node audits draw
from, the models of one architecture a descent is tried from).

A mixin, so that master/store/sql/sql_store.py keeps its size: `SqlStore` gets the audit
methods of `master.store.protocol.Store` from here, on its own sessions.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from master.store.errors import NotFound
from master.store.records import AuditInput, AuditRecord
from master.store.sql.tables import AuditRow, ModelRow, ProgressRow


def _audit(r: AuditRow) -> AuditRecord:
    return AuditRecord(
        id=r.id, run_id=r.run_id, model_id=r.model_id, audited_at=r.audited_at, auditor_host=r.auditor_host,
        verdict=r.verdict, architecture_ok=bool(r.architecture_ok), claimed_accuracy=r.claimed_accuracy,
        audited_accuracy=r.audited_accuracy, validation_images=int(r.validation_images), tolerance=r.tolerance,
        detail=r.detail, throughput=r.throughput or "", worker_hardware=r.worker_hardware or "",
        auditor_hardware=r.auditor_hardware or "", claimed_images_per_second=r.claimed_images_per_second or 0.0,
        audited_images_per_second=r.audited_images_per_second or 0.0, worker_flops=r.worker_flops or 0.0,
        audited_flops=r.audited_flops or 0.0, throughput_tolerance=r.throughput_tolerance or 0.0,
        node_audit=bool(r.node_audit), inventory=r.inventory or "",
    )


class AuditSql:
    """Audit methods over the store's `_write`/`_read` sessions."""

    _write: Any
    _read: Any

    def add_audit(self, audit: AuditInput) -> AuditRecord:
        with self._write() as s:
            model = s.get(ModelRow, audit.model_id)
            if model is None:
                raise NotFound(f"model {audit.model_id} not found")
            row = AuditRow(
                run_id=model.run_id, model_id=audit.model_id, audited_at=audit.audited_at,
                auditor_host=audit.auditor_host, verdict=audit.verdict, architecture_ok=audit.architecture_ok,
                claimed_accuracy=audit.claimed_accuracy, audited_accuracy=audit.audited_accuracy,
                validation_images=audit.validation_images, tolerance=audit.tolerance, detail=audit.detail,
                throughput=audit.throughput, worker_hardware=audit.worker_hardware,
                auditor_hardware=audit.auditor_hardware, claimed_images_per_second=audit.claimed_images_per_second,
                audited_images_per_second=audit.audited_images_per_second, worker_flops=audit.worker_flops,
                audited_flops=audit.audited_flops, throughput_tolerance=audit.throughput_tolerance,
                node_audit=audit.node_audit, inventory=audit.inventory[:300],
            )
            s.add(row)
            s.flush()
            return _audit(row)

    def audits(self, run_id: int) -> list[AuditRecord]:
        with self._read() as s:
            rows = s.scalars(select(AuditRow).where(AuditRow.run_id == run_id).order_by(AuditRow.id))
            return [_audit(r) for r in rows]

    def latest_audit(self, model_id: int) -> AuditRecord | None:
        with self._read() as s:
            row = s.scalars(select(AuditRow).where(AuditRow.model_id == model_id, ~AuditRow.node_audit)
                            .order_by(AuditRow.id.desc()).limit(1)).first()
            return _audit(row) if row is not None else None

    def stamped_digests(self, model_id: int) -> list[tuple[int, float, str]]:
        with self._read() as s:
            return [(int(e), float(t), str(d)) for e, t, d in s.execute(
                select(ProgressRow.epoch, ProgressRow.t, ProgressRow.weights_sha256)
                .where(ProgressRow.model_id == model_id, ProgressRow.weights_sha256 != "")
                .order_by(ProgressRow.seq))]

    def epoch_accuracy(self, model_id: int, epoch: int) -> float | None:
        with self._read() as s:
            accuracy: float | None = s.scalars(select(ProgressRow.accuracy).where(
                ProgressRow.model_id == model_id, ProgressRow.epoch == epoch, ProgressRow.accuracy.is_not(None))
                .order_by(ProgressRow.seq.desc()).limit(1)).first()
            return accuracy

    def model_owners(self, run_id: int) -> list[tuple[int, int]]:
        with self._read() as s:
            return [(int(m), int(w)) for m, w in s.execute(
                select(ModelRow.id, ModelRow.worker_id).where(ModelRow.run_id == run_id).order_by(ModelRow.id))]

    def graphs_with_hash(self, run_id: int, graph_hash: str, limit: int) -> list[str]:
        with self._read() as s:
            return list(s.scalars(select(ModelRow.graph_json).where(
                ModelRow.run_id == run_id, ModelRow.graph_hash == graph_hash).order_by(ModelRow.id).limit(limit)))

    def accuracy_reports(self, run_id: int) -> list[tuple[int, float, float]]:
        with self._read() as s:
            rows = s.execute(select(ProgressRow.model_id, ProgressRow.accuracy, ProgressRow.t)
                             .where(ProgressRow.run_id == run_id, ProgressRow.accuracy.is_not(None))
                             .order_by(ProgressRow.t, ProgressRow.id))
            return [(int(m), float(a), float(t)) for m, a, t in rows]

    def accuracy_model_at(self, run_id: int, t: float) -> int | None:
        with self._read() as s:
            model_id: int | None = s.scalar(
                select(ProgressRow.model_id)
                .where(ProgressRow.run_id == run_id, ProgressRow.t <= t, ProgressRow.accuracy.is_not(None))
                .order_by(ProgressRow.accuracy.desc(), ProgressRow.t, ProgressRow.id)
                .limit(1)
            )
            return model_id


__all__ = ["AuditSql"]
