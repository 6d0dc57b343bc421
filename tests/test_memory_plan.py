"""benchmarks/memory_plan's arithmetic and command line (its compiled figures: tests/test_jax_backend.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aiperf.profiles import OFFICIAL
from benchmarks import memory_plan

GIB = 2**30


@given(fixed=st.integers(0, 40 * GIB), per_image=st.integers(1, 200 << 20),
       batches=st.lists(st.integers(1, 4096), min_size=2, max_size=6, unique=True))
def test_a_line_through_exact_points_gives_back_its_fixed_part_and_slope(fixed, per_image, batches):
    got_fixed, got_per_image = memory_plan.line_through([(b, fixed + per_image * b) for b in batches])
    assert got_per_image == pytest.approx(per_image, rel=1e-9)
    assert got_fixed == pytest.approx(fixed, rel=1e-6, abs=per_image * 1e-6 * max(batches))


def test_what_fits_an_h200_at_the_memory_the_h200_run_measured():
    # 81.5 GiB at batch 1,024 (docs/benchmarks.md, the H200 run), taken as all per image: the
    # official sizes for 140 GiB run from 12 x 140 = 1,680 to 14 x 140 = 1,960
    per_image = 81.5 * GIB / 1024
    figures = memory_plan.fit_figures([(512, round(512 * per_image)), (1024, round(1024 * per_image))], 140 * GIB)
    assert figures["largest_batch_that_fits"] == 1759  # floor(140 / 81.5 x 1024)
    official = OFFICIAL.for_accelerator_memory(140 * GIB).batch_sizes
    assert (official[0], official[-1]) == (1680, 1960)
    assert figures["official_batch_sizes_that_fit"] == f"{sum(b <= 1759 for b in official)}/{len(official)}" == "10/36"
    assert figures["images_per_gib_that_fit"] == pytest.approx(1759 / 140, abs=0.01)


def test_without_a_memory_only_the_line_is_given():
    assert set(memory_plan.fit_figures([(8, 100), (16, 180)], None)) == {"planned_bytes_per_image", "planned_fixed_bytes"}


@pytest.mark.parametrize("batches", ["256", "0,8", "a,b", ""])
def test_fewer_than_two_sizes_or_a_bad_size_is_exit_2(batches, capsys):
    assert memory_plan.main(["--batches", batches]) == 2
    assert "two or more sizes" in capsys.readouterr().err


def test_it_needs_the_jax_backend(monkeypatch, capsys):
    monkeypatch.setenv("KERAS_BACKEND", "tensorflow")
    assert memory_plan.main(["--batches", "8,16"]) == 2
    assert "KERAS_BACKEND=jax" in capsys.readouterr().err
