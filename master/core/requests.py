"""What the Master takes: plain dataclasses, no protobuf.

The servicers (master/rpc/servicers.py) convert protobuf requests to these
(master/rpc/conversions.py); the Master never sees protobuf. What it returns is
in master/core/replies.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from master.store.errors import InvalidArgument

DEFAULT_WARMUP_ROUNDS = 5
DEFAULT_REPORT_INTERVAL_S = 30.0
DEFAULT_RESOURCE_INTERVAL_S = 30.0


@dataclass(frozen=True)
class ModelSubmission:
    """A model a worker is about to train (run_id 0: the current run; parent_id 0: none)."""

    worker_id: int
    run_id: int
    graph_json: str
    graph_hash: str
    parent_id: int
    round: int
    batch_size: int
    kernel_size: int
    queue: bool = False  # True: queued until its first report
    dataset: dict[str, Any] | None = None  # the dataset it trains on (DatasetInfo's fields); None: not reported
    inherited_from: int = 0  # 0: from scratch; else parent_id


@dataclass(frozen=True)
class AuditSubmission:
    """What `aiperf audit` found for a DONE model's stored weights (RecordAudit)."""

    model_id: int
    audited_accuracy: float | None  # None: the weights were not evaluated
    architecture_ok: bool
    verdict: str
    auditor_host: str
    validation_images: int
    detail: str = ""
    audited_images_per_second: float = 0.0  # the model's steps timed on one device of the auditor; 0: not timed
    auditor_hardware: str = ""              # that device's model (aiperf.audit.hardware_name)
    node_audit: bool = False  # timing and inventory of a drawn model on its worker's node (weights not read)
    node_accelerators: tuple[dict[str, Any], ...] = ()  # the node's accelerators (model, uuid) per NVML
    node_cpu_model: str = ""
    node_cpus: int = 0
    retrained_accuracy: float | None = None  # the first epoch re-trained from the model's seed; None: not


@dataclass(frozen=True)
class ProgressReport:
    """Images a worker processed since its previous report of the model."""

    worker_id: int
    model_id: int
    seq: int
    epoch: int
    images_trained: int
    images_validated: int
    val_accuracy: float | None  # a new observed validation accuracy
    worker_flops: int
    weights_sha256: str = ""  # at an epoch's end: the weights' digest (aiperf.weight_digest)

    def check_figures(self) -> None:
        """InvalidArgument unless each figure is in its range."""
        if self.seq < 1:
            raise InvalidArgument("seq must be >= 1")
        if self.images_trained < 0 or self.images_validated < 0:
            raise InvalidArgument(f"image counts must be >= 0, got trained={self.images_trained} "
                                  f"validated={self.images_validated}")
        if self.worker_flops < 0:
            raise InvalidArgument("worker_flops must be >= 0")
        if self.val_accuracy is not None and not (0.0 <= self.val_accuracy <= 1.0):
            raise InvalidArgument(f"val_accuracy must be in [0, 1], got {self.val_accuracy}")


@dataclass(frozen=True)
class ModelFinish:
    """The end of a model: state "done", "failed" or "cut"."""

    worker_id: int
    model_id: int
    state: str
    reason: str = ""
    best_accuracy: float | None = None
    predicted_accuracy: float | None = None
    checkpoint_uri: str = ""     # the model's weights in its worker's store; "" none
    checkpoint_sha256: str = ""
    undeleted: tuple[tuple[int, str], ...] = ()  # (model id, error): let go earlier, not deleted
    checkpoint_weights_sha256: str = ""  # the checkpoint's weights' digest: one its reports carried


@dataclass(frozen=True)
class ResourceSampleReport:
    """One resource sample as a worker sends it: taken `age_s` seconds before sending."""

    age_s: float
    accelerator_index: int  # -1: host-wide
    accelerator_util: float
    accelerator_memory_used: int
    cpu_util: float
    memory_used: int

    def check_figures(self) -> None:
        """InvalidArgument unless its age and utilizations are in their ranges."""
        if not math.isfinite(self.age_s) or self.age_s < 0:
            raise InvalidArgument("age_s must be >= 0")
        for name in ("accelerator_util", "cpu_util"):
            v = getattr(self, name)
            if not (0.0 <= v <= 1.0):
                raise InvalidArgument(f"{name} must be in [0, 1], got {v}")
