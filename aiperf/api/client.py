"""Typed clients for the master's gRPC API.

`WorkerClient` is what a worker agent uses; `ControlClient` is what the CLI
uses. Both send `authorization: Bearer <token>` on every call and raise
`ApiError` (with the gRPC status code and the master's message) on failure.

A worker's life, in calls::

    from aiperf.api.client import WorkerClient, Accelerator
    c = WorkerClient("master:50051", token)
    reg = c.register(name="node-1", host="node-1",
                     accelerators=[Accelerator("NVIDIA H100", 80 << 30, peak_flops=4e14)],
                     cpus=32, memory_bytes=512 << 30,
                     software={"tensorflow": "2.21.0"})
    # reg.worker_id, reg.heartbeat_interval_s, reg.has_run, reg.run (RunInfo)
    hb = c.heartbeat(reg.worker_id)          # every heartbeat_interval_s, from a thread
    s = c.connect()                          # or: the same calls on one Connect stream,
    hb = s.heartbeat(reg.worker_id)          # what the worker agent uses (cheaper for the master)
    # hb.has_run / hb.run.state (aiperf_pb2.RUN_RUNNING ...), hb.run.config:
    #   run_id, profile, seed, duration_s, precision, limits, warmup_rounds, ...
    hist = c.get_history(reg.worker_id, since_model_id=last_seen)  # .models, .ranked_model_ids
    sub = c.submit_model(reg.worker_id, graph.to_json(), graph.hash(), parent_id=3,
                         round=6, hyperparameters={"batch_size": 448, "kernel_size": 5})
    c.report_progress(reg.worker_id, sub.model_id, seq=1, images_trained=44800,
                      images_validated=0, epoch=1, worker_flops=fc.ops(44800, 0))
    c.report_progress(reg.worker_id, sub.model_id, seq=2, images_trained=0,
                      images_validated=10000, epoch=1, val_accuracy=0.41,
                      worker_flops=fc.ops(0, 10000))
    c.finish_model(reg.worker_id, sub.model_id, "done", best_accuracy=0.41,
                   predicted_accuracy=0.55)
    obs = c.get_hyperparameter_history(reg.worker_id)  # for TPE: .observations

Rules the master enforces (violations raise ApiError):
- `seq` starts at 1 and grows by one per report of a model; resending the same
  seq (after a timeout, say) is safe: the ack says `duplicate=True` and nothing
  is counted twice. `report_progress` retries transient failures itself.
- Image counts are those processed since the previous report (steps x global
  batch), never negative. `val_accuracy` is a real observed validation
  accuracy; the error of the run is computed from these alone.
- `worker_flops` is the worker's own count for the same images; the master
  counts them itself and flags a disagreement above 1%.
- Report at least every `run.config.report_interval_s` (30 s) while training.
- Train only while hb.has_run and hb.run.state == RUN_RUNNING. When the run
  is STOPPING (deadline or stop request), stop training, send the last report
  and finish_model; reports are refused once it is FINISHED or ABORTED, and
  hb.has_run turns False when no run is active (the master keeps only active
  runs in heartbeats).
- A model abandoned by the master (the worker was silent for 3 heartbeat
  intervals) refuses further reports with FAILED_PRECONDITION.
"""

from __future__ import annotations

import collections
import logging
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence, TypeVar

import grpc

from aiperf.api import aiperf_pb2 as pb
from aiperf.api import aiperf_pb2_grpc as pb_grpc
from aiperf.api.enums import API_VERSION, MODEL_STATE_VALUES, PRECISION_VALUES, PROFILE_VALUES

log = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_TIMEOUT_S = 15.0
# Messages hold graph JSON; a history page of many models can be large.
MAX_MESSAGE_BYTES = 256 * 1024 * 1024
_TRANSIENT = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})


class ApiError(Exception):
    """A failed call: `code` is the grpc.StatusCode, `details` the master's message."""

    def __init__(self, code: grpc.StatusCode, details: str, method: str = "") -> None:
        super().__init__(f"{method}: {code.name}: {details}" if method else f"{code.name}: {details}")
        self.code = code
        self.details = details
        self.method = method


@dataclass(frozen=True)
class Accelerator:
    """One accelerator of a worker node."""

    model: str
    memory_bytes: int
    peak_flops: float = 0.0  # a GEMM rate for any precision; 0 unknown
    # measured dense GEMM rate per compute type ("float32", "float16", "bfloat16")
    peak_flops_by_dtype: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class ResourceSample:
    """One resource sample; `age_s` is how long ago it was taken."""

    age_s: float = 0.0
    accelerator_index: int = -1  # -1: host-wide
    accelerator_util: float = 0.0
    accelerator_memory_used: int = 0
    cpu_util: float = 0.0
    memory_used: int = 0


