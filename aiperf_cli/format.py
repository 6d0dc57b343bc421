"""Numbers as a person types them (durations), and the CLI's names for aiperf.units' writers."""

from __future__ import annotations

import re

from aiperf import units
from aiperf.limits import MAX_RUN_DURATION_S

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
# The longest run the CLI starts is the API's (a month): anything longer is a typo, and absurd
# values (1e300 s) would overflow the master's arithmetic on deadlines.


def format_flops(value: float | None, unit: str = "FLOPS") -> str:
    """2.5e15 -> '2.50 PFLOPS' (aiperf.units.si)."""
    return units.si(value, unit)


def format_duration(seconds: float | None) -> str:
    """5400.7 -> '1:30:00' (aiperf.units.duration)."""
    return units.duration(seconds)


def parse_duration(text: str) -> float:
    """'1h', '90m', '1h30m', '3600', '2.5h' -> seconds, positive and at most 30 days; ValueError otherwise."""
    s = text.strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", s):
        value = float(s)
    else:
        parts = re.findall(r"(\d+(?:\.\d+)?)([smhd])", s)
        if not parts or "".join(n + u for n, u in parts) != s:
            raise ValueError(f"bad duration {_short(text)}: use e.g. 90s, 30m, 1h, 1h30m")
        value = sum(float(n) * _UNITS[u] for n, u in parts)
    if value <= 0:
        raise ValueError(f"bad duration {_short(text)}: must be positive")
    if not value <= MAX_RUN_DURATION_S:  # also inf: float() of 400 digits
        raise ValueError(f"bad duration {_short(text)}: at most 30d ({MAX_RUN_DURATION_S:.0f} s)")
    return value


def _short(text: str, keep: int = 40) -> str:
    """repr(text), cut in the middle when longer than `keep` characters (a message stays one short line)."""
    if len(text) <= keep:
        return repr(text)
    return repr(text[:keep // 2] + "..." + text[-keep // 2:]) + f" ({len(text)} characters)"
