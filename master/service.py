"""The master service: run lifecycle, workers, verified FLOP accounting, scores.

`Master` holds the logic and the in-memory caches (heartbeat times, FLOP
counts per model, the current run); `WorkerServicer` and `ControlServicer`
translate between protobuf messages and `Master`. All truth lives in the
store: a restarted master continues a run where it stopped.

FLOPs are counted by the master, never taken from workers: the stored graph
JSON -> Graph.from_json -> with_inserted_kernel(graph, kernel_size) ->
count_flops -> fc.ops(images_trained, images_validated). The worker's own
figure is stored next to it and a disagreement above 1% is flagged.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import logging
import math
import platform
import queue
import threading
import time
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable, NoReturn, TypeVar

import grpc

import aiperf
from aiperf import scoring, timeline
from aiperf.api import aiperf_pb2 as pb
from aiperf.api import aiperf_pb2_grpc as pb_grpc
from aiperf.api.enums import (
    API_VERSION,
    GEMM_DTYPES,
    KNOWN_GEMM_DTYPES,
    MODEL_STATE_VALUES,
    MODEL_STATES,
    PRECISION_VALUES,
    PRECISIONS,
    PROFILE_VALUES,
    PROFILES,
    RUN_STATE_VALUES,
    WORKER_STATE_VALUES,
)
from aiperf.flops import FlopCount, count_flops
from aiperf.graph import Graph, GraphError, with_inserted_kernel
from master.metrics import MasterMetrics
from master.store import (
    FailedPrecondition,
    InvalidArgument,
    ModelRecord,
    NewModel,
    NewRun,
    NotFound,
    PermissionDenied,
    ProgressInput,
    ProgressResult,
    ResourceSampleInput,
    RunRecord,
    Store,
    StoreError,
    WorkerInput,
    WorkerRecord,
)

log = logging.getLogger(__name__)

T = TypeVar("T")

LOST_AFTER_BEATS = 3
HEARTBEAT_FLUSH_MAX_S = 5.0
DEFAULT_WARMUP_ROUNDS = 5
DEFAULT_REPORT_INTERVAL_S = 30.0
DEFAULT_RESOURCE_INTERVAL_S = 30.0
MAX_KERNEL_SIZE = 15
FLOP_CACHE_SIZE = 4096
LIST_LIMIT_DEFAULT = 1000
LIST_LIMIT_MAX = 10000
TIMELINE_BUCKETS = 200
TIMELINE_BUCKETS_MAX = 100_000


def software_versions() -> dict[str, str]:
    """Versions of the master's software, recorded with every run."""
    import alembic
    import google.protobuf
    import sqlalchemy

    return {
        "aiperf": aiperf.__version__,
        "python": platform.python_version(),
        "grpcio": grpc.__version__,
        "protobuf": google.protobuf.__version__,
        "sqlalchemy": sqlalchemy.__version__,
        "alembic": alembic.__version__,
        "platform": platform.platform(),
    }


Callback = Callable[[list[ProgressResult] | None, BaseException | None], None]


class ProgressWriter:
    """Group commit of progress reports: concurrent RPCs hand their reports to
    one thread, which records everything waiting in one transaction. Each
    caller gets its own results only after the commit."""

    def __init__(self, store: Store, max_batch: int = 1024, linger_s: float = 0.002) -> None:
        self._store = store
        self._max_batch = max_batch
        self._linger_s = linger_s
        self._queue: queue.SimpleQueue[tuple[list[ProgressInput], Callback] | None] = queue.SimpleQueue()
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name="aiperf-progress-writer", daemon=True)
        self._thread.start()

    def submit(self, items: list[ProgressInput], done: Callback) -> None:
        """Queue items; `done(results, None)` or `done(None, error)` runs on the writer thread."""
        if self._closed:
            raise FailedPrecondition("the master is shutting down")
        self._queue.put((items, done))

    def write(self, items: list[ProgressInput]) -> list[ProgressResult]:
        """Blocking form of submit."""
        # a bare lock as the wait: lighter than a Future (a Condition and its callbacks) per report
        ready = threading.Lock()
        ready.acquire()
        box: list[Any] = [None, None]

        def done(results: list[ProgressResult] | None, exc: BaseException | None) -> None:
            box[0], box[1] = results, exc
            ready.release()

        self.submit(items, done)
        ready.acquire()
        if box[1] is not None:
            raise box[1]
        return box[0] or []

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._queue.put(None)
            self._thread.join(timeout=30)

    def _loop(self) -> None:
        stop = False
        while not stop:
            job = self._queue.get()
            if job is None:
                return
            jobs = [job]
            n = len(job[0])
            # Linger once, then take everything queued: a transaction costs as much as a few
            # reports, and one sleep wakes this thread once per batch instead of once per report.
            if self._linger_s > 0:
                time.sleep(self._linger_s)
            while n < self._max_batch:
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    stop = True
                    break
                jobs.append(more)
                n += len(more[0])
            items = [i for inputs, _ in jobs for i in inputs]
            try:
                results = self._store.add_progress(items)
            except Exception as exc:  # noqa: BLE001 - handed to every waiting caller
                for _, done in jobs:
                    done(None, exc)
                continue
            k = 0
            for inputs, done in jobs:
                done(results[k:k + len(inputs)], None)
                k += len(inputs)


def _resolve(future: asyncio.Future, results: list[ProgressResult] | None, exc: BaseException | None) -> None:
    if future.cancelled():  # the caller went away (stream closed)
        return
    if exc is not None:
        future.set_exception(exc)
    else:
        future.set_result(results or [])


