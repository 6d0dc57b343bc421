"""Audits: recording `aiperf audit`'s findings, and the audit behind a run's regulated score.

The auditor (any machine with the dataset and the admin token) re-evaluates a
DONE model's stored weights and sends its figures; the master recomputes the
verdict from them and from the model's claimed accuracy (its best reported
validation accuracy) with `aiperf.audit.verdict`, and refuses a request whose
verdict disagrees. The master stamps the time. The model behind the regulated
score is the one whose report gave acc(t) at the regulated score's time t; an
official run is valid only when that model's latest audit passed
(docs/spec.md, "Audit"). The master also checks the model's throughput
(`aiperf.audit.throughput_verdict`) from the auditor's timed rate and its own
records of the model and its worker, and records the final verdict; a run with
a TOO_FAST audit is invalid, whatever its profile (a proven false count of
work). Smoke runs show the accuracy audit but it does not decide their
validity: they are unofficial anyway, and the demo would otherwise depend on a
worker's checkpoint store being readable from where the scoreboard is asked.
"""

from __future__ import annotations

import logging
from typing import Callable, Protocol

from aiperf import audit as rule
from aiperf import scoring
from aiperf.limits import MAX_REASON_CHARS
from aiperf.states import ModelState
from master.core import node_audits
from master.core.replies import RegulatedAudit
from master.core.requests import AuditSubmission
from master.store.errors import FailedPrecondition, InvalidArgument
from master.store.protocol import AuditStore, ModelStore, ProgressStore, RunStore, RunWorkerStore
from master.store.records import AuditInput, AuditRecord, ModelRecord, RunRecord, RunWorker

log = logging.getLogger(__name__)

_UNREAD = (rule.NO_CHECKPOINT, rule.CORRUPT)  # verdicts of a checkpoint that was not read
MIN_SPAN_S = 1.0  # the shortest time a claim is spread over (a model finished at once claims per second)


class AuditedStore(AuditStore, ModelStore, RunStore, RunWorkerStore, ProgressStore, Protocol):
    """What the audits read and write: audits, the audited model, its run and workers, acc(t)."""


