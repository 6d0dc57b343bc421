"""Protobuf <-> the Master's plain types, both directions, in one place.

Requests become master/core/requests.py types (an unknown enum value or API version
is refused here: it is a malformed message); records and replies become
messages. Nothing here reads the store or decides anything.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from aiperf.api import aiperf_pb2 as pb
from aiperf.api.enums import (
    API_VERSION,
    BACKEND_VALUES,
    BACKENDS,
    MODEL_STATE_VALUES,
    MODEL_STATES,
    PRECISION_VALUES,
    PRECISIONS,
    PROFILE_VALUES,
    PROFILES,
    RUN_STATE_VALUES,
    WORKER_STATE_VALUES,
    WORKER_STATES,
)
from aiperf.run_spec import RunLimits, RunSpec
from aiperf.states import ModelState
from master.core import weight_lineage
from master.core.replies import (
    History,
    HyperparameterObservation,
    ModelPage,
    RunPage,
    RunStatus,
    RunTimeline,
    Scoreboard,
    WorkerPage,
)
from master.core.requests import (
    DEFAULT_REPORT_INTERVAL_S,
    DEFAULT_RESOURCE_INTERVAL_S,
    DEFAULT_WARMUP_ROUNDS,
    AuditSubmission,
    ModelFinish,
    ModelSubmission,
    ProgressReport,
    ResourceSampleReport,
)
from master.store.errors import FailedPrecondition, InvalidArgument
from master.store.records import (
    AuditRecord,
    ModelRecord,
    ProgressResult,
    RunRecord,
    RunWorker,
    WorkerInput,
    WorkerRecord,
)

# ---------------------------------------------------------------- requests -> plain types


def run_spec(req: pb.StartRunRequest) -> RunSpec:
    profile = PROFILES.get(req.profile or pb.PROFILE_SMOKE)
    if profile is None:
        raise InvalidArgument(f"unknown profile {req.profile}")
    precision = PRECISIONS.get(req.precision, "") if req.precision else ""  # "": the profile's
    if req.precision and not precision:
        raise InvalidArgument(f"unknown precision {req.precision}")
    return RunSpec(
        duration_s=req.duration_s, profile=profile, seed=int(req.seed), precision=precision,
        limits=RunLimits(int(req.limits.max_models), int(req.limits.max_rounds_per_worker),
                         int(req.limits.max_epochs_per_round)),
        warmup_rounds=int(req.warmup_rounds), min_workers=int(req.min_workers),
        allow_concurrent=req.allow_concurrent, report_interval_s=req.report_interval_s,
        resource_interval_s=req.resource_interval_s, deterministic=req.deterministic,
        xla={pb.TOGGLE_ON: True, pb.TOGGLE_OFF: False}.get(req.xla),
        inherit=not req.no_inherit, keep_checkpoints=int(req.keep_checkpoints),
    )


def worker_input(req: pb.RegisterRequest) -> WorkerInput:
    if req.api_version not in (pb.API_VERSION_UNSPECIFIED, API_VERSION):
        raise FailedPrecondition(f"API version {req.api_version} not supported; this master speaks {API_VERSION}")
    return WorkerInput(
        name=req.name,
        host=req.host,
        accelerators=[
            {"model": a.model, "memory_bytes": int(a.memory_bytes), "peak_flops": float(a.peak_flops),
             "peak_flops_by_dtype": {k: float(v) for k, v in sorted(a.peak_flops_by_dtype.items())},
             **({"uuid": a.uuid} if a.uuid else {}), **({"pci_bus_id": a.pci_bus_id} if a.pci_bus_id else {})}
            for a in req.accelerators
        ],
        cpus=int(req.cpus),
        memory_bytes=int(req.memory_bytes),
        software={s.name: s.version for s in req.software},
        cpu=_cpu_inventory(req),
        # a worker from before the field trained on TensorFlow, the only backend then
        backend=BACKENDS.get(req.backend, "tensorflow"),
    )


def _cpu_inventory(req: pb.RegisterRequest) -> dict[str, Any]:
    """A worker's CPU as it registered it: its measured GEMM rates and model name (each when sent)."""
    cpu: dict[str, Any] = {}
    if req.cpu_peak_flops_by_dtype:
        cpu["peak_flops_by_dtype"] = {k: float(v) for k, v in sorted(req.cpu_peak_flops_by_dtype.items())}
    if req.cpu_model:
        cpu["model"] = req.cpu_model
    return cpu


