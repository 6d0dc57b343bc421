"""The report's chart of the paper's Fig. 4: FLOPS(t), the regulated score and
valid FLOPS along the time line (aiperf.timeline.score_curve), maxima marked."""

from __future__ import annotations

import re

from aiperf_cli.report import score_chart


def _board(**kw):
    board = {"target_accuracy": 0.763, "min_running_time_s": 60.0, "score": 2e12, "score_time_s": 120.0,
             "regulated_score": 1.5e12 * 1.3862943611198906, "regulated_score_time_s": 240.0,
             "valid_flops": 0.0, "valid_flops_time_s": 0.0}
    board.update(kw)
    return board


def test_the_chart_draws_the_three_curves_of_the_time_line():
    # FLOPS peaks at 2e12 with error 0.5; the error reaches 0.25 when FLOPS is 1.5e12: the
    # regulated score's maximum is 1.5e12 * ln 4 at t = 240 s, not 2e12 * ln 4 (SPEC section 7)
    points = [{"elapsed_s": 120.0, "ops": int(2.4e14), "flops": 2e12, "best_accuracy": 0.5},
              {"elapsed_s": 240.0, "ops": int(3.6e14), "flops": 1.5e12, "best_accuracy": 0.75}]
    svg = score_chart(_board(), points)
    assert svg.startswith("<svg")
    for label in ("FLOPS(t)", "regulated score -ln(Error(t))·FLOPS(t)", "valid FLOPS, FLOPS(t)·(acc(t)/0.763)^5",
                  "minimum running time"):
        assert label in svg, label
    # three curves of two points each, plus the maxima that are known (score, regulated score)
    assert len(re.findall(r'<path [^>]*clip-path', svg)) >= 3


def test_the_chart_of_a_run_without_accuracy_has_a_zero_regulated_score():
    svg = score_chart(_board(regulated_score=0.0), [{"elapsed_s": 30.0, "ops": 300, "flops": 10.0,
                                                     "best_accuracy": None}])
    assert "regulated score" in svg


def test_the_axis_is_labelled_in_the_unit_without_offset_text():
    from aiperf_cli.report import flops_chart

    points = [{"elapsed_s": 60.0 * i, "ops": 0, "flops": 3.7e9 + 1e7 * i, "best_accuracy": 0.5} for i in range(1, 6)]
    for svg in (score_chart(_board(score=3.74e9, regulated_score=5e9), points),
                flops_chart({**_board(score=3.74e9), "provisional": False, "final": True}, points)):
        assert ">GFLOPS</text>" in svg  # the y axis: SI prefix and unit
        assert not re.search(r">\s*(1e\d+|×10|\+\d\.\d+e\d+)", svg)  # no "1e9" offset text over the axis
    svg = flops_chart({**_board(score=3.74e9), "provisional": False, "final": True}, points)
    assert "score (final): 3.74 GFLOPS" in svg  # the marker has its legend entry, written as everywhere
