"""The official run's rules through the real server: a CPU worker's measured peak (checked by
a physical bound), the locked official workload (settings, precision, XLA,
the ImageNet split sizes, the dataset fingerprint), the per-worker ops budget
and the refused reports stored per run and worker."""

from __future__ import annotations

import json

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aiperf import official, peaks
from aiperf.api import aiperf_pb2 as pb
from aiperf.api.client import ApiError
from aiperf.flops import count_flops
from aiperf.hyperparameters import Hyperparameters
from aiperf.profiles import OFFICIAL, SMOKE
from aiperf.resnet import resnet50
from tests.support.fake_clock import FakeClock
from tests.support.master_clients import HP, IMAGENET, clients


def _cpu_worker(w, rate: float, cpus: int = 2, name: str = "cpu-node") -> int:
    return w.register(name=name, host=name, cpus=cpus, memory_bytes=8 << 30,
                      cpu_peak_flops_by_dtype={"float32": rate}).worker_id


def test_a_cpu_worker_registers_its_measured_peak_and_the_run_shows_an_efficiency(master_server, small_graph):
    """A worker without accelerators sends its CPU's float32 GEMM rate: accepted as
    measured ("unverified peak": no CPU datasheet), the efficiency is known, and
    its reports are bounded by its CPUs' physical bound (a shared CPU may train
    faster than it measured at start; the bound is what a liar cannot pass)."""
    clock = FakeClock()
    h = master_server(clock=clock, heartbeat_interval_s=10_000.0)
    w, c = clients(h)
    rate = 5e10
    wid = _cpu_worker(w, rate)
    c.start_run(600, profile="smoke")
    fc = count_flops(small_graph)
    mid = w.submit_model(wid, small_graph.to_json(), small_graph.hash(), 0, 1, HP).model_id
    clock.t += 10
    honest = int(rate * 0.2 * 10 / fc.train)  # 20% of the GEMM rate
    w.report_progress(wid, mid, 1, honest, 0, 1, fc.ops(honest, 0))
    clock.t += 10
    faster = int(rate * 1.5 * 10 / fc.train)  # 1.5x the rate measured at start: a loaded CPU measured low
    w.report_progress(wid, mid, 2, faster, 0, 1, fc.ops(faster, 0))
    bound = 2 * peaks.CPU_MAX_FLOPS_PER_CPU
    too_many = int(bound * 16 / fc.train)  # 16 s of the physical bound in 10 s (+5 s slack)
    with pytest.raises(ApiError, match=f"worker {wid} claims .* above its accepted peak 2.5e\\+13"):
        w.report_progress(wid, mid, 3, too_many, 0, 1, fc.ops(too_many, 0))
    sb = c.scoreboard()
    assert sb.peak_flops == pytest.approx(rate) and sb.peak_verdict == "unverified peak"
    assert sb.efficiency_vs_measured == pytest.approx(sb.score / rate) and 0 < sb.efficiency_vs_measured
    assert sb.efficiency == 0.0 and sb.efficiency_unknown_reason == "no datasheet entry for CPU"  # no CPU table
    assert sb.implausible_reports == 1 and sb.inventory[0].implausible_reports == 1
    assert dict(sb.inventory[0].cpu_peak_flops_by_dtype) == {"float32": rate}


def test_a_cpu_rate_above_the_physical_bound_is_capped(master_server):
    """cpus x CPU_MAX_FLOPS_PER_CPU bounds a CPU's rate: a claim above it is capped there."""
    h = master_server()
    w, c = clients(h)
    _cpu_worker(w, 1e16, cpus=2)
    c.start_run(600, profile="smoke")
    w.heartbeat(1)
    sb = c.scoreboard()
    assert sb.peak_verdict == "capped"
    assert sb.peak_flops == pytest.approx(2 * peaks.CPU_MAX_FLOPS_PER_CPU)


def test_cpu_rates_of_a_worker_with_accelerators_are_ignored_and_bad_ones_refused(master_server):
    from aiperf.api.client import Accelerator

    h = master_server()
    w, c = clients(h)
    with pytest.raises(ApiError) as excinfo:
        w.register(name="x", host="x", cpus=2, cpu_peak_flops_by_dtype={"float64": 1e9})
    assert excinfo.value.code == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(ApiError) as excinfo:
        w.register(name="x", host="x", cpus=2, cpu_peak_flops_by_dtype={"float32": float("nan")})
    assert excinfo.value.code == grpc.StatusCode.INVALID_ARGUMENT
    w.register(name="g", host="g", cpus=2, accelerators=[Accelerator("NVIDIA H100 80GB HBM3", 80 << 30, 0.0,
                                                                     {"float32": 5e13})],
               cpu_peak_flops_by_dtype={"float32": 1e11})
    c.start_run(600, profile="smoke")
    w.heartbeat(1)
    sb = c.scoreboard()
    assert sb.peak_flops == pytest.approx(5e13) and sb.peak_verdict == "checked"


