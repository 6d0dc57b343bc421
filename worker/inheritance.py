"""Checkpoints and weight inheritance on the worker (docs/spec.md, "Checkpoints" and "Inheritance").

- After a round that validated at least one epoch (and did not fail), the
  trained weights are written to the worker's checkpoint store
  (worker/checkpoints.py): the model `aiperf.keras_builder.build_model` builds
  from the recorded graph at the model's kernel size, saved with Keras 3
  ``save_weights`` (no optimizer state). FinishModel carries its URI and SHA-256.
- Before a child is submitted, when the run inherits: its parent's checkpoint
  (URI and SHA-256 from the run's history) is read and checked, loaded into
  the parent's model, and `aiperf.weight_transfer` makes the child's initial
  weights, which compute the parent's function. The child's kernel size never
  shrinks below the parent's when the parent has inserted convs
  (`inherited_kernel_size`). A parent without a usable checkpoint (none
  stored, deleted by retention, missing, corrupt, unreadable by this worker)
  gives a child trained from scratch, logged, with inherited_from 0.
- A child planned while its parent still trains (the look-ahead prepares round
  r + 1 while round r, often its parent, trains) is prepared at the kernel it
  would inherit with and marked pending; at the hand-over, when the parent's
  checkpoint has been written by then, its weights are loaded into the prepared
  round (`late_weights`), so the child starts from its parent whenever the
  checkpoint exists by its first step.
- Checkpoints are Keras weight files: a model trained on one backend
  (TensorFlow, JAX) is inherited and audited on the other.
- The checkpoints the master's retention lets go (FinishModel's reply) are
  deleted from the store; those that cannot be are kept in `undeleted` until the
  master has them, and in the state directory's undeleted file (worker/undeleted.py)
  when the worker has one, so that a restarted worker still reports them. The file
  also lists the deletes in flight, written before the first: a worker stopped
  before it finished them deletes them when it starts (only files its store holds).
"""

from __future__ import annotations

import logging
import tempfile
import warnings
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterable, Mapping

from aiperf.api.records import CheckpointToDelete, ModelRecord
from aiperf.graph import Graph, with_inserted_kernel
from aiperf.hyperparameters import Hyperparameters
from aiperf.states import OPEN_MODEL_STATES
from aiperf.weight_digest import weights_digest
from aiperf.weight_transfer import TransferError, Weights, inherited_kernel_size, transfer_weights
from worker.checkpoints import Checkpoint, CheckpointError, CheckpointStore, read_checkpoint, save_model_weights
from worker.undeleted import MAX_DELETING, MAX_ENTRIES, Kept, UndeletedFile, clean_error

log = logging.getLogger(__name__)

def parent_kernel(parent: ModelRecord) -> int:
    """The kernel size the parent trained with (CheckpointError: its record holds none usable)."""
    if parent.hyperparameters is None:
        raise CheckpointError(f"model {parent.model_id} has no usable hyperparameters")
    return parent.hyperparameters.kernel_size


@dataclass(frozen=True)
class ChildStart:
    """How a child starts: its hyperparameters (kernel possibly raised), its initial weights
    (None: He initialisation) and the model it inherits from (0: none)."""

    hyperparameters: Hyperparameters
    weights: Weights | None
    inherited_from: int
    why: str  # for the log: "inherited", or why not
    pending_parent: int = 0  # a parent still training, without a checkpoint yet: inherit at the hand-over


def build_weights_model(graph: Graph, kernel_size: int) -> Any:
    """The Keras model a checkpoint holds the weights of: `build_model` of the recorded graph
    at the model's kernel size, under the float32 policy (the variables' dtype in every policy)."""
    import keras

    from aiperf.keras_builder import build_model

    previous = keras.config.dtype_policy()
    try:
        keras.config.set_dtype_policy("float32")
        with _cpu():
            return build_model(graph, kernel_size=kernel_size)
    finally:
        keras.config.set_dtype_policy(previous)


def _cpu() -> Any:
    from worker.backend import host_scope

    return host_scope()  # a scratch copy: keep it off the accelerator the round trains on


