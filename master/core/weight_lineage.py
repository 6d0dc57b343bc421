"""Weights from outside the run: the initialisation seed and the stamped weight digests
(docs/spec.md, "Weights from outside the run").

A model's initial weights come from a seed the master hands out at SubmitModel: HMAC-SHA256
of the model id under the run's secret (the one the node audits draw with, never sent to a
worker), so no worker can know the seed of a model before the master created it, and weights
trained before that cannot be its start. Each epoch's end reports the digest of the weights
then (`aiperf.weight_digest`), stamped by the master's clock with its report; a checkpoint
is accepted only as one of those digests stamped inside the window (`check_checkpoint`).
"""

from __future__ import annotations

from typing import Protocol

from aiperf.states import OPEN_MODEL_STATES, ModelState
from master.core import node_audits, retention
from master.core.requests import ModelFinish
from master.store.errors import FailedPrecondition
from master.store.protocol import AuditStore, ModelStore, RunStore
from master.store.records import RunRecord

SEED_BITS = 63  # an int64 column, a uint64 field and Keras's (seed + n) mod 2**32 all hold it


def init_seed(run: RunRecord, model_id: int) -> int:
    """The model's initialisation seed, in [1, 2**63); 0 for a run recorded without a secret."""
    secret = str(run.config.get(node_audits.SECRET_KEY, ""))
    if not secret:
        return 0
    if run.config.get("deterministic"):  # repeatable: the same in every run of its seed, hence unofficial
        secret = f"run seed {run.seed}"
    return node_audits.keyed_number(secret, f"init:{run.id}:{model_id}") % ((1 << SEED_BITS) - 1) + 1


class DigestStore(AuditStore, ModelStore, RunStore, Protocol):
    """What the checkpoint check reads: the model, its run and the model's stamped digests."""


def window_end(run: RunRecord) -> float:
    """The end of the run's window: its stop, else its deadline (reports after it are not scored)."""
    ends = [t for t in (run.stopped_at, run.deadline) if t is not None]
    return min(ends) if ends else float("inf")


def check_checkpoint(store: DigestStore, fin: ModelFinish) -> None:
    """A checkpoint's weights must be ones the model's reports showed inside the window: its
    digest one the master stamped then (FailedPrecondition otherwise). An official run's
    checkpoint must carry the digest; a smoke run's is checked when it does (the demo and
    hand-written clients send checkpoints without one). First `retention.check_checkpoint`."""
    retention.check_checkpoint(fin)
    if fin.state != ModelState.DONE or not fin.checkpoint_uri:
        return
    model = store.get_model(fin.model_id)
    if model.worker_id != fin.worker_id or model.state not in OPEN_MODEL_STATES:
        return  # another worker's, or finished already: the store's refusal (PERMISSION_DENIED, ...)
    run = store.get_run(model.run_id)
    if not fin.checkpoint_weights_sha256:
        if run.config.get("official"):
            raise FailedPrecondition(f"model {fin.model_id}: an official run's checkpoint needs "
                                     f"checkpoint_weights_sha256, a digest its epoch reports carried")
        return
    end = window_end(run)
    stamped = {digest for _, t, digest in store.stamped_digests(fin.model_id) if t <= end}
    if fin.checkpoint_weights_sha256 not in stamped:
        raise FailedPrecondition(
            f"model {fin.model_id}: the checkpoint's weights ({fin.checkpoint_weights_sha256[:16]}...) are none "
            f"of the {len(stamped)} digests its epoch reports carried inside the run's window")