def test_the_worker_measures_its_cpu_quickly():
    from worker.gemm import measure_cpu_peak

    found = measure_cpu_peak(n=256, seconds=0.05, trials=2)
    assert set(found) == {"float32"} and 1e7 < found["float32"] < 2 * peaks.CPU_MAX_FLOPS_PER_CPU


def _gpu_worker(w, name: str) -> int:
    """A worker an official run counts: an H100 of the table, with its UUID and 16-bit peaks."""
    from aiperf.api.client import Accelerator

    return w.register(name=name, host=name, cpus=2, accelerators=[Accelerator(
        "NVIDIA H100 80GB HBM3", 80 << 30, 0.0, {"float16": 9e14, "bfloat16": 9e14, "float32": 4e14},
        uuid=f"GPU-{name}")]).worker_id


def _official_model(w, wid: int, dataset: dict | None) -> int:
    g = resnet50(224, 3, 1000, 1.0)
    batch = OFFICIAL.for_accelerator_memory(80 << 30).batch_size  # the H100's
    return w.submit_model(wid, g.to_json(), g.hash(), 0, 1, Hyperparameters(batch, 3),
                          dataset=dataset).model_id


def test_an_official_run_defaults_to_mixed_fp16_with_xla_and_stays_official_on_imagenet(master_server):
    h = master_server()
    w, c = clients(h)
    wid = _gpu_worker(w, "n")
    run = c.start_run(3600, profile="official")
    assert run.config.precision == pb.PRECISION_MIXED_FP16 and run.config.xla
    _official_model(w, wid, IMAGENET)
    sb = c.scoreboard()
    assert sb.official and list(sb.unofficial_reasons) == []
    assert sb.inventory[0].has_dataset and sb.inventory[0].dataset.fingerprint == "ab" * 32
    st_ = c.run_status()
    assert st_.official and not st_.unofficial_reasons


@pytest.mark.parametrize(("options", "reason"), [
    ({"warmup_rounds": 2}, "--warmup-rounds 2 (official: 5)"),
    ({"max_epochs_per_round": 1}, "--max-epochs 1 (official: no cap)"),
    ({"max_rounds_per_worker": 3}, "--max-rounds 3 (official: no cap)"),
    ({"max_models": 9}, "--max-models 9 (official: no cap)"),
    ({"precision": "fp32"}, "precision fp32 (official: mixed_fp16 or mixed_bf16)"),
    ({"xla": False}, "XLA off (official: on)"),
    ({"deterministic": True}, "--deterministic (initial weights from the run seed; official: the master's secret)"),
])
def test_any_override_makes_the_run_unofficial(master_server, options, reason):
    from aiperf.api.views import run_status_to_dict, scoreboard_to_dict

    h = master_server()
    w, c = clients(h)
    wid = _gpu_worker(w, "n")
    c.start_run(3600, profile="official", **options)
    _official_model(w, wid, IMAGENET)
    sb = c.scoreboard()
    assert not sb.official and list(sb.unofficial_reasons) == [reason]
    d = json.loads(json.dumps(scoreboard_to_dict(sb)))  # what --json prints
    assert d["official"] is False and d["unofficial_reasons"] == [reason]
    assert run_status_to_dict(c.run_status())["unofficial_reasons"] == [reason]


def test_mixed_bf16_is_official_too(master_server):
    h = master_server()
    _, c = clients(h)
    c.start_run(3600, profile="official", precision="mixed_bf16")
    assert c.scoreboard().official


@pytest.mark.parametrize(("change", "reason"), [
    ({"train_images": 128_116}, "128,116 training images (official: 1,281,167)"),
    ({"validation_images": 10_000}, "10,000 validation images (official: 50,000)"),
    ({"kind": "cifar10"}, "dataset kind cifar10"),
    (None, "no dataset reported"),
])
def test_a_dataset_that_is_not_imagenet_1k_makes_the_run_unofficial(master_server, change, reason):
    h = master_server()
    w, c = clients(h)
    wid = _gpu_worker(w, "n")
    other = _gpu_worker(w, "m")
    c.start_run(3600, profile="official")
    _official_model(w, other, IMAGENET)
    _official_model(w, wid, None if change is None else {**IMAGENET, **change})
    sb = c.scoreboard()
    assert not sb.official and len(sb.unofficial_reasons) == 1
    assert sb.unofficial_reasons[0].startswith(f"worker {wid} (n) dataset: ") and reason in sb.unofficial_reasons[0]