class _LoopWaker:
    """Hands the writer's results to an event loop with one wake-up per batch:
    call_soon_threadsafe per report costs a syscall each."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._lock = threading.Lock()
        self._ready: list[tuple[asyncio.Future, list[ProgressResult] | None, BaseException | None]] = []

    def resolve(self, future: asyncio.Future, results: list[ProgressResult] | None, exc: BaseException | None) -> None:
        with self._lock:
            self._ready.append((future, results, exc))
            first = len(self._ready) == 1
        if first:
            self._loop.call_soon_threadsafe(self._drain)

    def _drain(self) -> None:
        with self._lock:
            ready, self._ready = self._ready, []
        for future, results, exc in ready:
            _resolve(future, results, exc)


@dataclass(frozen=True)
class _ModelFlops:
    """What the master needs to count a model's reports: per-image totals only
    (a full FlopCount holds every layer; thousands of them slow the GC)."""

    run_id: int
    worker_id: int
    train: int  # operations per trained image
    eval: int   # operations per validated image

    @classmethod
    def of(cls, run_id: int, worker_id: int, fc: FlopCount) -> "_ModelFlops":
        return cls(run_id, worker_id, int(fc.train), int(fc.eval))

    def ops(self, images_trained: int, images_validated: int) -> int:
        return self.train * images_trained + self.eval * images_validated


class Master:
    """The master's logic. Thread-safe; `tick()` is called periodically by
    the server's background thread (deadlines, lost workers, metrics)."""

    def __init__(
        self,
        store: Store,
        heartbeat_interval_s: float = 5.0,
        stop_grace_s: float = 300.0,
        clock: Callable[[], float] = time.time,
        metrics: MasterMetrics | None = None,
    ) -> None:
        if heartbeat_interval_s <= 0:
            raise ValueError("heartbeat interval must be positive")
        self.store = store
        self.heartbeat_interval_s = heartbeat_interval_s
        self.stop_grace_s = stop_grace_s
        self.clock = clock
        self.metrics = metrics or MasterMetrics()
        # heartbeat times are kept in memory and written lazily: losing a few seconds of them in a
        # crash is harmless, and one UPDATE per beat would cost more than the beat itself
        self.heartbeat_flush_s = min(heartbeat_interval_s, HEARTBEAT_FLUSH_MAX_S)
        self._flushed_at = time.monotonic()
        self._lock = threading.RLock()
        self._tick_lock = threading.Lock()
        self._flops: collections.OrderedDict[int, _ModelFlops] = collections.OrderedDict()
        self._joined: set[tuple[int, int]] = set()
        self._run_ops: dict[int, int] = {}
        now = clock()
        # A restarted master gives every known alive worker a fresh grace period.
        self._beats: dict[int, float] = {}
        self._dirty: dict[int, float] = {}
        self._lost: set[int] = set()
        for w in store.list_workers():
            if w.state == "alive":
                self._beats[w.id] = max(w.last_heartbeat, now)
            else:
                self._lost.add(w.id)
                self._beats[w.id] = w.last_heartbeat
        self._current: RunRecord | None = store.current_run()
        self._writer = ProgressWriter(store)
        self._run_message: tuple[RunRecord, pb.RunInfo] | None = None
        self._wakers: dict[asyncio.AbstractEventLoop, _LoopWaker] = {}

    def close(self) -> None:
        """Stop the progress writer (reports are refused afterwards)."""
        self._writer.close()

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

    def start_run(self, req: pb.StartRunRequest) -> RunRecord:
        profile = PROFILES.get(req.profile or pb.PROFILE_SMOKE)
        if profile is None:
            raise InvalidArgument(f"unknown profile {req.profile}")
        rules = scoring.PROFILES[profile]
        precision = PRECISIONS.get(req.precision or pb.PRECISION_FP32)
        if precision is None:
            raise InvalidArgument(f"unknown precision {req.precision}")
        if not math.isfinite(req.duration_s) or req.duration_s <= 0:
            raise InvalidArgument(f"duration must be positive, got {req.duration_s:g} s")
        if req.duration_s < rules.min_duration_s:
            raise InvalidArgument(
                f"the {profile} profile needs a duration of at least {rules.min_duration_s:.0f} s, "
                f"got {req.duration_s:g} s"
            )
        for name in ("report_interval_s", "resource_interval_s"):
            v = getattr(req, name)
            if not math.isfinite(v) or v < 0:
                raise InvalidArgument(f"{name} must be >= 0")
        config = {
            "limits": {
                "max_models": req.limits.max_models,
                "max_rounds_per_worker": req.limits.max_rounds_per_worker,
                "max_epochs_per_round": req.limits.max_epochs_per_round,
            },
            "warmup_rounds": req.warmup_rounds or DEFAULT_WARMUP_ROUNDS,
            "min_workers": req.min_workers,
            "report_interval_s": req.report_interval_s or DEFAULT_REPORT_INTERVAL_S,
            "resource_interval_s": req.resource_interval_s or DEFAULT_RESOURCE_INTERVAL_S,
            "min_running_time_s": rules.min_running_time_s,
            "max_error": rules.max_error,
            "target_accuracy": rules.target_accuracy,
            "official": rules.official,
        }
        now = self.clock()
        with self._lock:
            run = self.store.create_run(
                NewRun(profile, int(req.seed), float(req.duration_s), precision, config, software_versions()),
                now,
                allow_concurrent=req.allow_concurrent,
            )
            if req.min_workers == 0:
                run = self.store.start_run(run.id, now)
            self._refresh_current()
        log.info("event=run_created run_id=%d profile=%s duration_s=%g seed=%d precision=%s state=%s",
                 run.id, profile, run.duration_s, run.seed, precision, run.state)
        self.tick()
        return self.store.get_run(run.id)

    def stop_run(self, run_id: int, abort: bool, reason: str) -> RunRecord:
        run = self.resolve_run(run_id, active_only=not run_id)
        now = self.clock()
        with self._lock:
            if abort:
                run, abandoned = self.store.finish_run(run.id, now, "aborted", reason or "aborted on request")
                self._forget_models(abandoned)
            else:
                run = self.store.stop_run(run.id, now, reason or "stopped on request")
            self._refresh_current()
        log.info("event=run_stop run_id=%d abort=%s state=%s", run.id, abort, run.state)
        return run

    # ------------------------------------------------------------ background
    def tick(self, flush: bool = True) -> None:
        """Flush heartbeats, detect lost workers, enforce deadlines, update metrics.

        flush=False (the background loop): heartbeats are written only when
        `heartbeat_flush_s` has passed since the last write, or a worker is lost.
        """
        with self._tick_lock:
            now = self.clock()
            if flush or time.monotonic() - self._flushed_at >= self.heartbeat_flush_s:
                self._flush_heartbeats()
            self._detect_lost(now)
            self._advance_runs(now)
            self._update_metrics()

    def _flush_heartbeats(self) -> None:
        self._flushed_at = time.monotonic()
        with self._lock:
            dirty, self._dirty = self._dirty, {}
        if dirty:
            self.store.record_heartbeats(dirty)

    def _detect_lost(self, now: float) -> None:
        limit = LOST_AFTER_BEATS * self.heartbeat_interval_s
        with self._lock:
            lost = [w for w, t in self._beats.items() if w not in self._lost and now - t > limit]
            self._lost.update(lost)
        if lost:
            # the stored last heartbeat of a lost worker must be its real last one, and a
            # later flush must not mark it alive again
            self._flush_heartbeats()
            abandoned = self.store.mark_workers_lost(lost, now)
            self._forget_models(abandoned)
            self.metrics.workers_lost.inc(len(lost))
            for w in lost:
                log.warning("event=worker_lost worker_id=%d silent_s=%.1f", w, now - self._beats.get(w, now))
            if abandoned:
                log.warning("event=models_abandoned model_ids=%s reason=worker_lost", abandoned)

    def _advance_runs(self, now: float) -> None:
        changed = False
        for run in self.store.active_runs():
            if run.state == "pending":
                need = int(run.config.get("min_workers", 0))
                if self.alive_count() >= need:
                    self.store.start_run(run.id, now)
                    log.info("event=run_started run_id=%d workers_alive=%d", run.id, self.alive_count())
                    changed = True
            elif run.state == "running" and run.deadline is not None and now >= run.deadline:
                self.store.stop_run(run.id, now, "deadline reached")
                log.info("event=run_deadline run_id=%d", run.id)
                changed = True
            elif run.state == "stopping":
                counts = self.store.count_models(run.id)
                open_models = counts.get("training", 0) + counts.get("queued", 0)
                stopped = run.stopped_at or now
                if open_models == 0 or now - stopped >= self.stop_grace_s:
                    _, abandoned = self.store.finish_run(
                        run.id, now, "finished", "" if open_models == 0 else "stop grace period over"
                    )
                    self._forget_models(abandoned)
                    log.info("event=run_finished run_id=%d abandoned=%d", run.id, len(abandoned))
                    changed = True
        if changed:
            self._refresh_current()

    def _update_metrics(self) -> None:
        self.metrics.workers_alive.set(self.alive_count())
        run = self.current_run()
        if run is None:
            self.metrics.run_state.set(0)
            return
        counts = self.store.count_models(run.id)
        for state in MODEL_STATES.values():
            self.metrics.models.labels(state=state).set(counts.get(state, 0))
        self.metrics.run_state.set(1 if run.state == "running" else 0)
        if run.started_at is not None:
            elapsed = self.clock() - run.started_at
            ops = self._ops_of_run(run.id)
            self.metrics.current_flops.set(ops / elapsed if elapsed > 0 else 0.0)

    def _ops_of_run(self, run_id: int) -> int:
        with self._lock:
            if run_id in self._run_ops:
                return self._run_ops[run_id]
        total = sum(p.ops for p in self.store.timeline(run_id))
        with self._lock:
            return self._run_ops.setdefault(run_id, total)

    # ------------------------------------------------------------ workers
    def alive_count(self) -> int:
        with self._lock:
            return sum(1 for w in self._beats if w not in self._lost)

    def is_alive(self, worker_id: int) -> bool:
        with self._lock:
            return worker_id in self._beats and worker_id not in self._lost

    def known_worker(self, worker_id: int) -> None:
        """NotFound unless the worker registered (cached after the first look-up)."""
        self._known_worker(worker_id)

    def _known_worker(self, worker_id: int) -> None:
        with self._lock:
            if worker_id in self._beats:
                return
        w = self.store.get_worker(worker_id)  # NotFound
        with self._lock:
            self._beats.setdefault(worker_id, w.last_heartbeat)
            if w.state == "lost":
                self._lost.add(worker_id)

    def _join(self, run: RunRecord | None, worker_id: int) -> None:
        if run is None or run.state != "running":
            return
        key = (run.id, worker_id)
        with self._lock:
            if key in self._joined:
                return
        if self.store.join_run(run.id, worker_id, self.clock()):
            log.info("event=worker_joined run_id=%d worker_id=%d", run.id, worker_id)
        with self._lock:
            self._joined.add(key)

    def register(self, req: pb.RegisterRequest) -> tuple[WorkerRecord, list[int]]:
        if req.api_version not in (pb.API_VERSION_UNSPECIFIED, API_VERSION):
            raise FailedPrecondition(f"API version {req.api_version} not supported; this master speaks {API_VERSION}")
        name = req.name or req.host
        if not name:
            raise InvalidArgument("a worker needs a name or a host")
        for a in req.accelerators:
            if not math.isfinite(a.peak_flops) or a.peak_flops < 0:
                raise InvalidArgument("accelerator peak_flops must be >= 0")
            for dtype, value in a.peak_flops_by_dtype.items():
                if dtype not in KNOWN_GEMM_DTYPES:
                    raise InvalidArgument(f"accelerator peak_flops_by_dtype: unknown compute type {dtype!r} "
                                          f"(expected one of {', '.join(sorted(KNOWN_GEMM_DTYPES))})")
                if not math.isfinite(value) or value < 0:
                    raise InvalidArgument(f"accelerator peak_flops_by_dtype[{dtype!r}] must be >= 0")
        info = WorkerInput(
            name=name,
            host=req.host or name,
            accelerators=[
                {"model": a.model, "memory_bytes": int(a.memory_bytes), "peak_flops": float(a.peak_flops),
                 "peak_flops_by_dtype": {k: float(v) for k, v in sorted(a.peak_flops_by_dtype.items())}}
                for a in req.accelerators
            ],
            cpus=int(req.cpus),
            memory_bytes=int(req.memory_bytes),
            software={s.name: s.version for s in req.software},
        )
        now = self.clock()
        worker, abandoned = self.store.register_worker(info, now)
        self._forget_models(abandoned)
        with self._lock:
            self._beats[worker.id] = now
            self._dirty.pop(worker.id, None)
            self._lost.discard(worker.id)
        self._join(self.current_run(), worker.id)
        log.info("event=worker_registered worker_id=%d name=%s host=%s accelerators=%d abandoned=%s",
                 worker.id, worker.name, worker.host, len(worker.accelerators), abandoned)
        return worker, abandoned

    def run_message(self, run: RunRecord) -> pb.RunInfo:
        """run_info(run), cached for the current run (heartbeats ask for it constantly)."""
        with self._lock:
            cached = self._run_message
        if cached is not None and cached[0] is run:
            return cached[1]
        msg = run_info(run)
        with self._lock:
            self._run_message = (run, msg)
        return msg

    def heartbeat_is_in_memory(self, worker_id: int) -> bool:
        """True when heartbeat(worker_id) will not touch the database (the
        worker is known and has joined the running run): safe on an event loop."""
        run = self.current_run()
        with self._lock:
            if worker_id not in self._beats:
                return False
            return run is None or run.state != "running" or (run.id, worker_id) in self._joined

    def heartbeat(self, worker_id: int) -> tuple[RunRecord | None, str]:
        self._known_worker(worker_id)
        now = self.clock()
        with self._lock:
            was_lost = worker_id in self._lost
            self._beats[worker_id] = now
            self._dirty[worker_id] = now
            self._lost.discard(worker_id)
        if was_lost:
            log.info("event=worker_back worker_id=%d", worker_id)
        run = self.current_run()
        self._join(run, worker_id)
        # "lost" tells the worker its model was abandoned while it was silent
        return run, "lost" if was_lost else "alive"

    # ------------------------------------------------------------ models
    def _flop_count(self, model_id: int) -> _ModelFlops:
        with self._lock:
            hit = self._flops.get(model_id)
            if hit is not None:
                self._flops.move_to_end(model_id)
                return hit
        m = self.store.get_model(model_id)  # NotFound
        entry = _ModelFlops.of(m.run_id, m.worker_id, self._count(Graph.from_json(m.graph_json), m.kernel_size))
        self._remember(model_id, entry)
        return entry

    @staticmethod
    def _count(graph: Graph, kernel_size: int) -> FlopCount:
        return count_flops(with_inserted_kernel(graph, kernel_size))

    def _remember(self, model_id: int, entry: _ModelFlops) -> None:
        with self._lock:
            self._flops[model_id] = entry
            while len(self._flops) > FLOP_CACHE_SIZE:
                self._flops.popitem(last=False)

    def _forget_models(self, model_ids: list[int]) -> None:
        with self._lock:
            for mid in model_ids:
                self._flops.pop(mid, None)

    def submit_model(self, req: pb.SubmitModelRequest) -> ModelRecord:
        self._known_worker(req.worker_id)
        run = self.resolve_run(req.run_id, active_only=True)
        hp = req.hyperparameters
        if hp.batch_size < 1:
            raise InvalidArgument("hyperparameters.batch_size must be >= 1")
        if hp.kernel_size < 1 or hp.kernel_size % 2 == 0 or hp.kernel_size > MAX_KERNEL_SIZE:
            raise InvalidArgument(f"hyperparameters.kernel_size must be odd, 1..{MAX_KERNEL_SIZE}, got {hp.kernel_size}")
        if req.round < 1:
            raise InvalidArgument("round must be >= 1")
        max_rounds = int(run.config.get("limits", {}).get("max_rounds_per_worker", 0))
        if max_rounds and req.round > max_rounds:
            raise FailedPrecondition(f"round {req.round} exceeds the run's limit of {max_rounds} rounds per worker")
        try:
            graph = Graph.from_json(req.graph_json)
        except GraphError as exc:
            raise InvalidArgument(f"malformed graph JSON: {exc}") from None
        except ValueError as exc:  # json.JSONDecodeError and friends
            raise InvalidArgument(f"malformed graph JSON: {exc}") from None
        actual = graph.hash()
        if req.graph_hash != actual:
            raise InvalidArgument(f"graph hash mismatch: submitted {req.graph_hash!r}, the graph hashes to {actual}")
        fc = self._count(graph, hp.kernel_size)
        new = NewModel(
            run_id=run.id,
            parent_id=req.parent_id or None,
            worker_id=req.worker_id,
            round=int(req.round),
            graph_json=graph.to_json(),
            graph_hash=actual,
            batch_size=int(hp.batch_size),
            kernel_size=int(hp.kernel_size),
            state="queued" if req.queue else "training",
            flops_per_train_image=int(fc.train),
            flops_per_eval_image=int(fc.eval),
        )
        model = self.store.add_model(new, self.clock(), max_models=int(run.config.get("limits", {}).get("max_models", 0)))
        self._remember(model.id, _ModelFlops.of(run.id, req.worker_id, fc))
        self._join(run, req.worker_id)
        log.info("event=model_submitted model_id=%d run_id=%d worker_id=%d parent_id=%s round=%d hash=%s "
                 "batch_size=%d kernel_size=%d flops_train=%d",
                 model.id, run.id, req.worker_id, model.parent_id, model.round, actual[:12],
                 model.batch_size, model.kernel_size, model.flops_per_train_image)
        return model

    def _progress_input(self, r: pb.ProgressReport, now: float) -> tuple[ProgressInput, int]:
        """Validate one report and count its FLOPs; returns it with its run id."""
        if r.seq < 1:
            raise InvalidArgument("seq must be >= 1")
        if r.images_trained < 0 or r.images_validated < 0:
            raise InvalidArgument(
                f"image counts must be >= 0, got trained={r.images_trained} validated={r.images_validated}"
            )
        if r.worker_flops < 0:
            raise InvalidArgument("worker_flops must be >= 0")
        if r.has_accuracy and not (0.0 <= r.val_accuracy <= 1.0):
            raise InvalidArgument(f"val_accuracy must be in [0, 1], got {r.val_accuracy}")
        self._known_worker(r.worker_id)
        entry = self._flop_count(r.model_id)
        if entry.worker_id != r.worker_id:
            raise PermissionDenied(f"model {r.model_id} belongs to worker {entry.worker_id}, not {r.worker_id}")
        master_flops = entry.ops(int(r.images_trained), int(r.images_validated))
        mismatch = not scoring.flops_agree(master_flops, int(r.worker_flops))
        item = ProgressInput(
            model_id=r.model_id, worker_id=r.worker_id, seq=int(r.seq), t=now, epoch=int(r.epoch),
            images_trained=int(r.images_trained), images_validated=int(r.images_validated),
            accuracy=float(r.val_accuracy) if r.has_accuracy else None,
            worker_flops=int(r.worker_flops), master_flops=int(master_flops), flops_mismatch=mismatch,
        )
        return item, entry.run_id

    def prepare_reports(
        self, reports: list[pb.ProgressReport]
    ) -> tuple[list[ProgressInput], list[int], StoreError | None]:
        """Validate and count reports in order, up to the first invalid one."""
        now = self.clock()
        inputs: list[ProgressInput] = []
        run_ids: list[int] = []
        for r in reports:
            try:
                item, run_id = self._progress_input(r, now)
            except StoreError as exc:
                return inputs, run_ids, exc
            except GraphError as exc:  # a stored graph that no longer parses
                return inputs, run_ids, FailedPrecondition(f"model {r.model_id}: {exc}")
            inputs.append(item)
            run_ids.append(run_id)
        return inputs, run_ids, None

    def settle_reports(
        self, results: list[ProgressResult], inputs: list[ProgressInput], run_ids: list[int],
        error: StoreError | None,
    ) -> tuple[list[ProgressResult], StoreError | None]:
        """Results up to the first one refused by the store; metrics and logs."""
        kept: list[ProgressResult] = []
        for res, inp, run_id in zip(results, inputs, run_ids):
            if res.error is not None:
                return kept, res.error  # earlier in the stream than any validation error
            kept.append(res)
            if res.duplicate:
                self.metrics.duplicate_reports.inc()
                continue
            self.metrics.reports.inc()
            if res.flops_mismatch:
                self.metrics.flops_mismatch.inc()
                log.warning("event=flops_mismatch model_id=%d seq=%d worker_flops=%d master_flops=%d",
                            inp.model_id, inp.seq, inp.worker_flops, inp.master_flops)
            with self._lock:
                if run_id in self._run_ops:
                    self._run_ops[run_id] += inp.master_flops
        return kept, error

    async def report_progress_async(
        self, reports: list[pb.ProgressReport]
    ) -> tuple[list[ProgressResult], StoreError | None]:
        """report_progress for the event loop: waits for the group commit without blocking it."""
        inputs, run_ids, error = self.prepare_reports(reports)
        results: list[ProgressResult] = []
        if inputs:
            loop = asyncio.get_running_loop()
            future: asyncio.Future[list[ProgressResult]] = loop.create_future()
            wake = self._wakers.get(loop)
            if wake is None:
                wake = self._wakers.setdefault(loop, _LoopWaker(loop))
            self._writer.submit(inputs, functools.partial(wake.resolve, future))
            results = await future
        return self.settle_reports(results, inputs, run_ids, error)

    def report_progress(self, reports: list[pb.ProgressReport]) -> tuple[list[ProgressResult], StoreError | None]:
        """Validate and record reports in order. Stops at the first invalid
        one: the reports before it are recorded; its error is returned."""
        inputs, run_ids, error = self.prepare_reports(reports)
        results = self._writer.write(inputs) if inputs else []
        return self.settle_reports(results, inputs, run_ids, error)

    def finish_model(self, req: pb.FinishModelRequest) -> ModelRecord:
        state = MODEL_STATES.get(req.state)
        if state not in ("done", "failed"):
            raise InvalidArgument("state must be MODEL_DONE or MODEL_FAILED")
        for name in ("best_accuracy", "predicted_accuracy"):
            v = getattr(req, name)
            if not (0.0 <= v <= 1.0):
                raise InvalidArgument(f"{name} must be in [0, 1], got {v}")
        self._known_worker(req.worker_id)
        model = self.store.finish_model(
            req.model_id, req.worker_id, state, req.reason,
            req.best_accuracy if req.has_accuracy else None,
            req.predicted_accuracy if req.predicted_accuracy > 0 else None,
            self.clock(),
        )
        self._forget_models([model.id])
        log.info("event=model_finished model_id=%d state=%s best_accuracy=%s predicted_accuracy=%s",
                 model.id, model.state, model.best_accuracy, model.predicted_accuracy)
        return model

    def send_resource_samples(self, req: pb.SendResourceSamplesRequest) -> int:
        self._known_worker(req.worker_id)
        now = self.clock()
        items = []
        for s in req.samples:
            if not math.isfinite(s.age_s) or s.age_s < 0:
                raise InvalidArgument("age_s must be >= 0")
            for name in ("accelerator_util", "cpu_util"):
                v = getattr(s, name)
                if not (0.0 <= v <= 1.0):
                    raise InvalidArgument(f"{name} must be in [0, 1], got {v}")
            items.append(ResourceSampleInput(
                worker_id=req.worker_id, t=now - s.age_s, accelerator_index=s.accelerator_index,
                accelerator_util=s.accelerator_util, accelerator_memory_used=int(s.accelerator_memory_used),
                cpu_util=s.cpu_util, memory_used=int(s.memory_used),
            ))
        run = self.current_run()
        return self.store.add_resource_samples(run.id if run is not None else None, items)

    # ------------------------------------------------------------ scores
    @staticmethod
    def peaks(run: RunRecord, joined: list) -> list[float]:
        """The GEMM peak of every accelerator that took part, for the run's precision (0: unknown)."""
        dtype = GEMM_DTYPES.get(run.precision)
        return [float(a.get("peak_flops_by_dtype", {}).get(dtype) or a.get("peak_flops", 0.0))
                for rw in joined for a in rw.inventory.get("accelerators", [])]

    def score(self, run: RunRecord) -> scoring.ScoreResult:
        rules = self.rules_of(run)
        if run.started_at is None:
            return scoring.score_run(0.0, 0.0, [], rules, run.precision)
        peaks = self.peaks(run, self.store.run_workers(run.id))
        return scoring.score_run(
            run.started_at, self.clock(), self.store.timeline(run.id), rules, run.precision,
            end=run.stopped_at, peaks=peaks,
        )

    @staticmethod
    def rules_of(run: RunRecord) -> scoring.ProfileRules:
        base = scoring.PROFILES[run.profile]
        c = run.config
        # the rules recorded with the run win over today's defaults
        return scoring.ProfileRules(
            name=base.name,
            min_duration_s=base.min_duration_s,
            min_running_time_s=float(c.get("min_running_time_s", base.min_running_time_s)),
            max_error=float(c.get("max_error", base.max_error)),
            target_accuracy=float(c.get("target_accuracy", base.target_accuracy)),
            official=bool(c.get("official", base.official)),
        )


