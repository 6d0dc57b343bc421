"""The control API's messages as plain JSON-ready dicts: what `--json` prints,
what the tables and the HTML report read. None stands for a value the master
does not know (proto3 sends 0 or "" for it). Here, in aiperf.api, protobuf stops on the
CLI's side: aiperf_cli/ reads these dicts, never a message's module."""

from __future__ import annotations

from typing import Any, Iterable

from aiperf.api import aiperf_pb2 as pb
from aiperf.api.enums import BACKENDS, MODEL_STATES, PRECISIONS, PROFILES, RUN_STATES, WORKER_STATES
from aiperf.profiles import get_profile


def run_info_to_dict(run: pb.RunInfo) -> dict[str, Any]:
    """A run's configuration and lifecycle times (what `aiperf start/stop --json` print)."""
    c = run.config
    return {
        "run_id": c.run_id,
        "state": RUN_STATES.get(run.state, "unknown"),
        "profile": PROFILES.get(c.profile, "unknown"),
        "seed": c.seed,
        "duration_s": c.duration_s,
        "precision": PRECISIONS.get(c.precision, "unknown"),
        "limits": {
            "max_models": c.limits.max_models,
            "max_rounds_per_worker": c.limits.max_rounds_per_worker,
            "max_epochs_per_round": c.limits.max_epochs_per_round,
        },
        "warmup_rounds": c.warmup_rounds,
        "recipe": recipe_of(PROFILES.get(c.profile, "unknown"), c.warmup_rounds),
        "min_workers": c.min_workers,
        "deterministic": c.deterministic,
        "xla": c.xla,
        "inherit": c.inherit,
        "keep_checkpoints": c.keep_checkpoints or None,
        "min_running_time_s": c.min_running_time_s,
        "report_interval_s": c.report_interval_s,
        "resource_interval_s": c.resource_interval_s,
        "created_at": run.created_at,
        "started_at": run.started_at or None,
        "deadline": run.deadline or None,
        "stopped_at": run.stopped_at or None,
        "finished_at": run.finished_at or None,
        "stop_reason": run.stop_reason,
        "rules_version": run.rules_version or None,  # recorded at its start; None: before versions
        **downtime_of(run),
    }


def downtime_of(run: pb.RunInfo) -> dict[str, Any]:
    """The master's outages during the run, their total and the part inside the scored window
    [started_at, stopped_at or deadline] (seconds on the master's clock)."""
    outages = [{"start": o.start, "end": o.end, "duration_s": max(0.0, o.end - o.start)} for o in run.outages]
    window_s = 0.0
    if run.started_at:
        window_end = run.stopped_at or run.deadline
        window_s = sum(max(0.0, min(o.end, window_end) - max(o.start, run.started_at)) for o in run.outages)
    return {"outages": outages, "downtime_s": sum(o["duration_s"] for o in outages), "downtime_in_window_s": window_s}


def _model_counts_dict(counts: Iterable[pb.ModelCount]) -> dict[str, int]:
    """{state name: number of models}."""
    return {MODEL_STATES.get(c.state, "unknown"): c.count for c in counts}


def worker_info_to_dict(w: pb.WorkerInfo) -> dict[str, Any]:
    """One worker's hardware and software, as the scoreboard lists it."""
    return {
        "worker_id": w.worker_id,
        "name": w.name,
        "host": w.host,
        "state": WORKER_STATES.get(w.state, "unknown"),
        "accelerators": [
            {"model": a.model, "memory_bytes": a.memory_bytes, "peak_flops": a.peak_flops or None}
            for a in w.accelerators
        ],
        "cpus": w.cpus,
        "cpu_peak_flops": dict(w.cpu_peak_flops_by_dtype) or None,
        "memory_bytes": w.memory_bytes,
        "software": {s.name: s.version for s in w.software},
        "backend": BACKENDS.get(w.backend, "tensorflow"),  # unsaid: a worker from before backends, on TensorFlow
        "dataset": {"kind": w.dataset.kind, "train_images": w.dataset.train_images,
                    "validation_images": w.dataset.validation_images, "num_classes": w.dataset.num_classes,
                    "image_size": w.dataset.image_size, "fingerprint": w.dataset.fingerprint}
        if w.has_dataset else None,
        "implausible_reports": w.implausible_reports,
    }


