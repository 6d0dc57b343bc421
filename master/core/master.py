"""The Master: run lifecycle, workers, verified FLOP accounting, scores.

`Master` holds the logic and the in-memory caches (the workers' heartbeats in master/core/heartbeats.py, FLOP
counts per model, the current run). It takes and returns plain types (master/core/requests.py,
master/store/records.py); the servicers convert protobuf. All truth lives in the store: a restarted master
continues a run where it stopped. Whether a model is the reporting worker's is checked by the store, inside the
transaction that records the report or the finish. Whether a call comes from the worker it names is checked here,
in `_authorize`, by every worker method but `register` (master/core/identity.py).

FLOPs are counted by the master, never taken from workers: at submission the graph JSON -> Graph.from_json ->
with_inserted_kernel(graph, kernel_size) -> count_flops gives the per-image counts stored with the model; every
report is counted as train * images_trained + eval * images_validated from them. The worker's own figure is
stored next to it and a disagreement above 1% is flagged.

The master's clock defines a run's window [started_at, deadline]. Reports are stamped on receipt; one received
after the deadline (or a stop) is recorded but not scored. The master stamps its liveness in the store every
ALIVE_STAMP_S; on start it records the outage since the last stamp, and a run whose deadline passed meanwhile is
stopped at its deadline before any request is served (the store never sets stopped_at after the deadline).
"""
from __future__ import annotations

import asyncio
import collections
import logging
import secrets
import threading
import time
from concurrent.futures import Executor
from dataclasses import replace
from typing import Any, Callable, Sequence

from aiperf import scoring
from aiperf.api import bounds
from aiperf.flops import count_flops
from aiperf.graph import with_inserted_kernel
from aiperf.hyperparameters import HyperparameterError, Hyperparameters
from aiperf.limits import MAX_OPS_PER_REPORT
from aiperf.ruleset import RULES_VERSION
from aiperf.run_spec import RunSpec
from aiperf.states import FINISHED_MODEL_STATES, OPEN_MODEL_STATES, ModelState, RunState, WorkerState
from master.core import node_audits, restart, retention, weight_lineage
from master.core.audits import Audits
from master.core.budget import ImplausibleReport, WorkerBudgets
from master.core.budget import ModelFlops as _ModelFlops
from master.core.devices import DeviceOwners
from master.core.heartbeats import Heartbeats
from master.core.identity import WorkerCredentials, credential_hash
from master.core.officiality import run_config
from master.core.operations import RunOperations
from master.core.progress_writer import ProgressWriter
from master.core.replies import Registration
from master.core.requests import ModelFinish, ModelSubmission, ProgressReport, ResourceSampleReport
from master.core.resends import ResentReports
from master.core.roster import Roster
from master.core.run_rules import check_accelerators, parse_graph, with_checked_peaks, worker_budget
from master.core.run_views import RunViews
from master.core.submission_rules import check_submission
from master.core.versions import software_versions
from master.observability.metrics import MasterMetrics
from master.store.errors import FailedPrecondition, InvalidArgument, NotFound, PermissionDenied, ResendNotRecorded
from master.store.protocol import Store
from master.store.records import (
    ModelEnd,
    ModelRecord,
    NewModel,
    NewRun,
    ProgressInput,
    ProgressResult,
    ResourceSampleInput,
    RunRecord,
    WorkerInput,
    WorkerRecord,
)

log = logging.getLogger(__name__)

HEARTBEAT_FLUSH_MAX_S = 5.0
# open models whose FLOPs and busy_until stay in memory: one per worker, for 10,000s of workers
# (an evicted entry costs a database read on the report path and restarts its busy_until)
FLOP_CACHE_SIZE = 1 << 17
# the model counts of the metrics: a query over the run's models (scrapes come every 15-30 s)
METRICS_S = 5.0
ALIVE_STAMP_S = 1.0  # liveness stamp period: an outage's start is known to within this (plus a tick)


