"""benchmarks/forgery_bench.py: how far each way of lying to the master lifts a score.

A real master (gRPC on a real port, SQLite) on a scripted clock; for each
scenario a fresh master and one worker that reports a smoke run's model every
10 s for 300 s. The honest baseline runs an H100 at a quarter of its measured
float32 peak (4e14 ops/s, within the H100 datasheet) with accuracy 0.80. Each
liar does one thing the issue lists (docs/spec.md section 7) and keeps going
when a report is refused. Printed per lie: the score it reached over the honest
score (the forgery ratio; <= 1.0 means the lie gained nothing), its valid-FLOPS
ratio, whether the run stays valid, and the calls refused.

    python -m benchmarks.forgery_bench [--json] [--audit]

`two_models_at_peak` reports the peak's worth of work on two models at once:
with one budget per worker (master/core/budget.py) it reaches the peak once, not
twice. Ends with RESULT lines. A lie that stays within the worker's accepted peak is
physically possible, so it is bounded, not refused. Accuracy and the kernel
size are not counted by the master: `--audit` (needs TensorFlow, about a minute)
gives every model real weights (the smoke child at kernel 3, He-initialised and
saved in a checkpoint store), has every worker claim the accuracy those weights
give on the digits validation split (the accuracy liar claims 0.9999), and runs
the audit (worker/audit.py, recorded through RecordAudit) on each model (the first
one of a liar with several) before the scoreboard is read. The audit also times
the model's training steps here (worker/throughput.py), so under `--audit` the
worker is this machine, not an H100: it registers this CPU (its model, its
count and its measured float32 GEMM rate), the honest worker claims
HONEST_SHARE of the smoke child's training rate timed here at start, and a liar
about its peak claims the same share of the peak it registered. The ratio after
the audit is the score ratio when the audit passed and 0 when it did not: a
failed audit of the model behind the regulated score makes an official run
invalid, and a throughput found too fast any run (docs/spec.md, "Audit").
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from aiperf.api.client import Accelerator, ApiError, ControlClient, WorkerClient
from aiperf.flops import count_flops
from aiperf.graph import Graph, with_inserted_kernel
from aiperf.hyperparameters import Hyperparameters
from aiperf.morphism import deeper_at, deeper_positions
from aiperf.resnet import resnet50

H100 = "NVIDIA H100 80GB HBM3"
PEAK = 4e14            # the honest worker's measured float32 (TF32) GEMM rate; H100 SXM datasheet: 494.5 TF
UTILISATION = 0.25     # the share of its peak an honest training run reaches
STEP_S = 10.0
DURATION_S = 300.0
TOKENS = {"worker_token": "forgery-worker", "admin_token": "forgery-admin"}
# the lies the master's rules refuse outright (the test asserts their ratio <= 1.0); the others
# stay within the worker's accepted peak, which bounds them (score <= peak) but cannot tell them
# from a worker that trains at that rate.
COVERED = ("images_x1e6", "worker_ops_9.2e18", "graph_512x512", "peak_1e18")
HONEST_SHARE = 0.5     # under --audit: an honest worker's share of its timed step rate (it also prepares,
                       # reads data, validates and reports: the demo's workers claim 25-45% of the rate
                       # the audit times); it leaves room for this machine to slow down between the
                       # two timings


@dataclass(frozen=True)
class Machine:
    """The worker's hardware as it registers it, and the rate an honest worker reaches on it."""

    accelerator: str       # the model registered ("" : a CPU worker)
    peak: float            # its measured float32 GEMM rate
    honest_ops_per_s: float
    cpus: int = 0
    cpu_model: str = ""

    def register(self, w: WorkerClient, peak: float) -> int:
        """Register with `peak` claimed (ApiError when refused): the worker id."""
        if self.accelerator:
            return w.register(name="w", host="w", accelerators=[Accelerator(self.accelerator, 80 << 30, 0.0,
                                                                            {"float32": peak})]).worker_id
        return w.register(name="w", host="w", cpus=self.cpus, cpu_peak_flops_by_dtype={"float32": peak},
                          cpu_model=self.cpu_model).worker_id


H100_MACHINE = Machine(H100, PEAK, UTILISATION * PEAK)


class Clock:
    def __init__(self) -> None:
        self.t = 1_000_000.0

    def __call__(self) -> float:
        return self.t