def hyperparameters_message(h: Mapping[str, int] | pb.Hyperparameters) -> pb.Hyperparameters:
    if isinstance(h, pb.Hyperparameters):
        return h
    return pb.Hyperparameters(batch_size=int(h["batch_size"]), kernel_size=int(h["kernel_size"]))


def hyperparameters_dict(h: pb.Hyperparameters) -> dict[str, int]:
    """The project's hyperparameter dict {"batch_size": int, "kernel_size": int}."""
    return {"batch_size": int(h.batch_size), "kernel_size": int(h.kernel_size)}


def make_channel(
    address: str, root_certificates: bytes | None = None, tls: bool = False
) -> grpc.Channel:
    """A channel to `address` (host:port); TLS when a CA is given or tls=True."""
    options = [
        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
        ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ("grpc.keepalive_time_ms", 30_000),
    ]
    if root_certificates is not None or tls:
        creds = grpc.ssl_channel_credentials(root_certificates=root_certificates)
        return grpc.secure_channel(address, creds, options=options)
    return grpc.insecure_channel(address, options=options)


class _Client:
    def __init__(
        self,
        address: str,
        token: str,
        *,
        root_certificates: bytes | None = None,
        tls: bool = False,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        retries: int = 3,
        channel: grpc.Channel | None = None,
    ) -> None:
        self.address = address
        self.timeout_s = timeout_s
        self.retries = retries
        self._channel = channel or make_channel(address, root_certificates, tls)
        self._metadata = (("authorization", f"Bearer {token}"),)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> "_Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def wait_ready(self, timeout_s: float = 10.0) -> None:
        """Block until the channel connects; ApiError(UNAVAILABLE) otherwise."""
        try:
            grpc.channel_ready_future(self._channel).result(timeout=timeout_s)
        except grpc.FutureTimeoutError:
            raise ApiError(grpc.StatusCode.UNAVAILABLE, f"master {self.address} unreachable") from None

    def _call(self, method: str, fn: Callable[..., T], request: Any, retry: bool = False) -> T:
        def once() -> T:
            try:
                return fn(request, timeout=self.timeout_s, metadata=self._metadata)
            except grpc.RpcError as exc:
                raise _api_error(exc, method) from None

        return _with_retries(method, self.retries + 1 if retry else 1, once)


def _api_error(exc: grpc.RpcError, method: str) -> ApiError:
    code = exc.code() if hasattr(exc, "code") else grpc.StatusCode.UNKNOWN
    details = exc.details() if hasattr(exc, "details") else str(exc)
    return ApiError(code, details or "", method)


def _with_retries(method: str, attempts: int, once: Callable[[], T]) -> T:
    """once(), again after transient failures (backoff 0.2 s doubling to 5 s), at most `attempts` times."""
    delay = 0.2
    for attempt in range(attempts):
        try:
            return once()
        except ApiError as exc:
            if exc.code in _TRANSIENT and attempt + 1 < attempts:
                log.warning("event=retry method=%s code=%s attempt=%d", method, exc.code.name, attempt + 1)
                time.sleep(delay)
                delay = min(delay * 2, 5.0)
                continue
            raise
    raise AssertionError("unreachable")


