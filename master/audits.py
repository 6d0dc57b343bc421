"""Audits: recording `aiperf audit`'s findings, and the audit behind a run's regulated score.

The auditor (any machine with the dataset and the admin token) re-evaluates a
DONE model's stored weights and sends its figures; the master recomputes the
verdict from them and from the model's claimed accuracy (its best reported
validation accuracy) with `aiperf.audit.verdict`, and refuses a request whose
verdict disagrees. The master stamps the time. The model behind the regulated
score is the one whose report gave acc(t) at the regulated score's time t; an
official run is valid only when that model's latest audit passed
(docs/spec.md, "Audit"). Smoke runs show the audit but it does not decide their
validity: they are unofficial anyway, and the demo would otherwise depend on a
worker's checkpoint store being readable from where the scoreboard is asked.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Callable

from aiperf import audit as rule
from aiperf import scoring
from master.domain import AuditSubmission, RegulatedAudit
from master.store import AuditInput, AuditRecord, FailedPrecondition, InvalidArgument, RunRecord, Store

log = logging.getLogger(__name__)

_UNREAD = (rule.NO_CHECKPOINT, rule.CORRUPT)  # verdicts of a checkpoint that was not read


class Audits:
    """The audit rule over the store; thread-safe (the store is)."""

    def __init__(self, store: Store, clock: Callable[[], float]) -> None:
        self.store = store
        self.clock = clock

    def record(self, sub: AuditSubmission) -> AuditRecord:
        """Check and record an audit of a DONE model (NotFound, FailedPrecondition, InvalidArgument)."""
        model = self.store.get_model(sub.model_id)
        if model.state != "done":
            raise FailedPrecondition(f"model {model.id} is {model.state}: only a DONE model is audited")
        if sub.verdict not in rule.VERDICTS:
            raise InvalidArgument(f"verdict must be one of {', '.join(rule.VERDICTS)}, got {sub.verdict!r}")
        if sub.audited_accuracy is not None and sub.validation_images <= 0:
            raise InvalidArgument("an audited accuracy needs validation_images > 0")
        if sub.verdict in _UNREAD:
            if sub.audited_accuracy is not None or sub.architecture_ok:
                raise InvalidArgument(f"verdict {sub.verdict!r}: the weights were not read, so neither an "
                                      f"audited accuracy nor architecture_ok can be sent")
        else:
            expected = rule.verdict(model.best_accuracy, sub.audited_accuracy, sub.architecture_ok,
                                    sub.validation_images)
            if sub.verdict != expected:
                raise InvalidArgument(f"verdict {sub.verdict!r} disagrees with the figures: claimed "
                                      f"{model.best_accuracy}, audited {sub.audited_accuracy}, architecture_ok "
                                      f"{sub.architecture_ok}, {sub.validation_images} images give {expected!r}")
        record = self.store.add_audit(AuditInput(
            model_id=model.id, audited_at=self.clock(), auditor_host=sub.auditor_host, verdict=sub.verdict,
            architecture_ok=sub.architecture_ok, claimed_accuracy=model.best_accuracy,
            audited_accuracy=sub.audited_accuracy, validation_images=sub.validation_images,
            tolerance=rule.tolerance(sub.validation_images), detail=sub.detail,
        ))
        log.info("event=audit_recorded model_id=%d run_id=%d verdict=%r claimed=%s audited=%s architecture_ok=%s "
                 "auditor=%s", model.id, record.run_id, record.verdict, record.claimed_accuracy,
                 record.audited_accuracy, record.architecture_ok, record.auditor_host)
        return record

    def of_run(self, run_id: int) -> list[AuditRecord]:
        """Every audit of the run, oldest first."""
        return self.store.audits(run_id)

    def regulated(self, run: RunRecord, result: scoring.ScoreResult) -> RegulatedAudit:
        """The model behind the run's regulated score and its latest audit."""
        if run.started_at is None or result.best_accuracy is None:
            return RegulatedAudit(None, "", None)
        model_id = self.store.accuracy_model_at(run.id, run.started_at + result.regulated_score_time_s)
        if model_id is None:
            return RegulatedAudit(None, "", None)
        latest = self.store.latest_audit(model_id)
        return RegulatedAudit(model_id, rule.status(latest.verdict if latest else None), latest)


def with_audit_rule(result: scoring.ScoreResult, rules: scoring.ProfileRules,
                    audit: RegulatedAudit) -> scoring.ScoreResult:
    """`result`, made invalid when the run is official and the model behind its regulated
    score has not passed an audit (smoke runs: unchanged; see the module docstring)."""
    if not rules.official or audit.model_id is None or audit.status == rule.STATUS_PASSED:
        return result
    why = (f"the model behind the regulated score (model {audit.model_id}) is not audited"
           if audit.latest is None else
           f"the model behind the regulated score (model {audit.model_id}) failed its audit: "
           f"{audit.latest.verdict}")
    reasons = (*result.invalid_reasons, why)
    return replace(result, valid=False, invalid_reasons=reasons)
