"""Generator pool: child architectures chosen on the node's CPUs, reproducibly.

The child of a worker's round r is a pure function of the pool's seed, r and
the history snapshot the round uses: a `ProcessPoolExecutor` (spawn context:
TensorFlow in the parent makes fork unsafe) runs `aiperf.search.select_child`
on that snapshot with the seed derive_seed(pool seed, "round", r). Nothing
else enters: no job counter, no earlier hand-outs, no race between jobs, and a
process's distance cache does not change results (`select_child` says so).

Prefetch: `prepare(r + 1, snapshot)` starts round r + 1's child while round r
trains, on the snapshot as it stands then. `child(r + 1, snapshot)` uses that
result only when the snapshot it is given is the very one the job was started
on (same models, hashes and accuracies); otherwise it computes the child again
on the given snapshot. A finished model changes the snapshot, so the prefetch
pays off only when nothing finished meanwhile (the round's model failed, or
was cut); determinism comes first. The agent does not use it: its look-ahead
(`worker.lookahead`) asks `child(r + 1, snapshot)` on its own thread, on the
snapshot round r + 1 will use, and builds the model too.

History reaches the processes through files rather than pickled arguments
(1,000 graphs are ~20 MB of JSON): each architecture is written once, as
``graphs/<hash>.json``, and each snapshot as a small index of (model id, hash,
accuracy) named by its digest. Each process keeps parsed graphs and its
distance cache across jobs, so a history that grows by one model costs one
new row of distances.
"""

from __future__ import annotations

import hashlib
import json
import logging
import multiprocessing
import os
import shutil
import signal
import tempfile
import threading
import time
from collections import OrderedDict
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any, Sequence

from aiperf.distance import DistanceCache
from aiperf.graph import Graph
from aiperf.morphism import Limits, MorphSpace
from aiperf.search import Candidate, HistoryEntry, SearchSettings, derive_seed, select_child

log = logging.getLogger(__name__)

# a job's child: its graph JSON, parent model id, predicted accuracy and UCB score
_Generated = tuple[str, int | None, float | None, float | None]


class GeneratorError(RuntimeError):
    """A generation job failed (the message carries the job's error)."""


