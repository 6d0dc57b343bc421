"""What the Master answers about a run: its models (a worker's history, pages), status, scoreboard
and time line.

A mixin, so that master/core/master.py keeps its size: `Master` gets these read-only answers from
here; they read the store and the Master's memory (live workers, the refusals counted) and change
nothing but the stored count of refused reports.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable

from aiperf import scoring, timeline
from aiperf.limits import CLOCK_SLACK_S, MAX_PAGE, MAX_TIMELINE_BUCKETS
from aiperf.ruleset import RULES_VERSION
from aiperf.states import ModelState
from master.core.audits import Audits
from master.core.officiality import unofficial_reasons
from master.core.replies import History, HyperparameterObservation, ModelPage, RunStatus, RunTimeline, Scoreboard
from master.core.run_rules import accelerator_peaks, datasheet_peaks, peak_bounds, peak_verdict, rules_of
from master.store.errors import InvalidArgument
from master.store.protocol import Store
from master.store.records import RunRecord, RunWorker, WorkerRecord

LIST_LIMIT_DEFAULT = 1000  # models per ListModels page when the caller names no limit
TIMELINE_BUCKETS = 200
TIMELINE_BUCKETS_MAX = MAX_TIMELINE_BUCKETS


class RunViews:
    """The Master's answers about a run (History, HyperparameterHistory, ListModels, GetRunStatus,
    GetScoreboard, GetTimeline)."""

    store: Store
    clock: Callable[[], float]
    audits: Audits
    resolve_run: Callable[..., RunRecord]
    window_end: Callable[[RunRecord], float]
    elapsed_s: Callable[[RunRecord], float]
    alive_count: Callable[[], int]
    is_alive: Callable[[int], bool]
    live_worker: Callable[[WorkerRecord], WorkerRecord]
    _store_refusals: Callable[[], None]
    _authorize: Callable[[int, str], None]

    def history(self, worker_id: int, run_id: int, since_model_id: int = 0, limit: int = 0, *,
                ranking: bool = True, credential: str) -> History:
        """The run's models after since_model_id (limit 0: all) and its DONE models ranked (or none)."""
        self._authorize(worker_id, credential)
        run = self.resolve_run(run_id)
        return History(run.id, self.store.models_since(run.id, since_model_id, limit),
                       self.store.ranked_done_ids(run.id) if ranking else [])

    def hyperparameter_history(self, worker_id: int, run_id: int, *,
                               credential: str) -> tuple[int, list[HyperparameterObservation]]:
        """The run's id and its DONE models' hyperparameters with their accuracy, ascending id."""
        self._authorize(worker_id, credential)
        run = self.resolve_run(run_id)
        return run.id, [HyperparameterObservation.of(m) for m in self.store.hyperparameter_history(run.id)]

    def list_models(self, run_id: int, state: str | None = None, limit: int = 0, offset: int = 0) -> ModelPage:
        """A page of the run's models (limit 0: LIST_LIMIT_DEFAULT; at most MAX_PAGE)."""
        run = self.resolve_run(run_id)
        if state is not None and state not in set(ModelState):
            raise InvalidArgument(f"unknown model state {state}")
        models, total = self.store.list_models(run.id, state, min(limit or LIST_LIMIT_DEFAULT, MAX_PAGE), offset)
        return ModelPage(run.id, models, total)

    def score(self, run: RunRecord, joined: list[RunWorker] | None = None) -> scoring.ScoreResult:
        """The run's score now (or at its stop); `joined`: its workers, when already read."""
        rules = rules_of(run)
        if run.started_at is None:
            return scoring.score_run(0.0, 0.0, [], rules, run.precision)
        joined = joined if joined is not None else self.store.run_workers(run.id)
        # the window ends at the stop, or at the deadline even before the run is stopped
        return scoring.score_run(
            run.started_at, self.clock(), self.store.timeline(run.id), rules, run.precision,
            end=run.stopped_at if run.stopped_at is not None else run.deadline, peaks=accelerator_peaks(run, joined),
            peak_slack_s=CLOCK_SLACK_S, datasheet_peaks=datasheet_peaks(run, joined).for_scoring(),
            bounds=peak_bounds(run, joined))

    def run_status(self, run_id: int) -> RunStatus:
        """The run (0: the current or latest one), its workers and model counts."""
        run = self.resolve_run(run_id)
        joined = self.store.run_workers(run.id)
        return RunStatus(
            run=run, master_time=self.clock(), elapsed_s=self.elapsed_s(run), workers_alive=self.alive_count(),
            workers_joined=len(joined), model_counts=self.store.count_models(run.id),
            unofficial_reasons=unofficial_reasons(run, joined),
        )

    def scoreboard(self, run_id: int) -> Scoreboard:
        """The run's score (0: the current or latest run) and everything printed with it."""
        run = self.resolve_run(run_id)
        self._store_refusals()  # the counts of refused reports, exact
        joined = self.store.run_workers(run.id)
        result = self.score(run, joined)
        audit = self.audits.regulated(run, result)
        result = self.audits.validity(run, rules_of(run), result, audit, joined)
        ranked = self.store.ranked_done_ids(run.id, limit=1)
        images_trained, images_validated = self.store.run_images(run.id)
        sheets = datasheet_peaks(run, joined)
        return Scoreboard(
            run=run, result=result, rules=rules_of(run),
            peak_flops=sum(accelerator_peaks(run, joined)) if result.efficiency_vs_measured is not None else None,
            datasheet_peak_flops=sheets.total, efficiency_unknown_reason=sheets.unknown_reason,
            scoring_rules_version=RULES_VERSION,
            peak_verdict=peak_verdict(run, joined), implausible_reports=sum(rw.implausible_reports for rw in joined),
            unofficial_reasons=unofficial_reasons(run, joined),
            flops_mismatch_reports=self.store.flops_mismatch_count(run.id),
            workers=[replace(rw, worker=self.live_worker(rw.worker)) for rw in joined],  # state: memory's
            workers_alive=sum(1 for rw in joined if self.is_alive(rw.worker.id)),
            model_counts=self.store.count_models(run.id), best_model_id=ranked[0] if ranked else None,
            images_trained=images_trained, images_validated=images_validated, audit=audit,
        )

    def timeline(self, run_id: int, max_points: int = 0, buckets: int = 0) -> RunTimeline:
        """FLOPS(t) at each report (max_points 0: all) and resource means in `buckets` time buckets (0: 200)."""
        run = self.resolve_run(run_id)
        if buckets > TIMELINE_BUCKETS_MAX:
            raise InvalidArgument(f"buckets must be at most {TIMELINE_BUCKETS_MAX}, got {buckets}")
        if run.started_at is None:
            return RunTimeline(run, [], [])
        end = self.window_end(run)
        curve = timeline.flops_curve(run.started_at, self.store.timeline(run.id), end=end, max_points=int(max_points))
        samples = [timeline.Sample(r.t, r.accelerator_index, r.accelerator_util, r.accelerator_memory_used,
                                   r.cpu_util, r.memory_used)
                   for r in self.store.resource_samples(run_id=run.id)]
        resources = timeline.resource_curve(run.started_at, samples, end, int(buckets) or TIMELINE_BUCKETS)
        return RunTimeline(run, curve, resources)
