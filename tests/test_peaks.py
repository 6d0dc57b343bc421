"""Checked peaks (aiperf.peaks): datasheet figures, model-string matching, caps, the CPU path."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aiperf.peaks import (
    CAPPED,
    CHECKED,
    CPU_MAX_FLOPS_PER_CPU,
    TABLE,
    TOLERANCE,
    UNVERIFIED,
    UNVERIFIED_CPU,
    check_cpu_peak,
    check_peak,
    datasheet_of,
    largest_bound,
)
from aiperf.precision import GEMM_DTYPES

T = 1e12

# Model strings as NVML (nvmlDeviceGetName) or TensorFlow/ROCm report them.
MODELS = {
    "NVIDIA H100 80GB HBM3": "H100 SXM",
    "NVIDIA H100 PCIe": "H100 PCIe",
    "NVIDIA H100 NVL": "H100 NVL",
    "NVIDIA H100": "H100 SXM",  # no variant named: the fastest H100's figures
    "NVIDIA H200": "H200 SXM",
    "NVIDIA H200 NVL": "H200 NVL",
    "NVIDIA B200": "B200",
    "NVIDIA A100-SXM4-80GB": "A100 SXM",
    "NVIDIA A100-SXM4-40GB": "A100 SXM",
    "NVIDIA A100-PCIE-40GB": "A100 PCIe",
    "NVIDIA A100 80GB PCIe": "A100 PCIe",
    "NVIDIA L40S": "L40S",
    "Tesla V100-SXM2-32GB": "V100 SXM2",
    "Tesla V100-PCIE-16GB": "V100 PCIe",
    "Tesla V100S-PCIE-32GB": "V100S PCIe",
    "Tesla V100-SXM3-32GB": "V100 (variant not named)",
    "AMD Instinct MI300X": "MI300X",
    "AMD Instinct MI250X": "MI250X (one GCD)",
    "nvidia h100 pcie": "H100 PCIe",  # case does not matter
}

# Names that contain a known one but are other chips: never matched to it.
OTHERS = ["NVIDIA GH200 480GB", "NVIDIA GB200", "NVIDIA H20", "NVIDIA H800", "NVIDIA A10", "NVIDIA A10G",
          "NVIDIA A800-SXM4-80GB", "NVIDIA L40", "AMD Instinct MI250", "AMD Instinct MI300A", "", "CPU"]


@pytest.mark.parametrize("model,entry", sorted(MODELS.items()))
def test_model_strings_match_their_datasheet(model, entry):
    assert datasheet_of(model).name == entry


@pytest.mark.parametrize("model", OTHERS)
def test_other_chips_are_not_mistaken_for_a_known_one(model):
    assert datasheet_of(model) is None
    r = check_peak(model, "float16", 5e14)
    assert r.verdict == UNVERIFIED and r.accepted_flops == 5e14 and r.datasheet_flops is None


# Dense datasheet figures (TFLOPS): (model, GEMM type) -> figure. Sparse figures halved.
GOLDEN = {
    ("NVIDIA H100 80GB HBM3", "float16"): 989.5, ("NVIDIA H100 80GB HBM3", "bfloat16"): 989.5,
    ("NVIDIA H100 80GB HBM3", "float32"): 494.5,  # TF32: TensorFlow's float32 matmul on Hopper
    ("NVIDIA H100 80GB HBM3", "fp8"): 1979,
    ("NVIDIA H100 PCIe", "float16"): 756.5, ("NVIDIA H100 PCIe", "float32"): 378,
    ("NVIDIA H100 NVL", "bfloat16"): 835.5,
    ("NVIDIA H200", "bfloat16"): 989.5, ("NVIDIA H200 NVL", "float16"): 835.5,
    ("NVIDIA B200", "bfloat16"): 2250, ("NVIDIA B200", "float32"): 1100, ("NVIDIA B200", "fp8"): 4500,
    ("NVIDIA A100-SXM4-80GB", "float16"): 312, ("NVIDIA A100-PCIE-40GB", "float32"): 156,
    ("NVIDIA L40S", "float16"): 362.05, ("NVIDIA L40S", "float32"): 183, ("NVIDIA L40S", "fp8"): 733,
    ("Tesla V100-SXM2-32GB", "float16"): 125, ("Tesla V100-SXM2-32GB", "float32"): 15.7,
    ("Tesla V100-PCIE-16GB", "float16"): 112, ("Tesla V100-PCIE-16GB", "float32"): 14,
    ("AMD Instinct MI300X", "bfloat16"): 1307.4, ("AMD Instinct MI300X", "float32"): 653.7,
    ("AMD Instinct MI250X", "float16"): 383 / 2, ("AMD Instinct MI250X", "float32"): 95.7 / 2,
}


@pytest.mark.parametrize("key", sorted(GOLDEN))
def test_datasheet_figures(key):
    model, dtype = key
    r = check_peak(model, dtype, 1.0)
    assert r.datasheet_flops == pytest.approx(GOLDEN[key] * T)
    assert r.verdict == CHECKED and r.accepted_flops == 1.0


def test_every_entry_has_fp32_fp16_and_a_source_and_dense_figures_are_ordered():
    for d in TABLE:
        assert d.fp32 > 0 and d.fp16 and d.source
        # dense tensor figures: FP8 = 2 x FP16 = 4 x TF32 where they exist (B200: "2.2" PF TF32, rounded)
        if d.tf32 and d.fp8:
            assert d.fp8 == pytest.approx(2 * d.fp16, rel=0.03) and d.fp16 == pytest.approx(2 * d.tf32, rel=0.03)


def test_a_rate_above_the_datasheet_is_capped_and_flagged():
    # The issue: a peak of 1e18 claimed for one H100 was accepted.
    r = check_peak("NVIDIA H100 80GB HBM3", "float16", 1e18)
    assert r.verdict == CAPPED and r.entry == "H100 SXM"
    assert r.accepted_flops == pytest.approx(989.5 * T * 1.05) == r.bound_flops
    assert r.measured_flops == 1e18  # the claim is kept in the record
    assert "FP16 dense" in r.basis and "H100 Tensor Core GPU datasheet" in r.basis
    # within the tolerance: accepted as measured
    assert check_peak("NVIDIA H100 80GB HBM3", "float16", 989.5 * T * 1.04).verdict == CHECKED
    # a real measurement: a PCIe card's rate is checked against the PCIe figure
    assert check_peak("NVIDIA H100 PCIe", "float16", 900 * T).verdict == CAPPED


def test_a_type_without_a_unit_is_bounded_by_the_fastest_wider_one():
    r = check_peak("Tesla V100-SXM2-32GB", "bfloat16", 1e14)  # Volta has no BF16: emulated
    assert r.datasheet_flops == 125 * T and r.verdict == CHECKED and "no bfloat16 unit" in r.basis
    r = check_peak("AMD Instinct MI250X", "tf32", 1e14)
    assert r.datasheet_flops == pytest.approx(95.7 / 2 * T) and r.verdict == CAPPED


def test_every_gemm_type_a_worker_measures_is_known():
    for dtype in GEMM_DTYPES:
        assert check_peak("NVIDIA A100-SXM4-80GB", dtype, 1.0).verdict == CHECKED


def test_cpu_rates_are_unverified_and_bounded_by_physics():
    r = check_cpu_peak(16, "float32", 2e12, model="Intel(R) Xeon(R) Platinum 8480+")
    assert r.verdict == UNVERIFIED_CPU and r.accepted_flops == 2e12 and r.datasheet_flops is None
    assert r.bound_flops == 16 * CPU_MAX_FLOPS_PER_CPU
    r = check_cpu_peak(2, "float32", 1e18)
    assert r.verdict == CAPPED and r.accepted_flops == 2 * 2048 * 6e9
    for bad in (0, -1, 10**6, 2.5, True):
        with pytest.raises(ValueError, match="cpus"):
            check_cpu_peak(bad, "float32", 1e9)


@pytest.mark.parametrize("rate", [-1.0, math.nan, math.inf, "1e12", None, True])
def test_hostile_rates_are_refused(rate):
    with pytest.raises(ValueError, match="measured rate"):
        check_peak("NVIDIA H100 PCIe", "float16", rate)


def test_hostile_types_and_models_are_refused():
    with pytest.raises(ValueError, match="unknown GEMM compute type 'int4'"):
        check_peak("NVIDIA H100 PCIe", "int4", 1.0)
    with pytest.raises(ValueError, match="must be a string"):
        check_peak(None, "float16", 1.0)
    with pytest.raises(ValueError, match="longer than 256"):
        check_peak("H100 " * 100, "float16", 1.0)
    assert check_peak("NVIDIA H100 PCIe", "FLOAT16", 1.0).dtype == "float16"


@given(model=st.sampled_from(sorted(MODELS) + OTHERS), dtype=st.sampled_from(["float32", "float16", "bfloat16",
                                                                             "tf32", "fp8"]),
       rate=st.floats(0, 1e20))
def test_accepted_rate_never_above_the_bound_nor_the_measurement(model, dtype, rate):
    r = check_peak(model, dtype, rate)
    assert r.accepted_flops <= rate
    if r.datasheet_flops is not None:
        assert r.accepted_flops <= r.datasheet_flops * (1 + TOLERANCE) * (1 + 1e-12)
        assert (r.verdict == CAPPED) == (rate > r.bound_flops)
        assert r.verdict in (CHECKED, CAPPED)
    else:  # not in the table: as measured, never above the table's fastest entry for the compute type
        assert r.verdict == UNVERIFIED and r.accepted_flops == min(rate, largest_bound(dtype))
        assert r.bound_flops == largest_bound(dtype)
    assert set(r.to_dict()) >= {"model", "dtype", "measured_flops", "accepted_flops", "datasheet_flops", "verdict"}
