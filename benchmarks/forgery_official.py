"""The lies of an official run (benchmarks/forgery_bench.py runs them): device identities,
node audits, the accuracy window, graphs from the search, honest retries.

A real master (gRPC on a real port, SQLite) on a scripted clock runs an official 2 h run
(mixed fp16, ImageNet reported) per scenario. Each worker submits the profile's ResNet-50
every 20 min (six rounds), reports every 60 s and finishes each model; accuracy rises to
its final figure over the rounds. Each model is one epoch long: its last report closes
the epoch with its accuracy and the digest of its weights, and its checkpoint is that
digest. After the deadline a scripted auditor does what `aiperf audit` does: it audits
the weights of the model behind the regulated score (passed at the claimed accuracy when
a checkpoint is recorded: the weights are taken to be the claimed ones, and "no
checkpoint" otherwise) and re-trains that model's first epoch from the weights its seed
gives: training from scratch on that hardware reaches the accuracy of the honest curve
(`earned`), whatever the worker claimed, so for an honest worker the re-trained accuracy
is its report, and for a worker that claimed weights trained before the run it is the
honest curve's figure at that model, not the claim. It then runs the node audit of every
worker's drawn model on that worker's real node, timing at AUDIT_IMAGES_PER_S x
ResNet-50's operations per image (an H100's rate: the project's own figure). The honest worker is one H100 reporting at
HONEST_SHARE of that rate, with final accuracy 0.72. A scenario's ratio is its score over
the honest one's; as a valid result only when the run is valid and official.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from aiperf.api.client import Accelerator, ApiError, ControlClient, NodeInventory, WorkerClient
from aiperf.flops import count_flops
from aiperf.graph import Graph, conv, dense, simple, with_inserted_kernel
from aiperf.hyperparameters import Hyperparameters
from aiperf.profiles import OFFICIAL

H100 = "NVIDIA H100 80GB HBM3"
MEMORY = 80 << 30
HONEST_PEAKS = {"float16": 9e14, "bfloat16": 9e14, "float32": 4e14}  # measured, within the datasheet
AUDIT_IMAGES_PER_S = 5783.0  # ResNet-50 training on one H100 as the audit times it (the figure)
HONEST_SHARE = 0.8           # the honest worker's own loop: input pipeline, validation, reports
ROUND_S, REPORT_S, ROUNDS = 1200.0, 60.0, 6
DURATION_S = ROUND_S * ROUNDS
TOKENS = {"worker_token": "forgery-worker", "admin_token": "forgery-admin"}
IMAGENET = {"kind": "imagenet-tfrecord", "train_images": 1_281_167, "validation_images": 50_000,
            "num_classes": 1000, "image_size": 224, "fingerprint": "ab" * 32}
SEED = OFFICIAL.base_graph()
SEED_TRAIN = count_flops(with_inserted_kernel(SEED, 3)).train
AT_CAP = 989.5e12 * 1.05 / SEED_TRAIN  # images/s at the H100's fp16 datasheet bound
CAP_PEAKS = {"float16": 1e15}  # claimed above the datasheet: capped at its bound


def _gpu(uuid: str, model: str = H100, peaks: dict | None = None) -> Accelerator:
    return Accelerator(model, MEMORY, 0.0, HONEST_PEAKS if peaks is None else peaks, uuid=uuid)


ONE_H100 = NodeInventory((_gpu("GPU-0"),), "Intel(R) Xeon(R) Platinum 8480+", 112)


def chain_of_1x1() -> Graph:
    """A graph outside the search: 40 1x1 convolutions at 224 px."""
    layers = [conv("c0", "input", 256, 1)] + [conv(f"c{i}", f"c{i - 1}", 256, 1) for i in range(1, 40)]
    layers += [simple("gap", "avgpool", "c39"), dense("fc", "gap", 1000), simple("out", "softmax", "fc")]
    return Graph(SEED.input_shape, 1000, tuple(layers), {"operations": []})


@dataclass
class Actor:
    """One worker of a scenario: what it registers, what its node really is, what it reports."""

    name: str
    accelerators: list[Accelerator]
    node: NodeInventory = ONE_H100
    images_per_s: float = HONEST_SHARE * AUDIT_IMAGES_PER_S
    accuracy: float = 0.72           # its final claimed accuracy
    pretrained: bool = False         # claims its final accuracy from the first report
    earned_accuracy: float | None = None  # the final accuracy training in the run gives (None: `accuracy`)
    finish: str = "done"
    checkpoint: bool = True
    late_checkpoint: bool = False    # finishes without one, attaches one after the deadline
    graph: Graph = SEED
    batch: int = OFFICIAL.for_accelerator_memory(MEMORY).batch_size
    resend: bool = False             # every report sent twice (its ack lost)
    refused: list[str] = field(default_factory=list)
    wid: int = 0


def honest(name: str = "honest", uuid: str = "GPU-0", **kw: Any) -> Actor:
    return Actor(name, [_gpu(uuid)], **kw)


SCENARIOS: dict[str, tuple[str, list[Actor]]] = {
    "device_count_x8": ("one H100 registers 8 and reports 8x", [Actor(
        "liar", [_gpu(f"GPU-{i}") for i in range(8)], images_per_s=8 * HONEST_SHARE * AUDIT_IMAGES_PER_S)]),
    "sybil_x8": ("8 workers on one H100, each at the honest rate", [honest(f"sybil-{i}") for i in range(8)]),
    "name_variant_x8": ("8 'NVIDIA H100-SXM5-80GB' at the datasheet cap", [Actor(
        "liar", [_gpu(f"GPU-{i}", "NVIDIA H100-SXM5-80GB", {"float16": 1e15}) for i in range(8)],
        images_per_s=8 * AT_CAP)]),
    "lookalike_name": ("a Cyrillic H in 'H100' with a 1e16 peak", [Actor(
        "liar", [_gpu("GPU-0", "NVIDIA \u041d100 80GB HBM3", {"float16": 1e16})], images_per_s=78 * AT_CAP)]),
    "unknown_accelerator_x64": ("64 x 'Acme X1' at 1e16 each", [Actor(
        "liar", [_gpu(f"GPU-{i}", "Acme X1", {"float16": 1e16}) for i in range(64)], images_per_s=64 * 1e16 / SEED_TRAIN)]),
    "missing_peak": ("an H100 with only a float32 peak in an fp16 run, reporting at 1e16", [Actor(
        "liar", [_gpu("GPU-0", peaks={"float32": 4e14})], images_per_s=1e16 / SEED_TRAIN)]),
    "unaudited_worker": ("a mediocre worker at its datasheet cap beside the honest leader", [
        honest("leader", "GPU-L", node=NodeInventory((_gpu("GPU-L"),), "Xeon", 112)),
        Actor("liar", [_gpu("GPU-0", peaks=CAP_PEAKS)], images_per_s=0.99 * AT_CAP, accuracy=0.5)]),
    "failed_models_liar": ("every model ends FAILED, reported at the datasheet cap", [
        honest("leader", "GPU-L", node=NodeInventory((_gpu("GPU-L"),), "Xeon", 112)),
        Actor("liar", [_gpu("GPU-0", peaks=CAP_PEAKS)], images_per_s=0.99 * AT_CAP, finish="failed")]),
    "late_checkpoint": ("weights attached to a DONE model after the deadline", [honest(
        checkpoint=False, late_checkpoint=True)]),
    "pretrained_weights": ("weights trained before the run, claimed from the first report", [honest(
        accuracy=0.76, pretrained=True, earned_accuracy=0.72)]),
    "non_descendant_graph": ("a chain of 1x1 convolutions instead of a child", [honest(graph=chain_of_1x1())]),
    "batch_outside_profile": ("batch 256, not one of the profile's", [honest(batch=256)]),
}


class Clock:
    def __init__(self) -> None:
        self.t = 1_000_000.0

    def __call__(self) -> float:
        return self.t


def honest_curve(final: float, seq: int) -> float:
    """The accuracy training from scratch reaches by report `seq` of the run (final at the last)."""
    return final * (0.6 + 0.4 * seq / (ROUNDS * ROUND_S / REPORT_S))


def earned(a: Actor, seq: int) -> float:
    """What a model of `a` whose epoch ended at report `seq` gives when trained from its seed."""
    return honest_curve(a.accuracy if a.earned_accuracy is None else a.earned_accuracy, seq)


def weights_digest(a: Actor, mid: int) -> str:
    """The digest of the weights `a`'s model ends its epoch with (its checkpoint's)."""
    return hashlib.sha256(f"{a.name}:{mid}".encode()).hexdigest()


def _report(w: WorkerClient, a: Actor, mid: int, seq: int, last: bool) -> None:
    """One report of `a` on its model (sent twice by a worker whose acks are lost); the last one
    closes the model's epoch: its accuracy and its weights' digest."""
    fc = count_flops(with_inserted_kernel(a.graph, 3))
    n = int(a.images_per_s * REPORT_S)
    acc = a.accuracy if a.pretrained else honest_curve(a.accuracy, seq)
    for _ in range(2 if a.resend else 1):
        try:
            w.report_progress(a.wid, mid, seq, n, 0, 1, min(fc.ops(n, 0), 2**62),
                              val_accuracy=acc if last else None,
                              weights_sha256=weights_digest(a, mid) if last else "")
        except ApiError as exc:
            a.refused.append(f"ReportProgress: {exc.details}")


def _finish(w: WorkerClient, a: Actor, mid: int, acc: float, late: bool = False) -> None:
    uri = f"file:///ckpt/model-{mid}.weights.h5"
    ckpt = ({"checkpoint_uri": uri, "checkpoint_sha256": hashlib.sha256(uri.encode()).hexdigest(),
             "checkpoint_weights_sha256": weights_digest(a, mid)}
            if (a.checkpoint or late) and a.finish == "done" else {})
    try:
        w.finish_model(a.wid, mid, a.finish, best_accuracy=acc if a.finish == "done" else None, **ckpt)
    except ApiError as exc:
        a.refused.append(f"FinishModel: {exc.details}")


def _audit(c: ControlClient, actors: list[Actor]) -> None:
    """The scripted auditor: the regulated model's weights and its first epoch re-trained from its
    seed, then every drawn model on its real node."""
    board = c.scoreboard()
    by_id = {m.model_id: m for m in c.list_models(limit=10_000).models}
    by_worker = {a.wid: a for a in actors if a.wid}
    if board.audit_model_id:
        m = by_id[board.audit_model_id]
        if m.checkpoint_uri:
            assert m.init_seed, "the auditor re-trains from the seed ListModels gives it"
            retrained = earned(by_worker[m.worker_id], m.round * int(ROUND_S / REPORT_S))  # its epoch's last report
            c.record_audit(m.model_id, verdict="passed", architecture_ok=True, audited_accuracy=m.best_accuracy,
                           validation_images=50_000, audited_images_per_second=AUDIT_IMAGES_PER_S,
                           auditor_hardware=H100, retrained_accuracy=retrained)
        else:
            c.record_audit(m.model_id, verdict="no checkpoint", architecture_ok=False)
    nodes = {a.wid: a.node for a in actors if a.wid}
    for mid in c.list_audits().node_audit_model_ids:
        m = by_id[mid]
        node = nodes[m.worker_id]
        rate = AUDIT_IMAGES_PER_S * SEED_TRAIN / m.flops_per_train_image
        c.record_audit(mid, verdict="no checkpoint", architecture_ok=False, node=node, auditor_host="node",
                       audited_images_per_second=rate, auditor_hardware=node.accelerators[0].model)


def run_scenario(actors: list[Actor], tmp: Path, name: str) -> dict[str, Any]:
    from master.server import MasterConfig, serve

    clock = Clock()
    h = serve(MasterConfig(f"sqlite:///{tmp / (name + '.db')}", port=0, host="127.0.0.1", data_dir=tmp / name,
                           heartbeat_interval_s=100_000.0, env={}, clock=clock, **TOKENS))
    try:
        w = WorkerClient(h.address, h.worker_token, retries=0)
        c = ControlClient(h.address, h.admin_token, retries=0)
        for a in actors:
            try:
                a.wid = w.register(name=a.name, host=f"host-{a.name}", cpus=112, accelerators=a.accelerators).worker_id
            except ApiError as exc:
                a.refused.append(f"Register: {exc.code.name}: {exc.details}")
        c.start_run(DURATION_S, profile="official")
        t0, done = clock.t, {}
        steps = int(ROUND_S / REPORT_S)
        for r in range(ROUNDS):
            models = {}
            for a in (a for a in actors if a.wid):
                try:
                    models[a.name] = w.submit_model(a.wid, a.graph.to_json(), a.graph.hash(), 0, r + 1,
                                                    Hyperparameters(a.batch, 3), dataset=IMAGENET).model_id
                except ApiError as exc:
                    a.refused.append(f"SubmitModel: {exc.details}")
            for k in range(1, steps + 1):  # the workers report side by side on the master's clock
                clock.t = t0 + r * ROUND_S + k * REPORT_S
                for a in actors:
                    if a.name in models:
                        _report(w, a, models[a.name], r * steps + k, k == steps)
            for a in actors:
                if a.name in models:
                    _finish(w, a, models[a.name], a.accuracy)
                    done[a.name] = models[a.name]
        clock.t = t0 + DURATION_S + 1
        for a in actors:
            if a.late_checkpoint and a.name in done:
                _finish(w, a, done[a.name], a.accuracy, late=True)
        _audit(c, actors)
        sb = c.scoreboard()
        return {"score": sb.score, "valid_flops": sb.valid_flops, "valid": sb.valid, "official": sb.official,
                "invalid_reason": sb.invalid_reason, "unofficial_reasons": list(sb.unofficial_reasons),
                "refused": [r for a in actors for r in a.refused],
                "implausible_reports": sb.implausible_reports}
    finally:
        h.stop(grace_s=0)


def run_official(tmp: Path, names: tuple[str, ...] | None = None) -> dict[str, Any]:
    """The honest baseline, the honest retry and every scenario (or those named): {name: result}."""
    base = run_scenario([honest()], tmp, "official_honest")
    retry_actor = honest(resend=True)
    retry = run_scenario([retry_actor], tmp, "official_retry")
    out: dict[str, Any] = {"honest": base, "honest_retry": {**retry, "refused_count": len(retry_actor.refused)}}
    for name, (what, actors) in SCENARIOS.items():
        if names and name not in names:
            continue
        r = run_scenario([replace(a, refused=[]) for a in actors], tmp, f"official_{name}")
        r["ratio"] = r["score"] / base["score"] if base["score"] else 0.0
        r["valid_ratio"] = r["ratio"] if r["valid"] and r["official"] else 0.0
        r["valid_flops_ratio"] = r["valid_flops"] / base["valid_flops"] if base["valid_flops"] else 0.0
        r["what"] = what
        out[name] = r
    return out