@dataclass
class Lie:
    name: str
    what: str
    peak: float = PEAK
    image_factor: float = 1.0           # images reported per image trained
    images_per_s: float | None = None   # a fixed claimed rate instead
    worker_ops: float | None = None     # the worker's own count, per report
    accuracy: float = 0.80
    kernel: int = 3                      # kernel claimed at submission
    graph: str = "smoke"                 # "smoke" or "512"
    models: int = 1                      # models reported on at once (one trains; the rest are fiction)
    utilisation: float = UTILISATION     # the share of the peak claimed per model
    refused: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Audit:
    """What `--audit` gives each scenario: the weights every worker really trained (kernel 3), the
    checkpoint store they go to, the accuracy they give and the split it was measured on."""

    weights: Path
    store: Any
    accuracy: float
    dataset: Any
    timing: Any      # worker.audit.Timing: how the audit times training steps here
    machine: Machine  # this machine, as a worker registers it


def _audit_setup(graph: Graph, tmp: Path) -> Audit:
    """Real weights of the smoke child at kernel 3, their accuracy on the digits validation split,
    and this machine as a worker: its CPU, its GEMM rate and the honest rate timed here."""
    import numpy as np

    from aiperf.keras_builder import build_model
    from aiperf.profiles import SMOKE
    from worker.audit import Timing
    from worker.checkpoints import open_store, save_model_weights
    from worker.data import load_dataset
    from worker.gemm import measure_cpu_peak
    from worker.inventory import inventory
    from worker.throughput import auditor_hardware, one_device, training_rate

    dataset = load_dataset("digits", None, image_size=32)
    model = build_model(graph, kernel_size=3, seed=11)
    xs, ys = zip(*[(x.numpy(), y.numpy()) for x, y in dataset.validation(64)])
    predicted = np.argmax(model.predict(np.concatenate(xs), verbose=0, batch_size=64), -1)
    accuracy = float(np.mean(predicted == np.argmax(np.concatenate(ys), -1)))
    device, strategy = one_device()
    timing = Timing(xla=False, profile=SMOKE, strategy=strategy, hardware=auditor_hardware(device))
    rate = training_rate(graph, 3, 32, "fp32", False, dataset, SMOKE, strategy)
    inv = inventory()
    machine = Machine("", measure_cpu_peak()["float32"], HONEST_SHARE * rate * count_flops(
        with_inserted_kernel(graph, 3)).train, cpus=inv.cpus, cpu_model=inv.cpu_model)
    return Audit(save_model_weights(model, tmp, 0), open_store(str(tmp / "checkpoints")), accuracy, dataset,
                 timing, machine)


def _audited(w: WorkerClient, c: ControlClient, wid: int, mid: int, lie: Lie, audit: Audit) -> str:
    """Finish the model with the real weights in the store, audit it and record the audit: its verdict."""
    from aiperf.api.wire import model_record
    from worker.audit import audit_model

    run_id = c.run_status().run.config.run_id
    ckpt = audit.store.put(run_id, mid, audit.weights)
    w.finish_model(wid, mid, "done", best_accuracy=lie.accuracy, checkpoint_uri=ckpt.uri,
                   checkpoint_sha256=ckpt.sha256)
    (model,) = [m for m in c.list_models(run_id, state="done", include_graph=True).models if m.model_id == mid]
    f = audit_model(model_record(model), "fp32", audit.dataset, audit.weights.parent, timing=audit.timing)
    return c.record_audit(mid, verdict=f.verdict, architecture_ok=f.architecture_ok,
                          audited_accuracy=f.audited_accuracy, validation_images=f.validation_images,
                          auditor_host="forgery-bench", detail=f.detail,
                          audited_images_per_second=f.audited_images_per_second,
                          auditor_hardware=f.auditor_hardware).verdict


def _graphs() -> dict[str, Graph]:
    base = resnet50(input_size=32, channels=3, classes=10, width=0.125)
    child = deeper_at(base, deeper_positions(base)[3], kernel_size=3)  # one inserted conv: kernel matters
    return {"smoke": child, "512": resnet50(input_size=512, channels=3, classes=10, width=0.125)}


