"""The worker's calls that carry results: sent in order on a thread, retried through
master restarts and network drops (`Outbox`), and the retry rule they share."""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Any, Callable, TypeVar

import grpc
import tenacity

from aiperf.api.calls import is_transient
from aiperf.api.client import ApiError

log = logging.getLogger(__name__)
T = TypeVar("T")

TRANSIENT = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED,
                        grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL})


# Waits between retries to the master: 0.5, 1, 2, 4, 8, then 10 s (tests set it to none).
RETRY_WAIT: tenacity.wait.wait_base = tenacity.wait_exponential(multiplier=0.5, max=10)


def interruptible(stopping: threading.Event) -> Callable[[float], None]:
    """tenacity's sleep between retries, cut short when `stopping` is set."""
    def sleep(seconds: float) -> None:
        stopping.wait(seconds)
    return sleep


def call_until_done(call: Callable[[], T], stopping: threading.Event,
                    on_retry: Callable[[ApiError, float], None],
                    also: frozenset[grpc.StatusCode] = frozenset()) -> T:
    """``call()``, again after each transient error or one in `also` (``on_retry(error, delay)``,
    then a `RETRY_WAIT` that `stopping` cuts short).

    A permanent error, or any error once `stopping` is set, propagates.
    """
    retryable = TRANSIENT | also

    def worth_retrying(exc: BaseException) -> bool:
        # the database's full disk too: the reports stay here until the master has room
        return (isinstance(exc, ApiError) and (exc.code in retryable or is_transient(exc))
                and not stopping.is_set())

    def retried(state: tenacity.RetryCallState) -> None:
        # tenacity calls this after a failed attempt that `worth_retrying` took: an ApiError
        assert state.outcome is not None and state.next_action is not None
        exc = state.outcome.exception()
        assert isinstance(exc, ApiError)
        on_retry(exc, state.next_action.sleep)

    retrying = tenacity.Retrying(
        retry=tenacity.retry_if_exception(worth_retrying), wait=RETRY_WAIT, sleep=interruptible(stopping),
        reraise=True, before_sleep=retried)
    return retrying(call)


class Outbox:
    """Sends result-carrying calls in order on a thread, retrying transient errors.

    Progress reports are idempotent on (model, seq), so a retry after a lost
    reply is safe. A permanent error (the model was abandoned, the run is over)
    is logged and the call dropped: retrying it cannot succeed.
    """

    def __init__(self, name: str = "outbox") -> None:
        self._queue: "queue.Queue[tuple[str, Callable[[], Any]] | None]" = queue.Queue()
        self._stopping = threading.Event()
        self.sent = 0
        self.dropped: list[tuple[str, str]] = []
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def put(self, what: str, call: Callable[[], Any]) -> None:
        self._queue.put((what, call))

    def _loop(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                self._queue.task_done()
                return
            what, call = item
            try:
                call_until_done(call, self._stopping, lambda exc, delay: log.warning(
                    "event=retry what=%s code=%s in=%.1fs", what, exc.code.name, delay))
                self.sent += 1
            except ApiError as exc:
                log.warning("event=dropped what=%s error=%s", what, exc)
                self.dropped.append((what, str(exc)))
            except Exception as exc:  # noqa: BLE001 - a bug in one call must not stop the rest
                log.exception("event=dropped what=%s", what)
                self.dropped.append((what, repr(exc)))
            self._queue.task_done()

    def flush(self, timeout_s: float = 60.0) -> bool:
        """Wait until everything queued so far was sent (or dropped)."""
        deadline = time.monotonic() + timeout_s
        while self._queue.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.05)
        return not self._queue.unfinished_tasks

    def close(self, timeout_s: float = 60.0) -> None:
        self.flush(timeout_s)
        self._stopping.set()
        self._queue.put(None)
        self._thread.join(timeout=5)
