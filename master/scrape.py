"""What the master's /metrics computes when Prometheus scrapes: each run's score,
accuracy, elapsed time and validity (master/metrics.py RunCollector), and the
hook that counts the database driver's errors (aiperf_database_errors).

The runs scraped are the active ones, or the latest when none is active, so a
dashboard keeps the final figures of the run that just ended.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Engine

from master.master import Master
from master.metrics import MasterMetrics, RunGauges


def run_gauges(m: Master) -> list[RunGauges]:
    """The figures of the active runs (or of the latest run), scored as the scoreboard scores them."""
    runs = m.store.active_runs()
    if not runs:
        latest = m.store.latest_run()
        runs = [latest] if latest is not None else []
    out = []
    for run in runs:
        result = m.score(run)
        out.append(RunGauges(
            run_id=run.id, profile=run.profile, elapsed_s=m.elapsed_s(run), score=result.score,
            regulated_score=result.regulated_score, valid_flops=result.valid_flops,
            best_accuracy=result.best_accuracy, valid=result.valid, provisional=result.provisional,
        ))
    return out


def count_database_errors(engine: Engine, metrics: MasterMetrics) -> None:
    """Count every error the database driver raises on `engine` (SQLAlchemy's handle_error
    event: RPCs, the tick and the progress writer alike)."""

    def on_error(_context: Any) -> None:
        metrics.database_errors.inc()

    event.listen(engine, "handle_error", on_error)


def watch(m: Master, engine: Engine) -> None:
    """Wire the master's scrape-time run gauges and its database-error counter."""
    m.metrics.watch_runs(lambda: run_gauges(m))
    count_database_errors(engine, m.metrics)
