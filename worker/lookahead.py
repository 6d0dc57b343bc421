"""Look-ahead: the next round is chosen, built and traced while the current one trains.

A round's work before its first training step (the child from the generator
pool, its hyperparameters, the Keras model built, its train and eval functions
traced and warmed up: `worker.trainer.prepare_round`) runs on one background
thread while the previous round trains, so the accelerator waits only for the
hand-over: submit the prepared child, fetch the history, start the next
look-ahead, first step. The trained round's model is freed at the next
hand-over (`dispose`, then `take`), once the round planned meanwhile is ready
and before the next planning and training begin: freeing a model's functions
while another thread traces or trains waits seconds on TensorFlow's locks, a
twentieth of a second with nothing else running (docs/benchmarks.md, idle_bench's
figures). Its data iterators go to a thread of their own (`worker.rounds`):
deleting one waits for its pipeline's autotuning thread.
The heap alive when the process's first run begins its rounds is frozen
(`freeze_heap`), so the collection at each hand-over scans only what rounds create.

Reproducibility. Everything a round chooses depends on its `Basis`: the run,
the round index and the history snapshot. The rule (the same with the
look-ahead on or off, so turning it off changes no child):

- the basis of round r + 1 is the run's history as the master returns it right
  after round r's model was submitted: every model submitted so far (round r's
  own one still open, without accuracy) with the accuracies of those finished
  by then. Round r's accuracy therefore reaches round r + 2, not r + 1 (one
  round of lag, the price of overlapping); before the basis is fetched, the
  worker's own finished reports are flushed, so a single worker's bases do not
  depend on timing;
- a prepared round is handed over only when its key (run, round index,
  snapshot digest) equals the basis the agent holds at the hand-over. The agent
  drops its basis, and so discards the prepared round and prepares again, when
  the history it holds changed in a way that can change the child: the
  submission of round r failed (no model was created, the round index does not
  advance), the worker was re-registered after being marked lost (the master
  may have abandoned models), or the basis could not be fetched;
- a preparation that ran out of memory while the previous round still held its
  memory, or that failed, is discarded and done again at the hand-over.
- a round that is its architecture's second (or later) trial after warm-up
  (`Profile.trial`) trains the architecture of the worker's previous round, as the
  basis holds it (`repeated_architecture`): the previous round's model is in
  every basis of the next round, submitted before it was fetched.

In a deterministic run the global random seeds are set before the round is
prepared (on the look-ahead thread); the trainer seeds its weights and data
order itself.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from aiperf.api.records import ModelRecord
from aiperf.graph import Graph
from aiperf.search import Candidate, HistoryEntry
from worker.generator import snapshot_digest, snapshot_rows
from worker.rounds import wait_for_released

log = logging.getLogger(__name__)

Key = tuple[int, int, str]
RETRY_WAIT_S = 60.0  # at most, for released iterators to be deleted before an out-of-memory retry


@dataclass(frozen=True)
class Basis:
    """What a round's choices depend on: its run, its index and the history snapshot."""

    run_id: int
    round_index: int
    entries: tuple[HistoryEntry, ...]
    models: Mapping[int, ModelRecord] = field(default_factory=dict)  # the snapshot's models as the master sent them
    digest: str = ""

    @classmethod
    def of(cls, run_id: int, round_index: int, entries: Sequence[HistoryEntry],
           models: Mapping[int, ModelRecord]) -> "Basis":
        entries = tuple(entries)
        return cls(run_id, round_index, entries, dict(models), snapshot_digest(snapshot_rows(entries)))

    @property
    def key(self) -> Key:
        return (self.run_id, self.round_index, self.digest)


def repeated_architecture(basis: Basis, worker_id: int, trial: int) -> Candidate | None:
    """The architecture of the worker's previous round when round `basis.round_index` is its
    trial `trial` > 1 (`Profile.trial`: after warm-up an architecture trains
    `trials_per_architecture` times, as the original's maxTPEsearchNum), with the same parent;
    None for a new architecture, or when the previous round's model is not in the snapshot
    (its submission failed, the worker restarted): a new architecture then."""
    if trial <= 1:
        return None
    previous = next((m for m in basis.models.values()
                     if m.worker_id == worker_id and m.round == basis.round_index - 1), None)
    if previous is None:
        log.info("event=trial_without_previous round=%d trial=%d: a new architecture", basis.round_index, trial)
        return None
    entry = next((e for e in basis.entries if e.model_id == previous.model_id), None)
    graph = entry.graph if entry is not None else Graph.from_json(previous.graph_json)
    return Candidate(graph=graph, parent_model_id=int(previous.parent_id) or None)


@dataclass
class PlannedRound:
    """A round ready to hand over: its child, hyperparameters and prepared model."""

    key: Key
    candidate: Candidate
    parent_id: int
    hyper: Any                  # aiperf.hyperparameters.Hyperparameters
    source: str                 # where the hyperparameters came from (warm-up, parent, TPE)
    prepared: Any               # worker.trainer.PreparedRound
    seconds: float = 0.0        # time the planning took
    ahead: bool = False         # prepared on the look-ahead thread
    inherited_from: int = 0     # the parent whose weights the model starts from; 0: from scratch
    start_why: str = ""         # for the log: "inherited", or why not (worker.inheritance)
    pending_parent: int = 0     # prepared while this parent trained: its weights are loaded at the hand-over

    @property
    def graph(self) -> Any:
        return self.candidate.graph

    @property
    def failed(self) -> bool:
        return self.prepared.compiled is None

    def release(self) -> None:
        self.prepared.release()


