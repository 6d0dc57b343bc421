"""A master clock the tests set by hand (`serve(MasterConfig(..., clock=FakeClock()))`)."""

from __future__ import annotations


class FakeClock:
    """Returns `t`, which a test moves forward itself."""

    def __init__(self, t: float = 1_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t