def _run(lie: Lie, graphs: dict[str, Graph], tmp: Path, audit: Audit | None = None) -> dict[str, Any]:
    from master.server import MasterConfig, serve

    machine = audit.machine if audit is not None else H100_MACHINE
    clock = Clock()
    h = serve(MasterConfig(f"sqlite:///{tmp / (lie.name + '.db')}", port=0, host="127.0.0.1", data_dir=tmp / lie.name,
                           heartbeat_interval_s=10_000.0, env={}, clock=clock, **TOKENS))
    try:
        w = WorkerClient(h.address, h.worker_token, retries=0)
        c = ControlClient(h.address, h.admin_token, retries=0)
        t0 = clock.t
        claimed_peak = machine.peak if lie.peak == PEAK else lie.peak  # the lie, or this machine's own
        try:
            wid = machine.register(w, claimed_peak)
        except ApiError as exc:
            lie.refused.append(f"Register: {exc.details}")
            wid = machine.register(w, 1e16)  # the most it can register: the bound of the request
        c.start_run(600, profile="smoke", precision="fp32")
        honest_ops = count_flops(with_inserted_kernel(graphs["smoke"], 3))
        graph = graphs[lie.graph]
        claimed_ops = count_flops(with_inserted_kernel(graph, lie.kernel))
        try:
            mids = [w.submit_model(wid, graph.to_json(), graph.hash(), 0, r,
                                   Hyperparameters(32, lie.kernel), queue=r > 1).model_id
                    for r in range(1, lie.models + 1)]
        except ApiError as exc:
            lie.refused.append(f"SubmitModel: {exc.details}")
            mids = []
        # what the worker trains: the honest rate; a liar about its utilisation (two_models_at_peak)
        # claims that share of its real peak, a liar about its peak the honest share of the claimed one
        utilisation = machine.honest_ops_per_s / machine.peak
        share = utilisation if lie.utilisation == UTILISATION else lie.utilisation
        images_per_step = int(share * machine.peak * STEP_S / honest_ops.train)
        peak_images = int(utilisation * claimed_peak * STEP_S / honest_ops.train)
        for seq in range(1, int(DURATION_S / STEP_S) + 1):
            clock.t = t0 + seq * STEP_S
            for mid in mids:
                _report(w, lie, wid, mid, seq, peak_images if claimed_peak > machine.peak else images_per_step,
                        claimed_ops)
        verdict = _audited(w, c, wid, mids[0], lie, audit) if audit is not None and mids else None
        clock.t = t0 + DURATION_S + STEP_S
        sb = c.scoreboard()
        return {"audit": verdict, "score": sb.score, "valid_flops": sb.valid_flops, "valid": sb.valid,
                "invalid_reason": sb.invalid_reason, "peak_flops": sb.peak_flops, "peak_verdict": sb.peak_verdict,
                "implausible_reports": sb.implausible_reports}
    finally:
        h.stop(grace_s=0)


def _report(w: WorkerClient, lie: Lie, wid: int, mid: int, seq: int, images_per_step: int,
            claimed_ops: Any) -> None:
    """One report of the liar on one model (a refusal is recorded, and the liar goes on)."""
    n = int(lie.images_per_s * STEP_S) if lie.images_per_s else int(images_per_step * lie.image_factor)
    # a consistent liar sends the count the master will make (else the run is invalid at once)
    own = int(lie.worker_ops) if lie.worker_ops is not None else claimed_ops.ops(n, 0)
    try:
        w.report_progress(wid, mid, seq, n, 0, 1, min(own, 2**63 - 1), val_accuracy=lie.accuracy)
    except ApiError as exc:
        lie.refused.append(f"ReportProgress: {exc.details}")

LIES = (
    Lie("images_x1e6", "reports 10^6 x the images it trained", image_factor=1e6),
    Lie("100k_img_per_s", "claims 100,000 images/s", images_per_s=100_000.0),
    Lie("worker_ops_9.2e18", "reports 9.2e18 operations of its own count", worker_ops=9.2e18),
    Lie("accuracy_0.9999", "claims accuracy 0.9999 (not audited by these rules)", accuracy=0.9999),
    Lie("kernel_7_for_3", "trains kernel 3, claims kernel 7 at submission", kernel=7),
    Lie("graph_512x512", "submits a 512x512 graph in the 32x32 smoke run", graph="512"),
    Lie("peak_1e18", "registers a peak of 1e18 for one H100, reports at that rate", peak=1e18),
    Lie("peak_5e15_capped", "registers 5e15 for one H100 (within the request bound)", peak=5e15),
    # Before the per-worker budget each model had its own interval: two models at the
    # full peak each scored twice the peak.
    Lie("two_models_at_peak", "reports the peak's worth of work on two models at once", models=2, utilisation=1.0),
)


def run_all(names: tuple[str, ...] | None = None, audit: bool = False) -> dict[str, Any]:
    """Every lie (or those named) against the honest baseline: {name: result}; with `audit`, every
    model audited (see the module docstring) and `after_audit_ratio` added."""
    graphs = _graphs()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        checked = _audit_setup(graphs["smoke"], tmp) if audit else None

        def claims(lie: Lie) -> Lie:  # under audit an honest claim is what the weights give
            if checked is None or lie.name == "accuracy_0.9999":
                return lie
            return replace(lie, accuracy=checked.accuracy)

        honest = _run(claims(Lie("honest", "the honest baseline")), graphs, tmp, checked)
        out: dict[str, Any] = {"honest": honest}
        for lie in LIES:
            if names and lie.name not in names:
                continue
            lie = claims(lie)
            r = _run(lie, graphs, tmp, checked)
            r["ratio"] = r["score"] / honest["score"]
            if audit:
                r["after_audit_ratio"] = r["ratio"] if r["audit"] == "passed" else 0.0
            r["valid_ratio"] = r["ratio"] if r["valid"] else 0.0  # an invalid run is no result
            r["valid_flops_ratio"] = r["valid_flops"] / honest["valid_flops"]
            r["what"], r["refused"] = lie.what, lie.refused
            out[lie.name] = r
    return out


