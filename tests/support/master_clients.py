"""A test master's clients and what most tests send it: the two clients without retries, a
registered worker, the hyperparameters of a submission, an official run's dataset; its /metrics
scraped; and the one wait for a condition the tests poll."""

from __future__ import annotations

import time
import urllib.request
from typing import Any, Callable

from aiperf.api.client import Accelerator, ControlClient, WorkerClient
from aiperf.hyperparameters import Hyperparameters

HP = Hyperparameters(32, 3)
# what an official run's worker reports of its dataset: ImageNet-1k's split sizes (docs/spec.md)
IMAGENET = {"kind": "imagenet-tfrecord", "train_images": 1_281_167, "validation_images": 50_000,
            "num_classes": 1000, "image_size": 224, "fingerprint": "ab" * 32}
H100 = "NVIDIA H100 80GB HBM3"
H100_PEAKS = {"float16": 9e14, "bfloat16": 9e14, "float32": 4e14}  # measured, within the datasheet
AUDIT_TOKENS = {"worker_token": "audit-worker", "admin_token": "audit-admin"}  # of the audit tests' masters


def clients(h: Any) -> tuple[WorkerClient, ControlClient]:
    """The worker and control clients of the test master `h`, without retries."""
    return WorkerClient(h.address, h.worker_token, retries=0), ControlClient(h.address, h.admin_token, retries=0)


def register(w: WorkerClient, name: str = "node-1", peak: float = 0.0) -> int:
    """A worker with two V100s (peak: each one's measured peak, 0 for none); its id."""
    reg = w.register(name=name, host=name, accelerators=[Accelerator("Tesla V100", 32 << 30, peak)] * 2,
                     cpus=16, memory_bytes=128 << 30, software={"tensorflow": "2.21.0"})
    return reg.worker_id


def h100s(*uuids: str, model: str = H100) -> list[Accelerator]:
    """One H100 (80 GiB, peaks within the datasheet) per NVML UUID."""
    return [Accelerator(model, 80 << 30, 0.0, H100_PEAKS, uuid=u) for u in uuids]


def wait_for(cond: Callable[[], Any], timeout: float = 10.0, what: str = "condition", interval: float = 0.02) -> None:
    """Poll `cond` until it is true; AssertionError naming `what` after `timeout` seconds."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what}")


def scrape(port: int) -> dict[str, float]:
    """{series with labels: value} of the master's /metrics."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out