def model_submission(req: pb.SubmitModelRequest) -> ModelSubmission:
    hp = req.hyperparameters
    return ModelSubmission(
        worker_id=req.worker_id, run_id=req.run_id, graph_json=req.graph_json, graph_hash=req.graph_hash,
        parent_id=req.parent_id, round=req.round, batch_size=hp.batch_size, kernel_size=hp.kernel_size,
        queue=req.queue, dataset=dataset_dict(req.dataset) if req.has_dataset else None,
        inherited_from=int(req.inherited_from),
    )


def dataset_dict(d: pb.DatasetInfo) -> dict[str, Any]:
    return {"kind": d.kind, "train_images": int(d.train_images), "validation_images": int(d.validation_images),
            "num_classes": int(d.num_classes), "image_size": int(d.image_size), "fingerprint": d.fingerprint}


def progress_report(r: pb.ProgressReport) -> ProgressReport:
    return ProgressReport(
        worker_id=r.worker_id, model_id=r.model_id, seq=r.seq, epoch=r.epoch, images_trained=r.images_trained,
        images_validated=r.images_validated, val_accuracy=r.val_accuracy if r.has_accuracy else None,
        worker_flops=r.worker_flops, weights_sha256=r.weights_sha256,
    )


def model_finish(req: pb.FinishModelRequest) -> ModelFinish:
    return ModelFinish(
        worker_id=req.worker_id, model_id=req.model_id, state=MODEL_STATES.get(req.state, ""), reason=req.reason,
        best_accuracy=req.best_accuracy if req.has_accuracy else None,
        predicted_accuracy=req.predicted_accuracy if req.predicted_accuracy != 0 else None,  # 0: unknown
        checkpoint_uri=req.checkpoint_uri, checkpoint_sha256=req.checkpoint_sha256,
        undeleted=tuple((u.model_id, u.error) for u in req.undeleted_checkpoints),
        checkpoint_weights_sha256=req.checkpoint_weights_sha256,
    )


def resource_samples(req: pb.SendResourceSamplesRequest) -> list[ResourceSampleReport]:
    return [
        ResourceSampleReport(
            age_s=s.age_s, accelerator_index=s.accelerator_index, accelerator_util=s.accelerator_util,
            accelerator_memory_used=s.accelerator_memory_used, cpu_util=s.cpu_util, memory_used=s.memory_used,
        )
        for s in req.samples
    ]


def _state_filter(state: int, names: Mapping[int, str], what: str) -> str | None:
    """A list call's state filter: None for UNSPECIFIED (all), else the state's name."""
    if not state:
        return None
    name = names.get(state)
    if name is None:
        raise InvalidArgument(f"unknown {what} state {state}")
    return name


def worker_state(state: int) -> str | None:
    """A ListWorkers state filter: None for UNSPECIFIED (all)."""
    return _state_filter(state, WORKER_STATES, "worker")


def model_state(state: int) -> str | None:
    """A ListModels state filter: None for UNSPECIFIED (all)."""
    return _state_filter(state, MODEL_STATES, "model")


# ---------------------------------------------------------------- plain types -> messages

UINT64_MAX = 2**64 - 1


def _uint64(n: int) -> int:
    """A total for a uint64 field, saturated: a run's images summed over its models may exceed
    2^64 (each model's total fits 2^63), and the scoreboard must still be answered."""
    return min(n, UINT64_MAX)



def run_info(run: RunRecord) -> pb.RunInfo:
    c = run.config
    limits = c.get("limits", {})
    return pb.RunInfo(
        config=pb.RunConfig(
            run_id=run.id,
            profile=PROFILE_VALUES[run.profile],
            seed=run.seed,
            duration_s=run.duration_s,
            precision=PRECISION_VALUES[run.precision],
            limits=pb.Limits(
                max_models=int(limits.get("max_models", 0)),
                max_rounds_per_worker=int(limits.get("max_rounds_per_worker", 0)),
                max_epochs_per_round=int(limits.get("max_epochs_per_round", 0)),
            ),
            warmup_rounds=int(c.get("warmup_rounds", DEFAULT_WARMUP_ROUNDS)),
            min_running_time_s=float(c.get("min_running_time_s", 0.0)),
            report_interval_s=float(c.get("report_interval_s", DEFAULT_REPORT_INTERVAL_S)),
            resource_interval_s=float(c.get("resource_interval_s", DEFAULT_RESOURCE_INTERVAL_S)),
            min_workers=int(c.get("min_workers", 0)),
            deterministic=bool(c.get("deterministic", False)),
            xla=bool(c.get("xla", False)),
            inherit=bool(c.get("inherit", False)),  # runs before inheritance trained from scratch
            keep_checkpoints=int(c.get("keep_checkpoints", 0)),
        ),
        state=RUN_STATE_VALUES[run.state],
        created_at=run.created_at,
        started_at=run.started_at or 0.0,
        deadline=run.deadline or 0.0,
        stopped_at=run.stopped_at or 0.0,
        finished_at=run.finished_at or 0.0,
        stop_reason=run.stop_reason,
        outages=[pb.Outage(start=o.start, end=o.end) for o in run.outages],
        rules_version=run.rules_version,
    )