# ---------------------------------------------------------------- protobuf conversion


def run_info(run: RunRecord) -> pb.RunInfo:
    c = run.config
    limits = c.get("limits", {})
    return pb.RunInfo(
        config=pb.RunConfig(
            run_id=run.id,
            profile=PROFILE_VALUES[run.profile],
            seed=run.seed,
            duration_s=run.duration_s,
            precision=PRECISION_VALUES[run.precision],
            limits=pb.Limits(
                max_models=int(limits.get("max_models", 0)),
                max_rounds_per_worker=int(limits.get("max_rounds_per_worker", 0)),
                max_epochs_per_round=int(limits.get("max_epochs_per_round", 0)),
            ),
            warmup_rounds=int(c.get("warmup_rounds", DEFAULT_WARMUP_ROUNDS)),
            min_running_time_s=float(c.get("min_running_time_s", 0.0)),
            report_interval_s=float(c.get("report_interval_s", DEFAULT_REPORT_INTERVAL_S)),
            resource_interval_s=float(c.get("resource_interval_s", DEFAULT_RESOURCE_INTERVAL_S)),
            min_workers=int(c.get("min_workers", 0)),
        ),
        state=RUN_STATE_VALUES[run.state],
        created_at=run.created_at,
        started_at=run.started_at or 0.0,
        deadline=run.deadline or 0.0,
        stopped_at=run.stopped_at or 0.0,
        finished_at=run.finished_at or 0.0,
        stop_reason=run.stop_reason,
    )


