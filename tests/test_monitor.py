"""Resource sampling: psutil always, NVML when present."""

import sys
import threading
import time
import types

import psutil
import pytest

from worker import monitor
from worker.monitor import Monitor, ResourceSample, sample


@pytest.fixture(autouse=True)
def fresh_nvml():
    monitor._NVML.reset()
    yield
    monitor._NVML.reset()


def test_sample_has_sane_cpu_and_memory():
    s = sample()
    assert 0.0 <= s.cpu_percent <= 100.0
    total = psutil.virtual_memory().total
    assert s.memory_total_bytes == total
    assert 0 < s.memory_used_bytes <= total
    assert 0 < s.process_rss_bytes <= total
    assert 0 < s.memory_percent < 100
    assert abs(s.time - time.time()) < 5


def test_without_nvml_there_are_no_accelerators(monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails as on a machine without the package
    with caplog.at_level("INFO", logger="worker.monitor"):
        assert sample().accelerators == ()
        assert sample().accelerators == ()
    assert sum("NVML not available" in r.getMessage() for r in caplog.records) == 1  # said once


def test_nvml_without_driver_is_handled(monkeypatch):
    fake = types.ModuleType("pynvml")

    def init():
        raise RuntimeError("NVML Shared Library Not Found")

    fake.nvmlInit = init
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    assert sample().accelerators == ()


def fake_nvml(devices):
    m = types.ModuleType("pynvml")
    m.nvmlInit = lambda: None
    m.nvmlDeviceGetCount = lambda: len(devices)
    m.nvmlDeviceGetHandleByIndex = lambda i: i
    m.nvmlDeviceGetName = lambda h: devices[h][0]
    m.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=devices[h][1], memory=0)
    m.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(used=devices[h][2], total=devices[h][3], free=0)
    return m


def test_nvml_devices_are_sampled(monkeypatch):
    devs = [(b"NVIDIA A100-SXM4-40GB", 97, 30 * 2**30, 40 * 2**30), ("NVIDIA H100 80GB HBM3", 12, 2**30, 80 * 2**30)]
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(devs))
    acc = sample().accelerators
    assert [(a.index, a.name, a.utilization_percent, a.memory_used_bytes, a.memory_total_bytes) for a in acc] == [
        (0, "NVIDIA A100-SXM4-40GB", 97.0, 30 * 2**30, 40 * 2**30),
        (1, "NVIDIA H100 80GB HBM3", 12.0, 2**30, 80 * 2**30),
    ]


def test_monitor_sends_at_the_interval_and_stops_cleanly():
    sent: list[ResourceSample] = []
    times: list[float] = []

    def send(s):
        sent.append(s)
        times.append(time.monotonic())

    m = Monitor(interval_s=0.1, send=send).start()
    time.sleep(0.75)
    m.stop()
    assert not m.running
    n = len(sent)
    assert 4 <= n <= 9, n                           # one at start, then every 0.1 s (8 expected)
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert min(gaps) > 0.05
    assert all(isinstance(s, ResourceSample) for s in sent)
    time.sleep(0.3)
    assert len(sent) == n                           # nothing after stop()
    assert not any(t.name == "aiperf-monitor" for t in threading.enumerate())


def test_monitor_survives_a_failing_send():
    calls = []

    def send(s):
        calls.append(s)
        if len(calls) == 1:
            raise ConnectionError("master unreachable")

    with Monitor(interval_s=0.05, send=send, sampler=lambda: "s") as m:
        time.sleep(0.3)
    assert len(calls) >= 3 and m.samples_sent == len(calls) - 1


def test_monitor_arguments():
    with pytest.raises(ValueError):
        Monitor(interval_s=0, send=print)
    m = Monitor(interval_s=1, send=lambda s: None, sampler=lambda: "s").start()
    with pytest.raises(RuntimeError):
        m.start()
    m.stop()