class Master(RunViews):  # its answers about a run: master/core/run_views.py
    """The master's logic. Thread-safe; `tick()` is called periodically by
    the server's background thread (deadlines, lost workers, metrics)."""

    def __init__(
        self,
        store: Store,
        heartbeat_interval_s: float = 5.0,
        stop_grace_s: float = 300.0,
        clock: Callable[[], float] = time.time,
        metrics: MasterMetrics | None = None,
        resume_outage_s: float = restart.RESUME_OUTAGE_S,
    ) -> None:
        if heartbeat_interval_s <= 0:
            raise ValueError("heartbeat interval must be positive")
        self.store = store
        self.heartbeat_interval_s = heartbeat_interval_s
        self.stop_grace_s = stop_grace_s
        self.clock = clock
        self.metrics = metrics or MasterMetrics()
        # heartbeats are written lazily, at most this long after they came (see Heartbeats)
        self.heartbeat_flush_s = min(heartbeat_interval_s, HEARTBEAT_FLUSH_MAX_S)
        self._flushed_at = time.monotonic()
        self._lock = threading.RLock()
        self._tick_lock = threading.Lock()
        self._flops: collections.OrderedDict[int, _ModelFlops] = collections.OrderedDict()
        self.budgets = WorkerBudgets(lambda w, r: worker_budget(store, w, r))
        self._datasets: dict[tuple[int, int], dict[str, Any]] = {}  # (run, worker) -> the dataset recorded
        self.audits = Audits(store, clock)  # RecordAudit / ListAudits call it directly
        self._joined: set[tuple[int, int]] = set()
        self.operations = RunOperations(store)
        now = clock()
        self._life_started_at = now
        self._alive_stamped = self._metrics_at = time.monotonic()
        self.resume_outage_s = resume_outage_s
        outage = self._outage = store.record_master_start(now)
        if outage is not None:
            log.warning("event=master_outage start=%.3f end=%.3f downtime_s=%.3f",
                        outage.start, outage.end, outage.duration_s)
        workers = store.list_workers()
        self._heartbeats, self.devices = Heartbeats(workers, now), DeviceOwners(workers)
        self.roster = Roster(store, self.live_worker, clock)  # ListRuns / ListWorkers call it directly
        self._credentials = WorkerCredentials(store.worker_credential_hash, store.set_credential_hash,
                                              self.metrics.credential_conflicts.inc)
        self._register_lock = threading.Lock()  # one name decision at a time (read, decide, write)
        self._current: RunRecord | None = store.current_run()
        if self._current is not None:  # read before any commit can add to it (the writer starts below)
            self.operations.total(self._current.id)
        self.records = retention.AccuracyRecords(store)  # each run's accuracy record holders, for retention
        self.resends = ResentReports(store.progress_seq)
        self._writer = ProgressWriter(store, on_commit=self._committed)
        self._advance_runs(now)  # a deadline passed while the master was down: closed before serving

    def close(self) -> None:
        """Stop the progress writer (reports are refused afterwards); store the refusals counted."""
        self._writer.close()
        self._store_refusals()

    def _store_refusals(self) -> None:
        """Store the implausible reports counted in memory since the last time (off the event loop)."""
        taken = self.budgets.take_refused()
        try:
            self.store.add_implausible_reports(taken, self.clock())
        except Exception:
            for (run_id, worker_id), n in taken.items():  # kept for the next try: never lost to a failed write
                self.budgets.refused(worker_id, run_id, n)
            raise

    # ------------------------------------------------------------ runs
    def current_run(self) -> RunRecord | None:
        with self._lock:
            return self._current

    def _refresh_current(self) -> RunRecord | None:
        with self._lock:
            self._current = self.store.current_run()
            return self._current

    def resolve_run(self, run_id: int, active_only: bool = False) -> RunRecord:
        """run_id, or (0) the current run, or the most recent one."""
        if run_id:
            return self.store.get_run(run_id)
        run = self.current_run()
        if run is None and not active_only:
            run = self.store.latest_run()
        if run is None:
            raise (FailedPrecondition if active_only else NotFound)("no run" + (" is active" if active_only else " yet"))
        return run

    def start_run(self, spec: RunSpec) -> RunRecord:
        precision, config = run_config(spec)
        config[node_audits.SECRET_KEY] = secrets.token_hex(16)  # draws the node audits' models; never sent out
        new = NewRun(spec.profile, int(spec.seed), float(spec.duration_s), precision, config, software_versions(),
                     rules_version=RULES_VERSION)
        now = self.clock()
        with self._tick_lock, self._lock:  # the tick would start the pending run between these two writes
            run = self.store.create_run(new, now, allow_concurrent=spec.allow_concurrent)
            self.operations.created(run.id)
            if spec.min_workers == 0:
                run = self.store.start_run(run.id, now)
            self._refresh_current()
        log.info("event=run_created run_id=%d profile=%s duration_s=%g seed=%d precision=%s state=%s",
                 run.id, run.profile, run.duration_s, run.seed, run.precision, run.state)
        self.tick()
        return self.store.get_run(run.id)

    def stop_run(self, run_id: int, abort: bool, reason: str) -> RunRecord:
        run = self.resolve_run(run_id, active_only=not run_id)
        now = self.clock()
        with self._lock:
            if abort:
                run, abandoned = self.store.finish_run(run.id, now, RunState.ABORTED, reason or "aborted on request")
                self._forget_models(abandoned)
            else:
                run = self.store.stop_run(run.id, now, reason or "stopped on request")
            self._refresh_current()
        log.info("event=run_stop run_id=%d abort=%s state=%s", run.id, abort, run.state)
        return run

    def window_end(self, run: RunRecord) -> float:
        """The end of the run's scored window so far: its stop, else now, never after its deadline."""
        if run.stopped_at is not None:
            return run.stopped_at
        now = self.clock()
        return now if run.deadline is None else min(now, run.deadline)

    def elapsed_s(self, run: RunRecord) -> float:
        """Seconds the run has been running (until it stopped, at most until its deadline)."""
        if run.started_at is None:
            return 0.0
        return max(0.0, self.window_end(run) - run.started_at)

    # ------------------------------------------------------------ background
    def tick(self, flush: bool = True) -> None:
        """Flush heartbeats, detect lost workers, enforce deadlines, update metrics.

        flush=False (the background loop): heartbeats are written only when their flush
        period (`heartbeat_flush_s`, longer for a large fleet) has passed, or a worker is lost.
        """
        with self._tick_lock:
            now = self.clock()
            if flush or time.monotonic() - self._alive_stamped >= ALIVE_STAMP_S:
                self._alive_stamped = time.monotonic()
                self.store.record_master_alive(now)
            if flush or time.monotonic() - self._flushed_at >= self._heartbeats.flush_period(self.heartbeat_flush_s):
                self._flush_heartbeats()
            self._write_beats(self._heartbeats.take_back())
            self._detect_lost(now)
            self._advance_runs(now)
            self._store_refusals()
            if flush or time.monotonic() - self._metrics_at >= METRICS_S:
                self._metrics_at = time.monotonic()
                self._update_metrics()

    def _flush_heartbeats(self) -> None:
        self._flushed_at = time.monotonic()
        self._write_beats(self._heartbeats.take_unwritten())

    def _write_beats(self, beats: dict[int, float]) -> None:
        if beats:
            self.store.record_heartbeats(beats)

    def _detect_lost(self, now: float) -> None:
        lost = self._heartbeats.mark_silent(now, restart.LOST_AFTER_BEATS * self.heartbeat_interval_s)
        if lost:
            # the stored last heartbeat of a lost worker must be its real last one (its own
            # beat only: the others keep their flush period), and no later flush marks it alive
            beats = self._heartbeats.take_unwritten(lost)
            try:
                self._write_beats(beats)
                abandoned = self.store.mark_workers_lost(list(lost), now)
            except Exception:
                self._heartbeats.not_lost(lost, beats)  # not stored: the next tick finds them again
                raise
            self._forget_models(abandoned)
            self.metrics.workers_lost.inc(len(lost))
            for w, silent_s in lost.items():
                log.warning("event=worker_lost worker_id=%d silent_s=%.1f", w, silent_s)
            if abandoned:
                log.warning("event=models_abandoned model_ids=%s reason=worker_lost", abandoned)

    def _advance_runs(self, now: float) -> None:
        changed = False
        for run in self.store.active_runs():
            if run.state == RunState.PENDING:
                need = int(run.config.get("min_workers", 0))
                if self.alive_count() >= need:
                    self.store.start_run(run.id, now)
                    log.info("event=run_started run_id=%d workers_alive=%d", run.id, self.alive_count())
                    changed = True
            elif run.state == RunState.RUNNING and run.deadline is not None and now >= run.deadline:
                # stopped at the deadline itself (the store caps stopped_at), however late this tick is
                down = any(o.start <= run.deadline <= o.end for o in run.outages)
                self.store.stop_run(run.id, now, "deadline reached" + (" while the master was down" if down else ""))
                log.info("event=run_deadline run_id=%d late_s=%.3f", run.id, now - run.deadline)
                changed = True
            elif run.state == RunState.STOPPING:
                changed = self._finish_stopping(run, now) or changed
        if changed:
            self._refresh_current()

    def _finish_stopping(self, run: RunRecord, now: float) -> bool:
        """A stopping run becomes finished once its models ended or the grace period is over."""
        counts = self.store.count_models(run.id)
        open_models = sum(counts.get(s, 0) for s in OPEN_MODEL_STATES)
        # the grace period runs while the master is up: workers cannot finish with it down
        stopped = max(run.stopped_at or now, self._life_started_at)
        if open_models and now - stopped < self.stop_grace_s:
            return False
        _, abandoned = self.store.finish_run(
            run.id, now, RunState.FINISHED, "" if open_models == 0 else "stop grace period over"
        )
        self._forget_models(abandoned)
        log.info("event=run_finished run_id=%d abandoned=%d", run.id, len(abandoned))
        return True

    def _update_metrics(self) -> None:
        self.metrics.workers_alive.set(self.alive_count())
        run = self.current_run()
        if run is None:
            self.metrics.run_state.set(0)
            return
        counts = self.store.count_models(run.id)
        for state in ModelState:
            self.metrics.models.labels(state=state).set(counts.get(state, 0))
        self.metrics.run_state.set(1 if run.state == RunState.RUNNING else 0)
        if run.started_at is not None:
            elapsed = self.clock() - run.started_at
            ops = self.operations.total(run.id)
            self.metrics.current_flops.set(ops / elapsed if elapsed > 0 else 0.0)
            self.metrics.observe_run(run.id, run.profile, elapsed, ops)

    def serving(self) -> None:
        """Once serving, the workers of before may reconnect: their grace, or their models' end (restart.py)."""
        self._forget_models(restart.resume(self.store, self._heartbeats, self._outage, self.clock(),
                                           self.heartbeat_interval_s, self.resume_outage_s))

    # ------------------------------------------------------------ workers
    def alive_count(self) -> int:
        return self._heartbeats.alive_count()

    def is_alive(self, worker_id: int) -> bool:
        return self._heartbeats.is_alive(worker_id)

    def live_worker(self, w: WorkerRecord) -> WorkerRecord:
        return self._heartbeats.live(w)

    def _known_worker(self, worker_id: int) -> None:
        """NotFound unless the worker registered (cached after the first look-up)."""
        if not self._heartbeats.knows(worker_id):
            self._heartbeats.learn(self.store.get_worker(worker_id))  # NotFound

    def _authorize(self, worker_id: int, credential: str) -> None:
        """Every worker call after Register: NotFound unless registered, PermissionDenied unless its `credential`."""
        self._known_worker(worker_id)
        self._credentials.verify(worker_id, credential)

    def _join(self, run: RunRecord | None, worker_id: int) -> None:
        """Join the worker to a running run (once) and have its ceiling there in memory:
        the report path reads it on the event loop."""
        if run is None or run.state != RunState.RUNNING:
            return
        key = (run.id, worker_id)
        with self._lock:
            joined = key in self._joined
        if not joined:
            if self.store.join_run(run.id, worker_id, self.clock()):
                log.info("event=worker_joined run_id=%d worker_id=%d", run.id, worker_id)
            with self._lock:
                self._joined.add(key)
        self.budgets.get(worker_id, run.id)

    def register(self, info: WorkerInput, credential: str = "") -> Registration:
        """Register (or re-register) a worker: it, the ids of the models of its
        earlier life (now abandoned) and its credential. The name defaults to the
        host. A live worker's name needs that worker's `credential` (AlreadyExists)."""
        if not info.name and not info.host:
            raise InvalidArgument("a worker needs a name or a host")
        info = replace(info, name=info.name or info.host, host=info.host or info.name)
        check_accelerators(info)
        info = with_checked_peaks(info)
        with self._register_lock:
            existing = self.store.worker_by_name(info.name)
            self.devices.check(info, existing.id if existing is not None else None, self.is_alive)
            now = self.clock()
            secret = self._credentials.claim(existing, credential, self._heartbeats, now, self.heartbeat_interval_s)
            digest = credential_hash(secret)
            worker, abandoned = self.store.register_worker(info, now, digest)
            self.devices.registered(worker.id, info)
            self._credentials.set(worker.id, digest)
        self._forget_models(abandoned)
        self.budgets.registered(worker.id)
        self._heartbeats.registered(worker.id, now)
        self._join(self.current_run(), worker.id)
        log.info("event=worker_registered worker_id=%d name=%s host=%s accelerators=%d abandoned=%s "
                 "credential=%s", worker.id, worker.name, worker.host, len(worker.accelerators), abandoned,
                 "rotated" if credential else "new")
        return Registration(worker, abandoned, secret)

    def report_is_in_memory(self, worker_id: int, model_id: int, seq: int) -> bool:
        """True when report_progress's checks will not touch the database (the worker, its credential,
        the model's FLOPs and the worker's ceiling cached, and the report not a possible resend)."""
        if not self._heartbeats.knows(worker_id) or not self._credentials.cached(worker_id):
            return False
        if self.resends.needs_store(model_id, seq):
            return False
        with self._lock:
            entry = self._flops.get(model_id)
        return entry is not None and self.budgets.cached(entry.worker_id, entry.run_id)

    def heartbeat_in_memory(self, worker_id: int, *, credential: str,
                            leaving: bool = False) -> tuple[RunRecord | None, WorkerState] | None:
        """heartbeat(), when it will not touch the database (the worker and its credential
        are known and, in a running run, it joined and its budget is cached): safe on an
        event loop. None (nothing done) when it would: call heartbeat on a pool."""
        run = self.current_run()
        if not self._heartbeats.knows(worker_id) or not self._credentials.cached(worker_id):
            return None
        if run is not None and run.state == RunState.RUNNING:
            with self._lock:
                joined = (run.id, worker_id) in self._joined
            if not joined or not self.budgets.cached(worker_id, run.id):
                return None  # heartbeat joins it and loads its budget
        self._credentials.verify(worker_id, credential)  # cached: no store (the worker is known)
        return run, self._beat(worker_id, leaving)

    def _beat(self, worker_id: int, leaving: bool = False) -> WorkerState:
        """Record the beat of an authorized worker; its state ("lost" once after it was). Leaving:
        its last, and the next tick counts it lost (a stopped worker does not read as alive)."""
        was_lost = self._heartbeats.beat(worker_id, self.clock())
        if was_lost:
            log.info("event=worker_back worker_id=%d", worker_id)
        if leaving:
            self._heartbeats.leave(worker_id)
            log.info("event=worker_leaving worker_id=%d", worker_id)
        return WorkerState.LOST if was_lost else WorkerState.ALIVE

    def heartbeat(self, worker_id: int, *, credential: str,
                  leaving: bool = False) -> tuple[RunRecord | None, WorkerState]:
        """The current run and the worker's state: "lost" once after the
        master gave up on it (its model was abandoned), else "alive"."""
        self._authorize(worker_id, credential)
        state = self._beat(worker_id, leaving)
        run = self.current_run()
        self._join(run, worker_id)
        return run, state

    def send_resource_samples(self, worker_id: int, samples: list[ResourceSampleReport], *, credential: str) -> int:
        """Store a worker's resource samples (stamped now - age_s); returns how many."""
        self._authorize(worker_id, credential)
        now = self.clock()
        items = []
        for s in samples:
            s.check_figures()
            items.append(ResourceSampleInput(
                worker_id=worker_id, t=now - s.age_s, accelerator_index=s.accelerator_index,
                accelerator_util=s.accelerator_util, accelerator_memory_used=int(s.accelerator_memory_used),
                cpu_util=s.cpu_util, memory_used=int(s.memory_used),
            ))
        run = self.current_run()
        return self.store.add_resource_samples(run.id if run is not None else None, items)

    # ------------------------------------------------------------ models
    def _flop_count(self, model_id: int) -> _ModelFlops:
        """The model's per-image FLOPs: from the cache, else as stored with the model (NotFound)."""
        with self._lock:
            hit = self._flops.get(model_id)
            if hit is not None:
                self._flops.move_to_end(model_id)
                return hit
        m = self.store.get_model(model_id)
        entry = _ModelFlops(m.run_id, m.worker_id, m.flops_per_train_image, m.flops_per_eval_image, m.created_at)
        self._remember(model_id, entry)
        return entry

    def _remember(self, model_id: int, entry: _ModelFlops) -> None:
        with self._lock:
            self._flops[model_id] = entry
            while len(self._flops) > FLOP_CACHE_SIZE:
                self._flops.popitem(last=False)

    def _record_dataset(self, run_id: int, worker_id: int, dataset: dict[str, Any]) -> None:
        """Record the dataset a submission names ({}: none), when it is not the one recorded."""
        if self._datasets.get((run_id, worker_id)) != dataset:
            self.store.record_dataset(run_id, worker_id, dataset, self.clock())
            with self._lock:
                self._datasets[(run_id, worker_id)] = dataset

    def _forget_models(self, model_ids: list[int]) -> None:
        with self._lock:
            for mid in model_ids:
                self._flops.pop(mid, None)
                self.resends.forget(mid)

    def submit_model(self, sub: ModelSubmission, *, credential: str) -> ModelRecord:
        """Check the graph, count its FLOPs with the inserted kernel and record the model."""
        self._authorize(sub.worker_id, credential)
        run = self.resolve_run(sub.run_id, active_only=True)
        try:
            Hyperparameters(sub.batch_size, sub.kernel_size)  # the library's one rule
        except HyperparameterError as exc:
            raise InvalidArgument(f"hyperparameters: {exc}") from None
        if sub.round < 1:
            raise InvalidArgument("round must be >= 1")
        limits = run.config.get("limits", {})
        max_rounds = int(limits.get("max_rounds_per_worker", 0))
        if max_rounds and sub.round > max_rounds:
            raise FailedPrecondition(f"round {sub.round} exceeds the run's limit of {max_rounds} rounds per worker")
        retention.check_inheritance(sub.parent_id, sub.inherited_from)
        graph = parse_graph(sub.graph_json)
        actual = graph.hash()
        if sub.graph_hash != actual:
            raise InvalidArgument(f"graph hash mismatch: submitted {sub.graph_hash!r}, the graph hashes to {actual}")
        fc = count_flops(with_inserted_kernel(graph, sub.kernel_size))
        bounds.check_flops_per_image(int(fc.train), int(fc.eval))
        check_submission(self.store, run, sub, graph)  # profile, hyperparameters, descent from the parent
        new = NewModel(
            run_id=run.id, parent_id=sub.parent_id or None, worker_id=sub.worker_id, round=int(sub.round),
            graph_json=graph.to_json(), graph_hash=actual, batch_size=int(sub.batch_size),
            kernel_size=int(sub.kernel_size), state=ModelState.QUEUED if sub.queue else ModelState.TRAINING,
            flops_per_train_image=int(fc.train), flops_per_eval_image=int(fc.eval),
            inherited_from=int(sub.inherited_from),
        )
        model = self.store.add_model(new, self.clock(), max_models=int(limits.get("max_models", 0)))
        self._remember(model.id, _ModelFlops(run.id, sub.worker_id, model.flops_per_train_image,
                                             model.flops_per_eval_image, model.created_at))
        self.resends.new_model(model.id)
        self._join(run, sub.worker_id)
        self._record_dataset(run.id, sub.worker_id, sub.dataset or {})
        log.info("event=model_submitted model_id=%d run_id=%d worker_id=%d parent_id=%s round=%d hash=%s "
                 "batch_size=%d kernel_size=%d flops_train=%d",
                 model.id, run.id, sub.worker_id, model.parent_id, model.round, actual[:12],
                 model.batch_size, model.kernel_size, model.flops_per_train_image)
        return model

    def _progress_input(self, r: ProgressReport, credential: str) -> ProgressInput:
        """Validate one report and count its FLOPs; its budget is claimed unless it is a resend
        (master/core/resends.py: the caller ends it). Whether the model is the worker's is the
        store's check (add_progress)."""
        self._authorize(r.worker_id, credential)
        r.check_figures()
        entry = self._flop_count(r.model_id)
        if entry.worker_id != r.worker_id:  # the store's rule, before the model's time is spent
            raise PermissionDenied(f"model {r.model_id} belongs to worker {entry.worker_id}, not {r.worker_id}")
        master_flops = entry.ops(int(r.images_trained), int(r.images_validated))
        if master_flops > MAX_OPS_PER_REPORT:
            raise InvalidArgument(f"images_trained/images_validated: {master_flops:.3g} operations in one report "
                                  f"exceed the bound of {MAX_OPS_PER_REPORT:.3g}")
        now = self.clock()
        resent = self.resends.begin(r.model_id, int(r.seq))  # before the claim: a resend spends nothing
        try:
            if not resent:
                self.budgets.get(r.worker_id, entry.run_id).claim(master_flops, now, since=entry.created_at)
        except ImplausibleReport:
            self.resends.end(r.model_id, int(r.seq), resent)
            self.budgets.refused(r.worker_id, entry.run_id)
            self.metrics.implausible_reports.inc()
            raise
        except BaseException:
            self.resends.end(r.model_id, int(r.seq), resent)
            raise
        return ProgressInput(
            model_id=r.model_id, worker_id=r.worker_id, seq=int(r.seq), t=now, epoch=int(r.epoch),
            images_trained=int(r.images_trained), images_validated=int(r.images_validated),
            val_accuracy=r.val_accuracy, worker_flops=int(r.worker_flops), master_flops=int(master_flops),
            flops_mismatch=not scoring.flops_agree(master_flops, int(r.worker_flops)), resent=resent,
            weights_sha256=r.weights_sha256)

    async def report_progress(self, report: ProgressReport, *, credential: str,
                              pool: Executor | None = None) -> ProgressResult:
        """Validate, count and record one report; awaits the progress writer's group commit without blocking
        the event loop. StoreError when refused; a resent report (same seq) comes back as a duplicate,
        counted once, its budget never spent. Checks that need the database run on `pool` when given."""
        for _ in range(2):  # a resend whose first copy was not recorded goes again as new
            if pool is None or self.report_is_in_memory(report.worker_id, report.model_id, report.seq):
                item = self._progress_input(report, credential)
            else:
                item = await asyncio.get_running_loop().run_in_executor(
                    pool, self._progress_input, report, credential)
            try:
                [result] = await self._writer.write_async([item])
            finally:
                self.resends.end(item.model_id, item.seq, item.resent)
            if not isinstance(result.error, ResendNotRecorded):
                break
        if result.error is not None:
            raise result.error
        return result

    def _committed(self, items: Sequence[ProgressInput], results: Sequence[ProgressResult]) -> None:
        """The progress writer's hook, at each commit, whether or not the callers still wait:
        fold its accuracies (first: retention depends on them), count what it recorded, add its
        operations to its run's total."""
        self.records.committed(items, results)
        for item, result in zip(items, results):
            if result.error is not None:
                continue
            self.resends.committed(item.model_id, item.seq)
            if result.duplicate:
                self.metrics.duplicate_reports.inc()
                continue
            self.metrics.reports.inc()
            if result.flops_mismatch:
                self.metrics.flops_mismatch.inc()
                log.warning("event=flops_mismatch model_id=%d seq=%d worker_flops=%d master_flops=%d",
                            item.model_id, item.seq, item.worker_flops, item.master_flops)
            self.operations.add(result.run_id, item.master_flops)

    def finish_model(self, fin: ModelFinish, *,
                     credential: str) -> tuple[ModelRecord, str, list[tuple[int, str]]]:
        """End a model as done or failed, with its checkpoint; returns it, the state of its run
        and the worker's checkpoints retention lets go (master/core/retention.py)."""
        self._authorize(fin.worker_id, credential)
        if fin.state not in FINISHED_MODEL_STATES:
            raise InvalidArgument("state must be MODEL_DONE, MODEL_FAILED or MODEL_CUT")
        for name, v in (("best_accuracy", fin.best_accuracy), ("predicted_accuracy", fin.predicted_accuracy)):
            if v is not None and not (0.0 <= v <= 1.0):
                raise InvalidArgument(f"{name} must be in [0, 1], got {v}")
        weight_lineage.check_checkpoint(self.store, fin)  # both fields or neither; its weights seen in the window
        retention.take_back(self.store, fin)  # checkpoints it could not delete (before this finish's retention)
        now = self.clock()
        end = ModelEnd(fin.model_id, fin.worker_id, ModelState(fin.state), fin.reason, fin.best_accuracy,
                       fin.predicted_accuracy, fin.checkpoint_uri, fin.checkpoint_sha256)
        model = self.store.finish_model(end, now)
        self._forget_models([model.id])
        if model.best_accuracy is not None:  # a best above its reports entered the time line at now
            self.records.add(model.run_id, model.id, model.best_accuracy, now)
        log.info("event=model_finished model_id=%d state=%s best_accuracy=%s predicted_accuracy=%s checkpoint=%s",
                 model.id, model.state, model.best_accuracy, model.predicted_accuracy, bool(model.checkpoint_uri))
        run = self.store.get_run(model.run_id)
        return model, run.state, retention.release_checkpoints(self.store, run, fin.worker_id, self.records)