def model_message(m: ModelRecord, include_graph: bool = True) -> pb.Model:
    return pb.Model(
        model_id=m.id, run_id=m.run_id, parent_id=m.parent_id or 0, worker_id=m.worker_id, round=m.round,
        graph_json=m.graph_json if include_graph else "", graph_hash=m.graph_hash,
        hyperparameters=pb.Hyperparameters(batch_size=m.batch_size, kernel_size=m.kernel_size),
        state=MODEL_STATE_VALUES[m.state],
        best_accuracy=m.best_accuracy or 0.0, predicted_accuracy=m.predicted_accuracy or 0.0,
        has_accuracy=m.best_accuracy is not None,
        created_at=m.created_at, finished_at=m.finished_at or 0.0, reason=m.reason,
        flops_per_train_image=m.flops_per_train_image, flops_per_eval_image=m.flops_per_eval_image,
        images_trained=m.images_trained, images_validated=m.images_validated, epochs=m.epochs,
    )


def worker_message(w: WorkerRecord, inventory: dict[str, Any] | None = None) -> pb.WorkerInfo:
    inv = inventory or {
        "host": w.host, "accelerators": w.accelerators, "cpus": w.cpus,
        "memory_bytes": w.memory_bytes, "software": w.software,
    }
    return pb.WorkerInfo(
        worker_id=w.id, name=w.name, host=inv.get("host", w.host),
        accelerators=[
            pb.Accelerator(model=a.get("model", ""), memory_bytes=int(a.get("memory_bytes", 0)),
                           peak_flops=float(a.get("peak_flops", 0.0)),
                           peak_flops_by_dtype=a.get("peak_flops_by_dtype", {}))
            for a in inv.get("accelerators", [])
        ],
        cpus=int(inv.get("cpus", 0)), memory_bytes=int(inv.get("memory_bytes", 0)),
        software=[pb.SoftwareVersion(name=k, version=v) for k, v in sorted(inv.get("software", {}).items())],
        state=WORKER_STATE_VALUES[w.state], registered_at=w.registered_at, last_heartbeat=w.last_heartbeat,
    )