class WorkerClient(_Client):
    """The worker service (token: the worker token, AIPERF_TOKEN)."""

    def __init__(self, address: str, token: str, **kwargs: Any) -> None:
        super().__init__(address, token, **kwargs)
        self._stub = pb_grpc.WorkerServiceStub(self._channel)

    def register(
        self,
        name: str,
        host: str,
        accelerators: Sequence[Accelerator] = (),
        cpus: int = 0,
        memory_bytes: int = 0,
        software: Mapping[str, str] | None = None,
    ) -> pb.RegisterResponse:
        """Register (idempotent on `name`: a restarted worker gets its id back
        and its unfinished models are abandoned, listed in abandoned_model_ids)."""
        req = pb.RegisterRequest(
            api_version=API_VERSION,
            name=name,
            host=host,
            accelerators=[
                pb.Accelerator(model=a.model, memory_bytes=int(a.memory_bytes), peak_flops=float(a.peak_flops),
                               peak_flops_by_dtype={k: float(v) for k, v in a.peak_flops_by_dtype.items()})
                for a in accelerators
            ],
            cpus=int(cpus),
            memory_bytes=int(memory_bytes),
            software=[pb.SoftwareVersion(name=k, version=v) for k, v in sorted((software or {}).items())],
        )
        return self._call("Register", self._stub.Register, req, retry=True)

    def heartbeat(self, worker_id: int, model_id: int = 0) -> pb.HeartbeatResponse:
        """Say alive; the reply carries the run (state, config) and the worker's state."""
        req = pb.HeartbeatRequest(worker_id=worker_id, model_id=model_id)
        return self._call("Heartbeat", self._stub.Heartbeat, req, retry=True)

    def get_history(
        self, worker_id: int, since_model_id: int = 0, run_id: int = 0, limit: int = 0
    ) -> pb.GetHistoryResponse:
        """Models of the run with model_id > since_model_id (ascending), with
        graph JSON, and the ids of all DONE models ranked best first."""
        req = pb.GetHistoryRequest(worker_id=worker_id, run_id=run_id, since_model_id=since_model_id, limit=limit)
        return self._call("GetHistory", self._stub.GetHistory, req, retry=True)

    def submit_model(
        self,
        worker_id: int,
        graph_json: str,
        graph_hash: str,
        parent_id: int,
        round: int,
        hyperparameters: Mapping[str, int] | pb.Hyperparameters,
        run_id: int = 0,
        queue: bool = False,
    ) -> pb.SubmitModelResponse:
        """Create the model the worker is about to train; returns its id (state
        training, or queued with queue=True) and the master's per-image FLOPs.
        Not retried automatically: a retry could create a second model."""
        req = pb.SubmitModelRequest(
            worker_id=worker_id,
            run_id=run_id,
            graph_json=graph_json,
            graph_hash=graph_hash,
            parent_id=parent_id,
            round=round,
            hyperparameters=hyperparameters_message(hyperparameters),
            queue=queue,
        )
        return self._call("SubmitModel", self._stub.SubmitModel, req)

    def get_hyperparameter_history(self, worker_id: int, run_id: int = 0) -> pb.GetHyperparameterHistoryResponse:
        """(model_id, round, worker_id, hyperparameters, accuracy) of the run's DONE
        models; accuracy is the predicted one when known, else the best observed."""
        req = pb.GetHyperparameterHistoryRequest(worker_id=worker_id, run_id=run_id)
        return self._call("GetHyperparameterHistory", self._stub.GetHyperparameterHistory, req, retry=True)

    @staticmethod
    def progress_report(
        worker_id: int,
        model_id: int,
        seq: int,
        images_trained: int,
        images_validated: int,
        epoch: int,
        worker_flops: int,
        val_accuracy: float | None = None,
    ) -> pb.ProgressReport:
        return pb.ProgressReport(
            worker_id=worker_id,
            model_id=model_id,
            seq=seq,
            images_trained=int(images_trained),
            images_validated=int(images_validated),
            has_accuracy=val_accuracy is not None,
            val_accuracy=float(val_accuracy or 0.0),
            epoch=int(epoch),
            worker_flops=int(worker_flops),
        )

    def report_progress(
        self,
        worker_id: int,
        model_id: int,
        seq: int,
        images_trained: int,
        images_validated: int,
        epoch: int,
        worker_flops: int,
        val_accuracy: float | None = None,
    ) -> pb.ProgressAck:
        """Report images processed since the last report (idempotent on seq;
        retried on transient failures)."""
        req = self.progress_report(
            worker_id, model_id, seq, images_trained, images_validated, epoch, worker_flops, val_accuracy
        )
        return self._call("ReportProgress", self._stub.ReportProgress, req, retry=True)

    def connect(self) -> "WorkerStream":
        """A Connect stream for this worker's heartbeats and progress reports:
        the same calls as heartbeat() and report_progress(), at a fraction of
        the master's cost per message. Opened on first use."""
        return WorkerStream(self._stub, self._metadata, timeout_s=self.timeout_s, retries=self.retries)

    def stream_progress(self, reports: Iterable[pb.ProgressReport]) -> pb.ProgressSummary:
        """Send several reports over one stream (e.g. a backlog after a network
        outage); all or nothing: the first invalid report fails the call, but
        reports before it are recorded, and resending them is harmless."""
        items = list(reports)
        return self._call("StreamProgress", lambda req, **kw: self._stub.StreamProgress(iter(req), **kw), items, retry=True)

    def finish_model(
        self,
        worker_id: int,
        model_id: int,
        state: str,
        best_accuracy: float | None = None,
        predicted_accuracy: float | None = None,
        reason: str = "",
    ) -> pb.FinishModelResponse:
        """End a model: state "done" or "failed" (with reason). best_accuracy is
        the best observed validation accuracy; predicted_accuracy ranks it.
        Idempotent: finishing again with the same state is accepted."""
        if state not in ("done", "failed"):
            raise ValueError(f"finish state must be 'done' or 'failed', not {state!r}")
        req = pb.FinishModelRequest(
            worker_id=worker_id,
            model_id=model_id,
            state=MODEL_STATE_VALUES[state],
            reason=reason,
            has_accuracy=best_accuracy is not None,
            best_accuracy=float(best_accuracy or 0.0),
            predicted_accuracy=float(predicted_accuracy or 0.0),
        )
        return self._call("FinishModel", self._stub.FinishModel, req, retry=True)

    def send_resource_samples(self, worker_id: int, samples: Sequence[ResourceSample]) -> int:
        """Send resource samples; returns how many were stored."""
        req = pb.SendResourceSamplesRequest(
            worker_id=worker_id,
            samples=[
                pb.ResourceSample(
                    age_s=s.age_s,
                    accelerator_index=s.accelerator_index,
                    accelerator_util=s.accelerator_util,
                    accelerator_memory_used=int(s.accelerator_memory_used),
                    cpu_util=s.cpu_util,
                    memory_used=int(s.memory_used),
                )
                for s in samples
            ],
        )
        return self._call("SendResourceSamples", self._stub.SendResourceSamples, req).stored


