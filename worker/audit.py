"""Re-evaluating a DONE model's stored weights (`aiperf audit`; docs/spec.md, "Audit").

For one model of a run: read its checkpoint from the store it was recorded in
(`worker.checkpoints.read_checkpoint`, SHA-256 checked), check that the weights
are exactly the recorded graph at the model's kernel size, and measure their
top-1 accuracy on the validation split here. The verdict comes from
`aiperf.audit`; a model without a checkpoint, or whose checkpoint is missing,
is NO_CHECKPOINT, one whose file differs from its recorded SHA-256 or cannot be
read as weights is CORRUPT: never a pass.

Architecture. Keras 3 saves weights by its own walk of the model (layer paths
such as ``layers/conv2d_3/vars/0``), not by layer name. The expected layout is
therefore Keras's own: the model `aiperf.keras_builder.build_model` builds from
the recorded graph at the model's kernel size is saved empty, and every
variable path and shape of the checkpoint is compared with it; a missing, an
extra or a reshaped variable makes the architecture wrong (e.g. kernel 7
claimed, kernel 3 trained: every inserted conv's kernel is 3x3, not 7x7).

Evaluation runs the network in inference mode under the run's precision policy
(the worker validated in it), over the whole validation split in its fixed
order, at the model's batch size (which its worker fitted in memory).

Lineage. A model trained from scratch started from the weights its master-given seed gives
(`worker.weight_seed`); `Retraining` re-trains its first epoch from them here, as its worker
did (the round's epochs and schedule, its batch, kernel and precision), and the accuracy of
that epoch goes to the master, which compares it with the one the worker reported
(`aiperf.audit.retrain_verdict`): weights trained before the run, claimed from the first
report, are far above what one epoch from the seed gives. An inherited child started from
its parent's weights, which the auditor does not rebuild: it is not re-trained.

Throughput. Whatever became of its checkpoint, the model's training steps are
timed on one device here (`worker.throughput`), unless the caller says not to
(then the master records "not timed", which never passes).
"""

from __future__ import annotations

import logging
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from aiperf import audit as rule
from aiperf.api.records import ModelRecord
from aiperf.graph import Graph
from aiperf.precision import get_precision
from worker.checkpoints import CheckpointError, read_checkpoint

log = logging.getLogger(__name__)

MAX_LISTED_MISMATCHES = 5  # variables named in an audit's detail


@dataclass(frozen=True)
class Finding:
    """What the audit of one model found (RecordAudit's figures)."""

    model_id: int
    claimed_accuracy: float | None
    audited_accuracy: float | None  # None: the weights were not evaluated
    architecture_ok: bool
    verdict: str
    validation_images: int
    detail: str = ""
    audited_images_per_second: float = 0.0  # the model's training steps timed on one device here; 0: not timed
    auditor_hardware: str = ""              # that device (aiperf.audit.hardware_name)
    retrained_accuracy: float | None = None  # its first epoch re-trained from its seed here; None: not


def variable_shapes(weights_file: Path) -> dict[str, tuple[int, ...]]:
    """{variable path: shape} of a Keras 3 ``.weights.h5`` file (OSError: not such a file)."""
    import h5py

    shapes: dict[str, tuple[int, ...]] = {}

    def visit(name: str, obj: Any) -> None:
        if isinstance(obj, h5py.Dataset):
            shapes[name] = tuple(int(n) for n in obj.shape)

    with h5py.File(weights_file, "r") as f:
        f.visititems(visit)
    return shapes


def _policy_model(graph: Graph, kernel_size: int, policy: str) -> Any:
    """`build_model` of the graph at its kernel size under the Keras dtype `policy`."""
    import keras

    from aiperf.keras_builder import build_model

    previous = keras.config.dtype_policy()
    try:
        keras.config.set_dtype_policy(policy)
        return build_model(graph, kernel_size=kernel_size)
    finally:
        keras.config.set_dtype_policy(previous)