def _model_counts(counts: dict[str, int]) -> list[pb.ModelCount]:
    return [pb.ModelCount(state=MODEL_STATE_VALUES[s], count=counts.get(s, 0)) for s in MODEL_STATES.values()]


# ---------------------------------------------------------------- servicers

_CODES: dict[type[StoreError], grpc.StatusCode] = {
    NotFound: grpc.StatusCode.NOT_FOUND,
    PermissionDenied: grpc.StatusCode.PERMISSION_DENIED,
    FailedPrecondition: grpc.StatusCode.FAILED_PRECONDITION,
    InvalidArgument: grpc.StatusCode.INVALID_ARGUMENT,
}


def _status(exc: StoreError) -> grpc.StatusCode:
    for cls, code in _CODES.items():
        if isinstance(exc, cls):
            return code
    return grpc.StatusCode.INTERNAL


def rpc(fn: Callable[[Any, Any], T]) -> Callable[[Any, Any, grpc.aio.ServicerContext], Any]:
    """Serve a synchronous method as an asyncio gRPC handler: the body runs on
    the servicer's thread pool (it may touch the database), and store and
    validation errors become gRPC status codes with their message."""

    @functools.wraps(fn)
    async def wrapper(self: Any, request: Any, context: grpc.aio.ServicerContext) -> T:
        try:
            return await asyncio.get_running_loop().run_in_executor(self.pool, fn, self, request)
        except StoreError as exc:
            await _abort(context, fn.__name__, exc)

    return wrapper