def model_message(m: ModelRecord, include_graph: bool = True) -> pb.Model:
    return pb.Model(
        model_id=m.id, run_id=m.run_id, parent_id=m.parent_id or 0, worker_id=m.worker_id, round=m.round,
        graph_json=m.graph_json if include_graph else "", graph_hash=m.graph_hash,
        hyperparameters=pb.Hyperparameters(batch_size=m.batch_size, kernel_size=m.kernel_size),
        state=MODEL_STATE_VALUES[m.state],
        best_accuracy=m.best_accuracy or 0.0, predicted_accuracy=m.predicted_accuracy or 0.0,
        has_accuracy=m.best_accuracy is not None,
        created_at=m.created_at, finished_at=m.finished_at or 0.0, reason=m.reason,
        flops_per_train_image=m.flops_per_train_image, flops_per_eval_image=m.flops_per_eval_image,
        images_trained=m.images_trained, images_validated=m.images_validated, epochs=m.epochs,
        checkpoint_uri=m.checkpoint_uri, checkpoint_sha256=m.checkpoint_sha256,
        inherited_from=m.inherited_from, checkpoint_deleted=m.checkpoint_deleted,
        checkpoint_delete_error=m.checkpoint_delete_error,
    )


def dataset_message(d: dict[str, Any]) -> pb.DatasetInfo:
    return pb.DatasetInfo(kind=str(d.get("kind", "")), train_images=int(d.get("train_images", 0)),
                          validation_images=int(d.get("validation_images", 0)),
                          num_classes=int(d.get("num_classes", 0)), image_size=int(d.get("image_size", 0)),
                          fingerprint=str(d.get("fingerprint", "")))


def run_worker_message(rw: RunWorker) -> pb.WorkerInfo:
    """A worker of a run: its hardware when it joined, its dataset and its refused reports."""
    msg = worker_message(rw.worker, rw.inventory)
    msg.implausible_reports = rw.implausible_reports
    if rw.dataset is not None:
        msg.has_dataset = True
        msg.dataset.CopyFrom(dataset_message(rw.dataset))
    return msg


def worker_message(w: WorkerRecord, inventory: dict[str, Any] | None = None) -> pb.WorkerInfo:
    """The worker, with its hardware as in `inventory` (when it joined a run) or as registered."""
    inv = inventory or {
        "host": w.host, "accelerators": w.accelerators, "cpus": w.cpus,
        "memory_bytes": w.memory_bytes, "software": w.software, "cpu": w.cpu, "backend": w.backend,
    }
    return pb.WorkerInfo(
        cpu_peak_flops_by_dtype=inv.get("cpu", {}).get("peak_flops_by_dtype", {}),
        cpu_model=inv.get("cpu", {}).get("model", ""),
        backend=BACKEND_VALUES.get(inv.get("backend") or "tensorflow", pb.BACKEND_UNSPECIFIED),
        worker_id=w.id, name=w.name, host=inv.get("host", w.host),
        accelerators=[
            pb.Accelerator(model=a.get("model", ""), memory_bytes=int(a.get("memory_bytes", 0)),
                           peak_flops=float(a.get("peak_flops", 0.0)),
                           peak_flops_by_dtype=a.get("peak_flops_by_dtype", {}),
                           uuid=a.get("uuid", ""), pci_bus_id=a.get("pci_bus_id", ""))
            for a in inv.get("accelerators", [])
        ],
        cpus=int(inv.get("cpus", 0)), memory_bytes=int(inv.get("memory_bytes", 0)),
        software=software_messages(inv.get("software", {})),
        state=WORKER_STATE_VALUES[w.state], registered_at=w.registered_at, last_heartbeat=w.last_heartbeat,
    )


def software_messages(software: dict[str, str]) -> list[pb.SoftwareVersion]:
    return [pb.SoftwareVersion(name=k, version=v) for k, v in sorted(software.items())]


