"""benchmarks/forgery_bench.py against a real master: the lies the rules refuse
gain nothing over the honest worker, and no lie scores above its accepted peak
(plus the clock slack over the smoke profile's minimum running time)."""

from __future__ import annotations

import pytest

from aiperf import limits
from aiperf.profiles import SMOKE
from benchmarks import forgery_bench


def test_refused_lies_gain_nothing_and_no_lie_beats_its_peak():
    res = forgery_bench.run_all(forgery_bench.COVERED + ("peak_5e15_capped", "kernel_7_for_3", "two_models_at_peak"))
    assert res["honest"]["score"] > 0 and res["honest"]["peak_verdict"] == "checked"
    for name in forgery_bench.COVERED:
        assert res[name]["ratio"] <= 1.0, (name, res[name])
        assert res[name]["refused"], name  # refused by a rule, not by chance
    # the slack lets one report run CLOCK_SLACK_S ahead; the score is read after the minimum running time
    slack = 1.0 + limits.CLOCK_SLACK_S / SMOKE.min_running_time_s
    capped = res["peak_5e15_capped"]
    assert capped["peak_verdict"] == "capped" and capped["peak_flops"] == 494.5e12 * 1.05
    assert capped["implausible_reports"] > 0 and "above its accepted peak" in capped["refused"][0]
    # one budget per worker: a second model's reports share the first one's time
    assert res["two_models_at_peak"]["implausible_reports"] > 0
    for name, r in res.items():
        if r["peak_flops"]:
            assert r["score"] <= r["peak_flops"] * slack, (name, r)


@pytest.mark.slow
@pytest.mark.exclusive  # the honest claim is a share of one timing, the audit another: no other test may load the CPU
def test_the_audit_catches_the_lies_physics_only_bounds():
    """With --audit every model has real weights in a checkpoint store and the worker is this
    machine's CPU: the honest worker's claims pass their audit; the liars that report at the
    datasheet peak or at 100,000 images/s claim more than the audit's timed steps allow, which
    also makes the run invalid. Neither counts (ratio after the audit 0). (The accuracy and kernel
    lies fail the same audit_model through `aiperf audit` in tests/test_audit.py.)"""
    lies = ("peak_5e15_capped", "100k_img_per_s")
    res = forgery_bench.run_all(lies, audit=True)
    assert res["honest"]["audit"] == "passed"
    for name in lies:
        assert res[name]["ratio"] > 1.0 and res[name]["audit"] == "too fast", (name, res[name])
        assert "throughput audit" in res[name]["invalid_reason"]
    for name in lies:
        assert res[name]["after_audit_ratio"] == 0.0, (name, res[name])


def test_the_official_runs_lies_gain_nothing_as_valid_results_and_honest_retries_pass(tmp_path):
    """Each named lie of an official run (device count, sybils, name variants and look-alikes,
    unknown accelerators, a missing peak, unaudited and failed-model workers, a late checkpoint,
    weights from before the run, a graph outside the search, a batch outside the profile) scores at most the honest score as
    a valid official result; the honest run is valid and official; an honest worker resending
    every report is refused nothing."""
    from benchmarks.forgery_official import SCENARIOS, run_official

    res = run_official(tmp_path)
    assert res["honest"]["valid"] and res["honest"]["official"], res["honest"]
    assert res["honest_retry"]["refused_count"] == 0 and res["honest_retry"]["valid"]
    assert set(SCENARIOS) <= set(res)
    for name in SCENARIOS:
        assert res[name]["valid_ratio"] <= 1.0, (name, res[name])
    # the lies that would have scored more are caught by a rule, not by chance
    for name in ("device_count_x8", "name_variant_x8", "missing_peak", "unaudited_worker", "failed_models_liar"):
        assert res[name]["ratio"] > 1.0 and not res[name]["valid"], (name, res[name])
    for name in ("lookalike_name", "non_descendant_graph", "batch_outside_profile", "late_checkpoint"):
        assert res[name]["refused"], name
    assert any("ALREADY_EXISTS" in r for r in res["sybil_x8"]["refused"])
    # weights from before the run: the regulated model's first epoch, re-trained from its seed, falls short
    assert not res["pretrained_weights"]["valid"] and res["pretrained_weights"]["valid_ratio"] == 0.0
    assert "not earned in the run" in res["pretrained_weights"]["invalid_reason"]