async def _abort(context: grpc.aio.ServicerContext, method: str, exc: StoreError) -> NoReturn:
    """End the call with the error's status code and message (logged)."""
    log.info("event=rpc_error method=%s code=%s message=%r", method, _status(exc).name, str(exc))
    await context.abort(_status(exc), str(exc))
    raise AssertionError("unreachable")  # context.abort raises


class WorkerServicer(pb_grpc.WorkerServiceServicer):

    def __init__(self, master: Master, pool: Executor) -> None:
        self.m = master
        self.pool = pool

    def _run_reply(self) -> tuple[bool, pb.RunInfo]:
        run = self.m.current_run()
        return (True, run_info(run)) if run is not None else (False, pb.RunInfo())

    @rpc
    def Register(self, request: pb.RegisterRequest) -> pb.RegisterResponse:
        worker, abandoned = self.m.register(request)
        has_run, info = self._run_reply()
        return pb.RegisterResponse(
            worker_id=worker.id, heartbeat_interval_s=self.m.heartbeat_interval_s, has_run=has_run, run=info,
            master_time=self.m.clock(), api_version=API_VERSION, abandoned_model_ids=abandoned,
        )

    def _heartbeat_reply(self, run: RunRecord | None, state: str) -> pb.HeartbeatResponse:
        return pb.HeartbeatResponse(
            has_run=run is not None, run=self.m.run_message(run) if run is not None else pb.RunInfo(),
            master_time=self.m.clock(), heartbeat_interval_s=self.m.heartbeat_interval_s,
            worker_state=WORKER_STATE_VALUES[state],
        )

    def _beat(self, worker_id: int) -> pb.HeartbeatResponse:
        return self._heartbeat_reply(*self.m.heartbeat(worker_id))

    async def _beat_async(self, worker_id: int) -> pb.HeartbeatResponse:
        # on the loop when it is all in memory (nearly always); else on the pool,
        # e.g. thousands of workers joining a run that just started
        if self.m.heartbeat_is_in_memory(worker_id):
            return self._beat(worker_id)
        return await asyncio.get_running_loop().run_in_executor(self.pool, self._beat, worker_id)

    async def Heartbeat(self, request: pb.HeartbeatRequest, context: grpc.aio.ServicerContext) -> pb.HeartbeatResponse:
        try:
            return await self._beat_async(request.worker_id)
        except StoreError as exc:
            await _abort(context, "Heartbeat", exc)

    @rpc
    def GetHistory(self, request: pb.GetHistoryRequest) -> pb.GetHistoryResponse:
        self.m.known_worker(request.worker_id)
        run = self.m.resolve_run(request.run_id)
        models = self.m.store.models_since(run.id, request.since_model_id, request.limit)
        return pb.GetHistoryResponse(
            run_id=run.id, models=[model_message(m) for m in models],
            ranked_model_ids=self.m.store.ranked_done_ids(run.id),
        )

    @rpc
    def SubmitModel(self, request: pb.SubmitModelRequest) -> pb.SubmitModelResponse:
        model = self.m.submit_model(request)
        return pb.SubmitModelResponse(
            model_id=model.id, state=MODEL_STATE_VALUES[model.state],
            flops_per_train_image=model.flops_per_train_image, flops_per_eval_image=model.flops_per_eval_image,
        )

    @rpc
    def GetHyperparameterHistory(self, request: pb.GetHyperparameterHistoryRequest) -> pb.GetHyperparameterHistoryResponse:
        self.m.known_worker(request.worker_id)
        run = self.m.resolve_run(request.run_id)
        obs = []
        for m in self.m.store.hyperparameter_history(run.id):
            acc = m.predicted_accuracy if m.predicted_accuracy is not None else (m.best_accuracy or 0.0)
            obs.append(pb.HyperparameterObservation(
                model_id=m.id, round=m.round, worker_id=m.worker_id,
                hyperparameters=pb.Hyperparameters(batch_size=m.batch_size, kernel_size=m.kernel_size),
                accuracy=acc,
            ))
        return pb.GetHyperparameterHistoryResponse(run_id=run.id, observations=obs)

    def _ack(self, res: ProgressResult) -> pb.ProgressAck:
        run = self.m.current_run()
        return pb.ProgressAck(
            model_id=res.model_id, seq=res.seq, duplicate=res.duplicate, master_flops=res.master_flops,
            flops_mismatch=res.flops_mismatch,
            run_state=RUN_STATE_VALUES[run.state] if run is not None else pb.RUN_STATE_UNSPECIFIED,
            model_state=MODEL_STATE_VALUES.get(res.model_state, pb.MODEL_STATE_UNSPECIFIED),
        )

    async def _report(self, reports: list[pb.ProgressReport], context: grpc.aio.ServicerContext,
                      method: str) -> list[pb.ProgressAck]:
        try:
            results, error = await self.m.report_progress_async(reports)
            if error is not None:
                raise error
        except StoreError as exc:
            await _abort(context, method, exc)
        return [self._ack(r) for r in results]

    async def ReportProgress(self, request: pb.ProgressReport, context: grpc.aio.ServicerContext) -> pb.ProgressAck:
        return (await self._report([request], context, "ReportProgress"))[0]

    async def StreamProgress(self, request_iterator: AsyncIterator[pb.ProgressReport],
                             context: grpc.aio.ServicerContext) -> pb.ProgressSummary:
        reports = [r async for r in request_iterator]
        return pb.ProgressSummary(acks=await self._report(reports, context, "StreamProgress"))

    async def Connect(self, request_iterator: AsyncIterator[pb.WorkerMessage],
                      context: grpc.aio.ServicerContext) -> AsyncIterator[pb.MasterMessage]:
        # One reply per message, in order; a refused message gets an error
        # reply and the stream stays open.
        async for message in request_iterator:
            kind = message.WhichOneof("body")
            try:
                if kind == "heartbeat":
                    reply = pb.MasterMessage(heartbeat=await self._beat_async(message.heartbeat.worker_id))
                elif kind == "progress":
                    results, error = await self.m.report_progress_async([message.progress])
                    if error is not None:
                        raise error
                    reply = pb.MasterMessage(progress=self._ack(results[0]))
                else:
                    raise InvalidArgument("empty message: set heartbeat or progress")
            except StoreError as exc:
                log.info("event=rpc_error method=Connect.%s code=%s message=%r", kind, _status(exc).name, str(exc))
                reply = pb.MasterMessage(error=pb.MessageError(code=_status(exc).value[0], message=str(exc)))
            yield reply

    @rpc
    def FinishModel(self, request: pb.FinishModelRequest) -> pb.FinishModelResponse:
        model = self.m.finish_model(request)
        run = self.m.store.get_run(model.run_id)
        return pb.FinishModelResponse(model=model_message(model, include_graph=False),
                                      run_state=RUN_STATE_VALUES[run.state])

    @rpc
    def SendResourceSamples(self, request: pb.SendResourceSamplesRequest) -> pb.SendResourceSamplesResponse:
        return pb.SendResourceSamplesResponse(stored=self.m.send_resource_samples(request))