def test_the_smoke_profile_is_never_official_and_keeps_fp32_without_xla(master_server):
    h = master_server()
    _, c = clients(h)
    run = c.start_run(600, profile="smoke")
    assert run.config.precision == pb.PRECISION_FP32 and not run.config.xla
    sb = c.scoreboard()
    assert not sb.official and list(sb.unofficial_reasons) == ["the smoke profile is never official"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(train=st.integers(0, 2**40), val=st.integers(0, 2**40), classes=st.integers(0, 1 << 20),
       size=st.integers(0, 1 << 16), kind=st.sampled_from(["imagenet-tfrecord", "imagenet-folder", "cifar10", ""]))
def test_only_the_published_imagenet_split_is_an_official_dataset(train, val, classes, size, kind):
    d = {"kind": kind, "train_images": train, "validation_images": val, "num_classes": classes, "image_size": size}
    exact = (kind in official.IMAGENET_KINDS and train == 1_281_167 and val == 50_000 and classes == 1000
             and size == 224)
    assert official.is_official_dataset(OFFICIAL, d) == exact
    assert official.dataset_reasons(SMOKE, d) == []


def test_a_worker_with_several_models_shares_one_budget(master_server, small_graph):
    """The ops budget is per worker: reports on two models at once cannot claim
    twice the peak (each model's own interval would have allowed it)."""
    from aiperf.api.client import Accelerator

    clock = FakeClock()
    h = master_server(clock=clock, heartbeat_interval_s=10_000.0)
    w, c = clients(h)
    peak = 1e12
    wid = w.register(name="n", host="n", accelerators=[Accelerator("NVIDIA H100 80GB HBM3", 80 << 30, 0.0,
                                                                   {"float32": peak})]).worker_id
    c.start_run(600, profile="smoke")
    fc = count_flops(small_graph)
    a = w.submit_model(wid, small_graph.to_json(), small_graph.hash(), 0, 1, HP, queue=True).model_id
    b = w.submit_model(wid, small_graph.to_json(), small_graph.hash(), 0, 2, HP, queue=True).model_id
    clock.t += 20
    n = int(peak * 20 / fc.train)  # the whole 20 s at the peak
    w.report_progress(wid, a, 1, n, 0, 1, fc.ops(n, 0))
    with pytest.raises(ApiError, match="above its accepted peak"):
        w.report_progress(wid, b, 1, n, 0, 1, fc.ops(n, 0))
    assert c.scoreboard().implausible_reports == 1


def test_the_budget_starts_at_the_later_of_registration_and_run_start_and_refusals_survive_a_restart(
        master_server, small_graph, tmp_path):
    """A worker registered long after the run started cannot claim the time before it
    registered; the refused report is stored, so a restarted master still counts it."""
    from aiperf.api.client import Accelerator

    clock = FakeClock()
    db = f"sqlite:///{tmp_path / 'budget.db'}"
    h = master_server(db, clock=clock, heartbeat_interval_s=10_000.0)
    w, c = clients(h)
    c.start_run(3600, profile="smoke")
    clock.t += 1000
    peak = 1e12
    wid = w.register(name="late", host="late", accelerators=[Accelerator("NVIDIA H100 80GB HBM3", 80 << 30, 0.0,
                                                                         {"float32": peak})]).worker_id
    fc = count_flops(small_graph)
    mid = w.submit_model(wid, small_graph.to_json(), small_graph.hash(), 0, 1, HP).model_id
    clock.t += 10
    n = int(peak * 100 / fc.train)  # 100 s of work, 10 s after registering
    with pytest.raises(ApiError, match=f"worker {wid} claims"):
        w.report_progress(wid, mid, 1, n, 0, 1, fc.ops(n, 0))
    h.stop(grace_s=0)
    h2 = master_server(db, clock=clock, heartbeat_interval_s=10_000.0)
    _, c2 = clients(h2)
    sb = c2.scoreboard()
    assert sb.implausible_reports == 1 and sb.inventory[0].implausible_reports == 1 and sb.total_ops == 0
