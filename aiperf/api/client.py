"""Typed clients for the master's gRPC API.

`WorkerClient` is what a worker agent uses; `ControlClient` is what the CLI
uses. Both send `authorization: Bearer <token>` on every call and raise
`ApiError` (with the gRPC status code and the master's message) on failure.

Identity: the token admits a worker; `register` returns the worker's own
credential (reg.credential), which the WorkerClient keeps and sends with every
later call naming that worker (metadata `aiperf-worker-credential`), on its
Connect streams too. A worker that restarts presents the credential it kept:
`register(..., credential=kept)` (the agent keeps it in its state directory).

A worker's life in calls, and the rules the master enforces on them: docs/architecture.md,
"A worker's calls".
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence, TypeVar

import grpc

from aiperf.api import aiperf_pb2 as pb
from aiperf.api import aiperf_pb2_grpc as pb_grpc
from aiperf.api.bounds import clip_text
from aiperf.api.calls import CREDENTIAL_METADATA, DEFAULT_TIMEOUT_S, ApiError, api_error, with_retries
from aiperf.api.enums import (
    API_VERSION,
    BACKEND_VALUES,
    MODEL_STATE_VALUES,
    PRECISION_VALUES,
    PROFILE_VALUES,
    WORKER_STATE_VALUES,
)
from aiperf.api.stream import WorkerStream
from aiperf.api.tokens import check_token
from aiperf.hyperparameters import Hyperparameters
from aiperf.limits import MAX_REASON_CHARS
from aiperf.states import FINISHED_MODEL_STATES

__all__ = [
    "Accelerator", "ApiError", "ControlClient", "DEFAULT_TIMEOUT_S", "MAX_MESSAGE_BYTES", "ResourceSample",
    "WorkerClient", "WorkerStream", "hyperparameters_message", "make_channel",
]

log = logging.getLogger(__name__)

T = TypeVar("T")

# Messages hold graph JSON; a history page of many models can be large.
MAX_MESSAGE_BYTES = 256 * 1024 * 1024
# Reconnecting after the master went away: first after 0.1 s, then at most every 2 s. gRPC's
# default (1 s growing 1.6x to 120 s) reconnected 21 s after a 45 s outage, past the master's
# grace; a master that is back is found within 2 s at a cost of one connect attempt per 2 s.
RECONNECT_BACKOFF_MS = (100, 2000)


@dataclass(frozen=True)
class Accelerator:
    """One accelerator of a worker node."""

    model: str
    memory_bytes: int
    peak_flops: float = 0.0  # a GEMM rate for any precision; 0 unknown
    # measured dense GEMM rate per compute type ("float32", "float16", "bfloat16")
    peak_flops_by_dtype: Mapping[str, float] = field(default_factory=dict)
    uuid: str = ""        # NVML's UUID of the chip ("" unknown)
    pci_bus_id: str = ""  # NVML's PCI bus id ("" unknown)


@dataclass(frozen=True)
class NodeInventory:
    """A node's devices as a node audit reads them (NVML): its accelerators, its CPU model and count."""

    accelerators: Sequence[Accelerator] = ()
    cpu_model: str = ""
    cpus: int = 0


@dataclass(frozen=True)
class ResourceSample:
    """One resource sample; `age_s` is how long ago it was taken."""

    age_s: float = 0.0
    accelerator_index: int = -1  # -1: host-wide
    accelerator_util: float = 0.0
    accelerator_memory_used: int = 0
    cpu_util: float = 0.0
    memory_used: int = 0


def hyperparameters_message(h: Hyperparameters | pb.Hyperparameters) -> pb.Hyperparameters:
    """The wire form of `h`; a message is sent as it is (how tests send values the rule refuses,
    for the master to refuse)."""
    if isinstance(h, pb.Hyperparameters):
        return h
    return pb.Hyperparameters(batch_size=h.batch_size, kernel_size=h.kernel_size)


