"""The gRPC servicers: thin adapters between protobuf and the Master.

Each handler converts its request (master/conversions.py), calls one
`Master` method and converts the reply; it neither reads the store nor
decides anything. Store and validation errors become gRPC status codes with
their message. The handlers run on the server's event loop; a body that may
touch the database runs on the servicer's thread pool. A worker call's
credential (metadata `aiperf-worker-credential`) is read here and handed to the
Master as a plain string; the Master decides whether it is the named worker's.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
from concurrent.futures import Executor
from typing import Any, AsyncIterator, Callable, NoReturn, TypeVar

import grpc

from aiperf.api import aiperf_pb2 as pb
from aiperf.api import aiperf_pb2_grpc as pb_grpc
from aiperf.api.calls import CREDENTIAL_METADATA
from aiperf.api.enums import API_VERSION, MODEL_STATE_VALUES, RUN_STATE_VALUES, WORKER_STATE_VALUES
from master import conversions as cv
from master.master import Master
from master.store import (
    AlreadyExists,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    RunRecord,
    StoreError,
)

log = logging.getLogger(__name__)

T = TypeVar("T")

_CODES: dict[type[StoreError], grpc.StatusCode] = {
    NotFound: grpc.StatusCode.NOT_FOUND,
    PermissionDenied: grpc.StatusCode.PERMISSION_DENIED,
    FailedPrecondition: grpc.StatusCode.FAILED_PRECONDITION,
    InvalidArgument: grpc.StatusCode.INVALID_ARGUMENT,
    AlreadyExists: grpc.StatusCode.ALREADY_EXISTS,
}


def _status(exc: StoreError) -> grpc.StatusCode:
    for cls, code in _CODES.items():
        if isinstance(exc, cls):
            return code
    return grpc.StatusCode.INTERNAL


def rpc(fn: Callable[[Any, Any], T]) -> Callable[[Any, Any, grpc.aio.ServicerContext], Any]:
    """Serve a synchronous method as an asyncio gRPC handler: the body runs on
    the servicer's thread pool (it may touch the database), and store and
    validation errors become gRPC status codes with their message."""

    @functools.wraps(fn)
    async def wrapper(self: Any, request: Any, context: grpc.aio.ServicerContext) -> T:
        try:
            return await asyncio.get_running_loop().run_in_executor(self.pool, fn, self, request)
        except StoreError as exc:
            await _abort(context, fn.__name__, exc)

    return wrapper


def worker_rpc(fn: Callable[[Any, Any, str], T]) -> Callable[[Any, Any, grpc.aio.ServicerContext], Any]:
    """As `rpc`, for a worker call after Register: the body also gets the
    call's worker credential (empty when the metadata has none)."""

    @functools.wraps(fn)
    async def wrapper(self: Any, request: Any, context: grpc.aio.ServicerContext) -> T:
        credential = worker_credential(context.invocation_metadata())
        try:
            return await asyncio.get_running_loop().run_in_executor(self.pool, fn, self, request, credential)
        except StoreError as exc:
            await _abort(context, fn.__name__, exc)

    return wrapper


def worker_credential(metadata: Any) -> str:
    """The `aiperf-worker-credential` metadata value ("" when absent or not text)."""
    for key, value in metadata or ():
        if key == CREDENTIAL_METADATA:
            return value if isinstance(value, str) else ""
    return ""


async def _abort(context: grpc.aio.ServicerContext, method: str, exc: StoreError) -> NoReturn:
    """End the call with the error's status code and message (logged)."""
    log.info("event=rpc_error method=%s code=%s message=%r", method, _status(exc).name, str(exc))
    await context.abort(_status(exc), str(exc))
    raise AssertionError("unreachable")  # context.abort raises