def default_workers(input_pipeline_cpus: int = 1) -> int:
    """CPUs of this process minus those the trainer's input pipeline needs (at least 1)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cpus = os.cpu_count() or 1
    return max(1, cpus - max(0, input_pipeline_cpus))


def round_seed(seed: int, round_index: int) -> int:
    """The selection seed of a worker's round: from the worker's seed and the round only."""
    return derive_seed(seed, "round", round_index)


def snapshot_rows(entries: Sequence[HistoryEntry]) -> list[list[Any]]:
    """A history snapshot as what selection reads of it: (model id, hash, accuracy), by id."""
    return [[e.model_id, e.hash, e.accuracy] for e in sorted(entries, key=lambda e: e.model_id)]


def snapshot_digest(rows: list[list[Any]]) -> str:
    """Names a snapshot: equal digests, equal snapshots (accuracies compared exactly)."""
    return hashlib.sha256(json.dumps(rows, separators=(",", ":")).encode()).hexdigest()


@dataclass(frozen=True)
class _Job:
    directory: str
    index: str  # history index file name
    seed: int
    kernel_size: int
    limits: Limits | None
    space: MorphSpace | None
    search: SearchSettings


class GeneratorPool:
    """Children per (round, history snapshot); see the module docstring.

    Use as a context manager, or call `close()`: it cancels pending jobs and
    ends the processes (no orphans). `hits` and `misses` count the children
    that a prefetch had ready and those computed on demand.
    """

    def __init__(self, base: Graph, seed: int, workers: int | None = None, *,
                 kernel_size: int = 3, limits: Limits | None = None, input_pipeline_cpus: int = 1,
                 max_prepared: int = 2, space: MorphSpace | None = None,
                 search: SearchSettings = SearchSettings()) -> None:
        if max_prepared < 1:
            raise ValueError(f"max_prepared must be >= 1, got {max_prepared}")
        self.workers = max(1, workers) if workers is not None else default_workers(input_pipeline_cpus)
        self.seed = seed
        self.kernel_size = kernel_size
        self.limits = limits
        self.max_prepared = max_prepared
        self.hits = self.misses = 0
        self.space, self.search = space, search
        self._dir = tempfile.mkdtemp(prefix="aiperf-generator-")
        os.makedirs(os.path.join(self._dir, "graphs"))
        _write(os.path.join(self._dir, "base.json"), base.to_json())
        self._written: set[str] = set()
        self._jobs: OrderedDict[tuple[int, str], Future[_Generated]] = OrderedDict()
        self._retired: list[tuple[str, Future[_Generated]]] = []  # dropped jobs whose index may still be read
        self._lock = threading.RLock()
        self._closed = False
        self._executor = ProcessPoolExecutor(
            max_workers=self.workers, mp_context=multiprocessing.get_context("spawn"),
            initializer=_init_process, initargs=(os.getpid(),))

    # -- public ------------------------------------------------------------
    @property
    def prepared(self) -> list[tuple[int, str]]:
        """(round, snapshot digest) of the children started and not yet handed out."""
        with self._lock:
            return list(self._jobs)

    def prepare(self, round_index: int, history: Sequence[HistoryEntry]) -> str:
        """Start computing round `round_index`'s child on this snapshot (a no-op when it
        is already under way); returns the snapshot's digest. Only the newest
        `max_prepared` preparations are kept."""
        with self._lock:
            self._check_open()
            rows = self._write_graphs(history)
            digest = snapshot_digest(rows)
            self._start((round_index, digest), rows)
            return digest

    def child(self, round_index: int, history: Sequence[HistoryEntry],
              timeout: float | None = None) -> Candidate:
        """Round `round_index`'s child on snapshot `history`: the prepared one when it was
        started on this very snapshot, else computed now. Blocks (TimeoutError
        after `timeout` s); GeneratorError when the job fails (a retry starts it
        again). Preparations for this round and earlier ones are dropped."""
        with self._lock:
            self._check_open()
            rows = self._write_graphs(history)
            key = (round_index, snapshot_digest(rows))
            ready = key in self._jobs
            self._start(key, rows)
            future = self._jobs[key]
        try:
            graph_json, parent_id, predicted, ucb = future.result(timeout=timeout)
        except FutureTimeout:
            raise TimeoutError(f"no child generated within {timeout} s") from None
        except Exception as exc:  # a failed job: forget it so that a retry starts afresh
            with self._lock:
                if self._jobs.get(key) is future:
                    self._retire(key)
            raise GeneratorError(f"generating round {round_index}'s child failed: {exc}") from exc
        with self._lock:
            for k in [k for k in self._jobs if k[0] <= round_index]:
                self._retire(k)
            self._sweep()
            if ready:
                self.hits += 1
            else:
                self.misses += 1
        log.debug("round %d: child %s", round_index, "prefetched" if ready else "computed on demand")
        return Candidate(Graph.from_json(graph_json), parent_id, predicted, ucb)

    def close(self) -> None:
        """Cancel pending jobs and end the worker processes."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for fut in self._jobs.values():
                fut.cancel()
            self._jobs.clear()
        processes = list(getattr(self._executor, "_processes", {}).values())
        self._executor.shutdown(wait=False, cancel_futures=True)
        # A job may be mid-selection: give the processes a moment, then stop them.
        for p in processes:
            p.join(timeout=2.0)
        for p in processes:
            if p.is_alive():
                p.terminate()
                p.join(timeout=2.0)
        self._executor.shutdown(wait=True)
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> "GeneratorPool":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:  # pragma: no cover - safety net only
        try:
            self.close()
        except Exception:
            pass

    # -- internals -----------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("the generator pool is closed")

    def _write_graphs(self, entries: Sequence[HistoryEntry]) -> list[list[Any]]:
        """Write the architectures not written yet; the snapshot's rows."""
        for e in entries:
            h = e.hash
            if h not in self._written:
                _write(os.path.join(self._dir, "graphs", f"{h}.json"), e.graph.to_json())
                self._written.add(h)
        return snapshot_rows(entries)

    def _start(self, key: tuple[int, str], rows: list[list[Any]]) -> None:
        """Submit the job of (round, digest) unless it is under way."""
        if key in self._jobs:
            return
        index = f"history-{key[1]}.json"
        _write(os.path.join(self._dir, index), json.dumps(rows))
        job = _Job(self._dir, index, round_seed(self.seed, key[0]), self.kernel_size, self.limits, self.space,
                   self.search)
        self._jobs[key] = self._executor.submit(_generate, job)
        while len(self._jobs) > self.max_prepared:
            self._retire(next(iter(self._jobs)))

    def _retire(self, key: tuple[int, str]) -> None:
        """Drop a job: cancelled if it has not started, else left to finish unread."""
        future = self._jobs.pop(key)
        future.cancel()
        self._retired.append((key[1], future))

    def _sweep(self) -> None:
        """Remove the index files no job reads any more."""
        live = {digest for _, digest in self._jobs}
        keep: list[tuple[str, Future[_Generated]]] = []
        for digest, future in self._retired:
            if not future.done():
                keep.append((digest, future))
                live.add(digest)
        self._retired = keep
        for name in os.listdir(self._dir):
            if name.startswith("history-") and name[len("history-"):-len(".json")] not in live:
                try:
                    os.unlink(os.path.join(self._dir, name))
                except FileNotFoundError:  # pragma: no cover
                    pass