def make_channel(
    address: str, root_certificates: bytes | None = None, tls: bool = False
) -> grpc.Channel:
    """A channel to `address` (host:port); TLS when a CA is given or tls=True. Every client
    of the master gets its channel here, with the options set once: message sizes, keepalive
    and a bounded reconnect back-off (RECONNECT_BACKOFF_MS)."""
    first_ms, max_ms = RECONNECT_BACKOFF_MS
    options = [
        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
        ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ("grpc.keepalive_time_ms", 30_000),
        ("grpc.initial_reconnect_backoff_ms", first_ms),
        ("grpc.min_reconnect_backoff_ms", first_ms),
        ("grpc.max_reconnect_backoff_ms", max_ms),
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
        # gRPC would fail every call on this side with a message naming neither the token
        # nor its source, which a worker would take for a transient failure and retry
        self._metadata = (("authorization", f"Bearer {check_token(token, 'the client token argument')}"),)

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

    def _call(self, method: str, fn: Callable[..., T], request: Any, retry: bool = False,
              metadata: tuple[tuple[str, str], ...] | None = None) -> T:
        def once() -> T:
            try:
                return fn(request, timeout=self.timeout_s, metadata=metadata or self._metadata)
            except grpc.RpcError as exc:
                raise api_error(exc, method) from None

        return with_retries(method, self.retries + 1 if retry else 1, once, log)


class WorkerClient(_Client):
    """The worker service (token: the worker token, AIPERF_TOKEN)."""

    def __init__(self, address: str, token: str, **kwargs: Any) -> None:
        super().__init__(address, token, **kwargs)
        self._stub = pb_grpc.WorkerServiceStub(self._channel)
        self._lock = threading.Lock()
        self._credentials: dict[int, str] = {}  # worker id -> its credential
        self._by_name: dict[str, str] = {}  # worker name -> its credential, presented on re-register
        self._streams: dict[int, WorkerStream] = {}  # per worker, for heartbeat() and report_progress()

    def close(self) -> None:
        with self._lock:
            streams, self._streams = list(self._streams.values()), {}
        for stream in streams:
            stream.close()
        super().close()

    def credential(self, worker_id: int) -> str:
        """The credential this client holds for the worker ("" when none)."""
        with self._lock:
            return self._credentials.get(worker_id, "")

    def set_credential(self, worker_id: int, credential: str) -> None:
        """Use `credential` for the calls naming worker_id (register sets it itself)."""
        with self._lock:
            self._credentials[worker_id] = credential

    def _worker_metadata(self, worker_id: int) -> tuple[tuple[str, str], ...]:
        credential = self.credential(worker_id)
        return self._metadata + (((CREDENTIAL_METADATA, credential),) if credential else ())

    def _stream_for(self, worker_id: int) -> WorkerStream:
        with self._lock:
            stream = self._streams.get(worker_id)
            if stream is None:
                stream = self._streams[worker_id] = self.connect()
            return stream

    def register(
        self,
        name: str,
        host: str,
        accelerators: Sequence[Accelerator] = (),
        cpus: int = 0,
        memory_bytes: int = 0,
        software: Mapping[str, str] | None = None,
        credential: str = "",
        cpu_peak_flops_by_dtype: Mapping[str, float] | None = None,
        cpu_model: str = "",
        backend: str = "",
    ) -> pb.RegisterResponse:
        """Register (idempotent on `name` for the worker that holds its credential:
        a restarted worker gets its id back and its unfinished models are abandoned,
        listed in abandoned_model_ids). `credential`: the one an earlier register of
        this name returned (default: the one this client got for the name, if any).
        The reply's credential is kept and sent with every later call for the worker.
        `cpu_peak_flops_by_dtype`, `cpu_model`: a worker without accelerators, its CPU's GEMM
        rates and model name. `backend`: the framework it trains with ("tensorflow", "jax"; "":
        unsaid, which the master takes as TensorFlow)."""
        with self._lock:
            presented = credential or self._by_name.get(name, "")
        req = pb.RegisterRequest(
            api_version=API_VERSION,
            name=name,
            host=host,
            accelerators=[
                pb.Accelerator(model=a.model, memory_bytes=int(a.memory_bytes), peak_flops=float(a.peak_flops),
                               peak_flops_by_dtype={k: float(v) for k, v in a.peak_flops_by_dtype.items()},
                               uuid=a.uuid, pci_bus_id=a.pci_bus_id)
                for a in accelerators
            ],
            cpus=int(cpus),
            memory_bytes=int(memory_bytes),
            software=[pb.SoftwareVersion(name=k, version=v) for k, v in sorted((software or {}).items())],
            credential=presented,
            cpu_peak_flops_by_dtype={k: float(v) for k, v in (cpu_peak_flops_by_dtype or {}).items()},
            cpu_model=cpu_model,
            backend=BACKEND_VALUES[backend] if backend else pb.BACKEND_UNSPECIFIED,
        )
        reply: pb.RegisterResponse = self._call("Register", self._stub.Register, req, retry=True)
        with self._lock:
            self._credentials[reply.worker_id] = reply.credential
            self._by_name[name] = reply.credential
        return reply

    def heartbeat(self, worker_id: int, model_id: int = 0, leaving: bool = False) -> pb.HeartbeatResponse:
        """Say alive (leaving: the last beat of a worker that stops, which the master then counts
        lost at once); the reply carries the run (state, config) and the worker's state.
        Sent on the client's Connect stream of this worker; retried on transient failures."""
        return self._stream_for(worker_id).heartbeat(worker_id, model_id, leaving)

    def get_history(
        self, worker_id: int, since_model_id: int = 0, run_id: int = 0, limit: int = 0, ranking: bool = True
    ) -> pb.GetHistoryResponse:
        """Models of the run with model_id > since_model_id (ascending), with
        graph JSON, and (`ranking`) the ids of all DONE models ranked best first."""
        req = pb.GetHistoryRequest(worker_id=worker_id, run_id=run_id, since_model_id=since_model_id, limit=limit,
                                   without_ranking=not ranking)
        reply: pb.GetHistoryResponse = self._call("GetHistory", self._stub.GetHistory, req, retry=True,
                                                  metadata=self._worker_metadata(worker_id))
        return reply

    def submit_model(
        self,
        worker_id: int,
        graph_json: str,
        graph_hash: str,
        parent_id: int,
        round: int,
        hyperparameters: Hyperparameters | pb.Hyperparameters,
        run_id: int = 0,
        queue: bool = False,
        dataset: Mapping[str, Any] | None = None,
        inherited_from: int = 0,
    ) -> pb.SubmitModelResponse:
        """Create the model the worker is about to train; returns its id (state
        training, or queued with queue=True) and the master's per-image FLOPs.
        Not retried automatically: a retry could create a second model. `dataset`:
        what the worker trains on (DatasetInfo's fields), recorded for the run.
        inherited_from: parent_id when its weights were transferred into the child, else 0."""
        req = pb.SubmitModelRequest(
            worker_id=worker_id,
            run_id=run_id,
            graph_json=graph_json,
            graph_hash=graph_hash,
            parent_id=parent_id,
            round=round,
            hyperparameters=hyperparameters_message(hyperparameters),
            queue=queue,
            inherited_from=inherited_from,
        )
        if dataset is not None:
            req.has_dataset = True
            req.dataset.CopyFrom(pb.DatasetInfo(**dataset))
        reply: pb.SubmitModelResponse = self._call("SubmitModel", self._stub.SubmitModel, req,
                                                   metadata=self._worker_metadata(worker_id))
        return reply

    def get_hyperparameter_history(self, worker_id: int, run_id: int = 0) -> pb.GetHyperparameterHistoryResponse:
        """(model_id, round, worker_id, hyperparameters, accuracy) of the run's DONE
        models; accuracy is the predicted one when known, else the best observed."""
        req = pb.GetHyperparameterHistoryRequest(worker_id=worker_id, run_id=run_id)
        reply: pb.GetHyperparameterHistoryResponse = self._call(
            "GetHyperparameterHistory", self._stub.GetHyperparameterHistory, req, retry=True,
            metadata=self._worker_metadata(worker_id))
        return reply

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
        weights_sha256: str = "",
    ) -> pb.ProgressAck:
        """Report images processed since the last report (idempotent on seq;
        retried on transient failures). Sent on the client's Connect stream of this worker."""
        return self._stream_for(worker_id).report_progress(worker_id, model_id, seq, images_trained, images_validated, epoch,
                                            worker_flops, val_accuracy, weights_sha256)

    def connect(self) -> WorkerStream:
        """A new Connect stream for this worker's heartbeats and progress
        reports: the same calls as heartbeat() and report_progress(), on a
        stream of the caller's own. Opened on first use, with the credential
        this client holds for the worker its message names (see WorkerStream)."""
        return WorkerStream(self._stub, self._metadata, timeout_s=self.timeout_s, retries=self.retries,
                            credential=self.credential)

    def finish_model(
        self,
        worker_id: int,
        model_id: int,
        state: str,
        best_accuracy: float | None = None,
        predicted_accuracy: float | None = None,
        reason: str = "",
        checkpoint_uri: str = "",
        checkpoint_sha256: str = "",
        undeleted: Sequence[tuple[int, str]] = (),
        checkpoint_weights_sha256: str = "",
    ) -> pb.FinishModelResponse:
        """End a model: state "done", "failed" (with reason) or "cut" (the run's end stopped it). best_accuracy is
        the best observed validation accuracy; predicted_accuracy ranks it. A done
        model's checkpoint (worker/checkpoints.py) goes with it; the reply lists the
        worker's checkpoints retention lets go (delete_checkpoints); `undeleted` (model id, error)
        names those of an earlier reply the worker could not delete.
        Idempotent: finishing again with the same state is accepted. The reason is
        made to fit the master's bound (MAX_REASON_CHARS, printable; aiperf.api.bounds)."""
        if state not in FINISHED_MODEL_STATES:
            raise ValueError(f"finish state must be one of {', '.join(FINISHED_MODEL_STATES)}, not {state!r}")
        req = pb.FinishModelRequest(
            worker_id=worker_id,
            model_id=model_id,
            state=MODEL_STATE_VALUES[state],
            reason=clip_text(reason, MAX_REASON_CHARS),
            has_accuracy=best_accuracy is not None,
            best_accuracy=float(best_accuracy or 0.0),
            predicted_accuracy=float(predicted_accuracy or 0.0),
            checkpoint_uri=checkpoint_uri,
            checkpoint_sha256=checkpoint_sha256, checkpoint_weights_sha256=checkpoint_weights_sha256,
            undeleted_checkpoints=[pb.CheckpointNotDeleted(model_id=m, error=clip_text(e, MAX_REASON_CHARS))
                                   for m, e in undeleted],
        )
        reply: pb.FinishModelResponse = self._call("FinishModel", self._stub.FinishModel, req, retry=True,
                                                   metadata=self._worker_metadata(worker_id))
        return reply

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
        reply: pb.SendResourceSamplesResponse = self._call("SendResourceSamples", self._stub.SendResourceSamples, req,
                                                           metadata=self._worker_metadata(worker_id))
        return reply.stored


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
        precision: str = "",
        max_models: int = 0,
        max_rounds_per_worker: int = 0,
        max_epochs_per_round: int = 0,
        warmup_rounds: int = 0,
        min_workers: int = 0,
        allow_concurrent: bool = False,
        report_interval_s: float = 0.0,
        resource_interval_s: float = 0.0,
        deterministic: bool = False,
        xla: bool | None = None,
        inherit: bool = True,
        keep_checkpoints: int = 0,
    ) -> pb.RunInfo:
        """Start a run. precision "" and xla None: the profile's (official:
        mixed_fp16 with XLA; smoke: fp32 without); another value makes an official run unofficial."""
        if profile not in PROFILE_VALUES:
            raise ValueError(f"unknown profile {profile!r}")
        if precision and precision not in PRECISION_VALUES:
            raise ValueError(f"unknown precision {precision!r}")
        req = pb.StartRunRequest(
            duration_s=duration_s,
            profile=PROFILE_VALUES[profile],
            seed=seed,
            precision=PRECISION_VALUES[precision] if precision else pb.PRECISION_UNSPECIFIED,
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
            deterministic=deterministic,
            xla=pb.TOGGLE_UNSPECIFIED if xla is None else pb.TOGGLE_ON if xla else pb.TOGGLE_OFF,
            no_inherit=not inherit,
            keep_checkpoints=keep_checkpoints,
        )
        reply: pb.StartRunResponse = self._call("StartRun", self._stub.StartRun, req)
        return reply.run

    def stop_run(self, run_id: int = 0, abort: bool = False, reason: str = "") -> pb.RunInfo:
        req = pb.StopRunRequest(run_id=run_id, abort=abort, reason=reason)
        reply: pb.StopRunResponse = self._call("StopRun", self._stub.StopRun, req)
        return reply.run

    def run_status(self, run_id: int = 0) -> pb.RunStatus:
        reply: pb.RunStatus = self._call("GetRunStatus", self._stub.GetRunStatus, pb.GetRunStatusRequest(run_id=run_id),
                                         retry=True)
        return reply

    def scoreboard(self, run_id: int = 0) -> pb.Scoreboard:
        req = pb.GetScoreboardRequest(run_id=run_id)
        reply: pb.Scoreboard = self._call("GetScoreboard", self._stub.GetScoreboard, req, retry=True)
        return reply

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
        reply: pb.ListModelsResponse = self._call("ListModels", self._stub.ListModels, req, retry=True)
        return reply

    def timeline(self, run_id: int = 0, max_points: int = 0, buckets: int = 0) -> pb.Timeline:
        """FLOPS(t), best accuracy and resource means over the run (see aiperf.timeline)."""
        req = pb.GetTimelineRequest(run_id=run_id, max_points=max_points, buckets=buckets)
        reply: pb.Timeline = self._call("GetTimeline", self._stub.GetTimeline, req, retry=True)
        return reply

    def list_runs(self, limit: int = 0, offset: int = 0) -> pb.ListRunsResponse:
        """Every run, newest first (limit 0: the master's default page of 100)."""
        req = pb.ListRunsRequest(limit=limit, offset=offset)
        reply: pb.ListRunsResponse = self._call("ListRuns", self._stub.ListRuns, req, retry=True)
        return reply

    def list_workers(self, state: str | None = None, run_id: int = 0, limit: int = 0,
                     offset: int = 0) -> pb.ListWorkersResponse:
        """Registered workers (run_id: only those that took part in that run), live state and
        current model; `state` "alive" or "lost" filters."""
        if state is not None and state not in WORKER_STATE_VALUES:
            raise ValueError(f"unknown worker state {state!r}")
        req = pb.ListWorkersRequest(state=WORKER_STATE_VALUES[state] if state else pb.WORKER_STATE_UNSPECIFIED,
                                    run_id=run_id, limit=limit, offset=offset)
        reply: pb.ListWorkersResponse = self._call("ListWorkers", self._stub.ListWorkers, req, retry=True)
        return reply

    def record_audit(self, model_id: int, *, verdict: str, architecture_ok: bool,
                     audited_accuracy: float | None = None, validation_images: int = 0,
                     auditor_host: str = "", detail: str = "", audited_images_per_second: float = 0.0,
                     auditor_hardware: str = "", node: "NodeInventory | None" = None,
                     retrained_accuracy: float | None = None) -> pb.Audit:
        """Record `aiperf audit`'s finding for a DONE model (aiperf.audit): `verdict` is the weights'
        (the master checks it), `audited_images_per_second` the model's steps timed on one device of
        `auditor_hardware` (0: not timed). The reply is the recorded audit, with the final verdict.
        `node`: a node audit of a drawn model (any state; verdict "no checkpoint"), with the node's inventory."""
        req = pb.RecordAuditRequest(
            model_id=model_id, has_audited_accuracy=audited_accuracy is not None,
            audited_accuracy=audited_accuracy or 0.0, architecture_ok=architecture_ok, verdict=verdict,
            auditor_host=auditor_host, validation_images=validation_images, detail=clip_text(detail, MAX_REASON_CHARS),
            audited_images_per_second=audited_images_per_second, auditor_hardware=auditor_hardware,
            has_retrained_accuracy=retrained_accuracy is not None, retrained_accuracy=retrained_accuracy or 0.0,
        )
        if node is not None:  # a node audit: the node's inventory with it
            req.node_audit, req.node_cpu_model, req.node_cpus = True, node.cpu_model, int(node.cpus)
            req.node_accelerators.extend(pb.Accelerator(model=a.model, uuid=a.uuid, pci_bus_id=a.pci_bus_id,
                                                        memory_bytes=int(a.memory_bytes)) for a in node.accelerators)
        reply: pb.RecordAuditResponse = self._call("RecordAudit", self._stub.RecordAudit, req)
        return reply.audit

    def list_audits(self, run_id: int = 0) -> pb.ListAuditsResponse:
        req = pb.ListAuditsRequest(run_id=run_id)
        reply: pb.ListAuditsResponse = self._call("ListAudits", self._stub.ListAudits, req, retry=True)
        return reply