def worker_entry_to_dict(w: pb.WorkerInfo) -> dict[str, Any]:
    """A registered worker as ListWorkers reports it: hardware, live state, last heartbeat
    and the model it trains now (None: none)."""
    d = worker_info_to_dict(w)
    d.update({
        "registered_at": w.registered_at,
        "last_heartbeat": w.last_heartbeat or None,
        "current_model_id": w.current_model_id or None,
        "current_run_id": w.current_run_id or None,
    })
    return d


def run_status_to_dict(st: pb.RunStatus) -> dict[str, Any]:
    """The run plus its progress counters (what `aiperf status --json` prints)."""
    d = run_info_to_dict(st.run)
    d.update({
        "master_time": st.master_time,
        "elapsed_s": st.elapsed_s,
        "workers_alive": st.workers_alive,
        "workers": st.workers_joined,
        "models": _model_counts_dict(st.models),
        "api_version": st.api_version,
        "official": st.official,
        "unofficial_reasons": list(st.unofficial_reasons),
    })
    return d


RECIPE_FIELDS = ("learning_rate", "lr_decay", "momentum", "label_smoothing", "weight_decay", "early_stop_monitor",
                 "early_stop_min_delta", "trials_per_architecture")


def recipe_of(profile_name: str, warmup_rounds: int = 0) -> dict[str, Any] | None:
    """The training recipe a run's workers follow (its profile's, docs/spec.md "The training
    recipe"), with the run's warm-up length (0: the profile's); None for an unknown profile."""
    try:
        profile = get_profile(profile_name)
    except ValueError:
        return None
    return {**{name: getattr(profile, name) for name in RECIPE_FIELDS},
            "warmup_rounds": warmup_rounds or profile.warmup_rounds}


def scoreboard_to_dict(sb: pb.Scoreboard) -> dict[str, Any]:
    """The scoreboard as one JSON-ready dict (what `aiperf scoreboard --json` prints)."""
    d = run_info_to_dict(sb.run)
    d.update({
        "official": sb.official,
        "unofficial_reasons": list(sb.unofficial_reasons),
        "elapsed_s": sb.elapsed_s,
        "flops": sb.flops,
        "score": sb.score,
        # provisional: the score may still change (short of the minimum running time, not over);
        # final: the run is over, nothing changes it; short_of_minimum: it ran less than the minimum
        "provisional": sb.provisional and sb.run.state not in (pb.RUN_FINISHED, pb.RUN_ABORTED),
        "final": sb.run.state in (pb.RUN_FINISHED, pb.RUN_ABORTED),
        "short_of_minimum": sb.provisional,
        "score_time_s": sb.score_time_s,
        "regulated_score_time_s": sb.regulated_score_time_s,
        "valid_flops_time_s": sb.valid_flops_time_s,
        "regulated_score": sb.regulated_score,
        "valid_flops": sb.valid_flops,
        "error": sb.error,
        "best_accuracy": sb.best_accuracy if sb.error < 1.0 else None,
        "target_accuracy": sb.target_accuracy,
        "valid": sb.valid,
        "invalid_reason": sb.invalid_reason or None,
        # score / the datasheet peaks (HPL's Rmax/Rpeak), and / the accepted measured peaks
        "efficiency": sb.efficiency if sb.datasheet_peak_flops else None,
        "efficiency_unknown_reason": sb.efficiency_unknown_reason or None,
        "datasheet_peak_flops": sb.datasheet_peak_flops or None,
        "efficiency_vs_measured": sb.efficiency_vs_measured if sb.peak_flops else None,
        "peak_flops": sb.peak_flops or None,
        "peak_verdict": sb.peak_verdict or None,
        "total_ops": sb.total_ops,
        "worker_ops": sb.worker_ops,
        "flops_mismatch_reports": sb.flops_mismatch_reports,
        "implausible_reports": sb.implausible_reports,
        "reports": sb.reports,
        "workers": sb.workers,
        "workers_alive": sb.workers_alive,
        "accelerators": sb.accelerators,
        "models": _model_counts_dict(sb.models),
        "models_done": sb.models_done,
        "best_model_id": sb.best_model_id or None,
        "images_trained": sb.images_trained,
        "images_validated": sb.images_validated,
        "min_running_time_s": sb.min_running_time_s,
        "hardware": [worker_info_to_dict(w) for w in sb.inventory],
        # the frameworks the run's workers trained with (one run may mix them)
        "backends": ", ".join(sorted({BACKENDS.get(w.backend, "tensorflow") for w in sb.inventory})) or None,
        "software": {s.name: s.version for s in sb.master_software},
        "scoring_rules_version": sb.scoring_rules_version or None,  # the master's now (rules_version: at start)
        # the audit of the model behind the regulated score (docs/spec.md, "Audit")
        "audit_status": sb.audit_status or None,
        "audit_model_id": sb.audit_model_id or None,
        "audit": audit_to_dict(sb.audit) if sb.HasField("audit") else None,
        # the validity checklist (aiperf.scoring.VALIDITY_RULES): one entry per rule, in its order
        "checks": [checks_entry(c) for c in sb.checks],
    })
    return d