class ControlServicer(pb_grpc.ControlServiceServicer):
    def __init__(self, master: Master, pool: Executor) -> None:
        self.m = master
        self.pool = pool

    @rpc
    def StartRun(self, request: pb.StartRunRequest) -> pb.StartRunResponse:
        return pb.StartRunResponse(run=run_info(self.m.start_run(request)))

    @rpc
    def StopRun(self, request: pb.StopRunRequest) -> pb.StopRunResponse:
        run = self.m.stop_run(request.run_id, request.abort, request.reason)
        return pb.StopRunResponse(run=run_info(run))

    def _elapsed(self, run: RunRecord) -> float:
        if run.started_at is None:
            return 0.0
        end = run.stopped_at if run.stopped_at is not None else self.m.clock()
        return max(0.0, end - run.started_at)

    @rpc
    def GetRunStatus(self, request: pb.GetRunStatusRequest) -> pb.RunStatus:
        run = self.m.resolve_run(request.run_id)
        return pb.RunStatus(
            run=run_info(run), master_time=self.m.clock(), elapsed_s=self._elapsed(run),
            workers_alive=self.m.alive_count(), workers_joined=len(self.m.store.run_workers(run.id)),
            models=_model_counts(self.m.store.count_models(run.id)), api_version=API_VERSION,
        )

    @rpc
    def GetScoreboard(self, request: pb.GetScoreboardRequest) -> pb.Scoreboard:
        run = self.m.resolve_run(request.run_id)
        result = self.m.score(run)
        rules = self.m.rules_of(run)
        joined = self.m.store.run_workers(run.id)
        counts = self.m.store.count_models(run.id)
        ranked = self.m.store.ranked_done_ids(run.id)
        peak = sum(self.m.peaks(run, joined))
        images_trained, images_validated = self.m.store.run_images(run.id)
        alive = [rw for rw in joined if self.m.is_alive(rw.worker.id)]
        return pb.Scoreboard(
            run=run_info(run),
            elapsed_s=result.elapsed_s,
            flops=result.flops,
            score=result.score,
            provisional=result.provisional,
            regulated_score=result.regulated_score,
            valid_flops=result.valid_flops,
            error=result.error,
            best_accuracy=result.best_accuracy or 0.0,
            target_accuracy=rules.target_accuracy,
            valid=result.valid,
            invalid_reason=result.invalid_reason,
            official=rules.official,
            efficiency=result.efficiency or 0.0,
            peak_flops=peak if result.efficiency is not None else 0.0,
            total_ops=float(result.total_ops),
            worker_ops=float(result.worker_ops),
            flops_mismatch_reports=self.m.store.flops_mismatch_count(run.id),
            reports=result.reports,
            workers=len(joined),
            workers_alive=len(alive),
            accelerators=sum(len(rw.inventory.get("accelerators", [])) for rw in joined),
            models=_model_counts(counts),
            models_done=counts.get("done", 0),
            best_model_id=ranked[0] if ranked else 0,
            inventory=[worker_message(rw.worker, rw.inventory) for rw in joined],
            master_software=[pb.SoftwareVersion(name=k, version=v) for k, v in sorted(run.software.items())],
            min_running_time_s=rules.min_running_time_s,
            score_time_s=result.score_time_s,
            images_trained=images_trained,
            images_validated=images_validated,
        )

    @rpc
    def GetTimeline(self, request: pb.GetTimelineRequest) -> pb.Timeline:
        run = self.m.resolve_run(request.run_id)
        if request.buckets > TIMELINE_BUCKETS_MAX:
            raise InvalidArgument(f"buckets must be at most {TIMELINE_BUCKETS_MAX}, got {request.buckets}")
        if run.started_at is None:
            return pb.Timeline(run=run_info(run))
        end = run.stopped_at if run.stopped_at is not None else self.m.clock()
        curve = timeline.flops_curve(run.started_at, self.m.store.timeline(run.id), end=end,
                                     max_points=int(request.max_points))
        samples = [timeline.Sample(r.t, r.accelerator_index, r.accelerator_util, r.accelerator_memory_used,
                                   r.cpu_util, r.memory_used)
                   for r in self.m.store.resource_samples(run_id=run.id)]
        resources = timeline.resource_curve(run.started_at, samples, end, int(request.buckets) or TIMELINE_BUCKETS)
        return pb.Timeline(
            run=run_info(run),
            points=[pb.CurvePoint(elapsed_s=c.elapsed_s, ops=float(c.ops), flops=c.flops,
                                  has_accuracy=c.best_accuracy is not None, best_accuracy=c.best_accuracy or 0.0)
                    for c in curve],
            resources=[pb.ResourcePoint(
                elapsed_s=r.elapsed_s,
                has_accelerator=r.accelerator_util is not None, accelerator_util=r.accelerator_util or 0.0,
                accelerator_memory_used=r.accelerator_memory_used or 0.0,
                has_host=r.cpu_util is not None, cpu_util=r.cpu_util or 0.0, memory_used=r.memory_used or 0.0,
            ) for r in resources],
        )

    @rpc
    def ListModels(self, request: pb.ListModelsRequest) -> pb.ListModelsResponse:
        run = self.m.resolve_run(request.run_id)
        state = None
        if request.state:
            state = MODEL_STATES.get(request.state)
            if state is None:
                raise InvalidArgument(f"unknown model state {request.state}")
        limit = min(request.limit or LIST_LIMIT_DEFAULT, LIST_LIMIT_MAX)
        models, total = self.m.store.list_models(run.id, state, limit, request.offset)
        return pb.ListModelsResponse(
            run_id=run.id, models=[model_message(m, request.include_graph) for m in models], total=total
        )