class ControlClient(_Client):
    """The control service (token: the admin token, AIPERF_ADMIN_TOKEN)."""

    def __init__(self, address: str, token: str, **kwargs: Any) -> None:
        super().__init__(address, token, **kwargs)
        self._stub = pb_grpc.ControlServiceStub(self._channel)

    def start_run(
        self,
        duration_s: float,
        profile: str = "smoke",
        seed: int = 0,
        precision: str = "fp32",
        max_models: int = 0,
        max_rounds_per_worker: int = 0,
        max_epochs_per_round: int = 0,
        warmup_rounds: int = 0,
        min_workers: int = 0,
        allow_concurrent: bool = False,
        report_interval_s: float = 0.0,
        resource_interval_s: float = 0.0,
    ) -> pb.RunInfo:
        if profile not in PROFILE_VALUES:
            raise ValueError(f"unknown profile {profile!r}")
        if precision not in PRECISION_VALUES:
            raise ValueError(f"unknown precision {precision!r}")
        req = pb.StartRunRequest(
            duration_s=duration_s,
            profile=PROFILE_VALUES[profile],
            seed=seed,
            precision=PRECISION_VALUES[precision],
            limits=pb.Limits(
                max_models=max_models,
                max_rounds_per_worker=max_rounds_per_worker,
                max_epochs_per_round=max_epochs_per_round,
            ),
            warmup_rounds=warmup_rounds,
            min_workers=min_workers,
            allow_concurrent=allow_concurrent,
            report_interval_s=report_interval_s,
            resource_interval_s=resource_interval_s,
        )
        return self._call("StartRun", self._stub.StartRun, req).run

    def stop_run(self, run_id: int = 0, abort: bool = False, reason: str = "") -> pb.RunInfo:
        req = pb.StopRunRequest(run_id=run_id, abort=abort, reason=reason)
        return self._call("StopRun", self._stub.StopRun, req).run

    def run_status(self, run_id: int = 0) -> pb.RunStatus:
        return self._call("GetRunStatus", self._stub.GetRunStatus, pb.GetRunStatusRequest(run_id=run_id), retry=True)

    def scoreboard(self, run_id: int = 0) -> pb.Scoreboard:
        return self._call("GetScoreboard", self._stub.GetScoreboard, pb.GetScoreboardRequest(run_id=run_id), retry=True)

    def list_models(
        self, run_id: int = 0, state: str | None = None, limit: int = 0, offset: int = 0, include_graph: bool = False
    ) -> pb.ListModelsResponse:
        req = pb.ListModelsRequest(
            run_id=run_id,
            state=MODEL_STATE_VALUES[state] if state else pb.MODEL_STATE_UNSPECIFIED,
            limit=limit,
            offset=offset,
            include_graph=include_graph,
        )
        return self._call("ListModels", self._stub.ListModels, req, retry=True)

    def timeline(self, run_id: int = 0, max_points: int = 0, buckets: int = 0) -> pb.Timeline:
        """FLOPS(t), best accuracy and resource means over the run (see aiperf.timeline)."""
        req = pb.GetTimelineRequest(run_id=run_id, max_points=max_points, buckets=buckets)
        return self._call("GetTimeline", self._stub.GetTimeline, req, retry=True)