def expected_shapes(graph: Graph, kernel_size: int, scratch: Path) -> dict[str, tuple[int, ...]]:
    """The variable paths and shapes Keras writes for the recorded graph at `kernel_size`."""
    model = _policy_model(graph, kernel_size, "float32")
    path = scratch / "expected.weights.h5"
    try:
        model.save_weights(str(path))
        return variable_shapes(path)
    finally:
        path.unlink(missing_ok=True)


def architecture_mismatches(found: dict[str, tuple[int, ...]], expected: dict[str, tuple[int, ...]]) -> list[str]:
    """Every missing, extra or reshaped variable, in words (empty: the architecture is the recorded one)."""
    problems = [f"missing {name} {shape}" for name, shape in expected.items() if name not in found]
    problems += [f"extra {name} {shape}" for name, shape in found.items() if name not in expected]
    problems += [f"{name}: {found[name]} instead of {shape}" for name, shape in expected.items()
                 if name in found and found[name] != shape]
    return sorted(problems)


def evaluate(weights_file: Path, graph: Graph, kernel_size: int, precision: str, dataset: Any,
             batch_size: int) -> tuple[float, int]:
    """(top-1 accuracy, images) of the weights on the dataset's validation split (on the backend in use)."""
    from worker import backend

    model = _policy_model(graph, kernel_size, get_precision(precision).keras_policy)
    model.load_weights(str(weights_file))
    correct, images = backend.count_correct(model, backend.validation_batches(dataset, batch_size))
    if images == 0:
        raise ValueError("the validation split is empty")
    return correct / images, images


@dataclass(frozen=True)
class Timing:
    """How `audit_model` times training steps: the run's XLA setting and profile, the one-device
    distribution and that device's hardware name (`worker.throughput.one_device`, `auditor_hardware`).
    Rates are kept per (graph, kernel, batch, precision): models that train the same steps are
    timed once."""

    xla: bool
    profile: Any
    strategy: Any
    hardware: str
    rates: dict[tuple[str, int, int, str], float] = field(default_factory=dict)

    def rate(self, model: ModelRecord, precision: str, dataset: Any) -> float:
        """The model's training images per second on the one device (`worker.throughput`)."""
        from worker.throughput import training_rate

        hp = model.hyperparameters
        if hp is None:
            raise ValueError(f"model {model.model_id} has no usable hyperparameters to time it with")
        key = (model.graph_hash or model.graph_json, hp.kernel_size, hp.batch_size, precision)
        if key not in self.rates:
            self.rates[key] = training_rate(Graph.from_json(model.graph_json), hp.kernel_size, key[2], precision,
                                            self.xla, dataset, self.profile, self.strategy)
        return self.rates[key]


@dataclass(frozen=True)
class Retraining:
    """How `audit_model` re-trains a model's first epoch from its seed: the run's profile, its cap
    on epochs per round (0: none) and XLA setting, on the backend in use."""

    profile: Any
    max_epochs_per_round: int = 0
    xla: bool = False

    def first_epoch(self, model: ModelRecord, precision: str, dataset: Any) -> float | None:
        """The validation accuracy after the first epoch trained from the model's seed; None when
        the model is not re-trained (inherited, no seed) or the round failed (out of memory)."""
        from worker.trainer import prepare_round, run_round

        if model.inherited_from or not model.init_seed:
            return None
        if model.hyperparameters is None:  # values the master would refuse: nothing to re-train
            return None
        epochs = self.profile.epochs_for_round(model.round)
        if self.max_epochs_per_round:
            epochs = min(epochs, self.max_epochs_per_round)
        prepared = prepare_round(Graph.from_json(model.graph_json),
                                 model.hyperparameters,
                                 dataset, self.profile, model.round, precision=precision, xla=self.xla,
                                 seed=model.init_seed, epochs=epochs)
        prepared.start_from_seed(model.init_seed)
        ends: list[float] = []
        run_round(prepared, on_progress=lambda p: ends.append(p.val_accuracy)
                  if p.epoch_end and p.val_accuracy is not None else None,
                  should_stop=lambda: bool(ends), progress_interval_s=float("inf"), phase_reports=False)
        log.info("event=first_epoch_retrained model=%d seed=%d accuracy=%s", model.model_id, model.init_seed,
                 ends[0] if ends else None)
        return ends[0] if ends else None


