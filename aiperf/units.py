"""One way to write a number, for every table, chart and line a person reads.

Rates and counts get an SI prefix with their unit ("3.74 GFLOPS", "29.2 TFLOP"),
fractions are percentages ("12.3%"), durations hours:minutes:seconds. Machine
outputs (JSON, CSV) keep raw values and say the unit in the field's name
(`csv_name`). Pure functions: no I/O.
"""

from __future__ import annotations

import math

PREFIXES: tuple[tuple[float, str], ...] = (
    (1e24, "Y"), (1e21, "Z"), (1e18, "E"), (1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, ""),
)
DIGITS = 3  # significant digits a person compares by; JSON and CSV keep every digit
MISSING = "-"


def scale(magnitude: float) -> tuple[float, str]:
    """(factor, prefix) of the largest SI prefix not above `magnitude` (1 and "" below 1000)."""
    for factor, prefix in PREFIXES:
        if abs(magnitude) >= factor:
            return factor, prefix
    return 1.0, ""


def _significant(value: float, digits: int) -> str:
    """`value` with `digits` significant digits, never in e-notation (value < 1e4)."""
    value = float(f"{value:.{digits}g}")  # rounded first: 9.996 is 10.0, not 10.00
    if value == 0:
        return "0"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(value))))
    return f"{value:.{decimals}f}"


def si(value: float | None, unit: str, digits: int = DIGITS) -> str:
    """3.735e9, "FLOPS" -> "3.74 GFLOPS"; 0 -> "0 FLOPS"; None -> "-"; inf -> "inf FLOPS"."""
    if value is None:
        return MISSING
    if not math.isfinite(value):
        return f"{value} {unit}".strip()
    factor, prefix = scale(value)
    i = PREFIXES.index((factor, prefix))
    if i > 0 and abs(float(_significant(value / factor, digits))) >= 1000:  # 999.6 rounds to 1000: next prefix
        factor, prefix = PREFIXES[i - 1]
        return f"{_significant(round(value / factor, digits - 1), digits)} {prefix}{unit}"
    return f"{_significant(value / factor, digits)} {prefix}{unit}".strip()


def flops(value: float | None) -> str:
    """Operations per second: 3.735e9 -> "3.74 GFLOPS"."""
    return si(value, "FLOPS")


def operations(value: float | None) -> str:
    """A count of floating-point operations: 2.9e13 -> "29.0 TFLOP"."""
    return si(value, "FLOP")


def percent(fraction: float | None, digits: int = DIGITS) -> str:
    """0.1234 -> "12.3%"; None -> "-"."""
    if fraction is None:
        return MISSING
    if not math.isfinite(fraction):
        return f"{fraction}"
    return f"{_significant(fraction * 100, digits)}%"


def ratio(value: float | None) -> str:
    """A ratio to a reference: 2.0 -> "2.00x"; None -> "-"."""
    if value is None or not math.isfinite(value):
        return MISSING
    return f"{_significant(value, DIGITS)}x"


def duration(seconds: float | None) -> str:
    """5400.7 -> "1:30:00" (hours:minutes:seconds, fractions dropped); None -> "-"."""
    if seconds is None or not math.isfinite(seconds):
        return MISSING
    s = int(max(0.0, seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def count(n: int | float | None) -> str:
    """1234567 -> "1,234,567"; None -> "-"."""
    return MISSING if n is None else f"{int(n):,}"


def gib(n: float | None) -> str:
    """Bytes as GiB: 2**33 -> "8 GiB"."""
    return MISSING if n is None else f"{n / 2**30:.0f} GiB"


def plural(n: int, word: str, many: str = "") -> str:
    """(1, "model") -> "1 model"; (3, "model") -> "3 models"; `many`: an irregular plural."""
    return f"{n} {word if n == 1 else many or word + 's'}"


# The unit of each raw figure the exports write: its CSV column carries it in its name.
FIELD_UNITS: dict[str, str] = {
    "score": "flops", "regulated_score": "flops", "valid_flops": "flops", "flops": "flops",
    "efficiency": "fraction", "efficiency_vs_measured": "fraction", "error": "fraction",
    "best_accuracy": "fraction", "predicted_accuracy": "fraction", "total_ops": "flop", "ops": "flop",
    "flops_per_train_image": "flop", "flops_per_eval_image": "flop",
    "created_at": "unix_s", "finished_at": "unix_s",
}


def csv_name(field: str) -> str:
    """The CSV column of a raw field, its unit in the name: "score" -> "score_flops";
    a field already named with its unit ("elapsed_s", "valid_flops") is unchanged."""
    unit = FIELD_UNITS.get(field)
    if unit is None or field.endswith("_" + unit) or field == unit:
        return field
    return f"{field}_{unit}"