# ---------------------------------------------------------------- plain dicts (JSON output, reports)


def run_info_to_dict(run: pb.RunInfo) -> dict[str, Any]:
    from aiperf.api.enums import PRECISIONS, PROFILES, RUN_STATES

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
        "min_workers": c.min_workers,
        "min_running_time_s": c.min_running_time_s,
        "report_interval_s": c.report_interval_s,
        "resource_interval_s": c.resource_interval_s,
        "created_at": run.created_at,
        "started_at": run.started_at or None,
        "deadline": run.deadline or None,
        "stopped_at": run.stopped_at or None,
        "finished_at": run.finished_at or None,
        "stop_reason": run.stop_reason,
    }


def _model_counts_dict(counts: Iterable[pb.ModelCount]) -> dict[str, int]:
    from aiperf.api.enums import MODEL_STATES

    return {MODEL_STATES.get(c.state, "unknown"): c.count for c in counts}


def worker_info_to_dict(w: pb.WorkerInfo) -> dict[str, Any]:
    from aiperf.api.enums import WORKER_STATES

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
        "memory_bytes": w.memory_bytes,
        "software": {s.name: s.version for s in w.software},
    }


def run_status_to_dict(st: pb.RunStatus) -> dict[str, Any]:
    d = run_info_to_dict(st.run)
    d.update({
        "master_time": st.master_time,
        "elapsed_s": st.elapsed_s,
        "workers_alive": st.workers_alive,
        "workers": st.workers_joined,
        "models": _model_counts_dict(st.models),
        "api_version": st.api_version,
    })
    return d


def scoreboard_to_dict(sb: pb.Scoreboard) -> dict[str, Any]:
    """The scoreboard as one JSON-ready dict (what `aiperf scoreboard --json` prints)."""
    d = run_info_to_dict(sb.run)
    d.update({
        "official": sb.official,
        "elapsed_s": sb.elapsed_s,
        "flops": sb.flops,
        "score": sb.score,
        "provisional": sb.provisional,
        "score_time_s": sb.score_time_s,
        "regulated_score": sb.regulated_score,
        "valid_flops": sb.valid_flops,
        "error": sb.error,
        "best_accuracy": sb.best_accuracy if sb.error < 1.0 else None,
        "target_accuracy": sb.target_accuracy,
        "valid": sb.valid,
        "invalid_reason": sb.invalid_reason or None,
        "efficiency": sb.efficiency or None,
        "peak_flops": sb.peak_flops or None,
        "total_ops": sb.total_ops,
        "worker_ops": sb.worker_ops,
        "flops_mismatch_reports": sb.flops_mismatch_reports,
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
        "software": {s.name: s.version for s in sb.master_software},
    })
    return d


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
    from aiperf.api.enums import MODEL_STATES

    d: dict[str, Any] = {
        "model_id": m.model_id,
        "run_id": m.run_id,
        "parent_id": m.parent_id or None,
        "worker_id": m.worker_id,
        "round": m.round,
        "graph_hash": m.graph_hash,
        "hyperparameters": hyperparameters_dict(m.hyperparameters),
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
    }
    if m.graph_json:
        d["graph_json"] = m.graph_json
    return d


_CODE_BY_NUMBER = {c.value[0]: c for c in grpc.StatusCode}


class _Pending:
    """One message waiting for its reply."""

    __slots__ = ("done", "reply", "error")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.reply: pb.MasterMessage | None = None
        self.error: ApiError | None = None


class _OpenStream:
    def __init__(self, call: Any, requests: "queue.SimpleQueue[pb.WorkerMessage | None]") -> None:
        self.call = call
        self.requests = requests
        self.waiting: collections.deque[_Pending] = collections.deque()


