"""aiperf.units: the one way a number is written (SI prefixes with the unit, %, durations)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aiperf import units

PREFIX = {p: f for f, p in units.PREFIXES}
SHAPE = re.compile(r"(-?\d+(?:\.\d+)?) ([kMGTPEZY]?)FLOPS")


@pytest.mark.parametrize("value, text", [
    (3.735e9, "3.73 GFLOPS"),  # 3.735 is 3.73499... in binary
    (3.745e9, "3.75 GFLOPS"),
    (9.54e9, "9.54 GFLOPS"),
    (2.5e15, "2.50 PFLOPS"),
    (999.6e9, "1.00 TFLOPS"),  # rounding to 1000 moves up a prefix
    (12345.0, "12.3 kFLOPS"),
    (0.0, "0 FLOPS"),
    (None, "-"),
])
def test_flops_are_written_with_three_significant_digits_and_a_prefix(value, text):
    assert units.flops(value) == text


@given(st.floats(min_value=1e-3, max_value=1e26, allow_nan=False))
def test_any_rate_reads_back_within_half_a_unit_of_its_last_digit(value):
    text = units.flops(value)
    m = SHAPE.fullmatch(text)
    assert m, text  # never e-notation, always the unit
    number, prefix = float(m[1]), m[2]
    assert 1.0 <= abs(number) < 1000.0 or prefix in ("", "Y")
    assert number * PREFIX[prefix] == pytest.approx(value, rel=5e-3)
    assert len(m[1].replace("-", "").replace(".", "").lstrip("0")) <= 3 or number >= 1000


@given(st.floats(min_value=0, max_value=10, allow_nan=False))
def test_fractions_are_percentages(fraction):
    text = units.percent(fraction)
    assert text.endswith("%") and "e" not in text
    assert float(text[:-1]) == pytest.approx(fraction * 100, rel=5e-3, abs=1e-9)


def test_durations_counts_and_plurals():
    assert units.duration(5400.7) == "1:30:00" and units.duration(None) == "-"
    assert units.count(1234567) == "1,234,567"
    assert units.plural(1, "model") == "1 model" and units.plural(3, "model") == "3 models"
    assert units.ratio(2) == "2.00x" and units.ratio(None) == "-"


@pytest.mark.parametrize("field, column", [
    ("score", "score_flops"), ("regulated_score", "regulated_score_flops"), ("valid_flops", "valid_flops"),
    ("flops", "flops"), ("efficiency", "efficiency_fraction"), ("elapsed_s", "elapsed_s"),
    ("total_ops", "total_ops_flop"), ("run_id", "run_id"),
])
def test_csv_columns_carry_their_unit(field, column):
    assert units.csv_name(field) == column
