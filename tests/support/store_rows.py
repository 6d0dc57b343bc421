"""Rows put straight into a store (no master): a started run, a worker, a model, a report."""

from __future__ import annotations

from typing import Any

from master.store.records import NewModel, NewRun, ProgressInput, WorkerInput
from master.store.sql.sql_store import SqlStore


def started_run(store: SqlStore, now: float = 100.0, **kw: Any) -> int:
    """A smoke run created and started at `now`: its id."""
    spec = NewRun(profile="smoke", seed=7, duration_s=600.0, precision="fp32",
                  config={"limits": {}, "min_running_time_s": 120.0}, software={"aiperf": "0.1.0"})
    run = store.create_run(spec, now, **kw)
    return store.start_run(run.id, now).id


def registered_worker(store: SqlStore, name: str = "node-1", now: float = 100.0) -> int:
    """A worker with one V100 registered at `now`: its id."""
    w, _ = store.register_worker(
        WorkerInput(name=name, host=name, accelerators=[{"model": "V100", "memory_bytes": 32 << 30, "peak_flops": 1e14}],
                    cpus=8, memory_bytes=64 << 30, software={"tensorflow": "2.21"}), now)
    return w.id


def added_model(store: SqlStore, run_id: int, worker_id: int, parent: int | None = None, state: str = "training") -> int:
    """A model of 30/10 FLOPs per image added at 101: its id."""
    return store.add_model(NewModel(run_id=run_id, parent_id=parent, worker_id=worker_id, round=1, graph_json="{}",
                                    graph_hash="ab" * 32, batch_size=32, kernel_size=3, state=state,
                                    flops_per_train_image=30, flops_per_eval_image=10), 101.0).id


def progress_row(model_id: int, worker_id: int, seq: int, t: float, trained: int = 100,
                 acc: float | None = None) -> ProgressInput:
    """A report of `trained` images at `t`, its FLOPs counted alike by the worker and the master."""
    return ProgressInput(model_id=model_id, worker_id=worker_id, seq=seq, t=t, epoch=1, images_trained=trained,
                         images_validated=0, val_accuracy=acc, worker_flops=30 * trained, master_flops=30 * trained,
                         flops_mismatch=False)
