"""Checked peaks as the master applies them (master/core/run_rules.py, master/core/budget.py):
pure functions over plain records, property-based plus examples."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from aiperf import peaks
from aiperf.api import bounds
from master.core.budget import ceiling_of
from master.core.run_rules import accelerator_peaks, peak_verdict, with_checked_peaks, worker_peak
from master.store.records import RunRecord, RunWorker, WorkerInput, WorkerRecord

MODELS = ["NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB", "Tesla V100-SXM2-32GB", "AMD Instinct MI300X",
          "Acme Tensor 9000", "NVIDIA H100 PCIe"]
RATES = st.floats(min_value=0.0, max_value=bounds.MAX_OPS_PER_S_PER_ACCELERATOR)
ACCELERATOR = st.fixed_dictionaries({
    "model": st.sampled_from(MODELS), "memory_bytes": st.just(1 << 30), "peak_flops": st.just(0.0),
    "peak_flops_by_dtype": st.dictionaries(st.sampled_from(["float32", "float16", "bfloat16"]), RATES, min_size=1),
})


def _run(precision: str) -> RunRecord:
    return RunRecord("smoke", 0, 600.0, precision, {}, {}, id=1, state="running", created_at=0.0, started_at=0.0,
                     deadline=600.0, stopped_at=None, finished_at=None, stop_reason="")


def _joined(accelerators: list[dict]) -> list[RunWorker]:
    info = with_checked_peaks(WorkerInput("w", "w", accelerators, 1, 1, {}))
    worker = WorkerRecord(**vars(info), id=1, state="alive", registered_at=0.0, last_heartbeat=0.0)
    return [RunWorker(worker, 0.0, {"accelerators": info.accelerators})]


@settings(max_examples=200, deadline=None)
@given(st.lists(ACCELERATOR, min_size=1, max_size=4), st.sampled_from(["fp32", "mixed_fp16", "mixed_bf16"]))
def test_accepted_peaks_never_exceed_the_claim_or_the_datasheet(accelerators, precision):
    run = _run(precision)
    joined = _joined(accelerators)
    dtype = {"fp32": "float32", "mixed_fp16": "float16", "mixed_bf16": "bfloat16"}[precision]
    accepted = accelerator_peaks(run, joined)
    assert len(accepted) == len(accelerators)
    for a, got in zip(accelerators, accepted):
        claimed = a["peak_flops_by_dtype"].get(dtype, 0.0)
        assert 0.0 <= got <= claimed
        sheet = peaks.datasheet_of(a["model"])
        if sheet is not None and claimed > 0:
            assert got <= peaks.check_peak(a["model"], dtype, claimed).bound_flops
    assert worker_peak(run, joined[0].inventory["accelerators"]) == sum(accepted)
    ceiling = ceiling_of(sum(accepted), len(accelerators))
    assert ceiling.rate <= bounds.report_ops_ceiling(len(accelerators))
    assert ceiling.from_peak == (0 < sum(accepted) < bounds.report_ops_ceiling(len(accelerators)))


def test_the_verdict_names_the_weakest_check():
    run = _run("mixed_fp16")
    h100 = {"model": "NVIDIA H100 80GB HBM3", "memory_bytes": 1, "peak_flops": 0.0}
    checked = dict(h100, peak_flops_by_dtype={"float16": 8e14})
    capped = dict(h100, peak_flops_by_dtype={"float16": 5e15})
    unknown = {"model": "Acme Tensor 9000", "memory_bytes": 1, "peak_flops": 0.0,
               "peak_flops_by_dtype": {"float16": 1e14}}
    assert peak_verdict(run, _joined([checked])) == "checked"
    assert peak_verdict(run, _joined([checked, capped])) == "capped"
    assert peak_verdict(run, _joined([capped, unknown])) == "unverified peak"
    assert peak_verdict(run, _joined([])) == ""
    # H100 SXM datasheet: FP16 1,979 TFLOPS with sparsity, 989.5 dense; +5%
    assert accelerator_peaks(run, _joined([capped])) == [989.5e12 * 1.05]
    # a record from before checks were recorded is checked when read
    legacy = [RunWorker(_joined([capped])[0].worker, 0.0, {"accelerators": [capped]})]
    assert accelerator_peaks(run, legacy) == [989.5e12 * 1.05]
