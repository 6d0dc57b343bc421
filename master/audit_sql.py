"""The audits table of `SqlStore` (master/models.py AuditRow; migration 0006).

A mixin, so that master/sqlstore.py keeps its size: `SqlStore` gets the audit
methods of `master.store.Store` from here, on its own sessions.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from master.models import AuditRow, ModelRow, ProgressRow
from master.store import AuditInput, AuditRecord, NotFound


def _audit(r: AuditRow) -> AuditRecord:
    return AuditRecord(
        id=r.id, run_id=r.run_id, model_id=r.model_id, audited_at=r.audited_at, auditor_host=r.auditor_host,
        verdict=r.verdict, architecture_ok=bool(r.architecture_ok), claimed_accuracy=r.claimed_accuracy,
        audited_accuracy=r.audited_accuracy, validation_images=int(r.validation_images), tolerance=r.tolerance,
        detail=r.detail,
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
            row = s.scalars(select(AuditRow).where(AuditRow.model_id == model_id)
                            .order_by(AuditRow.id.desc()).limit(1)).first()
            return _audit(row) if row is not None else None

    def accuracy_model_at(self, run_id: int, t: float) -> int | None:
        with self._read() as s:
            return s.scalar(
                select(ProgressRow.model_id)
                .where(ProgressRow.run_id == run_id, ProgressRow.t <= t, ProgressRow.accuracy.is_not(None))
                .order_by(ProgressRow.accuracy.desc(), ProgressRow.t, ProgressRow.id)
                .limit(1)
            )


__all__ = ["AuditSql"]