def checks_entry(c: pb.ValidityCheck) -> dict[str, Any]:
    """One rule's state: its key, title, state (passed/failed/pending/not applicable), the figure
    judged, its limit and why (None: nothing to say)."""
    from aiperf.scoring import RULE_TITLES

    return {"rule": c.rule, "title": RULE_TITLES.get(c.rule, c.rule), "state": c.state, "figure": c.figure,
            "limit": c.limit, "detail": c.detail or None}


def audit_to_dict(a: pb.Audit) -> dict[str, Any]:
    """One audit of a model's stored weights (`aiperf audit --json` rows carry these keys)."""
    return {
        "model_id": a.model_id,
        "run_id": a.run_id,
        "claimed_accuracy": a.claimed_accuracy,
        "audited_accuracy": a.audited_accuracy if a.has_audited_accuracy else None,
        "architecture_ok": a.architecture_ok,
        "verdict": a.verdict,
        "tolerance": a.tolerance,
        "validation_images": a.validation_images,
        "auditor_host": a.auditor_host,
        "audited_at": a.audited_at,
        "detail": a.detail or None,
        "throughput": a.throughput or None,
        "worker_hardware": a.worker_hardware or None,
        "auditor_hardware": a.auditor_hardware or None,
        "claimed_images_per_second": a.claimed_images_per_second,
        "audited_images_per_second": a.audited_images_per_second or None,
        "worker_flops": a.worker_flops,
        "audited_flops": a.audited_flops or None,
        "throughput_tolerance": a.throughput_tolerance,
        "node_audit": a.node_audit,
        "inventory": a.inventory or None,
    }


def timeline_to_dict(tl: pb.Timeline) -> dict[str, Any]:
    """The run's timeline as plain dicts (None where a value is not known)."""
    return {
        "run": run_info_to_dict(tl.run),
        "points": [{"elapsed_s": p.elapsed_s, "ops": p.ops, "flops": p.flops,
                    "best_accuracy": p.best_accuracy if p.has_accuracy else None} for p in tl.points],
        "resources": [{
            "elapsed_s": r.elapsed_s,
            "accelerator_util": r.accelerator_util if r.has_accelerator else None,
            "accelerator_memory_used": r.accelerator_memory_used if r.has_accelerator else None,
            "cpu_util": r.cpu_util if r.has_host else None,
            "memory_used": r.memory_used if r.has_host else None,
        } for r in tl.resources],
    }


def model_to_dict(m: pb.Model) -> dict[str, Any]:
    """One model of a run; its graph JSON only when the master sent it."""
    d: dict[str, Any] = {
        "model_id": m.model_id,
        "run_id": m.run_id,
        "parent_id": m.parent_id or None,
        "worker_id": m.worker_id,
        "round": m.round,
        "graph_hash": m.graph_hash,
        "hyperparameters": {"batch_size": int(m.hyperparameters.batch_size),  # as stored, unvalidated
                            "kernel_size": int(m.hyperparameters.kernel_size)},
        "state": MODEL_STATES.get(m.state, "unknown"),
        "best_accuracy": m.best_accuracy if m.has_accuracy else None,
        "predicted_accuracy": m.predicted_accuracy or None,
        "created_at": m.created_at,
        "finished_at": m.finished_at or None,
        "reason": m.reason,
        "flops_per_train_image": m.flops_per_train_image,
        "flops_per_eval_image": m.flops_per_eval_image,
        "images_trained": m.images_trained,
        "images_validated": m.images_validated,
        "epochs": m.epochs,
        # where its weights are (None: none stored); deleted: retention let them go; delete_error: the
        # worker could not delete them (None: none reported)
        "checkpoint": ({"uri": m.checkpoint_uri, "sha256": m.checkpoint_sha256, "deleted": m.checkpoint_deleted,
                        "delete_error": m.checkpoint_delete_error or None} if m.checkpoint_uri else None),
        "inherited_from": m.inherited_from or None,  # None: trained from scratch
    }
    if m.graph_json:
        d["graph_json"] = m.graph_json
    return d
