"""Devices with identities, through the real server: one chip (its NVML UUID) one live worker;
accelerator names in printable ASCII, matched to the datasheet table by their canonical form;
an official run counts only table entries with a UUID and a measured peak; no ceiling above
the table's fastest entry; an unknown peak never lifts the score-over-peak rule."""

from __future__ import annotations

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aiperf import peaks, scoring
from aiperf.api.client import Accelerator, ApiError
from aiperf.audit import same_hardware
from aiperf.flops import count_flops
from aiperf.hyperparameters import Hyperparameters
from aiperf.scoring import Point
from tests.support.fake_clock import FakeClock
from tests.support.master_clients import HP, IMAGENET, clients

H100 = "NVIDIA H100 80GB HBM3"


def _gpu(uuid: str, model: str = H100, peak: dict | None = None) -> Accelerator:
    return Accelerator(model, 80 << 30, 0.0, peak if peak is not None else {"float16": 9e14, "float32": 5e13},
                       uuid=uuid, pci_bus_id="00000000:65:00.0")


def test_a_chip_registered_by_a_live_worker_is_refused_to_another(master_server):
    clock = FakeClock()
    h = master_server(clock=clock, heartbeat_interval_s=5.0)
    w, c = clients(h)
    first = w.register(name="a", host="node", accelerators=[_gpu("GPU-1")]).worker_id
    with pytest.raises(ApiError) as e:  # a second worker on the same H100
        w.register(name="b", host="node", accelerators=[_gpu("GPU-1")])
    assert e.value.code == grpc.StatusCode.ALREADY_EXISTS
    assert "GPU-1" in e.value.details and f"live worker {first}" in e.value.details
    assert w.register(name="a", host="node", accelerators=[_gpu("GPU-1")]).worker_id == first  # its own chip
    with pytest.raises(ApiError) as e:
        w.register(name="c", host="node", accelerators=[_gpu("GPU-2"), _gpu("GPU-2")])
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT and "listed twice" in e.value.details
    clock.t += 60  # "a" falls silent: lost, its chip free
    h.master.tick()
    assert w.register(name="b", host="node", accelerators=[_gpu("GPU-1")]).worker_id != first


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.text(min_size=1, max_size=40))
def test_accelerator_names_and_ids_are_printable_ascii(master_server, name):
    h = master_server()
    w, _ = clients(h)
    ascii_ok = all(" " <= ch <= "~" for ch in name)
    for acc in (Accelerator(name, 1 << 30), Accelerator("X", 1 << 30, uuid=name),
                Accelerator("X", 1 << 30, pci_bus_id=name[:32])):
        try:
            w.register(name="n", host="n", accelerators=[acc])
            assert ascii_ok or (acc.pci_bus_id and all(" " <= ch <= "~" for ch in acc.pci_bus_id))
        except ApiError as exc:
            assert exc.code == grpc.StatusCode.INVALID_ARGUMENT and not ascii_ok
    h.stop(grace_s=0)


def test_a_lookalike_letter_is_refused(master_server):
    w, _ = clients(master_server())
    with pytest.raises(ApiError) as e:
        w.register(name="n", host="n", accelerators=[Accelerator("NVIDIA \u041d100", 1 << 30, 1e16)])
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT and "U+041D" in e.value.details


@pytest.mark.parametrize("name", ["NVIDIA H100-SXM5-80GB", "nvidia h100 sxm5 80gb", "NVIDIA_H100_SXM5_80GB"])
def test_vendor_spellings_match_the_table_entry(name):
    assert peaks.datasheet_of(name).name == "H100 SXM"
    assert same_hardware(name, H100) and not same_hardware(name, "NVIDIA H100 PCIe")


def _official(master_server, accelerators, cpus: int = 8):
    h = master_server()
    w, c = clients(h)
    wid = w.register(name="n", host="n", accelerators=accelerators, cpus=cpus).worker_id
    c.start_run(7200, profile="official")
    from aiperf.profiles import OFFICIAL

    g = OFFICIAL.base_graph()
    batch = OFFICIAL.for_accelerator_memory(min((a.memory_bytes for a in accelerators), default=0)).batch_size
    w.submit_model(wid, g.to_json(), g.hash(), 0, 1, Hyperparameters(batch, 3), dataset=IMAGENET)
    return c.scoreboard()


def test_an_official_run_counts_table_entries_with_uuid_and_peak(master_server):
    sb = _official(master_server, [_gpu("GPU-a"), _gpu("GPU-b")])
    assert sb.official and not list(sb.unofficial_reasons)


