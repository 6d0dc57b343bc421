"""Resource sampling of a worker node (SPEC section 8).

`sample()` reads CPU and memory use through psutil and, where NVML is
available (nvidia-ml-py's ``pynvml`` and an NVIDIA driver), utilisation and
memory of every accelerator. Without NVML the accelerator list is empty; the
reason is logged once. `Monitor` samples in a background thread every
`interval_s` seconds (30 s by default) and hands each sample to `send`; a
failing `send` (say, the master is unreachable) is logged and sampling goes on.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

import psutil

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AcceleratorSample:
    index: int
    name: str
    utilization_percent: float     # 0..100, GPU busy time over NVML's last sample period
    memory_used_bytes: int
    memory_total_bytes: int


@dataclass(frozen=True)
class ResourceSample:
    time: float                    # Unix time of the sample (worker clock; informational)
    cpu_percent: float             # 0..100, whole node, all cores, since the previous sample
    memory_used_bytes: int         # whole node
    memory_total_bytes: int
    process_rss_bytes: int         # this worker process
    accelerators: tuple[AcceleratorSample, ...] = ()

    @property
    def memory_percent(self) -> float:
        return 100.0 * self.memory_used_bytes / self.memory_total_bytes if self.memory_total_bytes else 0.0


class _Nvml:
    """Lazy NVML session: initialised on first use, absent (and said so once) on failure."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._module: Any = None
        self._tried = False

    def module(self) -> Any:
        with self._lock:
            if not self._tried:
                self._tried = True
                try:
                    import pynvml

                    pynvml.nvmlInit()
                    self._module = pynvml
                except Exception as exc:  # noqa: BLE001 - ImportError or any NVMLError
                    log.info("NVML not available, no accelerator monitoring: %s", exc or type(exc).__name__)
            return self._module

    def reset(self) -> None:
        """Forget the session (tests; after a driver reload)."""
        with self._lock:
            self._module, self._tried = None, False


_NVML = _Nvml()
_CPU_PRIMED = False


def accelerators() -> tuple[AcceleratorSample, ...]:
    """Utilisation and memory of each NVIDIA accelerator; empty without NVML."""
    nvml = _NVML.module()
    if nvml is None:
        return ()
    out = []
    try:
        for i in range(nvml.nvmlDeviceGetCount()):
            h = nvml.nvmlDeviceGetHandleByIndex(i)
            name = nvml.nvmlDeviceGetName(h)
            if isinstance(name, bytes):  # older nvidia-ml-py returns bytes
                name = name.decode(errors="replace")
            util = nvml.nvmlDeviceGetUtilizationRates(h)
            mem = nvml.nvmlDeviceGetMemoryInfo(h)
            out.append(AcceleratorSample(index=i, name=str(name), utilization_percent=float(util.gpu),
                                         memory_used_bytes=int(mem.used), memory_total_bytes=int(mem.total)))
    except Exception as exc:  # noqa: BLE001 - a lost GPU must not kill the worker
        log.warning("NVML query failed: %s", exc)
    return tuple(out)


def sample() -> ResourceSample:
    """One sample of the node's CPU, memory and accelerators."""
    global _CPU_PRIMED
    if not _CPU_PRIMED:
        # psutil's first non-blocking reading is meaningless (0.0): measure a short window once.
        cpu = psutil.cpu_percent(interval=0.1)
        _CPU_PRIMED = True
    else:
        cpu = psutil.cpu_percent(interval=None)
    vm = psutil.virtual_memory()
    rss = psutil.Process().memory_info().rss
    return ResourceSample(time=time.time(), cpu_percent=float(cpu),
                          memory_used_bytes=int(vm.total - vm.available),
                          memory_total_bytes=int(vm.total), process_rss_bytes=int(rss),
                          accelerators=accelerators())


class Monitor:
    """Background sampler: `send(sample())` now and then every `interval_s` until `stop()`.

    Usable as a context manager. `sampler` is injectable for tests.
    """

    def __init__(self, interval_s: float = 30.0, send: Callable[[ResourceSample], None] | None = None,
                 *, sampler: Callable[[], ResourceSample] = sample) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be positive, got {interval_s}")
        if send is None:
            raise ValueError("Monitor needs a send callable")
        self.interval_s = interval_s
        self._send = send
        self._sampler = sampler
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.samples_sent = 0

    def start(self) -> "Monitor":
        if self._thread is not None:
            raise RuntimeError("monitor already started")
        self._thread = threading.Thread(target=self._run, name="aiperf-monitor", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float | None = 10.0) -> None:
        """Stop sampling; returns once the thread has ended (no `send` after this)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def __enter__(self) -> "Monitor":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            try:
                s = self._sampler()
                if self._stop.is_set():
                    break
                self._send(s)
                self.samples_sent += 1
            except Exception:  # noqa: BLE001 - keep sampling through transient failures
                log.warning("resource sample not sent", exc_info=True)
            # Fixed schedule, so a slow send does not stretch the interval.
            next_at += self.interval_s
            delay = next_at - time.monotonic()
            if delay < 0:
                next_at, delay = time.monotonic(), 0.0
            self._stop.wait(delay)