class WorkerServicer(pb_grpc.WorkerServiceServicer):

    def __init__(self, master: Master, pool: Executor) -> None:
        self.m = master
        self.pool = pool
        self._lock = threading.Lock()
        self._run_message: tuple[RunRecord, pb.RunInfo] | None = None

    def _run_info(self, run: RunRecord) -> pb.RunInfo:
        """cv.run_info(run), kept for the last run asked (every heartbeat carries the current run)."""
        with self._lock:
            cached = self._run_message
        if cached is not None and cached[0] is run:
            return cached[1]
        msg = cv.run_info(run)
        with self._lock:
            self._run_message = (run, msg)
        return msg

    @rpc
    def Register(self, request: pb.RegisterRequest) -> pb.RegisterResponse:
        reg = self.m.register(cv.worker_input(request), request.credential)
        run = self.m.current_run()
        return pb.RegisterResponse(
            worker_id=reg.worker.id, heartbeat_interval_s=self.m.heartbeat_interval_s, has_run=run is not None,
            run=cv.run_info(run) if run is not None else pb.RunInfo(), master_time=self.m.clock(),
            api_version=API_VERSION, abandoned_model_ids=reg.abandoned_model_ids, credential=reg.credential,
        )

    def _beat(self, worker_id: int, credential: str) -> pb.HeartbeatResponse:
        run, state = self.m.heartbeat(worker_id, credential=credential)
        return pb.HeartbeatResponse(
            has_run=run is not None, run=self._run_info(run) if run is not None else pb.RunInfo(),
            master_time=self.m.clock(), heartbeat_interval_s=self.m.heartbeat_interval_s,
            worker_state=WORKER_STATE_VALUES[state],
        )

    async def _beat_async(self, worker_id: int, credential: str) -> pb.HeartbeatResponse:
        # on the loop when it is all in memory (nearly always); else on the pool,
        # e.g. thousands of workers joining a run that just started
        if self.m.heartbeat_is_in_memory(worker_id):
            return self._beat(worker_id, credential)
        return await asyncio.get_running_loop().run_in_executor(self.pool, self._beat, worker_id, credential)

    async def _report(self, report: pb.ProgressReport, credential: str) -> pb.ProgressAck:
        result = await self.m.report_progress(cv.progress_report(report), credential=credential)
        return cv.progress_ack(result, self.m.current_run())

    @worker_rpc
    def GetHistory(self, request: pb.GetHistoryRequest, credential: str) -> pb.GetHistoryResponse:
        return cv.history_message(self.m.history(request.worker_id, request.run_id, request.since_model_id,
                                                 request.limit, credential=credential))

    @worker_rpc
    def SubmitModel(self, request: pb.SubmitModelRequest, credential: str) -> pb.SubmitModelResponse:
        model = self.m.submit_model(cv.model_submission(request), credential=credential)
        return pb.SubmitModelResponse(
            model_id=model.id, state=MODEL_STATE_VALUES[model.state],
            flops_per_train_image=model.flops_per_train_image, flops_per_eval_image=model.flops_per_eval_image,
        )

    @worker_rpc
    def GetHyperparameterHistory(self, request: pb.GetHyperparameterHistoryRequest, credential: str
                                 ) -> pb.GetHyperparameterHistoryResponse:
        return cv.hyperparameter_history_message(
            *self.m.hyperparameter_history(request.worker_id, request.run_id, credential=credential))

    async def Connect(self, request_iterator: AsyncIterator[pb.WorkerMessage],
                      context: grpc.aio.ServicerContext) -> AsyncIterator[pb.MasterMessage]:
        # One reply per message, in order; a refused message gets an error
        # reply and the stream stays open. The stream's credential comes with its
        # metadata; every message must name the worker it belongs to.
        credential = worker_credential(context.invocation_metadata())
        async for message in request_iterator:
            kind = message.WhichOneof("body")
            try:
                if kind == "heartbeat":
                    reply = pb.MasterMessage(heartbeat=await self._beat_async(message.heartbeat.worker_id, credential))
                elif kind == "progress":
                    reply = pb.MasterMessage(progress=await self._report(message.progress, credential))
                else:
                    raise InvalidArgument("empty message: set heartbeat or progress")
            except StoreError as exc:
                log.info("event=rpc_error method=Connect.%s code=%s message=%r", kind, _status(exc).name, str(exc))
                reply = pb.MasterMessage(error=pb.MessageError(code=_status(exc).value[0], message=str(exc)))
            yield reply

    @worker_rpc
    def FinishModel(self, request: pb.FinishModelRequest, credential: str) -> pb.FinishModelResponse:
        model, run_state = self.m.finish_model(cv.model_finish(request), credential=credential)
        return pb.FinishModelResponse(model=cv.model_message(model, include_graph=False),
                                      run_state=RUN_STATE_VALUES[run_state])

    @worker_rpc
    def SendResourceSamples(self, request: pb.SendResourceSamplesRequest,
                            credential: str) -> pb.SendResourceSamplesResponse:
        return pb.SendResourceSamplesResponse(stored=self.m.send_resource_samples(
            request.worker_id, cv.resource_samples(request), credential=credential))


class ControlServicer(pb_grpc.ControlServiceServicer):
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
        return cv.model_page_message(page, request.include_graph)