@pytest.mark.parametrize("acc, why", [
    (Accelerator("Acme X1", 80 << 30, 0.0, {"float16": 1e16}, uuid="GPU-x"), "'Acme X1' is not in the datasheet table"),
    (Accelerator(H100, 80 << 30, 0.0, {"float32": 5e13}, uuid="GPU-x"), "no measured float16 peak"),
    (Accelerator(H100, 80 << 30, 0.0, {}, uuid="GPU-x"), "no measured float16 peak"),
    (Accelerator(H100, 80 << 30, 0.0, {"float16": 9e14}), "no UUID"),
])
def test_unknown_hardware_makes_an_official_run_unofficial(master_server, acc, why):
    sb = _official(master_server, [acc])
    assert not sb.official
    assert any("hardware" in r and why in r for r in sb.unofficial_reasons), list(sb.unofficial_reasons)


def test_a_cpu_worker_cannot_make_an_official_run(master_server):
    sb = _official(master_server, [])
    assert any("no accelerator" in r for r in sb.unofficial_reasons)


@pytest.mark.parametrize("acc", [Accelerator("Acme X1", 80 << 30, 0.0, {"float32": 1e16}, uuid="GPU-u"),
                                 Accelerator(H100, 80 << 30, 0.0, {}, uuid="GPU-u")])
def test_no_ceiling_above_the_tables_fastest_entry(master_server, small_graph, acc):
    """An unknown accelerator claiming 1e16, or an H100 with no peak, is bounded by the fastest
    float32 entry of the table: 64 of them cannot claim 64 x 1e16."""
    clock = FakeClock()
    h = master_server(clock=clock, heartbeat_interval_s=10_000.0)
    w, c = clients(h)
    wid = w.register(name="n", host="n", accelerators=[acc]).worker_id
    c.start_run(3600, profile="smoke")
    mid = w.submit_model(wid, small_graph.to_json(), small_graph.hash(), 0, 1, HP).model_id
    fc = count_flops(small_graph)
    top = peaks.largest_bound("float32")
    assert top < 1e16 / 8  # B200 TF32, the table's fastest: far below a flat 1e16 over 8 devices
    clock.t += 10
    n = int(top * 20 / fc.train)  # 20 s at the table's fastest in 10 s (+5 s slack)
    with pytest.raises(ApiError, match="above its accepted peak"):
        w.report_progress(wid, mid, 1, n, 0, 1, fc.ops(n, 0))
    n = int(top * 10 / fc.train)
    w.report_progress(wid, mid, 1, n, 0, 1, fc.ops(n, 0))
    assert c.scoreboard().implausible_reports == 1


def test_an_unknown_peak_does_not_lift_the_score_over_peak_rule():
    rules = scoring.PROFILES["smoke"]
    pts = [Point(t=100.0 + i, ops=10**16, worker_ops=10**16, accuracy=0.9) for i in range(200)]  # 1e16 ops/s
    kw = dict(rules=rules, precision="fp32", end=400.0, peaks=[0.0], datasheet_peaks=[0.0])
    assert scoring.score_run(100.0, 400.0, pts, **kw).valid  # no bound given: the rule has nothing to go by
    result = scoring.score_run(100.0, 400.0, pts, bounds=[peaks.largest_bound("float32")], **kw)
    assert not result.valid and any("bounding peaks" in r for r in result.invalid_reasons)
    result = scoring.score_run(100.0, 400.0, pts, bounds=[1e17], **kw)
    assert result.valid


def test_the_worker_reads_each_accelerators_uuid_and_pci_bus_id_from_nvml(monkeypatch):
    """worker/inventory.py through a stand-in for nvidia-ml-py (older versions return bytes)."""
    import sys
    import types

    from worker.inventory import nvml_accelerators

    fake = types.ModuleType("pynvml")
    devices = [(b"NVIDIA H100 80GB HBM3", "GPU-8f1c0000-aaaa", b"00000000:65:00.0"),
               ("NVIDIA H100 80GB HBM3", b"GPU-8f1c0001-bbbb", "00000000:66:00.0")]
    fake.nvmlInit = fake.nvmlShutdown = lambda: None
    fake.nvmlDeviceGetCount = lambda: len(devices)
    fake.nvmlDeviceGetHandleByIndex = lambda i: i
    fake.nvmlDeviceGetName = lambda h: devices[h][0]
    fake.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(total=80 << 30)
    fake.nvmlDeviceGetUUID = lambda h: devices[h][1]
    fake.nvmlDeviceGetPciInfo = lambda h: types.SimpleNamespace(busId=devices[h][2])
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    found = nvml_accelerators()
    assert [(a.model, a.uuid, a.pci_bus_id) for a in found] == [
        (H100, "GPU-8f1c0000-aaaa", "00000000:65:00.0"), (H100, "GPU-8f1c0001-bbbb", "00000000:66:00.0")]
