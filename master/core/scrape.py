"""What the master's /metrics computes when Prometheus scrapes: each run's score,
accuracy, elapsed time, validity and efficiencies (master/observability/metrics.py RunCollector).

The runs scraped are the active ones, or the latest when none is active, so a
dashboard keeps the final figures of the run that just ended.
"""

from __future__ import annotations

from master.core.master import Master
from master.observability.metrics import RunGauges
from master.store.protocol import RunStore


def run_gauges(m: Master, runs: RunStore) -> list[RunGauges]:
    """The figures of the active runs (or of the latest run), scored as the scoreboard scores them."""
    active = runs.active_runs()
    if not active:
        latest = runs.latest_run()
        active = [latest] if latest is not None else []
    out = []
    for run in active:
        result = m.score(run)
        out.append(RunGauges(
            run_id=run.id, profile=run.profile, elapsed_s=m.elapsed_s(run), score=result.score,
            regulated_score=result.regulated_score, valid_flops=result.valid_flops,
            best_accuracy=result.best_accuracy, valid=result.valid, provisional=result.provisional,
            efficiency=result.efficiency, efficiency_vs_measured=result.efficiency_vs_measured,
        ))
    return out


def watch(m: Master, runs: RunStore) -> None:
    """Compute the master's run gauges (over the runs of `runs`) at each scrape."""
    m.metrics.watch_runs(lambda: run_gauges(m, runs))