def audit_model(model: ModelRecord, precision: str, dataset: Any, scratch: Path | None = None,
                batch_size: int = 0, timing: Timing | None = None, retraining: Retraining | None = None) -> Finding:
    """Audit one DONE model (its graph_json included): the checkpoint, its architecture, its
    accuracy, with `timing` its training rate on one device here, and with `retraining` its first
    epoch re-trained from its seed (when its weights were read).

    batch_size 0: the model's own. A dataset that does not fit the graph raises (the auditor's
    mistake, not the model's: nothing is recorded)."""
    finding = _audit_weights(model, precision, dataset, scratch, batch_size)
    if retraining is not None and finding.audited_accuracy is not None:
        finding = replace(finding, retrained_accuracy=retraining.first_epoch(model, precision, dataset))
    if timing is None:
        return finding
    return replace(finding, audited_images_per_second=timing.rate(model, precision, dataset),
                   auditor_hardware=timing.hardware)


def _audit_weights(model: ModelRecord, precision: str, dataset: Any, scratch: Path | None,
                   batch_size: int) -> Finding:
    """The checkpoint, its architecture and its accuracy (the Finding without a timed rate)."""
    claimed = model.best_accuracy if model.has_accuracy else None

    def unread(verdict: str, detail: str) -> Finding:
        return Finding(model.model_id, claimed, None, False, verdict, 0, detail)

    if not model.checkpoint_uri:
        return unread(rule.NO_CHECKPOINT, "no checkpoint was recorded")
    if model.checkpoint_deleted:
        return unread(rule.NO_CHECKPOINT, f"checkpoint {model.checkpoint_uri} was deleted by retention")
    if model.hyperparameters is None:  # the master checks them: a record without them is not this model's
        return unread(rule.WRONG_ARCHITECTURE, "no usable hyperparameters were recorded: the kernel is unknown")
    graph = Graph.from_json(model.graph_json)
    kernel = model.hyperparameters.kernel_size
    with tempfile.TemporaryDirectory(prefix="aiperf-audit-", dir=scratch) as tmp:
        work = Path(tmp)
        try:
            path = read_checkpoint(model.checkpoint_uri, model.checkpoint_sha256, work)
        except CheckpointError as exc:
            # read_checkpoint names absence "is missing"; every other failure is a bad file
            verdict = rule.NO_CHECKPOINT if "is missing" in str(exc) else rule.CORRUPT
            return unread(verdict, str(exc))
        try:
            found = variable_shapes(path)
        except OSError as exc:
            return unread(rule.CORRUPT, f"not a Keras weights file: {exc}")
        problems = architecture_mismatches(found, expected_shapes(graph, kernel, work))
        if problems:
            detail = (f"{len(problems)} variables differ from the recorded graph at kernel {kernel}: "
                      + "; ".join(problems[:MAX_LISTED_MISMATCHES]))
            return Finding(model.model_id, claimed, None, False, rule.WRONG_ARCHITECTURE, 0, detail)
        accuracy, images = evaluate(path, graph, kernel, precision, dataset,
                                    batch_size or model.hyperparameters.batch_size)
    verdict = rule.verdict(claimed, accuracy, True, images)
    log.info("event=model_audited model=%d claimed=%s audited=%.6f images=%d verdict=%r",
             model.model_id, claimed, accuracy, images, verdict)
    detail = "" if verdict == rule.PASSED else (
        f"audited {accuracy:.4f} < claimed {claimed or 0.0:.4f} - tolerance {rule.tolerance(images):.4f}")
    return Finding(model.model_id, claimed, accuracy, True, verdict, images, detail)
