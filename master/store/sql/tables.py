"""SQLAlchemy 2 tables of the master. Used only by master/store/sql/sql_store.py and the
Alembic migrations; times are master-clock seconds since the Unix epoch."""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    false,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    pass


class RunRow(Base):
    __tablename__ = "runs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    state: Mapped[str] = mapped_column(String(16), index=True)
    profile: Mapped[str] = mapped_column(String(16))
    seed: Mapped[int] = mapped_column(BigInteger)
    duration_s: Mapped[float] = mapped_column(Float)
    precision: Mapped[str] = mapped_column(String(16))
    config: Mapped[dict[str, Any]] = mapped_column(JSON)  # limits, warm-up, intervals, min_workers
    software: Mapped[dict[str, str]] = mapped_column(JSON)  # the master's software versions
    rules_version: Mapped[str | None] = mapped_column(String(64), nullable=True)  # aiperf/ruleset.py; NULL: before
    created_at: Mapped[float] = mapped_column(Float)
    started_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    deadline: Mapped[float | None] = mapped_column(Float, nullable=True)
    stopped_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    finished_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    stop_reason: Mapped[str] = mapped_column(String(200), default="")


class MasterLifeRow(Base):
    """One life of the master process: when it started and when it was last known alive.

    The gap between one life's alive_at and the next one's started_at is an
    outage (the master was down); see Store.record_master_start."""

    __tablename__ = "master_lives"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    started_at: Mapped[float] = mapped_column(Float)
    alive_at: Mapped[float] = mapped_column(Float)


class WorkerRow(Base):
    __tablename__ = "workers"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(255), unique=True)
    host: Mapped[str] = mapped_column(String(255))
    accelerators: Mapped[list[dict[str, Any]]] = mapped_column(JSON)
    cpus: Mapped[int] = mapped_column(Integer)
    memory_bytes: Mapped[int] = mapped_column(BigInteger)
    software: Mapped[dict[str, str]] = mapped_column(JSON)
    state: Mapped[str] = mapped_column(String(16))
    registered_at: Mapped[float] = mapped_column(Float)
    last_heartbeat: Mapped[float] = mapped_column(Float)
    # SHA-256 (hex) of the worker's credential, never the credential itself; NULL
    # for a worker registered before credentials (migration 0003).
    credential_hash: Mapped[str | None] = mapped_column(String(64), nullable=True)
    # A worker without accelerators: its CPU's measured GEMM rates and their checks
    # (migration 0004; NULL: none measured).
    cpu: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    # The framework it trains with (migration 0009; NULL: registered before, on TensorFlow).
    backend: Mapped[str | None] = mapped_column(String(16), nullable=True)


class RunWorkerRow(Base):
    """A worker that took part in a run, with its inventory when it joined."""

    __tablename__ = "run_workers"

    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id"), primary_key=True)
    worker_id: Mapped[int] = mapped_column(ForeignKey("workers.id"), primary_key=True)
    joined_at: Mapped[float] = mapped_column(Float)
    inventory: Mapped[dict[str, Any]] = mapped_column(JSON)
    # The dataset the worker reported for this run (DatasetInfo's fields; NULL: none)
    # and its reports refused as implausible (migration 0004).
    dataset: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    implausible_reports: Mapped[int] = mapped_column(Integer, default=0, server_default="0")


class ModelRow(Base):
    __tablename__ = "models"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id"), index=True)
    parent_id: Mapped[int | None] = mapped_column(ForeignKey("models.id"), nullable=True)
    worker_id: Mapped[int] = mapped_column(ForeignKey("workers.id"), index=True)
    round: Mapped[int] = mapped_column(Integer)
    graph_json: Mapped[str] = mapped_column(Text)
    graph_hash: Mapped[str] = mapped_column(String(64), index=True)
    batch_size: Mapped[int] = mapped_column(Integer)
    kernel_size: Mapped[int] = mapped_column(Integer)
    state: Mapped[str] = mapped_column(String(16), index=True)
    reason: Mapped[str] = mapped_column(String(500), default="")
    created_at: Mapped[float] = mapped_column(Float)
    started_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    finished_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    best_accuracy: Mapped[float | None] = mapped_column(Float, nullable=True)
    predicted_accuracy: Mapped[float | None] = mapped_column(Float, nullable=True)
    flops_per_train_image: Mapped[int] = mapped_column(BigInteger)
    flops_per_eval_image: Mapped[int] = mapped_column(BigInteger)
    images_trained: Mapped[int] = mapped_column(BigInteger, default=0)
    images_validated: Mapped[int] = mapped_column(BigInteger, default=0)
    epochs: Mapped[int] = mapped_column(Integer, default=0)
    # the weights its worker stored (DONE models; migration 0005): URI and SHA-256 (hex)
    checkpoint_uri: Mapped[str | None] = mapped_column(String(1024), nullable=True)
    checkpoint_sha256: Mapped[str | None] = mapped_column(String(64), nullable=True)
    checkpoint_deleted: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    # why its worker could not delete it when retention let it go (migration 0008); NULL: none reported
    checkpoint_delete_error: Mapped[str | None] = mapped_column(String(500), nullable=True)
    # the model whose weights it started from (its parent); NULL: trained from scratch
    inherited_from: Mapped[int | None] = mapped_column(Integer, nullable=True)