def model_counts(counts: dict[str, int]) -> list[pb.ModelCount]:
    """One count per model state, in the API's order."""
    return [pb.ModelCount(state=MODEL_STATE_VALUES[s], count=counts.get(s, 0)) for s in ModelState]


def progress_ack(res: ProgressResult, run: RunRecord | None, into: pb.ProgressAck | None = None) -> pb.ProgressAck:
    """The ack of a recorded report; `run`: the current run, whose state it carries.
    `into`: an empty ack to fill (the field of a reply: filled in place, not copied into it)."""
    ack = pb.ProgressAck() if into is None else into
    ack.model_id, ack.seq, ack.duplicate = res.model_id, res.seq, res.duplicate
    ack.master_flops, ack.flops_mismatch = res.master_flops, res.flops_mismatch
    ack.run_state = RUN_STATE_VALUES[run.state] if run is not None else pb.RUN_STATE_UNSPECIFIED
    ack.model_state = MODEL_STATE_VALUES.get(res.model_state, pb.MODEL_STATE_UNSPECIFIED)
    return ack


def history_message(h: History) -> pb.GetHistoryResponse:
    return pb.GetHistoryResponse(run_id=h.run_id, models=[model_message(m) for m in h.models],
                                 ranked_model_ids=h.ranked_model_ids)


def hyperparameter_history_message(run_id: int, observations: list[HyperparameterObservation]
                                   ) -> pb.GetHyperparameterHistoryResponse:
    return pb.GetHyperparameterHistoryResponse(run_id=run_id, observations=[
        pb.HyperparameterObservation(
            model_id=o.model_id, round=o.round, worker_id=o.worker_id,
            hyperparameters=pb.Hyperparameters(batch_size=o.batch_size, kernel_size=o.kernel_size),
            accuracy=o.accuracy,
        )
        for o in observations
    ])


def model_page_message(page: ModelPage, include_graph: bool) -> pb.ListModelsResponse:
    return pb.ListModelsResponse(run_id=page.run_id, models=[model_message(m, include_graph) for m in page.models],
                                 total=page.total)


def run_page_message(page: RunPage) -> pb.ListRunsResponse:
    return pb.ListRunsResponse(runs=[run_info(r) for r in page.runs], total=page.total,
                               master_time=page.master_time)


def worker_page_message(page: WorkerPage) -> pb.ListWorkersResponse:
    workers = []
    for e in page.workers:
        msg = worker_message(e.worker)
        msg.current_model_id = e.current_model_id or 0
        msg.current_run_id = e.current_run_id or 0
        workers.append(msg)
    return pb.ListWorkersResponse(workers=workers, total=page.total, master_time=page.master_time)


def run_status_message(st: RunStatus) -> pb.RunStatus:
    return pb.RunStatus(
        run=run_info(st.run), master_time=st.master_time, elapsed_s=st.elapsed_s, workers_alive=st.workers_alive,
        workers_joined=st.workers_joined, models=model_counts(st.model_counts), api_version=API_VERSION,
        official=not st.unofficial_reasons, unofficial_reasons=list(st.unofficial_reasons),
    )


def scoreboard_message(sb: Scoreboard) -> pb.Scoreboard:
    r = sb.result
    return pb.Scoreboard(
        run=run_info(sb.run),
        elapsed_s=r.elapsed_s,
        flops=r.flops,
        score=r.score,
        provisional=r.provisional,
        regulated_score=r.regulated_score,
        valid_flops=r.valid_flops,
        error=r.error,
        best_accuracy=r.best_accuracy or 0.0,
        target_accuracy=sb.rules.target_accuracy,
        valid=r.valid,
        invalid_reason=r.invalid_reason,
        official=sb.rules.official and not sb.unofficial_reasons,
        efficiency=r.efficiency or 0.0,
        efficiency_vs_measured=r.efficiency_vs_measured or 0.0,
        datasheet_peak_flops=sb.datasheet_peak_flops or 0.0,
        efficiency_unknown_reason=sb.efficiency_unknown_reason,
        scoring_rules_version=sb.scoring_rules_version,
        peak_flops=sb.peak_flops or 0.0,
        peak_verdict=sb.peak_verdict,
        implausible_reports=sb.implausible_reports,
        total_ops=float(r.total_ops),
        worker_ops=float(r.worker_ops),
        flops_mismatch_reports=sb.flops_mismatch_reports,
        reports=r.reports,
        workers=len(sb.workers),
        workers_alive=sb.workers_alive,
        accelerators=sb.accelerators,
        models=model_counts(sb.model_counts),
        models_done=sb.models_done,
        best_model_id=sb.best_model_id or 0,
        inventory=[run_worker_message(rw) for rw in sb.workers],
        unofficial_reasons=list(sb.unofficial_reasons),
        master_software=software_messages(sb.run.software),
        min_running_time_s=sb.rules.min_running_time_s,
        score_time_s=r.score_time_s,
        regulated_score_time_s=r.regulated_score_time_s,
        valid_flops_time_s=r.valid_flops_time_s,
        images_trained=_uint64(sb.images_trained),
        images_validated=_uint64(sb.images_validated),
        checks=[pb.ValidityCheck(rule=c.rule, state=c.state.value, figure=c.figure, limit=c.limit, detail=c.detail)
                for c in r.checks],
        **_scoreboard_audit(sb),
    )


