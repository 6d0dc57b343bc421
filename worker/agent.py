"""The worker agent: register, heartbeat, and loop over rounds while a run is running.

A round: the run's history as fetched right after the previous round's
submission (the round's snapshot: it numbers the round and is all the round's
choices depend on, with the seeds), take the child the
generator pool computes for (round, snapshot), choose hyperparameters (the
parent's or the defaults during warm-up, TPE on the snapshot after), give the
child its parent's weights when the run inherits (worker/inheritance.py: from
the parent's checkpoint; from scratch when it is unusable), submit the child
(the master gives its model id), train it while streaming progress, store its
weights in the checkpoint store and finish it with their URI (deleting what
the master's retention lets go). The next round is chosen, built and traced
while one trains (`worker.lookahead`, which states the rule for each round's
snapshot). Every call to the master that carries results goes through
`Outbox`, which sends in order and retries through master restarts and network
drops, so no finished report is lost.

Identity: the credential Register returns is kept in the state directory
(worker/credentials.py) and presented when the worker registers again, so a
restarted worker gets its name and id back; the checkpoints it could not
delete are kept there too (worker/undeleted.py) and sent with its first
FinishModel. A name still held by a live worker (its state directory was lost)
is waited for: the master frees it once the old worker is marked lost.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

import grpc
import tenacity

from aiperf.api.client import Accelerator, ApiError, ResourceSample
from aiperf.api.records import ModelRecord, RunInfo
from aiperf.api.session import WorkerSession
from aiperf.graph import Graph
from aiperf.hyperparameters import Hyperparameters
from aiperf.limits import MAX_UNDELETED_PER_FINISH
from aiperf.morphism import Limits
from aiperf.profiles import Profile, get_profile
from aiperf.search import HistoryEntry, derive_seed, worker_seed
from aiperf.states import OPEN_MODEL_STATES, ModelState, RoundOutcome, RunState, WorkerState
from worker import outbox as retries
from worker.checkpoints import Checkpoint, CheckpointStore, open_store
from worker.credentials import CredentialFile
from worker.data.fingerprint import checked_dataset
from worker.inheritance import Inheritance
from worker.inventory import Inventory, core_shortage, inventory
from worker.outbox import TRANSIENT as _TRANSIENT
from worker.outbox import Outbox, call_until_done
from worker.round_choice import model_with_hash, replanned_profile, round_hyperparameters
from worker.rounds import OOM_REASON_PREFIX, profile_after_out_of_memory
from worker.undeleted import UndeletedFile

if TYPE_CHECKING:  # pragma: no cover - typing only
    from worker.data.base import Dataset
    from worker.lookahead import Basis, PlannedRound
    from worker.monitor import ResourceSample as MonitorSample
    from worker.trainer import Progress, TrainResult

log = logging.getLogger(__name__)

@dataclass
class AgentConfig:
    master: str
    token: str
    name: str = field(default_factory=socket.gethostname)
    dataset_kind: str | None = None  # None: the profile's default
    dataset_path: str | None = None
    generator_processes: int | None = None  # None: CPUs minus input-pipeline CPUs
    input_pipeline_cpus: int = 1
    exit_when_run_ends: bool = False
    root_certificates: bytes | None = None
    tls: bool = False
    measure_peak: bool = True  # each accelerator's (no accelerator: the CPU's) GEMM rate, for the efficiency
    # where the worker's credential and undeleted list are kept; None: not kept (tests)
    state_dir: Path | None = None
    # checkpoint store URL (worker/checkpoints.py); None: <state_dir>/checkpoints, or none without a state_dir
    checkpoints: str | None = None
    lookahead: bool = True  # prepare the next round while one trains (worker/lookahead.py)
    phase_reports: bool = False  # extra progress reports that delimit training steps (idle_bench)


@dataclass
class RunContext:
    """What the agent knows about the run it works for."""

    run_id: int
    profile: Profile
    seed: int
    precision: str
    warmup_rounds: int
    report_interval_s: float
    resource_interval_s: float
    max_epochs_per_round: int
    max_rounds: int
    deterministic: bool = False  # TensorFlow op determinism and a seeded process for every round
    xla: bool = False  # the run's setting: compile the training steps with XLA
    dataset: dict[str, Any] = field(default_factory=dict)  # what this worker reports of its dataset
    inherit: bool = False  # children start from their parent's weights (worker/inheritance.py)


GOODBYE_S = 5.0  # how long a stopping worker waits to tell the master it leaves
# a FinishModel refused for its undeleted_checkpoints (another database, another worker's ids):
# sent again without them, which are dropped (they were logged when their delete failed)
REFUSED_UNDELETED = (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.INVALID_ARGUMENT)


class Agent:
    """One worker process. `run()` blocks until stopped (or the run ends, if asked)."""

    def __init__(self, config: AgentConfig) -> None:
        self.config = config
        # heartbeats and progress reports share the session's one Connect stream: cheaper for the master
        self.client = WorkerSession.open(config.master, config.token,
                                         root_certificates=config.root_certificates, tls=config.tls)
        self.credential_file = (CredentialFile(config.state_dir, config.master, config.name)
                                if config.state_dir is not None else None)
        self.worker_id = 0
        self.inventory: Inventory | None = None  # taken at registration
        self.peaks: list[dict[str, float]] | None = None  # GEMM rate per accelerator and compute type
        self.cpu_peaks: dict[str, float] = {}  # without accelerators: the CPU's GEMM rate per compute type
        self.heartbeat_interval_s = 5.0
        self._run: RunInfo | None = None
        self._lost = threading.Event()  # the master gave up on our current model
        self._stop = threading.Event()
        self._run_lock = threading.Lock()
        self._current_model = 0
        self._heartbeat_tick: float | None = None  # time.monotonic() of the heartbeat loop's last turn
        self._stop_reason = ""
        self._stop_requested_at = 0.0
        self._history: dict[int, ModelRecord] = {}
        self._graphs: dict[int, Graph] = {}  # parsed once per model
        self._datasets: dict[tuple[str, str | None, int, bool], Dataset] = {}  # (kind, path, size, deterministic)
        self._closed_runs: set[int] = set()  # runs that refused new models (stopping, model limit)
        self.rounds_done = 0
        self._profile_lock = threading.Lock()  # the run's profile is lowered from the look-ahead's thread too
        # what an earlier process with this name and master could not delete is sent with the first
        # FinishModel; what it was deleting when it stopped is deleted now
        self.inheritance = Inheritance(checkpoint_store(config), kept=(
            UndeletedFile(config.state_dir, config.master, config.name) if config.state_dir is not None else None))

    # -- public -------------------------------------------------------------
    def stop(self, reason: str = "") -> None:
        """Ask the agent to stop: the epoch in flight is reported up to its last report;
        `run()` logs what it did once it has (event=stopped)."""
        if not self._stop.is_set():
            self._stop_reason, self._stop_requested_at = reason, time.monotonic()
        self._stop.set()

    def health_state(self) -> dict[str, Any]:
        """What worker/health.py serves: heartbeat loop age (None before it started), worker,
        model in training, draining after a stop request."""
        tick = self._heartbeat_tick
        return {"worker_id": self.worker_id or None, "model_id": self._current_model or None,
                "heartbeat_age_s": None if tick is None else round(time.monotonic() - tick, 3),
                "heartbeat_interval_s": self.heartbeat_interval_s, "stopping": self._stop.is_set(),
                "rounds_done": self.rounds_done}

    def run(self) -> None:
        self._register()
        hb = threading.Thread(target=self._heartbeat_loop, name="heartbeat", daemon=True)
        hb.start()
        try:
            while not self._stop.is_set():
                run = self._wait_for_running_run()
                if run is None:
                    break
                self._work_on(run)
                if self.config.exit_when_run_ends:
                    break
        finally:
            self._stop.set()
            hb.join(timeout=self.heartbeat_interval_s + 1)
            if self.worker_id and not self._lost.is_set():  # lost at once, not alive for 3 intervals
                self.client.goodbye(self.worker_id, GOODBYE_S)
            self.client.close()
            if self._stop_reason:  # what a signal's grace period got: the log line an operator reads
                log.info("event=stopped reason=%s drain_s=%.1f rounds=%d", self._stop_reason,
                         time.monotonic() - self._stop_requested_at, self.rounds_done)
            self.inheritance.close()

    # -- registration and heartbeat ---------------------------------------
    def _register(self) -> None:
        inv = self.inventory = inventory()
        shortage = core_shortage(inv)
        if shortage:
            log.warning("event=few_cores %s", shortage)
        if self.peaks is None:
            self.peaks = [{} for _ in inv.accelerators]
            if self.config.measure_peak and inv.accelerators:
                from worker.gemm import measure_peaks

                self.peaks = measure_peaks([f"/GPU:{i}" for i in range(len(inv.accelerators))])
            elif self.config.measure_peak:
                from worker.gemm import measure_cpu_peak

                self.cpu_peaks = measure_cpu_peak()
        accelerator_peaks = self.peaks
        kept = self.credential_file.load() if self.credential_file is not None else ""
        # ALREADY_EXISTS: a live worker holds the name (this one's earlier life, when its state
        # directory was lost); the master frees the name once that worker is marked lost
        reg = call_until_done(
            lambda: self.client.register(
                name=self.config.name, host=socket.gethostname(),
                accelerators=[Accelerator(a.model, a.memory_bytes, peak_flops_by_dtype=peaks, uuid=a.uuid,
                                          pci_bus_id=a.pci_bus_id)
                              for a, peaks in zip(inv.accelerators, accelerator_peaks)],
                cpus=inv.cpus, memory_bytes=inv.memory_bytes, software=inv.software,
                credential=kept,  # "" : the client presents the one it got for the name, if any
                cpu_peak_flops_by_dtype=self.cpu_peaks, cpu_model=inv.cpu_model, backend=inv.backend),
            self._stop,
            lambda exc, delay: log.warning("event=register_retry code=%s in=%.1fs detail=%s", exc.code.name, delay,
                                           exc.details),
            also=frozenset({grpc.StatusCode.ALREADY_EXISTS}))
        if self.credential_file is not None and reg.credential != kept:
            try:
                self.credential_file.save(reg.worker_id, reg.credential)
            except OSError as exc:  # the worker still works; after a restart it waits for its name
                log.warning("event=credential_not_saved path=%s error=%s", self.credential_file.path, exc)
        self.worker_id = reg.worker_id
        self.heartbeat_interval_s = reg.heartbeat_interval_s or 5.0
        if reg.abandoned_model_ids:
            log.info("event=abandoned_by_restart models=%s", list(reg.abandoned_model_ids))
        with self._run_lock:
            self._run = reg.run
        self._lost.clear()
        log.info("event=registered worker_id=%d name=%s accelerators=%d backend=%s", self.worker_id,
                 self.config.name, len(inv.accelerators), inv.backend)

    def _heartbeat_loop(self) -> None:
        self._heartbeat_tick = time.monotonic()
        while not self._stop.wait(self.heartbeat_interval_s):
            self._heartbeat_tick = time.monotonic()  # the loop turns: healthy, master answering or not
            try:
                hb = self.client.heartbeat(self.worker_id, self._current_model)
            except ApiError as exc:
                # NOT_FOUND: the master lost us (new database?); PERMISSION_DENIED: our
                # credential is refused (the name was taken over while we were lost)
                if exc.code in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.PERMISSION_DENIED):
                    log.warning("event=reregister code=%s reason=%s", exc.code.name, exc.details)
                    self._lost.set()
                    try:
                        self._register()
                    except ApiError as again:
                        log.warning("event=reregister_failed error=%s", again)
                else:
                    log.warning("event=heartbeat_failed code=%s", exc.code.name)
                continue
            with self._run_lock:
                self._run = hb.run
            if hb.heartbeat_interval_s:
                self.heartbeat_interval_s = hb.heartbeat_interval_s
            if hb.worker_state == WorkerState.LOST and not self._lost.is_set():
                log.warning("event=marked_lost model=%d", self._current_model)
                self._lost.set()

    def _run_state(self, run_id: int) -> RunState | None:
        with self._run_lock:
            run = self._run
        if run is None or run.config.run_id != run_id:
            return RunState.FINISHED
        return run.state

    def _wait_for_running_run(self) -> RunInfo | None:
        announced = False
        while not self._stop.is_set():
            with self._run_lock:
                run = self._run
            if run is not None and run.state == RunState.RUNNING and run.config.run_id not in self._closed_runs:
                return run
            if not announced:
                log.info("event=waiting_for_run")
                announced = True
            self._stop.wait(min(1.0, self.heartbeat_interval_s))
        return None

    # -- a run --------------------------------------------------------------
    def _context(self, run: RunInfo) -> RunContext:
        cfg = run.config
        # Batch sizes scale with the accelerator's memory (448 on a 32 GiB V100).
        accelerators = self.inventory.accelerators if self.inventory else ()
        memory = min((a.memory_bytes for a in accelerators), default=0)
        profile = get_profile(cfg.profile or "smoke").for_accelerator_memory(memory)
        precision = cfg.precision or "fp32"
        return RunContext(
            run_id=cfg.run_id, profile=profile, seed=int(cfg.seed), precision=precision,
            warmup_rounds=int(cfg.warmup_rounds) or profile.warmup_rounds,
            report_interval_s=float(cfg.report_interval_s) or 30.0,
            resource_interval_s=float(cfg.resource_interval_s) or 30.0,
            max_epochs_per_round=int(cfg.limits.max_epochs_per_round),
            max_rounds=int(cfg.limits.max_rounds_per_worker),
            deterministic=bool(cfg.deterministic), xla=bool(cfg.xla),
            inherit=bool(cfg.inherit),
        )

    def _dataset(self, ctx: RunContext) -> Dataset:
        from worker.data import load_dataset

        kind = self.config.dataset_kind or ctx.profile.dataset
        key = (kind, self.config.dataset_path, ctx.profile.input_size, ctx.deterministic)
        if key not in self._datasets:  # a fixed element order only where the run asks for it (slower)
            self._datasets[key] = load_dataset(kind, self.config.dataset_path,
                                               image_size=ctx.profile.input_size,
                                               deterministic=ctx.deterministic)
        return self._datasets[key]

    def _work_on(self, run: RunInfo) -> None:
        from worker.generator import GeneratorPool
        from worker.monitor import Monitor

        ctx = self._context(run)
        # the backend's determinism (slower) for a deterministic run; the rest of a round's randomness
        # is seeded from (run seed, worker, round): `_plan` reseeds Python, NumPy and Keras each round
        from worker import backend

        backend.set_determinism(ctx.deterministic)
        dataset = self._dataset(ctx)
        ctx.dataset = checked_dataset(ctx.profile, dataset)
        outbox = Outbox()
        seed = worker_seed(ctx.seed, self.worker_id)
        base = ctx.profile.base_graph()
        monitor = Monitor(interval_s=ctx.resource_interval_s, send=lambda sample: outbox.put(
            "resources", lambda: self.client.send_resource_samples(self.worker_id, resource_samples(sample))))
        self._history.clear()
        self._graphs.clear()
        log.info("event=run_start run_id=%d profile=%s seed=%d worker_seed=%d deterministic=%s", ctx.run_id,
                 ctx.profile.name, ctx.seed, seed, ctx.deterministic)
        monitor.start()
        try:
            # children must stay within the parameter limit at any kernel the run's TPE may pick
            limits = Limits(kernel_size=max(ctx.profile.kernel_sizes))
            with GeneratorPool(base, seed=seed, workers=self.config.generator_processes, limits=limits,
                               input_pipeline_cpus=self.config.input_pipeline_cpus,
                               space=ctx.profile.morph_space()) as pool:
                self._rounds(ctx, dataset, pool, outbox)
        finally:
            monitor.stop()
            outbox.close()
            log.info("event=run_end run_id=%d rounds=%d dropped=%d", ctx.run_id, self.rounds_done,
                     len(outbox.dropped))

    def _rounds(self, ctx: RunContext, dataset: Any, pool: Any, outbox: Outbox) -> None:
        """Rounds until the run or the worker stops, each prepared while the previous one trains
        (`worker.lookahead`, which states the rule each round's basis follows)."""
        from worker.lookahead import LookAhead, freeze_heap

        freeze_heap()
        basis: Basis | None = None
        with LookAhead(lambda b: self._plan(ctx, dataset, pool, b), enabled=self.config.lookahead) as ahead:
            while not self._stop.is_set() and self._run_state(ctx.run_id) == RunState.RUNNING:
                if self._lost.is_set():
                    self._register()
                    basis = None  # the master may have abandoned models: a fresh basis
                if basis is None:
                    basis = self._basis(ctx, outbox)
                    if basis is None:  # stopping while the master was unreachable
                        break
                if ctx.max_rounds and basis.round_index > ctx.max_rounds:
                    log.info("event=max_rounds rounds=%d", ctx.max_rounds)
                    break
                try:
                    basis = self._round(ctx, outbox, ahead, basis)
                except _RunClosed as exc:
                    # The run ended (or hit its model limit) between our last heartbeat and this
                    # submission: a normal end of run, not an error.
                    log.info("event=run_closed run_id=%d reason=%s", ctx.run_id, exc)
                    self._closed_runs.add(ctx.run_id)
                    break
            log.info("event=lookahead hits=%d misses=%d discarded=%d waited_s=%.1f", ahead.hits,
                     ahead.misses, ahead.discarded, ahead.waited_s)

    def _basis(self, ctx: RunContext, outbox: Outbox) -> Basis | None:
        """The next round's basis: this worker's finished reports flushed, then the run's history
        fresh from the master (None when the worker stops first)."""
        from worker.lookahead import Basis

        outbox.flush()
        snapshot = self._snapshot()
        if snapshot is None:
            return None
        return Basis.of(ctx.run_id, self._next_round(), snapshot, self._history)

    def _next_round(self) -> int:
        """1 + this worker's models in the run, whatever became of them (done, failed,
        abandoned): the master created them. A submission that failed created none, so it
        does not count; a restarted worker counts the same way."""
        return 1 + sum(1 for m in self._history.values() if m.worker_id == self.worker_id)

    def _snapshot(self) -> list[HistoryEntry] | None:
        """The run's history, fresh from the master (retried until it answers; None when
        the worker stops first), as the entries selection reads."""
        fetched = tenacity.Retrying(
            retry=tenacity.retry_if_result(lambda done: not done), wait=retries.RETRY_WAIT,
            sleep=retries.interruptible(self._stop), stop=lambda _state: self._stop.is_set(),
            retry_error_callback=lambda _state: False)
        if not fetched(self._fetch_history):
            return None
        return self._history_entries()

    def _fetch_history(self) -> bool:
        """Bring `_history` up to date: new models and those still open; False on an error."""
        open_ids = [mid for mid, m in self._history.items()
                    if m.state in OPEN_MODEL_STATES]
        since = (min(open_ids) - 1) if open_ids else max(self._history, default=0)
        try:
            while True:  # page until the master has nothing newer (it may cap a page)
                # the search ranks what it holds itself (aiperf.search): the master's ranking is not asked for
                models = self.client.get_history(self.worker_id, since_model_id=since)
                if not models:
                    return True
                for m in models:
                    self._history[m.model_id] = m
                since = max(m.model_id for m in models)
        except ApiError as exc:
            log.warning("event=history_failed error=%s", exc)
            return False

    def _history_entries(self) -> list[HistoryEntry]:
        """The run's history for selection: every model, with its accuracy once done."""
        entries = []
        for mid in sorted(self._history):
            m = self._history[mid]
            accuracy = None
            if m.state == ModelState.DONE and m.has_accuracy:
                accuracy = m.predicted_accuracy or m.best_accuracy
            if mid not in self._graphs:
                self._graphs[mid] = Graph.from_json(m.graph_json)
            entries.append(HistoryEntry(model_id=mid, graph=self._graphs[mid], accuracy=accuracy,
                                        graph_hash=m.graph_hash))
        return entries

    def _round(self, ctx: RunContext, outbox: Outbox, ahead: Any, basis: Basis) -> Basis | None:
        """One round: its planned child submitted (the master gives its model id), the next
        round's basis fetched and its planning started, then training while reporting progress,
        its weights stored; returns the next round's basis (None: fetch a fresh one)."""
        planned = ahead.take(basis)
        round_index = basis.round_index
        model_id = None
        try:
            if planned.pending_parent:
                self._inherit_at_hand_over(planned)
            model_id = self._submit(planned.graph, planned.parent_id, round_index, planned.hyper, ctx.dataset,
                                    planned.inherited_from, prepared=planned.prepared)
        finally:
            if model_id is None:  # not submitted (run closed, transient error): drop the model
                planned.release()
        if model_id is None:
            return None
        self._current_model = model_id
        following = self._basis(ctx, outbox)
        if following is not None and not (ctx.max_rounds and following.round_index > ctx.max_rounds):
            ahead.start(following)
        hyper = planned.hyper
        log.info("event=round_start round=%d model=%d parent=%d source=%s batch=%d kernel=%d inherited_from=%d "
                 "start=%r planned_s=%.1f ahead=%s", round_index, model_id, planned.parent_id, planned.source,
                 hyper.batch_size, hyper.kernel_size, planned.inherited_from, planned.start_why,
                 planned.seconds, planned.ahead)
        saved: list[Checkpoint | None] = []
        try:
            result = self._train(ctx, planned, outbox, model_id, on_weights=lambda w: saved.append(
                self.inheritance.save(ctx.run_id, model_id, planned.graph, hyper.kernel_size, w)))
        finally:
            ahead.dispose(planned)
        self._current_model = 0
        self._finish(outbox, model_id, round_index, result, saved[-1] if saved else None)
        if result.state == RoundOutcome.FAILED and result.reason.startswith(OOM_REASON_PREFIX):
            self._lower_profile(ctx, profile_after_out_of_memory(ctx.profile, hyper.batch_size,
                                                                 result.batch_size_that_fits))
        self.rounds_done += 1
        return following

    def _plan(self, ctx: RunContext, dataset: Any, pool: Any, basis: Basis) -> PlannedRound:
        """Everything round `basis.round_index` needs before its first step, from its basis only:
        the child, its hyperparameters, the model built and its steps traced (any thread)."""
        from worker.lookahead import PlannedRound, free_memory, repeated_architecture
        from worker.trainer import prepare_round

        candidate = repeated_architecture(basis, self.worker_id, ctx.profile.trial(basis.round_index, ctx.warmup_rounds))
        if candidate is None:
            candidate = pool.child(basis.round_index, basis.entries, timeout=600)
        graph = candidate.graph
        parent_id = candidate.parent_model_id or model_with_hash(basis.models, graph.meta.get("parent"))
        parent_graph = next((e.graph for e in basis.entries if e.model_id == parent_id), None)
        epochs = ctx.profile.epochs_for_round(basis.round_index)
        if ctx.max_epochs_per_round:
            epochs = min(epochs, ctx.max_epochs_per_round)
        seed = derive_seed(ctx.seed, "train", self.worker_id, basis.round_index)
        profile = ctx.profile
        while True:  # chosen again at smaller sizes while the memory plan says they cannot fit
            if ctx.deterministic:  # whatever the trainer does not seed itself starts the same, each try
                import keras

                keras.utils.set_random_seed(seed % 2**32)
            hyper, source = self._hyperparameters(ctx, basis.round_index, parent_id, basis.models, profile)
            start = self.inheritance.child_start(ctx.inherit, basis.models.get(parent_id), parent_graph, graph, hyper)
            hyper = start.hyperparameters  # the kernel may be kept from the parent (never shrinks)
            prepared = prepare_round(graph, hyper, dataset, profile, basis.round_index, precision=ctx.precision,
                                     xla=ctx.xla, seed=seed, epochs=epochs, initial_weights=start.weights)
            lowered = replanned_profile(profile, hyper.batch_size, prepared)
            if lowered is None:
                break
            prepared.release()
            free_memory()  # the refused try's model and iterators, before the next compiles
            profile = self._lower_profile(ctx, lowered)
        return PlannedRound(basis.key, candidate, parent_id, hyper, source, prepared,
                            inherited_from=start.inherited_from, start_why=start.why,
                            pending_parent=start.pending_parent)

    def _lower_profile(self, ctx: RunContext, lowered: Profile) -> Profile:
        """The run's profile, lowered to `lowered` when that keeps fewer sizes (every lowering keeps
        the sizes up to a limit, so the smaller wins whichever thread lowers first); never raised."""
        with self._profile_lock:
            if max(lowered.batch_sizes) < max(ctx.profile.batch_sizes):
                ctx.profile = lowered
            return ctx.profile

    def _inherit_at_hand_over(self, planned: PlannedRound) -> None:
        """A round prepared while its parent trained: the parent's weights loaded into it now if its
        checkpoint was written meanwhile (the parent's record fetched again), else from scratch."""
        parent_id, planned.pending_parent = planned.pending_parent, 0
        if planned.failed:
            return
        self._fetch_history()
        parent = self._history.get(parent_id)
        parent_graph = self._graphs.get(parent_id)
        if parent_graph is None and parent is not None:
            parent_graph = self._graphs[parent_id] = Graph.from_json(parent.graph_json)
        weights, planned.start_why = self.inheritance.late_weights(parent, parent_graph, planned.graph,
                                                                   planned.hyper.kernel_size)
        if weights is None:
            return
        try:
            planned.prepared.compiled.load_weights(weights)
            planned.prepared.inherited.update(weights)
        except ValueError as exc:  # the transfer's shapes do not fit the prepared model: a bug, not fatal
            log.warning("event=inheritance_failed parent=%d error=%s: training from scratch", parent_id, exc)
            planned.start_why = f"from scratch: {exc}"
            return
        planned.inherited_from = parent_id

    def _hyperparameters(self, ctx: RunContext, round_index: int, parent_id: int, models: Mapping[int, ModelRecord],
                         profile: Profile | None = None) -> tuple[Hyperparameters, str]:
        """worker.round_choice.round_hyperparameters under `profile` (default: the run's, as lowered so far)."""
        return round_hyperparameters(profile or ctx.profile, round_index, parent_id, models,
                                     seed=derive_seed(ctx.seed, "hpo", self.worker_id, round_index),
                                     warmup_rounds=ctx.warmup_rounds)

    def _submit(self, graph: Graph, parent_id: int, round_index: int, hyper: Hyperparameters,
                dataset: dict[str, Any] | None = None, inherited_from: int = 0, prepared: Any = None) -> int | None:
        """The model id the master gives the child; None after a transient error (the round is skipped).
        `prepared` (a worker.trainer.PreparedRound) then starts from the master's initialisation seed.

        Raises `_RunClosed` when the run accepts no more models.
        """
        try:
            submitted = self.client.submit_model(self.worker_id, graph.to_json(), graph.hash(),
                                                 parent_id=parent_id, round=round_index,
                                                 hyperparameters=hyper, dataset=dataset,
                                                 inherited_from=inherited_from)
        except ApiError as exc:
            if exc.code in _TRANSIENT:
                log.warning("event=submit_failed error=%s", exc)
                time.sleep(1.0)
                return None
            if exc.code == grpc.StatusCode.FAILED_PRECONDITION:
                raise _RunClosed(exc.details) from None
            raise
        if prepared is not None:  # no weights from before the model existed (worker/weight_seed.py)
            prepared.start_from_seed(submitted.init_seed)
        return submitted.model_id

    def _train(self, ctx: RunContext, planned: PlannedRound, outbox: Outbox, model_id: int,
               on_weights: Callable[[Any], None] | None = None) -> TrainResult:
        """Train the planned round, queueing each progress report on `outbox`; returns the `TrainResult`."""
        from worker.trainer import run_round

        seq = [0]

        def on_progress(p: Progress) -> None:
            seq[0] += 1
            n = seq[0]
            outbox.put(f"progress model={model_id} seq={n}", lambda: self.client.report_progress(
                self.worker_id, model_id, seq=n, images_trained=p.images_trained,
                images_validated=p.images_validated, epoch=p.epoch,
                val_accuracy=p.val_accuracy, worker_flops=p.worker_flops, weights_sha256=p.weights_sha256))

        def should_stop() -> bool:
            return (self._stop.is_set() or self._lost.is_set()
                    or self._run_state(ctx.run_id) != RunState.RUNNING)

        return run_round(planned.prepared, on_progress=on_progress, should_stop=should_stop,
                         progress_interval_s=ctx.report_interval_s, phase_reports=self.config.phase_reports,
                         release=False, on_weights=on_weights)

    def _finish(self, outbox: Outbox, model_id: int, round_index: int, result: TrainResult,
                checkpoint: Checkpoint | None = None) -> None:
        """Tell the master how the model ended: done with its accuracies, or failed with a reason."""
        if self._lost.is_set():
            log.warning("event=model_abandoned model=%d", model_id)
            return
        if result.state == RoundOutcome.FAILED:
            self._send_finish(outbox, model_id, ModelState.FAILED, reason=result.reason)
            log.warning("event=model_failed model=%d reason=%s", model_id, result.reason)
            return
        if not result.val_accuracies:
            # Cut (run stopping, worker stopping) before a first validation:
            # there is no accuracy to rank it by. Close it so the master need
            # not wait for it; the progress already reported stays counted.
            # cut, not failed: it says nothing about its hyperparameters, so TPE leaves it out,
            # while a model that failed on its own (out of memory, NaN loss) counts as a failure
            self._send_finish(outbox, model_id, ModelState.CUT,
                              reason=result.reason or "stopped before its first validation")
            log.info("event=round_cut model=%d state=%s", model_id, result.state)
            return
        assert result.best_val_accuracy is not None  # an epoch validated: val_accuracies has it
        best = float(result.best_val_accuracy)
        predicted = float(result.predicted_accuracy if result.predicted_accuracy is not None else best)
        self._send_finish(outbox, model_id, ModelState.DONE, best_accuracy=best, predicted_accuracy=predicted,
                          checkpoint_uri=checkpoint.uri if checkpoint else "",
                          checkpoint_sha256=checkpoint.sha256 if checkpoint else "",
                          checkpoint_weights_sha256=checkpoint.weights_sha256 if checkpoint else "")
        outbox.flush()
        log.info("event=round_end round=%d model=%d state=%s best=%.4f predicted=%.4f epochs=%d",
                 round_index, model_id, result.state, best, predicted, result.epochs)

    def _send_finish(self, outbox: Outbox, model_id: int, state: ModelState, **fields: Any) -> None:
        def send() -> None:  # then delete what retention let go (on the outbox's thread)
            undeleted = self.inheritance.undeleted[:MAX_UNDELETED_PER_FINISH]  # what earlier deletes could not
            try:
                doomed = self.client.finish_model(self.worker_id, model_id, state, undeleted=undeleted, **fields)
            except ApiError as exc:  # e.g. a master on another database: the model's own finish must not wait
                if not undeleted or exc.code not in REFUSED_UNDELETED:
                    raise
                log.warning("event=undeleted_refused models=%s error=%s", [m for m, _ in undeleted], exc)
                doomed = self.client.finish_model(self.worker_id, model_id, state, **fields)
            # what was sent is answered; one write of the file covers that and the deletes to come
            self.inheritance.delete(doomed, answered=len(undeleted))

        outbox.put(f"finish model={model_id}", send)


class _RunClosed(Exception):
    """The master accepts no more models in this run."""


def resource_samples(sample: MonitorSample) -> list[ResourceSample]:
    """A monitor sample as the API's samples: one host-wide, one per accelerator."""
    age = max(0.0, time.time() - sample.time)
    out = [ResourceSample(age_s=age, accelerator_index=-1, cpu_util=sample.cpu_percent / 100.0,
                          memory_used=sample.memory_used_bytes)]
    for acc in sample.accelerators:
        out.append(ResourceSample(age_s=age, accelerator_index=acc.index,
                                  accelerator_util=acc.utilization_percent / 100.0,
                                  accelerator_memory_used=acc.memory_used_bytes))
    return out


def checkpoint_store(config: AgentConfig) -> CheckpointStore | None:
    """The store of --checkpoints, else `checkpoints` under the state directory; None without either
    (nothing stored, nothing inherited). CheckpointError: a bad URL, or fsspec missing."""
    url = config.checkpoints or (str(config.state_dir / "checkpoints") if config.state_dir is not None else None)
    if url is None:
        log.info("event=no_checkpoint_store: children train from scratch")
        return None
    return open_store(url)


def default_name() -> str:
    """Stable across restarts: the pod or host name (re-registration is idempotent on it)."""
    return os.environ.get("AIPERF_WORKER_NAME") or socket.gethostname()
