"""Generator pool: child architectures chosen on the node's CPUs, ahead of the trainer.

A `ProcessPoolExecutor` (spawn context: TensorFlow in the parent makes fork
unsafe) runs `aiperf.search.select_child` jobs and keeps `buffer` of them in
flight or ready; `take()` hands out the oldest, then immediately submits a
replacement. Job n gets the seed derive_seed(pool seed, "job", n), so a job's
result depends only on its seed and the history snapshot it saw.

History reaches the processes through files rather than pickled arguments
(1,000 graphs are ~20 MB of JSON): each architecture is written once, as
``graphs/<hash>.json``, and every `update_history` writes a small versioned
index of (model id, hash, accuracy). Each process keeps parsed graphs and its
distance cache across jobs, so a history that grows by one model costs one new
row of distances.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import shutil
import signal
import tempfile
import threading
import time
from collections import deque
from concurrent.futures import CancelledError, Future, ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any, Sequence

from aiperf.distance import DistanceCache
from aiperf.graph import Graph
from aiperf.morphism import Limits
from aiperf.search import Candidate, HistoryEntry, derive_seed, select_child

log = logging.getLogger(__name__)


class GeneratorError(RuntimeError):
    """A generation job failed (the message carries the job's error)."""


def default_workers(input_pipeline_cpus: int = 1) -> int:
    """CPUs of this process minus those the trainer's input pipeline needs (at least 1)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cpus = os.cpu_count() or 1
    return max(1, cpus - max(0, input_pipeline_cpus))


@dataclass(frozen=True)
class _Job:
    directory: str
    index: str  # history index file name
    seed: int
    exclude: tuple[str, ...]
    kernel_size: int
    limits: Limits | None
    options: tuple[tuple[str, Any], ...]


class GeneratorPool:
    """Keeps `buffer` children being generated or ready; see the module docstring.

    Use as a context manager, or call `close()`: it cancels pending jobs and
    ends the processes (no orphans).
    """

    def __init__(self, base: Graph, seed: int, workers: int | None = None, buffer: int = 2, *,
                 history: Sequence[HistoryEntry] = (), kernel_size: int = 3,
                 limits: Limits | None = None, input_pipeline_cpus: int = 1,
                 **select_options: Any) -> None:
        if buffer < 1:
            raise ValueError(f"buffer must be >= 1, got {buffer}")
        self.workers = max(1, workers) if workers is not None else default_workers(input_pipeline_cpus)
        self.buffer = buffer
        self.seed = seed
        self.kernel_size = kernel_size
        self.limits = limits
        self._options = tuple(sorted(select_options.items()))
        self._dir = tempfile.mkdtemp(prefix="aiperf-generator-")
        os.makedirs(os.path.join(self._dir, "graphs"))
        _write(os.path.join(self._dir, "base.json"), base.to_json())
        self._written: set[str] = set()
        self._hash_by_id: dict[int, str] = {}
        self._history_hashes: set[str] = set()
        self._taken: set[str] = set()
        self._version = 0
        self._index = ""
        self._pending: deque[tuple[int, str, Future]] = deque()
        self._seq = 0
        self._lock = threading.RLock()
        self._closed = False
        self._executor = ProcessPoolExecutor(
            max_workers=self.workers, mp_context=multiprocessing.get_context("spawn"),
            initializer=_init_process, initargs=(os.getpid(),))
        self._write_history(history)
        with self._lock:
            self._refill()

    # -- public ------------------------------------------------------------
    @property
    def pending(self) -> int:
        """Children being generated or ready (the buffer is kept full)."""
        with self._lock:
            return len(self._pending)

    def update_history(self, entries: Sequence[HistoryEntry]) -> None:
        """Give the pool the run's current history (all workers' models).

        Jobs not yet started are resubmitted against it; running ones finish on
        the previous snapshot (their results stay valid: duplicates are dropped).
        """
        with self._lock:
            self._check_open()
            self._write_history(entries)
            kept: deque[tuple[int, str, Future]] = deque()
            for seq, index, fut in self._pending:
                if not fut.cancel():
                    kept.append((seq, index, fut))
            self._pending = kept
            self._refill()

    def take(self, timeout: float | None = None) -> Candidate:
        """The next child: blocks until one is ready (TimeoutError after `timeout` s)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._lock:
                self._check_open()
                self._refill()
                seq, _, fut = self._pending[0]
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                result = fut.result(timeout=remaining)
            except TimeoutError:
                raise TimeoutError(f"no child generated within {timeout} s") from None
            except CancelledError:  # update_history (another thread) replaced the job
                with self._lock:
                    self._drop(fut)
                continue
            except Exception as exc:  # a failed job: drop it, keep the pool usable
                with self._lock:
                    self._drop(fut)
                    self._refill()
                raise GeneratorError(f"generation job {seq} failed: {exc}") from exc
            with self._lock:
                self._drop(fut)
                graph_json, parent_id, predicted, ucb = result
                graph = Graph.from_json(graph_json)
                h = graph.hash()
                if h in self._taken or h in self._history_hashes:
                    log.debug("job %d produced an architecture already handed out; regenerating", seq)
                    self._refill()
                    continue
                self._taken.add(h)
                self._refill()
                return Candidate(graph, parent_id, predicted, ucb)

    def close(self) -> None:
        """Cancel pending jobs and end the worker processes."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for _, _, fut in self._pending:
                fut.cancel()
            self._pending.clear()
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

    def _write_history(self, entries: Sequence[HistoryEntry]) -> None:
        rows = []
        for e in sorted(entries, key=lambda e: e.model_id):
            # A model's architecture never changes: hash it once (hashing costs ~3 ms).
            h = e.graph_hash or self._hash_by_id.get(e.model_id) or e.hash
            self._hash_by_id[e.model_id] = h
            if h not in self._written:
                _write(os.path.join(self._dir, "graphs", f"{h}.json"), e.graph.to_json())
                self._written.add(h)
            rows.append([e.model_id, h, e.accuracy])
        self._version += 1
        index = f"history-{self._version}.json"
        _write(os.path.join(self._dir, index), json.dumps(rows))
        old, self._index = self._index, index
        self._history_hashes = {r[1] for r in rows}
        if old and all(i != old for _, i, _ in self._pending):
            os.unlink(os.path.join(self._dir, old))

    def _refill(self) -> None:
        while len(self._pending) < self.buffer:
            exclude = tuple(sorted(self._taken))
            job = _Job(self._dir, self._index, derive_seed(self.seed, "job", self._seq), exclude,
                       self.kernel_size, self.limits, self._options)
            self._pending.append((self._seq, self._index, self._executor.submit(_generate, job)))
            self._seq += 1

    def _drop(self, fut: Future) -> None:
        self._pending = deque(p for p in self._pending if p[2] is not fut)


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


def _generate(job: _Job) -> tuple[str, int | None, float | None, float | None]:
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
                        exclude=job.exclude, cache=_CACHE, **dict(job.options))
    return cand.graph.to_json(), cand.parent_model_id, cand.predicted_accuracy, cand.ucb