class ProgressRow(Base):
    __tablename__ = "progress"
    __table_args__ = (
        UniqueConstraint("model_id", "seq", name="uq_progress_model_seq"),
        Index("ix_progress_run_t", "run_id", "t"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id"))
    model_id: Mapped[int] = mapped_column(ForeignKey("models.id"))
    worker_id: Mapped[int] = mapped_column(ForeignKey("workers.id"))
    seq: Mapped[int] = mapped_column(BigInteger)
    t: Mapped[float] = mapped_column(Float)
    epoch: Mapped[int] = mapped_column(Integer)
    images_trained: Mapped[int] = mapped_column(BigInteger)
    images_validated: Mapped[int] = mapped_column(BigInteger)
    accuracy: Mapped[float | None] = mapped_column(Float, nullable=True)
    worker_flops: Mapped[int] = mapped_column(BigInteger)
    master_flops: Mapped[int] = mapped_column(BigInteger)
    flops_mismatch: Mapped[bool] = mapped_column(Boolean)
    # the weights' digest at an epoch's end (aiperf.weight_digest), stamped with t; "" in other reports
    weights_sha256: Mapped[str] = mapped_column(String(64), server_default="")


class ResourceSampleRow(Base):
    __tablename__ = "resource_samples"
    __table_args__ = (Index("ix_resource_worker_t", "worker_id", "t"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    worker_id: Mapped[int] = mapped_column(ForeignKey("workers.id"))
    run_id: Mapped[int | None] = mapped_column(ForeignKey("runs.id"), nullable=True, index=True)
    t: Mapped[float] = mapped_column(Float)
    accelerator_index: Mapped[int] = mapped_column(Integer)
    accelerator_util: Mapped[float] = mapped_column(Float)
    accelerator_memory_used: Mapped[int] = mapped_column(BigInteger)
    cpu_util: Mapped[float] = mapped_column(Float)
    memory_used: Mapped[int] = mapped_column(BigInteger)


class AuditRow(Base):
    """One re-evaluation of a DONE model's stored weights (`aiperf audit`; migration 0006)."""

    __tablename__ = "audits"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id"), index=True)
    model_id: Mapped[int] = mapped_column(ForeignKey("models.id"), index=True)
    audited_at: Mapped[float] = mapped_column(Float)
    auditor_host: Mapped[str] = mapped_column(String(255))
    verdict: Mapped[str] = mapped_column(String(32))
    architecture_ok: Mapped[bool] = mapped_column(Boolean)
    claimed_accuracy: Mapped[float | None] = mapped_column(Float, nullable=True)
    audited_accuracy: Mapped[float | None] = mapped_column(Float, nullable=True)  # NULL: not evaluated
    validation_images: Mapped[int] = mapped_column(BigInteger)
    tolerance: Mapped[float] = mapped_column(Float)
    detail: Mapped[str] = mapped_column(String(500), default="")
    # the throughput check (migration 0007; "" and 0 in audits recorded before it)
    throughput: Mapped[str] = mapped_column(String(32), default="")
    worker_hardware: Mapped[str] = mapped_column(String(300), default="")
    auditor_hardware: Mapped[str] = mapped_column(String(300), default="")
    claimed_images_per_second: Mapped[float] = mapped_column(Float, default=0.0)
    audited_images_per_second: Mapped[float] = mapped_column(Float, default=0.0)
    worker_flops: Mapped[float] = mapped_column(Float, default=0.0)
    audited_flops: Mapped[float] = mapped_column(Float, default=0.0)
    throughput_tolerance: Mapped[float] = mapped_column(Float, default=0.0)
    # a node audit and its inventory check (migration 0012; false and "" before it)
    node_audit: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    inventory: Mapped[str] = mapped_column(String(300), default="", server_default="")
