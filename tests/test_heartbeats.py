"""The heartbeat flush period: a large fleet's beats are written less often (master/core/heartbeats.py)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from master.core.heartbeats import FLUSH_ROWS_PER_S, Heartbeats


def _beating(n: int) -> Heartbeats:
    h = Heartbeats([], 0.0)
    for w in range(1, n + 1):
        h.beat(w, 1.0)
    return h


def test_a_small_fleet_is_flushed_at_the_shortest_period_and_10000_workers_every_20_s():
    assert _beating(0).flush_period(5.0) == 5.0
    assert _beating(2_000).flush_period(5.0) == 5.0
    assert _beating(10_000).flush_period(5.0) == 20.0  # 10,000 rows at 500 a second


@given(n=st.integers(0, 30_000), shortest=st.floats(0.1, 10.0))
def test_the_flush_writes_at_most_its_rate_and_never_sooner_than_the_shortest_period(n: int, shortest: float):
    period = _beating(n).flush_period(shortest)
    assert period >= shortest
    assert n / period <= FLUSH_ROWS_PER_S * (1 + 1e-9)


def test_written_beats_no_longer_count():
    h = _beating(10_000)
    h.take_unwritten()
    assert h.flush_period(5.0) == 5.0