def _over_peak(r: dict[str, Any]) -> float:
    """Score over the accepted peak (0 without a score: the scoreboard then shows no peak)."""
    return r["score"] / r["peak_flops"] if r["peak_flops"] else 0.0


def _print_official(res: dict[str, Any]) -> None:
    """The official run's lies: each one's ratio as a valid official result, after the defences."""
    h = res["honest"]
    print(f"official honest: score {h['score']:.4g} FLOPS, valid {h['valid']}, official {h['official']}")
    lies = {k: v for k, v in res.items() if k not in ("honest", "honest_retry")}
    for name, r in lies.items():
        why = (r["refused"][:1] or [r["invalid_reason"]] or ["-"])[0]
        print(f"official {name:24s} score ratio {r['ratio']:.4g}, as a valid official result {r['valid_ratio']:.4g}, "
              f"valid-FLOPS ratio {r['valid_flops_ratio']:.3g}: {why[:110]}")
    if lies:
        print(f"RESULT max_valid_forgery_ratio={max(v['valid_ratio'] for v in lies.values()):.4g}")
    for name, r in lies.items():
        print(f"RESULT ratio_{name}={r['valid_ratio']:.4g} score_ratio_{name}={r['ratio']:.4g} "
              f"valid_flops_ratio_{name}={r['valid_flops_ratio']:.4g}")
    print(f"RESULT honest_retry_refused={res['honest_retry']['refused_count']}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.add_argument("--only", nargs="*", help="run only these lies")
    p.add_argument("--audit", action="store_true", help="audit every model's stored weights (TensorFlow)")
    p.add_argument("--no-official", action="store_true", help="skip the official run's lies (forgery_official.py)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)  # the liars' flops_mismatch warnings are expected
    res = run_all(tuple(args.only) if args.only else None, audit=args.audit)
    official = None
    if not args.no_official:
        from benchmarks.forgery_official import run_official

        with tempfile.TemporaryDirectory() as d:
            official = run_official(Path(d), tuple(args.only) if args.only else None)
    if args.json:
        print(json.dumps({"smoke": res, "official": official}, indent=2))
    h = res["honest"]
    print(f"honest: score {h['score']:.4g} FLOPS, valid FLOPS {h['valid_flops']:.4g}, peak {h['peak_flops']:.4g} "
          f"({h['peak_verdict']})")
    for name, r in res.items():
        if name == "honest":
            continue
        first = r["refused"][0] if r["refused"] else "nothing refused"
        audited = f", audit {r['audit']!r}: after audit {r['after_audit_ratio']:.3g}" if args.audit else ""
        print(f"{name:18s} score ratio {r['ratio']:.3g} (as a valid result {r['valid_ratio']:.3g}), valid-FLOPS "
              f"ratio {r['valid_flops_ratio']:.3g}, score/peak {_over_peak(r):.3g}{audited}, "
              f"refused {len(r['refused'])}: {first[:100]}")
    lies = {k: v for k, v in res.items() if k != "honest"}
    covered = [v["ratio"] for k, v in lies.items() if k in COVERED]
    if lies:
        print(f"RESULT max_forgery_ratio={max(v['ratio'] for v in lies.values()):.4g}")
        # a smoke run is never official and its validity needs no audit: these lies are bounded, not caught
        print(f"RESULT max_valid_forgery_ratio_smoke={max(v['valid_ratio'] for v in lies.values()):.4g}")
    if official is not None:
        _print_official(official)
    if lies:
        print(f"RESULT max_score_over_accepted_peak={max(_over_peak(v) for v in lies.values()):.4g}")
    if covered:
        print(f"RESULT max_covered_forgery_ratio={max(covered):.4g}")
    if args.audit and lies:
        print(f"RESULT honest_audit={h['audit']}")
        print(f"RESULT max_after_audit_ratio={max(v['after_audit_ratio'] for v in lies.values()):.4g}")
    for k, v in lies.items():
        print(f"RESULT ratio_{k}={v['ratio']:.4g} valid_ratio_{k}={v['valid_ratio']:.4g} "
              f"valid_flops_ratio_{k}={v['valid_flops_ratio']:.4g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
