"""What every call to the master shares: its time limit, its error and its retry rule.

Used by the typed clients (client.py) and the Connect stream (stream.py).
"""

from __future__ import annotations

import logging
from typing import Callable, TypeVar

import grpc
import tenacity

T = TypeVar("T")

DEFAULT_TIMEOUT_S = 15.0
# Metadata of every worker call after Register: the per-worker credential Register returned.
CREDENTIAL_METADATA = "aiperf-worker-credential"
TRANSIENT_CODES = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})
# How the master's RESOURCE_EXHAUSTED for its database's full disk begins: unlike a message
# too large (also RESOURCE_EXHAUSTED), it passes once there is room again.
DATABASE_FULL = "database full"


class ApiError(Exception):
    """A failed call: `code` is the grpc.StatusCode, `details` the master's message."""

    def __init__(self, code: grpc.StatusCode, details: str, method: str = "") -> None:
        super().__init__(f"{method}: {code.name}: {details}" if method else f"{code.name}: {details}")
        self.code = code
        self.details = details
        self.method = method


def api_error(exc: grpc.RpcError, method: str) -> ApiError:
    """The ApiError of a failed gRPC call."""
    code = exc.code() if hasattr(exc, "code") else grpc.StatusCode.UNKNOWN
    details = exc.details() if hasattr(exc, "details") else str(exc)
    return ApiError(code, details or "", method)


def is_transient(exc: BaseException) -> bool:
    """True for a failure that may pass by itself: the master or its database unavailable,
    a deadline, the database's disk full."""
    if not isinstance(exc, ApiError):
        return False
    return exc.code in TRANSIENT_CODES or (
        exc.code == grpc.StatusCode.RESOURCE_EXHAUSTED and exc.details.startswith(DATABASE_FULL))


def with_retries(method: str, attempts: int, once: Callable[[], T], log: logging.Logger) -> T:
    """once(), again after transient failures (backoff 0.2 s doubling to 5 s), at most `attempts` times.

    Retries are logged on the caller's `log` (the CLI silences the client's own logger).
    tenacity rather than the channel's service-config retry policy: gRPC cannot retry
    DEADLINE_EXCEEDED (the deadline bounds every attempt together), caps attempts at 5
    and retries silently, where each retry here is logged."""

    def logged(state: tenacity.RetryCallState) -> None:
        # tenacity calls this only after a failed attempt, and `is_transient` retries only ApiErrors
        assert state.outcome is not None
        exc = state.outcome.exception()
        assert isinstance(exc, ApiError)
        log.warning("event=retry method=%s code=%s attempt=%d", method, exc.code.name, state.attempt_number)

    retrying = tenacity.Retrying(
        stop=tenacity.stop_after_attempt(max(1, attempts)), wait=tenacity.wait_exponential(multiplier=0.2, max=5.0),
        retry=tenacity.retry_if_exception(is_transient), before_sleep=logged, reraise=True)
    return retrying(once)