class Inheritance:
    """The worker's checkpoint store (None: none; nothing is stored or inherited), a scratch
    directory for the files on their way in and out, and where the undeleted list is kept
    across restarts (None: in memory only)."""

    def __init__(self, store: CheckpointStore | None, scratch: Path | None = None,
                 kept: UndeletedFile | None = None) -> None:
        self.store = store
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if scratch is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="aiperf-ckpt-")
            scratch = Path(self._tmp.name)
        self.scratch = scratch
        self.scratch.mkdir(parents=True, exist_ok=True)
        self._kept = kept
        loaded = kept.load() if kept is not None else Kept()
        # (model id, error) of checkpoints retention let go that could not be deleted, oldest first,
        # at most MAX_ENTRIES: the agent reports them with its next FinishModel, and the master
        # records them as stored; what an earlier process kept comes first
        self.undeleted: list[tuple[int, str]] = loaded.undeleted
        # (model id, uri) of the checkpoints being deleted, in the file before the first delete: what
        # an earlier process had not finished is deleted now
        self._deleting: list[tuple[int, str]] = loaded.deleting
        if self._deleting:
            self._resume_deletes()
        # (model id, SHA-256, weights) of the checkpoint this worker stored last: a child prepared
        # while that model trained takes its weights from here at the hand-over (no file read
        # and no model built on the training thread)
        self._last_saved: tuple[int, str, Mapping[str, Any]] | None = None

    def close(self) -> None:
        if self._tmp is not None:
            self._tmp.cleanup()

    # -- writing ------------------------------------------------------------
    def save(self, run_id: int, model_id: int, graph: Graph, kernel_size: int,
             weights: Mapping[str, Any]) -> Checkpoint | None:
        """Store a trained model's weights; None (logged) when there is no store or it fails."""
        if self.store is None:
            return None
        from worker.rounds import set_layer_weights

        path: Path | None = None
        try:
            model = build_weights_model(graph, kernel_size)
            set_layer_weights(model, weights)
            path = save_model_weights(model, self.scratch, model_id)
            ckpt = replace(self.store.put(run_id, model_id, path), weights_sha256=weights_digest(weights))
        except (CheckpointError, OSError, ValueError) as exc:
            log.warning("event=checkpoint_not_saved model=%d error=%s", model_id, exc)
            return None
        finally:
            if path is not None:
                path.unlink(missing_ok=True)
        log.info("event=checkpoint_saved model=%d uri=%s bytes=%d", model_id, ckpt.uri, ckpt.size_bytes)
        self._last_saved = (model_id, ckpt.sha256, weights)
        return ckpt

    def delete(self, doomed: Iterable[CheckpointToDelete], answered: int = 0) -> None:
        """Delete the checkpoints retention let go, in reply to a FinishModel that sent the first
        `answered` of `undeleted` (forgotten). The file lists them as deleting before the first
        delete and is written again after the last (twice in all): a worker stopped in between
        deletes them when it starts. A failure is logged and kept in `undeleted` (the file stays);
        past MAX_ENTRIES waiting, only logged. Past MAX_DELETING in one reply (the file's bound),
        the rest are not deleted but kept in `undeleted`, so the master records them as stored."""
        if answered > 0:
            del self.undeleted[:answered]
        todo = [(int(d.model_id), d.uri) for d in doomed] if self.store is not None else []
        if not todo and answered <= 0:
            return
        if len(todo) > MAX_DELETING:
            log.warning("event=deletes_deferred count=%d: more than %d let go at once", len(todo) - MAX_DELETING,
                        MAX_DELETING)
            for model_id, uri in todo[MAX_DELETING:]:
                self._add_undeleted(model_id, uri, f"not deleted: more than {MAX_DELETING} let go at once")
        self._deleting.extend(todo[:MAX_DELETING])
        self._keep()  # on disk before the first delete
        if todo:
            self._delete_listed()
            self._keep()

    def _resume_deletes(self) -> None:
        """Delete what an earlier process was deleting when it stopped: its own checkpoints, which
        the master already let go. Only those this store holds (the file may be stale or forged:
        never delete another path); the others are dropped with a warning."""
        if self.store is None:
            log.warning("event=deleting_kept count=%d: no checkpoint store to delete them from", len(self._deleting))
            return
        store = self.store
        held = [store.holds(u, m) for m, u in self._deleting]  # once each: a local store resolves paths
        foreign = [entry for entry, ours in zip(self._deleting, held) if not ours]
        if foreign:
            log.warning("event=deleting_entries_dropped count=%d first=%d:%r: not checkpoints of the store %s",
                        len(foreign), foreign[0][0], foreign[0][1], store.url)
            self._deleting = [entry for entry, ours in zip(self._deleting, held) if ours]
        self._delete_listed()
        self._keep()

    def _delete_listed(self) -> None:
        """Delete each of `_deleting` in turn: a deleted one (or one already gone) leaves the list,
        one that fails moves to `undeleted`. Memory only: the caller writes the file."""
        assert self.store is not None
        done = 0
        try:
            for model_id, uri in self._deleting:
                try:
                    self.store.delete(uri)
                    log.info("event=checkpoint_deleted model=%d uri=%s", model_id, uri)
                except Exception as exc:  # noqa: BLE001 - any failure: the file may still be there
                    log.warning("event=checkpoint_not_deleted model=%d error=%s", model_id, exc)
                    self._add_undeleted(model_id, uri, str(exc) or type(exc).__name__)
                done += 1
        finally:  # on a BaseException (SystemExit, KeyboardInterrupt), the one in flight and the rest stay listed
            del self._deleting[:done]

    def _add_undeleted(self, model_id: int, uri: str, error: str) -> None:
        if len(self.undeleted) >= MAX_ENTRIES:
            log.warning("event=undeleted_not_kept model=%d uri=%s: %d already wait for the master",
                        model_id, uri, len(self.undeleted))
            return
        self.undeleted.append((model_id, clean_error(error)))

    def _keep(self) -> None:
        if self._kept is None:
            return
        try:
            self._kept.save(self.undeleted, self._deleting)
        except OSError as exc:  # the lists are still in memory; only a restart would lose them
            log.warning("event=undeleted_not_saved path=%s count=%d deleting=%d error=%s", self._kept.path,
                        len(self.undeleted), len(self._deleting), exc)

    # -- reading --------------------------------------------------------------
    def parent_weights(self, parent: ModelRecord, parent_graph: Graph) -> Weights:
        """The parent's trained weights by layer id, from its checkpoint (CheckpointError: none usable)."""
        if not parent.checkpoint_uri:
            raise CheckpointError(f"model {parent.model_id} has no checkpoint")
        if parent.checkpoint_deleted:
            raise CheckpointError(f"model {parent.model_id}'s checkpoint was deleted by retention")
        path = read_checkpoint(parent.checkpoint_uri, parent.checkpoint_sha256, self.scratch / "in")
        try:
            from worker.rounds import layer_weights

            model = build_weights_model(parent_graph, parent_kernel(parent))
            try:
                with warnings.catch_warnings():  # Keras only warns about layers it could not match
                    warnings.simplefilter("error", UserWarning)
                    model.load_weights(str(path))
            except (ValueError, OSError, UserWarning) as exc:  # a file of another architecture, or not HDF5
                raise CheckpointError(f"checkpoint {parent.checkpoint_uri} does not fit model "
                                      f"{parent.model_id}: {exc}") from exc
            return layer_weights(model)
        finally:
            path.unlink(missing_ok=True)

    def child_start(self, inherit: bool, parent: ModelRecord | None, parent_graph: Graph | None, child: Graph,
                    hyper: Hyperparameters) -> ChildStart:
        """How the child starts (see the module's docstring); never raises for a bad checkpoint."""
        if not inherit:
            return ChildStart(hyper, None, 0, "the run trains from scratch")
        if parent is None or parent_graph is None:
            return ChildStart(hyper, None, 0, "no parent model")
        if self.store is None:
            return ChildStart(hyper, None, 0, "this worker has no checkpoint store")
        if parent.hyperparameters is None:  # the master checks them; never trust, though
            return ChildStart(hyper, None, 0, f"from scratch: model {parent.model_id} has no usable hyperparameters")
        kernel = inherited_kernel_size(parent_graph, parent.hyperparameters.kernel_size, hyper.kernel_size)
        pending = not parent.checkpoint_uri and parent.state in OPEN_MODEL_STATES  # may still get a checkpoint
        if not pending:
            try:
                child_weights = self.child_weights(parent, parent_graph, child, kernel)
            except (CheckpointError, TransferError) as exc:
                log.warning("event=inheritance_failed parent=%d error=%s: training from scratch", parent.model_id, exc)
                return ChildStart(hyper, None, 0, f"from scratch: {exc}")
        if kernel != hyper.kernel_size:
            log.info("event=kernel_kept parent=%d chosen=%d kernel=%d", parent.model_id, hyper.kernel_size, kernel)
            hyper = replace(hyper, kernel_size=kernel)
        if pending:
            log.info("event=inheritance_deferred parent=%d: its checkpoint is not written yet", parent.model_id)
            return ChildStart(hyper, None, 0, "parent still training: inherit at the hand-over",
                              pending_parent=int(parent.model_id))
        return ChildStart(hyper, child_weights, int(parent.model_id), "inherited")

    def child_weights(self, parent: ModelRecord, parent_graph: Graph, child: Graph, kernel: int) -> Weights:
        """The child's initial weights (at `kernel`) from the parent's checkpoint (CheckpointError:
        none usable; TransferError: the graphs do not fit)."""
        weights = self.parent_weights(parent, parent_graph)
        return transfer_weights(with_inserted_kernel(parent_graph, parent_kernel(parent)),
                                weights, child, kernel_size=kernel)

    def late_weights(self, parent: ModelRecord | None, parent_graph: Graph | None, child: Graph,
                     kernel: int) -> tuple[Weights | None, str]:
        """At the hand-over, for a child prepared while its parent trained: the child's weights
        from the parent's checkpoint if it exists now (None and why not otherwise; never raises
        for a bad checkpoint)."""
        if parent is None or parent_graph is None or self.store is None:
            return None, "from scratch: the parent is unknown here"
        if not parent.checkpoint_uri:
            log.info("event=inheritance_failed parent=%d error=no checkpoint by the first step: training from "
                     "scratch", parent.model_id)
            return None, "from scratch: the parent's checkpoint was not written by the first step"
        try:
            saved = self._last_saved
            if saved is not None and (saved[0], saved[1]) == (parent.model_id, parent.checkpoint_sha256):
                # the checkpoint this worker just stored: its weights are still in memory
                weights = transfer_weights(with_inserted_kernel(parent_graph, parent_kernel(parent)),
                                           saved[2], child, kernel_size=kernel)
            else:
                weights = self.child_weights(parent, parent_graph, child, kernel)
        except (CheckpointError, TransferError) as exc:
            log.warning("event=inheritance_failed parent=%d error=%s: training from scratch", parent.model_id, exc)
            return None, f"from scratch: {exc}"
        return weights, "inherited at the hand-over"