def _write(path: str, text: str) -> None:
    """Write atomically: a reader never sees half a file."""
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


# ---------------------------------------------------------------------------
# Inside the worker processes.

_CACHE: DistanceCache | None = None
_GRAPHS: dict[str, Graph] = {}
_BASE: dict[str, Graph] = {}


def _init_process(parent_pid: int) -> None:
    # The agent handles Ctrl-C; the pool is closed from there.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # A worker killed with SIGKILL cannot close its pool: exit with it rather
    # than linger as an orphan on the node.
    threading.Thread(target=_exit_with_parent, args=(parent_pid,), daemon=True,
                     name="parent-watchdog").start()
    try:  # one BLAS thread per process: the pool already uses every core
        from threadpoolctl import threadpool_limits
        threadpool_limits(1)
    except ImportError:  # pragma: no cover - threadpoolctl comes with scikit-learn
        pass


def _exit_with_parent(parent_pid: int, period_s: float = 1.0) -> None:
    while True:
        time.sleep(period_s)
        if os.getppid() != parent_pid:  # re-parented: the worker is gone
            os._exit(0)


def _generate(job: _Job) -> _Generated:
    global _CACHE
    if _CACHE is None:
        _CACHE = DistanceCache()
    base = _BASE.get(job.directory)
    if base is None:
        with open(os.path.join(job.directory, "base.json"), encoding="utf-8") as f:
            base = _BASE[job.directory] = Graph.from_json(f.read())
    with open(os.path.join(job.directory, job.index), encoding="utf-8") as f:
        rows = json.load(f)
    history = []
    for model_id, h, accuracy in rows:
        graph = _GRAPHS.get(h)
        if graph is None:
            with open(os.path.join(job.directory, "graphs", f"{h}.json"), encoding="utf-8") as f:
                graph = _GRAPHS[h] = Graph.from_json(f.read())
        history.append(HistoryEntry(model_id, graph, accuracy, h))
    cand = select_child(history, job.seed, base=base, kernel_size=job.kernel_size, limits=job.limits,
                        space=job.space, settings=job.search, cache=_CACHE)
    return cand.graph.to_json(), cand.parent_model_id, cand.predicted_accuracy, cand.ucb
