"""What this node has: accelerators (NVML, else the backend's framework), CPUs, memory, software."""

from __future__ import annotations

import logging
import platform
from dataclasses import dataclass, field
from importlib import metadata

import psutil

log = logging.getLogger(__name__)

SOFTWARE = ("aiperf", "tensorflow", "jax", "jaxlib", "keras", "nni", "hyperopt", "numpy", "grpcio")


@dataclass(frozen=True)
class AcceleratorInfo:
    model: str
    memory_bytes: int
    uuid: str = ""        # NVML's, "" when the framework listed it
    pci_bus_id: str = ""


@dataclass(frozen=True)
class Inventory:
    accelerators: tuple[AcceleratorInfo, ...]
    cpus: int
    memory_bytes: int
    software: dict[str, str] = field(default_factory=dict)
    cpu_model: str = ""  # "" when the system does not say
    backend: str = ""    # the framework the worker trains with (worker.backend)


def nvml_accelerators() -> list[AcceleratorInfo] | None:
    """GPUs as NVML sees them; None when NVML (the NVIDIA driver) is absent."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # pynvml.NVMLError: no driver on this node
        return None
    try:
        out = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetName(handle)
            out.append(AcceleratorInfo(_text(name), int(pynvml.nvmlDeviceGetMemoryInfo(handle).total),
                                       _text(pynvml.nvmlDeviceGetUUID(handle)),
                                       _text(pynvml.nvmlDeviceGetPciInfo(handle).busId)))
        return out
    finally:
        pynvml.nvmlShutdown()


def _text(value: str | bytes) -> str:
    """An NVML string (older nvidia-ml-py returns bytes)."""
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def tensorflow_accelerators() -> list[AcceleratorInfo]:
    """GPUs TensorFlow can use (names from device details; memory unknown: 0)."""
    try:
        import tensorflow as tf
    except ImportError:
        return []
    out = []
    for dev in tf.config.list_physical_devices("GPU"):
        details = tf.config.experimental.get_device_details(dev)
        out.append(AcceleratorInfo(details.get("device_name", dev.name), 0))
    return out


def jax_accelerators() -> list[AcceleratorInfo]:
    """Accelerators JAX can use (its default platform when that is not the CPU; memory from the
    device's statistics where it has them, else 0)."""
    try:
        import jax
    except ImportError:
        return []
    out = []
    for dev in jax.local_devices():
        if dev.platform == "cpu":
            continue
        try:
            memory = int((dev.memory_stats() or {}).get("bytes_limit", 0))
        except Exception:  # noqa: BLE001 - a platform without statistics
            memory = 0
        out.append(AcceleratorInfo(str(dev.device_kind), memory))
    return out


def cpu_model(cpuinfo: str = "/proc/cpuinfo") -> str:
    """The CPU's model name: Linux's /proc/cpuinfo "model name" line (x86), "Model" or "Hardware"
    (Arm), else what `platform` says ("" when nothing does)."""
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Model", "Hardware") and value.strip():
                    return " ".join(value.split())
    except OSError:
        pass
    return " ".join((platform.processor() or platform.machine()).split())


def software_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in SOFTWARE:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return versions


def inventory() -> Inventory:
    from worker import backend

    accelerators = nvml_accelerators()
    if accelerators is None:
        accelerators = jax_accelerators() if backend.name() == "jax" else tensorflow_accelerators()
    return Inventory(
        backend=backend.name(),
        accelerators=tuple(accelerators),
        cpus=psutil.cpu_count(logical=True) or 1,
        memory_bytes=int(psutil.virtual_memory().total),
        software=software_versions(),
        cpu_model=cpu_model(),
    )


# Input pipeline sizing (benchmarks/data_bench.py, docs/benchmarks.md): one H100 training
# ResNet-50 in mixed precision consumes about 3,000 images/s; the ImageNet JPEG pipeline
# decodes and augments at least 450 images per CPU-second (484-538 measured on a slow shared
# 2-core machine, where the textbook tf.data pipeline does 303-331).
ACCELERATOR_IMAGES_PER_S = 3000
PIPELINE_IMAGES_PER_CPU_SECOND = 450


def input_cores_needed(accelerators: int, images_per_s: float = ACCELERATOR_IMAGES_PER_S,
                       per_core: float = PIPELINE_IMAGES_PER_CPU_SECOND) -> int:
    """Cores the input pipeline needs to keep `accelerators` fed, plus one for the rest of the worker."""
    if accelerators <= 0:
        return 1
    return int(-(-accelerators * images_per_s // per_core)) + 1


def core_shortage(inv: Inventory) -> str:
    """A one-line warning when the node has too few cores for its accelerators; "" otherwise."""
    needed = input_cores_needed(len(inv.accelerators))
    if not inv.accelerators or inv.cpus >= needed:
        return ""
    return (f"{inv.cpus} CPUs for {len(inv.accelerators)} accelerators: an ImageNet input pipeline at "
            f"{PIPELINE_IMAGES_PER_CPU_SECOND} images/CPU-s needs about {needed} to feed "
            f"{ACCELERATOR_IMAGES_PER_S} images/s each; training will wait for data")
