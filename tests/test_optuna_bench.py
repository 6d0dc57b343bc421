"""benchmarks/optuna_bench.py's closed loop, with stand-in writes (Optuna itself is only in the
`bench` extra; the comparison runs in `make bench`)."""

from __future__ import annotations

import threading
import time

import pytest

from benchmarks.optuna_bench import closed_loop


def test_every_client_keeps_one_write_in_flight_and_only_the_window_is_counted():
    in_flight, most = [0], [0]
    lock = threading.Lock()
    steps: dict[int, list[int]] = {}

    def make(k: int):
        def write(step: int) -> None:
            with lock:
                in_flight[0] += 1
                most[0] = max(most[0], in_flight[0])
                steps.setdefault(k, []).append(step)
            time.sleep(0.01)
            with lock:
                in_flight[0] -= 1
        return write

    rate, p50, p99, client_cpu, _ = closed_loop([make(k) for k in range(4)], warmup_s=0.1, window_s=0.4)
    assert most[0] <= 4  # closed loop: never more than one write per client
    assert all(s == list(range(1, len(s) + 1)) for s in steps.values())  # each client's steps in order
    assert p50 >= 0.01 and p99 >= p50
    assert 0.0 <= client_cpu < 1.0  # the clients mostly wait
    # 4 clients at <= 100 writes/s each; at least one write each in the window
    assert 4 / 0.4 <= rate <= 4 * 100 * 1.05


def test_a_failing_client_fails_the_measurement():
    def bad(step: int) -> None:
        raise ConnectionError("refused")

    with pytest.raises(RuntimeError, match="1 clients failed.*refused"):
        closed_loop([bad, lambda step: time.sleep(0.001)], warmup_s=0.0, window_s=0.1)


def test_the_async_loop_counts_alike_and_fails_alike():
    import asyncio

    from benchmarks.optuna_bench import closed_loop_async

    async def ok(step: int) -> None:
        await asyncio.sleep(0.01)

    async def bad(step: int) -> None:
        raise ConnectionError("stream ended")

    rate, p50, p99, _, _ = asyncio.run(closed_loop_async([ok, ok, ok], warmup_s=0.05, window_s=0.3))
    assert 3 / 0.3 <= rate <= 3 * 100 * 1.05 and 0.01 <= p50 <= p99
    with pytest.raises(RuntimeError, match="1 clients failed.*stream ended"):
        asyncio.run(closed_loop_async([bad, ok], warmup_s=0.0, window_s=0.1))
