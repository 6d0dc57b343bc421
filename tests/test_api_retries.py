"""The client's retry rule (aiperf/api/calls.py with_retries, on tenacity): transient
codes retried with a doubling wait up to the attempts, each retry logged; anything
else at once."""

from __future__ import annotations

import logging

import grpc
import pytest
from hypothesis import given
from hypothesis import strategies as st

from aiperf.api.calls import TRANSIENT_CODES, ApiError, with_retries


@given(failures=st.integers(0, 6), attempts=st.integers(1, 5),
       code=st.sampled_from(sorted(grpc.StatusCode, key=lambda c: c.name)))
def test_transient_failures_are_retried_within_the_attempts(failures, attempts, code):
    waits: list[float] = []
    calls = []

    def once() -> str:
        calls.append(1)
        if len(calls) <= failures:
            raise ApiError(code, "no")
        return "ok"

    log = logging.getLogger("test.retries")
    transient = code in TRANSIENT_CODES
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("time.sleep", waits.append)
        if failures == 0 or (transient and failures < attempts):
            assert with_retries("M", attempts, once, log) == "ok"
            assert len(calls) == failures + 1
        else:
            with pytest.raises(ApiError):
                with_retries("M", attempts, once, log)
            assert len(calls) == (min(failures, attempts) if transient else 1)
    assert waits == [min(0.2 * 2**i, 5.0) for i in range(len(calls) - 1)]


def test_each_retry_is_logged_on_the_callers_logger(monkeypatch, caplog):
    monkeypatch.setattr("time.sleep", lambda s: None)
    errors = [ApiError(grpc.StatusCode.UNAVAILABLE, "down")]

    def once() -> int:
        if errors:
            raise errors.pop()
        return 7

    with caplog.at_level(logging.WARNING, logger="test.retries"):
        assert with_retries("GetRunStatus", 3, once, logging.getLogger("test.retries")) == 7
    assert "event=retry method=GetRunStatus code=UNAVAILABLE attempt=1" in caplog.text