class WorkerStream:
    """Heartbeats and progress reports over one Connect stream.

    Each call blocks until the master's reply (one per message, in order) and
    raises ApiError like the unary calls: a refused message with the code the
    unary RPC would return; a broken stream (master restarting, network) with
    its transport code, after which the next call opens a new stream. Transient
    failures are retried as the unary calls are; both calls are idempotent.
    Thread-safe: a heartbeat thread and a progress sender can share one.
    """

    def __init__(self, stub: pb_grpc.WorkerServiceStub, metadata: tuple, timeout_s: float = DEFAULT_TIMEOUT_S,
                 retries: int = 3) -> None:
        self._stub = stub
        self._metadata = metadata
        self.timeout_s = timeout_s
        self.retries = retries
        self._lock = threading.Lock()
        self._open: _OpenStream | None = None
        self._closed = False

    def heartbeat(self, worker_id: int, model_id: int = 0) -> pb.HeartbeatResponse:
        """As WorkerClient.heartbeat."""
        msg = pb.WorkerMessage(heartbeat=pb.HeartbeatRequest(worker_id=worker_id, model_id=model_id))
        return self._retrying("Heartbeat", msg).heartbeat

    def report_progress(self, worker_id: int, model_id: int, seq: int, images_trained: int, images_validated: int,
                        epoch: int, worker_flops: int, val_accuracy: float | None = None) -> pb.ProgressAck:
        """As WorkerClient.report_progress."""
        report = WorkerClient.progress_report(worker_id, model_id, seq, images_trained, images_validated, epoch,
                                              worker_flops, val_accuracy)
        return self._retrying("ReportProgress", pb.WorkerMessage(progress=report)).progress

    def close(self) -> None:
        with self._lock:
            self._closed = True
            stream, self._open = self._open, None
        if stream is not None:
            stream.requests.put(None)  # half-close: the master ends the stream
            stream.call.cancel()

    def __enter__(self) -> "WorkerStream":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals ----------------------------------------------------------
    def _retrying(self, method: str, msg: pb.WorkerMessage) -> pb.MasterMessage:
        return _with_retries(f"Connect.{method}", self.retries + 1, lambda: self._exchange(method, msg))

    def _start(self) -> _OpenStream:
        requests: queue.SimpleQueue[pb.WorkerMessage | None] = queue.SimpleQueue()

        def messages() -> Iterator[pb.WorkerMessage]:
            while (m := requests.get()) is not None:
                yield m

        stream = _OpenStream(self._stub.Connect(messages(), metadata=self._metadata), requests)
        threading.Thread(target=self._read, args=(stream,), name="aiperf-connect-reader", daemon=True).start()
        return stream

    def _read(self, stream: _OpenStream) -> None:
        try:
            for reply in stream.call:
                with self._lock:
                    pending = stream.waiting.popleft() if stream.waiting else None
                if pending is not None:
                    pending.reply = reply
                    pending.done.set()
            error = ApiError(grpc.StatusCode.UNAVAILABLE, "the master closed the stream", "Connect")
        except grpc.RpcError as exc:
            error = _api_error(exc, "Connect")
            if error.code == grpc.StatusCode.CANCELLED and not self._closed:
                # cancelled by a master shutting down: retry elsewhere/later
                error = ApiError(grpc.StatusCode.UNAVAILABLE, error.details, "Connect")
        self._fail(stream, error)

    def _fail(self, stream: _OpenStream, error: ApiError) -> None:
        with self._lock:
            if self._open is stream:
                self._open = None
            waiting = list(stream.waiting)
            stream.waiting.clear()
        stream.requests.put(None)  # ends the request generator (gRPC's sending thread waits on it)
        for pending in waiting:
            pending.error = error
            pending.done.set()

    def _exchange(self, method: str, msg: pb.WorkerMessage) -> pb.MasterMessage:
        pending = _Pending()
        with self._lock:
            if self._closed:
                raise ApiError(grpc.StatusCode.CANCELLED, "the stream is closed", method)
            if self._open is None:
                self._open = self._start()
            stream = self._open
            stream.waiting.append(pending)  # under the lock: replies come in this order
            stream.requests.put(msg)
        if not pending.done.wait(self.timeout_s):
            # no reply in time: give up on this stream; the next call opens another
            stream.call.cancel()
            self._fail(stream, ApiError(grpc.StatusCode.DEADLINE_EXCEEDED, f"no reply in {self.timeout_s:g} s", method))
            pending.done.wait(self.timeout_s)  # set by _fail, or by the reader if the reply just came
        if pending.error is not None:
            raise ApiError(pending.error.code, pending.error.details, method)
        reply = pending.reply
        assert reply is not None
        if reply.WhichOneof("body") == "error":
            code = _CODE_BY_NUMBER.get(reply.error.code, grpc.StatusCode.UNKNOWN)
            raise ApiError(code, reply.error.message, method)
        return reply