def _scoreboard_audit(sb: Scoreboard) -> dict[str, Any]:
    """The Scoreboard's audit fields (none while no accuracy was reported)."""
    a = sb.audit
    if a is None or a.model_id is None:
        return {}
    fields: dict[str, Any] = {"audit_status": a.status, "audit_model_id": a.model_id}
    if a.latest is not None:
        fields["audit"] = audit_message(a.latest)
    return fields


def audit_submission(req: pb.RecordAuditRequest) -> AuditSubmission:
    return AuditSubmission(
        model_id=req.model_id,
        audited_accuracy=req.audited_accuracy if req.has_audited_accuracy else None,
        architecture_ok=req.architecture_ok, verdict=req.verdict, auditor_host=req.auditor_host,
        validation_images=req.validation_images, detail=req.detail,
        audited_images_per_second=req.audited_images_per_second, auditor_hardware=req.auditor_hardware,
        node_audit=req.node_audit, node_cpu_model=req.node_cpu_model, node_cpus=int(req.node_cpus),
        node_accelerators=tuple({"model": a.model, "uuid": a.uuid} for a in req.node_accelerators),
        retrained_accuracy=req.retrained_accuracy if req.has_retrained_accuracy else None,
    )


def audit_message(a: AuditRecord) -> pb.Audit:
    return pb.Audit(
        model_id=a.model_id, run_id=a.run_id, claimed_accuracy=a.claimed_accuracy or 0.0,
        has_audited_accuracy=a.audited_accuracy is not None, audited_accuracy=a.audited_accuracy or 0.0,
        architecture_ok=a.architecture_ok, verdict=a.verdict, auditor_host=a.auditor_host,
        validation_images=a.validation_images, audited_at=a.audited_at, detail=a.detail, tolerance=a.tolerance,
        throughput=a.throughput, worker_hardware=a.worker_hardware, auditor_hardware=a.auditor_hardware,
        claimed_images_per_second=a.claimed_images_per_second, audited_images_per_second=a.audited_images_per_second,
        worker_flops=a.worker_flops, audited_flops=a.audited_flops, throughput_tolerance=a.throughput_tolerance,
        node_audit=a.node_audit, inventory=a.inventory,
    )


def timeline_message(tl: RunTimeline) -> pb.Timeline:
    return pb.Timeline(
        run=run_info(tl.run),
        points=[pb.CurvePoint(elapsed_s=c.elapsed_s, ops=float(c.ops), flops=c.flops,
                              has_accuracy=c.best_accuracy is not None, best_accuracy=c.best_accuracy or 0.0)
                for c in tl.points],
        resources=[pb.ResourcePoint(
            elapsed_s=r.elapsed_s,
            has_accelerator=r.accelerator_util is not None, accelerator_util=r.accelerator_util or 0.0,
            accelerator_memory_used=r.accelerator_memory_used or 0.0,
            has_host=r.cpu_util is not None, cpu_util=r.cpu_util or 0.0, memory_used=r.memory_used or 0.0,
        ) for r in tl.resources],
    )


def with_init_seeds(page: pb.ListModelsResponse, run_of: Callable[[int], RunRecord]) -> pb.ListModelsResponse:
    """`page` with each model's init_seed (master/core/weight_lineage.py), for the auditor that
    re-trains a first epoch from it (ListModels is an admin call: workers never list models)."""
    runs: dict[int, RunRecord] = {}
    for m in page.models:
        if m.run_id not in runs:
            runs[m.run_id] = run_of(m.run_id)
        m.init_seed = weight_lineage.init_seed(runs[m.run_id], m.model_id)
    return page
