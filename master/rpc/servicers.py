"""The gRPC servicers: thin adapters between protobuf and the Master.

Each handler converts its request (master/rpc/conversions.py), calls one
`Master` method and converts the reply; it neither reads the store nor
decides anything. The handlers run on the server's event loop; a body that may
touch the database runs on the servicer's thread pool. A worker call's
credential (metadata `aiperf-worker-credential`) is read here and handed to the
Master as a plain string; the Master decides whether it is the named worker's.

No input gets UNKNOWN. Every request is checked against its bounds
(aiperf/api/bounds.py) before anything reads it; an undecodable payload
arrives as `Undecodable` (see `decoder`) and is refused. Store and validation
errors become their gRPC status codes; OverflowError, RecursionError and
ValueError from an extreme value INVALID_ARGUMENT; the database's outage UNAVAILABLE (its
disk full: RESOURCE_EXHAUSTED, details starting "database full"); anything else INTERNAL,
with its traceback logged. On the Connect stream each refused message gets
an error reply of its own and the stream lives on.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from concurrent.futures import Executor
from typing import Any, AsyncIterator, Callable, NoReturn, TypeVar

import grpc

from aiperf.api import aiperf_pb2 as pb
from aiperf.api import aiperf_pb2_grpc as pb_grpc
from aiperf.api import bounds
from aiperf.api.enums import API_VERSION, MODEL_STATE_VALUES, RUN_STATE_VALUES, WORKER_STATE_VALUES
from master.core import weight_lineage
from master.core.master import Master
from master.rpc import conversions as cv
from master.rpc.garbage_collector import StreamMemory
from master.rpc.tokens import worker_credential
from master.store.errors import (
    AlreadyExists,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    StorageFull,
    StoreError,
    Unavailable,
)
from master.store.records import RunRecord

log = logging.getLogger(__name__)

T = TypeVar("T")

_CODES: dict[type[StoreError], grpc.StatusCode] = {
    NotFound: grpc.StatusCode.NOT_FOUND,
    PermissionDenied: grpc.StatusCode.PERMISSION_DENIED,
    FailedPrecondition: grpc.StatusCode.FAILED_PRECONDITION,
    InvalidArgument: grpc.StatusCode.INVALID_ARGUMENT,
    AlreadyExists: grpc.StatusCode.ALREADY_EXISTS,
    Unavailable: grpc.StatusCode.UNAVAILABLE,
    StorageFull: grpc.StatusCode.RESOURCE_EXHAUSTED,
}
_OUTAGES = (Unavailable, StorageFull)  # the store logs an outage once, not each call it fails


def _status(exc: StoreError) -> grpc.StatusCode:
    for cls, code in _CODES.items():
        if isinstance(exc, cls):
            return code
    return grpc.StatusCode.INTERNAL


class Undecodable:
    """What a request that does not parse as its message type arrives as."""

    __slots__ = ("type_name", "error")

    def __init__(self, type_name: str, error: str) -> None:
        self.type_name, self.error = type_name, error


def decoder(message: Any) -> Callable[[bytes], Any]:
    """A request deserializer that never raises: gRPC would answer a raising one
    with UNKNOWN; the handler refuses an `Undecodable` with INVALID_ARGUMENT."""
    parse = message.FromString
    name = message.DESCRIPTOR.name

    def decode(data: bytes) -> Any:
        try:
            return parse(data)
        except Exception as exc:  # noqa: BLE001 - DecodeError, and whatever else a parser may raise
            return Undecodable(name, str(exc) or type(exc).__name__)

    return decode


_HANDLER_KINDS = {
    (False, False): grpc.unary_unary_rpc_method_handler,
    (False, True): grpc.unary_stream_rpc_method_handler,
    (True, False): grpc.stream_unary_rpc_method_handler,
    (True, True): grpc.stream_stream_rpc_method_handler,
}


def add_to_server(server: grpc.aio.Server, servicer: Any, service_name: str) -> None:
    """Serve every method of the service (aiperf.proto) with `decoder` for its requests:
    what the generated add_*_to_server does, but undecodable payloads reach the handler."""
    service = pb.DESCRIPTOR.services_by_name[service_name]
    handlers = {}
    for method in service.methods:
        make = _HANDLER_KINDS[(method.client_streaming, method.server_streaming)]
        handlers[method.name] = make(
            getattr(servicer, method.name),
            request_deserializer=decoder(getattr(pb, method.input_type.name)),
            response_serializer=getattr(pb, method.output_type.name).SerializeToString,
        )
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service.full_name, handlers),))
    server.add_registered_method_handlers(service.full_name, handlers)


def checked(request: Any) -> Any:
    """The request, when it decoded and is inside its bounds; else BoundsError."""
    if isinstance(request, Undecodable):
        raise bounds.BoundsError(f"undecodable {request.type_name}: {request.error[:200]}")
    bounds.check(request)
    return request


def refusal(exc: Exception, method: str) -> tuple[grpc.StatusCode, str]:
    """The status code and message a failed call ends with (logged; a traceback for INTERNAL)."""
    if isinstance(exc, _OUTAGES):
        return _status(exc), str(exc)
    if isinstance(exc, StoreError):
        code, message = _status(exc), str(exc)
    elif isinstance(exc, bounds.BoundsError):
        code, message = grpc.StatusCode.INVALID_ARGUMENT, str(exc)
    elif isinstance(exc, (OverflowError, RecursionError, ValueError)):
        # an extreme value the bounds let through: the caller's, but worth a traceback
        log.warning("event=rpc_value_error method=%s", method, exc_info=exc)
        code, message = grpc.StatusCode.INVALID_ARGUMENT, f"value out of range: {type(exc).__name__}: {exc}"[:500]
    else:
        log.error("event=rpc_internal_error method=%s", method, exc_info=exc)
        return grpc.StatusCode.INTERNAL, f"internal error ({type(exc).__name__}); see the master's log"
    log.info("event=rpc_error method=%s code=%s message=%r", method, code.name, message)
    return code, message


def rpc(fn: Callable[[Any, Any], T]) -> Callable[[Any, Any, grpc.aio.ServicerContext[Any, Any]], Any]:
    """Serve a synchronous method as an asyncio gRPC handler: the request's
    bounds are checked and the body runs on the servicer's thread pool (it may
    touch the database); every error becomes a status code (`refusal`)."""

    def body(self: Any, request: Any) -> T:
        return fn(self, checked(request))

    @functools.wraps(fn)
    async def wrapper(self: Any, request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> T:
        return await _unary(self, fn.__name__, context, body, self, request)

    return wrapper


def worker_rpc(fn: Callable[[Any, Any, str], T]) -> Callable[[Any, Any, grpc.aio.ServicerContext[Any, Any]], Any]:
    """As `rpc`, for a worker call after Register: the body also gets the
    call's worker credential (empty when the metadata has none)."""

    def body(self: Any, request: Any, credential: str) -> T:
        return fn(self, checked(request), credential)

    @functools.wraps(fn)
    async def wrapper(self: Any, request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> T:
        credential = worker_credential(context.invocation_metadata())
        return await _unary(self, fn.__name__, context, body, self, request, credential)

    return wrapper


async def _unary(servicer: Any, method: str, context: grpc.aio.ServicerContext[Any, Any],
                 body: Callable[..., T], *args: Any) -> T:
    """Run a unary call's body on the servicer's pool and count how the call ended."""
    try:
        reply = await asyncio.get_running_loop().run_in_executor(servicer.pool, body, *args)
        _handled(servicer, method, "OK")
        return reply
    except asyncio.CancelledError:  # the caller went away or its deadline passed
        remaining = context.time_remaining()  # None: the call had no deadline
        expired = remaining is not None and remaining <= 0.0
        _handled(servicer, method, "DEADLINE_EXCEEDED" if expired else "CANCELLED")
        raise
    except Exception as exc:  # noqa: BLE001 - every failure ends the call with a status code
        code, message = refusal(exc, method)
    _handled(servicer, method, code.name)
    await _abort(context, code, message)


def _handled(servicer: Any, method: str, code: str) -> None:
    """Count a finished unary call (aiperf_grpc_server_handled_total; the Connect stream's
    messages are counted as the reports and heartbeats they carry)."""
    servicer.m.metrics.grpc_handled.labels(servicer.SERVICE, method, code).inc()


async def _abort(context: grpc.aio.ServicerContext[Any, Any], code: grpc.StatusCode, message: str) -> NoReturn:
    """End the call with the status code and message."""
    await context.abort(code, message)
    raise AssertionError("unreachable")  # context.abort raises


def _error_message(exc: Exception) -> pb.MasterMessage:
    """The Connect reply to a refused message (the stream lives on)."""
    code, text = refusal(exc, "Connect")
    return pb.MasterMessage(error=pb.MessageError(code=code.value[0], message=text))


class WorkerServicer(pb_grpc.WorkerServiceServicer):
    SERVICE = "aiperf.v1.WorkerService"

    def __init__(self, master: Master, pool: Executor, stream_memory: StreamMemory | None = None) -> None:
        self.m = master
        self.pool = pool
        self.stream_memory = stream_memory or StreamMemory()  # the closed streams, whose memory is given back
        # (the run last asked, the interval, a heartbeat reply for it without master_time and
        # worker_state): every heartbeat carries the current run; copying a finished message
        # costs a third of building one (an attribute swap, atomic without a lock)
        self._beat_template: tuple[RunRecord | None, float, pb.MasterMessage] | None = None

    def _beat_reply(self, run: RunRecord | None, state: str) -> pb.MasterMessage:
        """The Connect reply to a heartbeat: the current run, the master's time, the worker's state."""
        interval = self.m.heartbeat_interval_s
        cached = self._beat_template
        if cached is None or cached[0] is not run or cached[1] != interval:
            template = pb.MasterMessage(heartbeat=pb.HeartbeatResponse(
                has_run=run is not None, run=cv.run_info(run) if run is not None else pb.RunInfo(),
                heartbeat_interval_s=interval))
            cached = self._beat_template = (run, interval, template)
        reply = pb.MasterMessage()
        reply.CopyFrom(cached[2])
        beat = reply.heartbeat
        beat.master_time = self.m.clock()
        beat.worker_state = WORKER_STATE_VALUES[state]
        return reply

    @rpc
    def Register(self, request: pb.RegisterRequest) -> pb.RegisterResponse:
        reg = self.m.register(cv.worker_input(request), request.credential)
        run = self.m.current_run()
        return pb.RegisterResponse(
            worker_id=reg.worker.id, heartbeat_interval_s=self.m.heartbeat_interval_s, has_run=run is not None,
            run=cv.run_info(run) if run is not None else pb.RunInfo(), master_time=self.m.clock(),
            api_version=API_VERSION, abandoned_model_ids=reg.abandoned_model_ids, credential=reg.credential,
        )

    def _beat(self, worker_id: int, credential: str, leaving: bool = False) -> pb.MasterMessage:
        return self._beat_reply(*self.m.heartbeat(worker_id, credential=credential, leaving=leaving))

    async def _report(self, report: pb.ProgressReport, credential: str) -> pb.MasterMessage:
        result = await self.m.report_progress(cv.progress_report(report), credential=credential, pool=self.pool)
        reply = pb.MasterMessage()
        reply.progress.SetInParent()  # the oneof is set even when every field is at its default
        cv.progress_ack(result, self.m.current_run(), into=reply.progress)
        return reply

    @worker_rpc
    def GetHistory(self, request: pb.GetHistoryRequest, credential: str) -> pb.GetHistoryResponse:
        return cv.history_message(self.m.history(request.worker_id, request.run_id, request.since_model_id,
                                                 request.limit, ranking=not request.without_ranking,
                                                 credential=credential))

    @worker_rpc
    def SubmitModel(self, request: pb.SubmitModelRequest, credential: str) -> pb.SubmitModelResponse:
        model = self.m.submit_model(cv.model_submission(request), credential=credential)
        run = self.m.current_run()
        return pb.SubmitModelResponse(
            model_id=model.id, state=MODEL_STATE_VALUES[model.state],
            flops_per_train_image=model.flops_per_train_image, flops_per_eval_image=model.flops_per_eval_image,
            init_seed=weight_lineage.init_seed(run if run and run.id == model.run_id else self.m.resolve_run(
                model.run_id), model.id),
        )

    @worker_rpc
    def GetHyperparameterHistory(self, request: pb.GetHyperparameterHistoryRequest, credential: str
                                 ) -> pb.GetHyperparameterHistoryResponse:
        return cv.hyperparameter_history_message(
            *self.m.hyperparameter_history(request.worker_id, request.run_id, credential=credential))

    async def Connect(self, request_iterator: AsyncIterator[pb.WorkerMessage],
                      context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[pb.MasterMessage]:
        # One reply per message, in order; a refused message (undecodable, out of
        # bounds, refused by the master) gets an error reply and the stream stays open.
        # The stream's credential comes with its metadata; every message must name
        # the worker it belongs to.
        credential = worker_credential(context.invocation_metadata())
        try:
            async for message in request_iterator:
                yield await self.answer(message, credential)
        finally:
            self.stream_memory.closed()

    async def answer(self, message: Any, credential: str) -> pb.MasterMessage:
        """The Connect reply to one message (decoded or `Undecodable`); never raises."""
        reply = self.answer_now(message, credential)
        return reply if reply is not None else await self.answer_later(message, credential)

    def answer_now(self, message: Any, credential: str) -> pb.MasterMessage | None:
        """The Connect reply when it needs no waiting: a refusal, or a heartbeat all in memory
        (nearly always: safe on the event loop); None when `answer` must wait for it."""
        try:
            if checked(message).WhichOneof("body") != "heartbeat":  # the bounds refuse a message with neither
                return None
            beat = self.m.heartbeat_in_memory(message.heartbeat.worker_id, credential=credential,
                                              leaving=message.heartbeat.leaving)
            return self._beat_reply(*beat) if beat is not None else None
        except Exception as exc:  # noqa: BLE001 - answered on the stream, which lives on
            return _error_message(exc)

    async def answer_later(self, message: Any, credential: str) -> pb.MasterMessage:
        """A checked message's reply that needs the database: a report, or a heartbeat on the pool
        (e.g. thousands of workers joining a run that just started)."""
        try:
            if message.WhichOneof("body") == "heartbeat":
                return await asyncio.get_running_loop().run_in_executor(
                    self.pool, self._beat, message.heartbeat.worker_id, credential, message.heartbeat.leaving)
            return await self._report(message.progress, credential)
        except Exception as exc:  # noqa: BLE001 - answered on the stream, which lives on
            return _error_message(exc)

    @worker_rpc
    def FinishModel(self, request: pb.FinishModelRequest, credential: str) -> pb.FinishModelResponse:
        model, run_state, released = self.m.finish_model(cv.model_finish(request), credential=credential)
        return pb.FinishModelResponse(model=cv.model_message(model, include_graph=False),
                                      delete_checkpoints=[pb.CheckpointToDelete(model_id=mid, uri=uri)
                                                          for mid, uri in released],
                                      run_state=RUN_STATE_VALUES[run_state])

    @worker_rpc
    def SendResourceSamples(self, request: pb.SendResourceSamplesRequest,
                            credential: str) -> pb.SendResourceSamplesResponse:
        return pb.SendResourceSamplesResponse(stored=self.m.send_resource_samples(
            request.worker_id, cv.resource_samples(request), credential=credential))


class ControlServicer(pb_grpc.ControlServiceServicer):
    SERVICE = "aiperf.v1.ControlService"
    def __init__(self, master: Master, pool: Executor) -> None:
        self.m = master
        self.pool = pool

    @rpc
    def StartRun(self, request: pb.StartRunRequest) -> pb.StartRunResponse:
        return pb.StartRunResponse(run=cv.run_info(self.m.start_run(cv.run_spec(request))))

    @rpc
    def StopRun(self, request: pb.StopRunRequest) -> pb.StopRunResponse:
        return pb.StopRunResponse(run=cv.run_info(self.m.stop_run(request.run_id, request.abort, request.reason)))

    @rpc
    def GetRunStatus(self, request: pb.GetRunStatusRequest) -> pb.RunStatus:
        return cv.run_status_message(self.m.run_status(request.run_id))

    @rpc
    def GetScoreboard(self, request: pb.GetScoreboardRequest) -> pb.Scoreboard:
        return cv.scoreboard_message(self.m.scoreboard(request.run_id))

    @rpc
    def GetTimeline(self, request: pb.GetTimelineRequest) -> pb.Timeline:
        return cv.timeline_message(self.m.timeline(request.run_id, request.max_points, request.buckets))

    @rpc
    def ListModels(self, request: pb.ListModelsRequest) -> pb.ListModelsResponse:
        page = self.m.list_models(request.run_id, cv.model_state(request.state), request.limit, request.offset)
        return cv.with_init_seeds(cv.model_page_message(page, request.include_graph), self.m.resolve_run)

    @rpc
    def ListRuns(self, request: pb.ListRunsRequest) -> pb.ListRunsResponse:
        return cv.run_page_message(self.m.roster.runs(request.limit, request.offset))

    @rpc
    def ListWorkers(self, request: pb.ListWorkersRequest) -> pb.ListWorkersResponse:
        page = self.m.roster.workers(cv.worker_state(request.state), request.run_id, request.limit, request.offset)
        return cv.worker_page_message(page)

    @rpc
    def RecordAudit(self, request: pb.RecordAuditRequest) -> pb.RecordAuditResponse:
        return pb.RecordAuditResponse(audit=cv.audit_message(self.m.audits.record(cv.audit_submission(request))))

    @rpc
    def ListAudits(self, request: pb.ListAuditsRequest) -> pb.ListAuditsResponse:
        run = self.m.resolve_run(request.run_id)
        return pb.ListAuditsResponse(run_id=run.id, audits=[cv.audit_message(a) for a in self.m.audits.of_run(run.id)],
                                     node_audit_model_ids=sorted(self.m.audits.drawn(run).values()))