@dataclass
class _Job:
    key: Key
    future: "Future[PlannedRound]"


class LookAhead:
    """Plans rounds on one background thread (or inline when disabled); see the module docstring.

    `start(basis)` begins planning that round; `take(basis)` returns the planned round of that
    basis, waiting for the look-ahead when it is under way, discarding it when its key differs
    and planning inline then. `hits` counts the rounds handed over from the look-ahead, `misses`
    those planned at the hand-over, `discarded` the preparations thrown away.
    """

    def __init__(self, plan: Callable[[Basis], PlannedRound], enabled: bool = True) -> None:
        self._plan = plan
        self.enabled = enabled
        self.hits = self.misses = self.discarded = 0
        self.waited_s = 0.0  # hand-over time spent waiting for an unfinished look-ahead
        self._job: _Job | None = None
        self._trained: list[PlannedRound] = []  # trained rounds to free at the next hand-over
        self._lock = threading.Lock()
        self._closed = False
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lookahead") if enabled else None

    def start(self, basis: Basis) -> None:
        """Begin planning `basis`'s round in the background (a no-op when disabled or already under way)."""
        if self._executor is None:
            return
        with self._lock:
            if self._closed or (self._job is not None and self._job.key == basis.key):
                return
            self._drop_job()
            self._job = _Job(basis.key, self._executor.submit(self._timed, basis, True))

    def take(self, basis: Basis) -> PlannedRound:
        """The planned round of `basis`: from the look-ahead when it was started on this very basis
        and succeeded, else planned now (errors of planning now propagate)."""
        with self._lock:
            job, self._job = self._job, None
        if job is not None and job.key == basis.key:
            begin = time.monotonic()
            try:
                planned = job.future.result()
            except Exception as exc:  # noqa: BLE001 - planned again below; a real error recurs there
                log.warning("event=lookahead_failed round=%d error=%s", basis.round_index, exc)
                planned = None
            self.waited_s += time.monotonic() - begin
            self._free_trained()  # nothing else runs now: fast
            if planned is not None and planned.failed:
                # out of memory while the previous round held its memory: try again without it
                log.info("event=lookahead_discarded round=%d reason=%s", basis.round_index, planned.prepared.failure)
                planned.release()
                free_memory()
                self.discarded += 1
                planned = None
            if planned is not None:
                self.hits += 1
                return planned
        elif job is not None:
            log.info("event=lookahead_discarded round=%d reason=basis changed", basis.round_index)
            self._discard(job)
        self._free_trained()  # before planning here: its memory too
        self.misses += 1
        return self._timed(basis, False)

    def dispose(self, planned: PlannedRound) -> None:
        """Free a trained round's model at the next hand-over (`take`), once the round planned
        meanwhile is ready (inline when disabled; at `close` when no hand-over comes): freeing
        a model's functions while another thread traces or trains waits on TensorFlow's locks."""
        with self._lock:
            if self._executor is not None and not self._closed:
                self._trained.append(planned)
                return
        planned.release()

    def close(self) -> None:
        """Discard what is under way (released once it ends) and stop the thread without waiting:
        a planning blocked on the generator pool ends when the pool is closed."""
        with self._lock:
            self._closed = True
            self._drop_job()
        self._free_trained()
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> "LookAhead":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals -----------------------------------------------------------
    def _timed(self, basis: Basis, ahead: bool) -> PlannedRound:
        begin = time.monotonic()
        if ahead:
            gc.collect()  # what the hand-over released of the trained model: collected off the training thread
        planned = self._plan(basis)
        planned.seconds = time.monotonic() - begin
        planned.ahead = ahead
        return planned

    def _free_trained(self) -> None:
        with self._lock:
            trained, self._trained = self._trained, []
        for planned in trained:
            planned.release()

    def _drop_job(self) -> None:
        if self._job is not None:
            self._discard(self._job)
            self._job = None

    def _discard(self, job: _Job) -> None:
        self.discarded += 1
        job.future.cancel()
        job.future.add_done_callback(_release_result)


_heap_frozen = False
_freeze_lock = threading.Lock()


def freeze_heap() -> None:
    """Move what is alive when the process's first run begins its rounds (TensorFlow, Keras, the
    dataset: about 400,000 objects) out of the collector's reach, so that the full collection at
    each hand-over (`LookAhead._timed`) scans only what rounds create. Scanning everything took
    0.2-0.4 s with the interpreter held, and the next round's first step waited for it.

    Once per process: frozen objects are never scanned again, so cyclic garbage among them is
    never collected (objects outside cycles are still freed when their last reference goes).
    What is alive before the first run is the process's long-lived state; freezing again at
    later runs would also freeze what is left of the run before (a preparation still ending)."""
    global _heap_frozen
    import keras  # noqa: F401 - long-lived too; imported here rather than by the first round

    with _freeze_lock:
        if _heap_frozen:
            return
        gc.collect()
        gc.freeze()
        _heap_frozen = True


def free_memory() -> None:
    """Free what released rounds still hold (models in reference cycles, iterators queued for
    deletion with their prefetch buffers) before a preparation that ran out of memory is tried again."""
    gc.collect()
    if not wait_for_released(RETRY_WAIT_S):
        log.warning("event=released_iterators_pending waited_s=%.0f", RETRY_WAIT_S)


def _release_result(future: "Future[PlannedRound]") -> None:
    if future.cancelled() or future.exception() is not None:
        return
    future.result().release()
