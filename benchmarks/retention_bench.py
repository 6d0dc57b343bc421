"""What a FinishModel's retention costs as the run grows (master/core/retention.py).

For each size N, a run with N done models (`--reports` accuracy reports each, every
checkpoint but the newest `--live` ones already deleted) is written straight into a
fresh database (SQLite in a temporary file; PostgreSQL too with `--postgres-url` or
AIPERF_TEST_POSTGRES_URL, in a schema of its own that it drops after). Then the
retention decision for one worker is timed, median of `--repeats`, two ways in the
same process on the same database:

- baseline: what retention read before: every model of the run, ranked in Python,
  and every accuracy report of the run folded into the record holders;
- now: `master.core.retention.release_checkpoints` (models holding a live checkpoint or
  open, the top `keep` ranked by the database, the record holders as the master
  keeps them: read once, as after a restart, outside the timing).

Both must decide the same; the decision is not applied (nothing is marked deleted).
Ends with `RESULT retention_ms_<N>=... retention_baseline_ms_<N>=... retention_speedup_<N>=...`
per size and backend (`_postgres` appended for PostgreSQL).

Usage: .venv/bin/python -m benchmarks.retention_bench [--sizes 1000,10000] [--reports 10] [--live 30]
       [--repeats 5] [--postgres-url URL]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from aiperf.retention import StoredModel, checkpoints_to_delete, record_holders
from aiperf.scoring import model_rank_key
from benchmarks.pg_schema import temporary_schema
from master.core.retention import AccuracyRecords, keep_checkpoints, release_checkpoints
from master.store.records import NewRun, WorkerInput
from master.store.sql.sql_store import SqlStore
from master.store.sql.tables import ModelRow, ProgressRow

KEEP = 10


def build_run(store: SqlStore, models: int, reports: int, live: int) -> tuple[Any, int]:
    """A started run with `models` done models and their reports, inserted in bulk; (run, worker id)."""
    run = store.create_run(NewRun("smoke", 1, 3600.0, "fp32", {"limits": {}, "keep_checkpoints": KEEP}, {}), 1.0,
                           allow_concurrent=True)  # a run per size, in one database
    run = store.start_run(run.id, 1.0)
    worker = store.register_worker(WorkerInput(f"bench-{run.id}", "bench", [], 1, 1, {}), 1.0)[0].id
    model_rows, progress_rows = [], []
    for i in range(models):
        accuracy = 0.1 + 0.8 * ((i * 7919) % 1000) / 1000  # a shuffled spread: records all along the run
        model_rows.append(dict(
            run_id=run.id, parent_id=None, worker_id=worker, round=i + 1, graph_json="{}", graph_hash=f"{i:064x}",
            batch_size=32, kernel_size=3, state="done", reason="", created_at=2.0 + i, finished_at=3.0 + i,
            best_accuracy=accuracy, predicted_accuracy=accuracy, flops_per_train_image=30, flops_per_eval_image=10,
            images_trained=reports, images_validated=reports, epochs=reports,
            checkpoint_uri=f"file:///c/model-{i}.weights.h5", checkpoint_sha256="0" * 64,
            checkpoint_deleted=i < models - live))
    with store.engine.begin() as conn:
        conn.execute(ModelRow.__table__.insert(), model_rows)
        ids = [row.id for row in conn.execute(ModelRow.__table__.select().with_only_columns(ModelRow.id)
                                              .where(ModelRow.run_id == run.id).order_by(ModelRow.id))]
        for i, mid in enumerate(ids):
            final = model_rows[i]["best_accuracy"]
            for e in range(reports):
                progress_rows.append(dict(run_id=run.id, model_id=mid, worker_id=worker, seq=e + 1,
                                          t=2.0 + i + e / reports, epoch=e + 1, images_trained=1, images_validated=1,
                                          accuracy=final * (e + 1) / reports, worker_flops=40, master_flops=40,
                                          flops_mismatch=False))
            if len(progress_rows) >= 50_000:
                conn.execute(ProgressRow.__table__.insert(), progress_rows)
                progress_rows = []
        if progress_rows:
            conn.execute(ProgressRow.__table__.insert(), progress_rows)
    return store.get_run(run.id), worker


def python_ranking(models: list[Any]) -> list[int]:
    """Ids of the DONE models best first, sorted here by aiperf.scoring.model_rank_key."""
    return [m.id for m in sorted((m for m in models if m.state == "done"),
                                 key=lambda m: model_rank_key(m.id, m.predicted_accuracy, m.best_accuracy))]


def whole_history(store: SqlStore, run: Any, worker: int) -> list[tuple[int, str]]:
    """The baseline: the rule over every model and every accuracy report of the run."""
    models, _ = store.list_models(run.id, limit=10**9)
    everything = [StoredModel(m.id, m.parent_id, m.state, bool(m.checkpoint_uri) and not m.checkpoint_deleted)
                  for m in models]
    doomed = set(checkpoints_to_delete(everything, python_ranking(models), keep_checkpoints(run),
                                       record_holders((m, a) for m, a, _ in store.accuracy_reports(run.id))))
    return [(m.id, m.checkpoint_uri) for m in models if m.worker_id == worker and m.id in doomed]


class _Dry:
    """The store as release_checkpoints sees it, minus the write (so every repeat decides the same)."""

    def __init__(self, store: SqlStore) -> None:
        self._store = store

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def mark_checkpoints_deleted(self, model_ids: Any) -> None:
        pass


def median_ms(fn: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times), out


def measure(url: str, sizes: list[int], reports: int, live: int, repeats: int, suffix: str) -> list[str]:
    results = []
    store = SqlStore(url)
    try:
        for n in sizes:
            run, worker = build_run(store, n, reports, live)
            records = AccuracyRecords(store)
            records.holders(run.id)  # read once, as a master does at its first FinishModel of the run
            dry = _Dry(store)
            base_ms, expected = median_ms(lambda: whole_history(store, run, worker), repeats)
            now_ms, got = median_ms(lambda: release_checkpoints(dry, run, worker, records), repeats)
            if got != expected:
                raise SystemExit(f"retention decided differently at N={n}: {got} vs {expected}")
            print(f"{suffix.lstrip('_') or 'sqlite':>8} N={n:>6} models, {n * reports:>7} reports: baseline {base_ms:8.2f} ms, "
                  f"now {now_ms:7.2f} ms, {base_ms / now_ms:6.1f}x; lets go of {len(got)}")
            results.append(f"retention_ms_{n}{suffix}={now_ms:.3f} retention_baseline_ms_{n}{suffix}={base_ms:.3f} "
                           f"retention_speedup_{n}{suffix}={base_ms / now_ms:.2f}")
    finally:
        store.close()
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,10000", help="done models per run, comma-separated")
    parser.add_argument("--reports", type=int, default=10, help="accuracy reports per model")
    parser.add_argument("--live", type=int, default=30, help="the newest models whose checkpoint is not deleted")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--postgres-url", default=os.environ.get("AIPERF_TEST_POSTGRES_URL", ""))
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    with tempfile.TemporaryDirectory(prefix="aiperf-retention-") as tmp:
        results = measure(f"sqlite:///{Path(tmp) / 'bench.db'}", sizes, args.reports, args.live, args.repeats, "")
    if args.postgres_url:
        with temporary_schema(args.postgres_url) as url:
            results += measure(url, sizes, args.reports, args.live, args.repeats, "_postgres")
    for line in results:
        print("RESULT " + line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
