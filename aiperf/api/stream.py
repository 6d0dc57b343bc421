"""The Connect multiplexer: a worker's heartbeats and progress reports on one stream.

`WorkerStream` sends each message on one long-lived Connect stream and
hands every caller its own reply (the master answers once per message, in
order). `WorkerClient.connect()` opens one; `WorkerClient.heartbeat` and
`report_progress` ride one of their own per worker.

A stream carries one worker's credential in its metadata (the master refuses a
message naming another worker with PERMISSION_DENIED and keeps the stream
open). The credential is looked up for the worker the message names when the
stream opens; a message whose worker's credential differs from the open
stream's (the worker registered anew) ends that stream and opens another.
"""

from __future__ import annotations

import collections
import logging
import queue
import threading
from typing import Any, Callable, Iterator

import grpc

from aiperf.api import aiperf_pb2 as pb
from aiperf.api import aiperf_pb2_grpc as pb_grpc
from aiperf.api.calls import CREDENTIAL_METADATA, DEFAULT_TIMEOUT_S, ApiError, api_error, with_retries

log = logging.getLogger(__name__)

_CODE_BY_NUMBER = {c.value[0]: c for c in grpc.StatusCode}


def progress_report(
    worker_id: int,
    model_id: int,
    seq: int,
    images_trained: int,
    images_validated: int,
    epoch: int,
    worker_flops: int,
    val_accuracy: float | None = None,
    weights_sha256: str = "",
) -> pb.ProgressReport:
    """The ProgressReport message of one report (see WorkerClient.report_progress)."""
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
        weights_sha256=weights_sha256,
    )


class _Pending:
    """One message waiting for its reply."""

    __slots__ = ("done", "reply", "error")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.reply: pb.MasterMessage | None = None
        self.error: ApiError | None = None


class _OpenStream:
    def __init__(self, call: Any, requests: "queue.SimpleQueue[pb.WorkerMessage | None]", credential: str) -> None:
        self.call = call
        self.requests = requests
        self.credential = credential  # sent in the stream's metadata
        self.waiting: collections.deque[_Pending] = collections.deque()


class WorkerStream:
    """Heartbeats and progress reports over one Connect stream.

    Each call blocks until the master's reply (one per message, in order) and
    raises ApiError like the other calls: a refused message with the status
    code of the refusal; a broken stream (master restarting, network) with
    its transport code, after which the next call opens a new stream. Transient
    failures are retried as the unary calls are; both calls are idempotent.
    Thread-safe: a heartbeat thread and a progress sender can share one.
    """

    def __init__(self, stub: pb_grpc.WorkerServiceStub, metadata: tuple[tuple[str, str], ...],
                 timeout_s: float = DEFAULT_TIMEOUT_S, retries: int = 3,
                 credential: Callable[[int], str] | None = None) -> None:
        self._stub = stub
        self._metadata = metadata
        self._credential = credential or (lambda _worker_id: "")  # worker id -> its credential
        self.timeout_s = timeout_s
        self.retries = retries
        self._lock = threading.Lock()
        self._open: _OpenStream | None = None
        self._closed = False

    def heartbeat(self, worker_id: int, model_id: int = 0, leaving: bool = False) -> pb.HeartbeatResponse:
        """As WorkerClient.heartbeat."""
        msg = pb.WorkerMessage(heartbeat=pb.HeartbeatRequest(worker_id=worker_id, model_id=model_id,
                                                             leaving=leaving))
        return self._retrying("Heartbeat", msg, worker_id).heartbeat

    def goodbye(self, worker_id: int, timeout_s: float) -> bool:
        """The last heartbeat of a worker that stops, `leaving`: the master counts it lost at once.
        Best effort, waiting `timeout_s` at most (a master gone must not hold the stop); True when sent."""
        sent = threading.Event()

        def send() -> None:
            try:
                self.heartbeat(worker_id, leaving=True)
                sent.set()
            except ApiError as exc:
                log.info("event=goodbye_unsent code=%s", exc.code.name)
            except ValueError:  # the channel was closed under it, after the timeout: nothing to send on
                log.info("event=goodbye_unsent reason=channel_closed")

        threading.Thread(target=send, name="aiperf-goodbye", daemon=True).start()
        return sent.wait(timeout_s)

    def report_progress(self, worker_id: int, model_id: int, seq: int, images_trained: int, images_validated: int,
                        epoch: int, worker_flops: int, val_accuracy: float | None = None,
                        weights_sha256: str = "") -> pb.ProgressAck:
        """As WorkerClient.report_progress."""
        report = progress_report(worker_id, model_id, seq, images_trained, images_validated, epoch,
                                 worker_flops, val_accuracy, weights_sha256)
        return self._retrying("ReportProgress", pb.WorkerMessage(progress=report), worker_id).progress

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
    def _retrying(self, method: str, msg: pb.WorkerMessage, worker_id: int) -> pb.MasterMessage:
        return with_retries(f"Connect.{method}", self.retries + 1,
                            lambda: self._exchange(method, msg, self._credential(worker_id)), log)

    def _start(self, credential: str) -> _OpenStream:
        requests: queue.SimpleQueue[pb.WorkerMessage | None] = queue.SimpleQueue()

        def messages() -> Iterator[pb.WorkerMessage]:
            while (m := requests.get()) is not None:
                yield m

        metadata = self._metadata + (((CREDENTIAL_METADATA, credential),) if credential else ())
        stream = _OpenStream(self._stub.Connect(messages(), metadata=metadata), requests, credential)
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
            error = api_error(exc, "Connect")
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

    def _exchange(self, method: str, msg: pb.WorkerMessage, credential: str) -> pb.MasterMessage:
        pending = _Pending()
        with self._lock:
            if self._closed:
                raise ApiError(grpc.StatusCode.CANCELLED, "the stream is closed", method)
            if self._open is not None and self._open.credential != credential:
                # the worker registered anew: half-close the old stream (the master still
                # answers what was sent on it) and open one with the new credential
                self._open.requests.put(None)
                self._open = None
            if self._open is None:
                self._open = self._start(credential)
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