class Audits:
    """The audit rule over the store; thread-safe (the store is)."""

    def __init__(self, store: AuditedStore, clock: Callable[[], float]) -> None:
        self.store = store
        self.clock = clock

    def record(self, sub: AuditSubmission) -> AuditRecord:
        """Check and record an audit of a DONE model (NotFound, FailedPrecondition, InvalidArgument)."""
        model = self.store.get_model(sub.model_id)
        if sub.node_audit:
            return self._record_node(model, sub)
        if model.state != ModelState.DONE:
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
        if sub.audited_images_per_second > 0 and not sub.auditor_hardware.strip():
            raise InvalidArgument("a timed rate (audited_images_per_second) needs the auditor_hardware it ran on")
        weights, detail = self._lineage(model, sub)
        t = self._throughput(model, sub)
        throughput = rule.throughput_verdict(t)
        record = self.store.add_audit(AuditInput(
            model_id=model.id, audited_at=self.clock(), auditor_host=sub.auditor_host,
            verdict=rule.final_verdict(weights, throughput),
            architecture_ok=sub.architecture_ok, claimed_accuracy=model.best_accuracy,
            audited_accuracy=sub.audited_accuracy, validation_images=sub.validation_images,
            tolerance=rule.tolerance(sub.validation_images), detail=detail,
            throughput=throughput, worker_hardware=t.worker_hardware, auditor_hardware=t.auditor_hardware,
            claimed_images_per_second=t.claimed_images_per_second,
            audited_images_per_second=t.audited_images_per_second, worker_flops=t.worker_flops,
            audited_flops=t.audited_flops, throughput_tolerance=rule.THROUGHPUT_TOLERANCE,
        ))
        log.info("event=audit_recorded model_id=%d run_id=%d verdict=%r claimed=%s audited=%s architecture_ok=%s "
                 "throughput=%r claimed_ips=%.4g audited_ips=%.4g worker_flops=%.4g audited_flops=%.4g auditor=%s",
                 model.id, record.run_id, record.verdict, record.claimed_accuracy, record.audited_accuracy,
                 record.architecture_ok, throughput, t.claimed_images_per_second, t.audited_images_per_second,
                 t.worker_flops, t.audited_flops, record.auditor_host)
        return record

    def _lineage(self, model: ModelRecord, sub: AuditSubmission) -> tuple[str, str]:
        """The weights' verdict and the detail with the first-epoch re-training folded in: NOT_EARNED
        when the weights passed but the first epoch re-trained from the model's seed falls short of
        its report (aiperf.audit.retrain_verdict)."""
        if sub.retrained_accuracy is None:
            return sub.verdict, sub.detail
        if sub.verdict in _UNREAD or sub.validation_images <= 0:
            raise InvalidArgument("a re-trained accuracy needs the weights read and validation_images > 0")
        reported = self.store.epoch_accuracy(model.id, 1)
        lineage = rule.retrain_verdict(reported, sub.retrained_accuracy, sub.validation_images)
        words = (f"epoch 1 re-trained from the seed: {sub.retrained_accuracy:.4f}, reported "
                 f"{'none' if reported is None else f'{reported:.4f}'} (tolerance "
                 f"{rule.retrain_tolerance(sub.validation_images):.4f})")
        detail = "; ".join(d for d in (words, sub.detail) if d)[:MAX_REASON_CHARS]  # its column's width
        return (lineage if sub.verdict == rule.PASSED else sub.verdict), detail

    def _record_node(self, model: ModelRecord, sub: AuditSubmission) -> AuditRecord:
        """A node audit of a model of any state: its steps timed on its worker's node, and the
        node's inventory against the worker's registration; its verdict is the throughput check's."""
        if (sub.verdict != rule.NO_CHECKPOINT or sub.audited_accuracy is not None or sub.architecture_ok
                or sub.retrained_accuracy is not None):
            raise InvalidArgument(f"a node audit reads no weights: verdict {rule.NO_CHECKPOINT!r}, no accuracy")
        if sub.audited_images_per_second > 0 and not sub.auditor_hardware.strip():
            raise InvalidArgument("a timed rate (audited_images_per_second) needs the auditor_hardware it ran on")
        joined = next((rw for rw in self.store.run_workers(model.run_id) if rw.worker.id == model.worker_id), None)
        inventory = node_audits.inventory_check(joined.inventory if joined else {}, sub.node_accelerators,
                                                sub.node_cpu_model, sub.node_cpus)
        t = self._throughput(model, sub)
        throughput = rule.throughput_verdict(t)
        record = self.store.add_audit(AuditInput(
            model_id=model.id, audited_at=self.clock(), auditor_host=sub.auditor_host, verdict=throughput,
            architecture_ok=False, claimed_accuracy=model.best_accuracy, audited_accuracy=None, validation_images=0,
            tolerance=0.0, detail=sub.detail, throughput=throughput, worker_hardware=t.worker_hardware,
            auditor_hardware=t.auditor_hardware, claimed_images_per_second=t.claimed_images_per_second,
            audited_images_per_second=t.audited_images_per_second, worker_flops=t.worker_flops,
            audited_flops=t.audited_flops, throughput_tolerance=rule.THROUGHPUT_TOLERANCE, node_audit=True,
            inventory=inventory,
        ))
        log.info("event=node_audit_recorded model_id=%d worker_id=%d throughput=%r inventory=%r auditor=%s",
                 model.id, model.worker_id, throughput, inventory, record.auditor_host)
        return record

    def drawn(self, run: RunRecord) -> dict[int, int]:
        """{worker id: the model drawn for its node audit} (master/core/node_audits.py)."""
        return node_audits.plan(run, self.store.model_owners(run.id))

    def validity(self, run: RunRecord, rules: scoring.ProfileRules, result: scoring.ScoreResult,
                 audit: RegulatedAudit, joined: list[RunWorker]) -> scoring.ScoreResult:
        """`result` with the audit rules applied: the regulated score's model audited (official),
        no TOO_FAST audit (any profile), every worker's node audit passed (official)."""
        audits = self.of_run(run.id)
        result = with_throughput_rule(with_audit_rule(result, rules, audit), audits)
        drawn = self.drawn(run) if rules.official else {}
        missing, failed = node_audits.node_audit_reasons(drawn, audits, joined)
        return scoring.with_checks(result, [scoring.node_audits_check(rules.official, len(drawn), missing, failed)])

    def _throughput(self, model: ModelRecord, sub: AuditSubmission) -> rule.Throughput:
        """The model's and its worker's claims per device, from the master's own records, beside the
        auditor's timed rate (aiperf.audit's module docstring)."""
        run = self.store.get_run(model.run_id)
        joined = next((rw for rw in self.store.run_workers(run.id) if rw.worker.id == model.worker_id), None)
        inv = joined.inventory if joined is not None else {}
        hardware, devices = rule.hardware_name([str(a.get("model", "")) for a in inv.get("accelerators", [])],
                                               str(inv.get("cpu", {}).get("model", "")), int(inv.get("cpus", 0)))
        now = self.clock()
        life = (model.finished_at or now) - model.created_at
        end = min(t for t in (now, run.stopped_at, run.deadline) if t is not None)
        start = max([t for t in (run.started_at, joined.joined_at if joined else None) if t is not None]
                    or [model.created_at])
        ops = self.store.worker_run_ops(run.id, model.worker_id)
        return rule.Throughput(
            worker_hardware=hardware, auditor_hardware=" ".join(sub.auditor_hardware.split()),
            claimed_images_per_second=model.images_trained / max(life, MIN_SPAN_S) / devices,
            audited_images_per_second=sub.audited_images_per_second,
            worker_flops=ops / max(end - start, MIN_SPAN_S) / devices,
            audited_flops=sub.audited_images_per_second * model.flops_per_train_image,
        )

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


def with_throughput_rule(result: scoring.ScoreResult, audits: list[AuditRecord]) -> scoring.ScoreResult:
    """`result` with the throughput check: failed when the latest audit of any of the run's models
    found its worker's claims TOO_FAST (any profile: a count of work the hardware cannot do)."""
    latest = {a.model_id: a for a in audits}  # oldest first: the last one of each model stays
    caught = [a for a in latest.values() if a.throughput == rule.TOO_FAST]
    timed = sum(1 for a in latest.values() if a.audited_images_per_second)
    why = [f"model {a.model_id}'s worker claimed {a.claimed_images_per_second:.4g} images/s and "
           f"{a.worker_flops:.4g} FLOPS per device, the audit timed {a.audited_images_per_second:.4g} "
           f"images/s ({a.audited_flops:.4g} FLOPS) on {a.auditor_hardware}" for a in caught]
    return scoring.with_checks(result, [scoring.throughput_check(timed, why)])


def with_audit_rule(result: scoring.ScoreResult, rules: scoring.ProfileRules,
                    audit: RegulatedAudit) -> scoring.ScoreResult:
    """`result` with the audit check: official runs need the model behind the regulated score to
    have passed an audit (smoke runs: not applicable; see the module docstring)."""
    latest = audit.latest
    check = scoring.audit_check(rules.official, audit.model_id, audit.status == rule.STATUS_PASSED,
                                latest.verdict if latest is not None else None)
    return scoring.with_checks(result, [check])
