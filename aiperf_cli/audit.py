"""`aiperf audit`: re-evaluate a run's best models from their stored weights (docs/spec.md, "Audit").

    aiperf audit [--run ID] [--top N] [--json] [--dataset PATH --dataset-format F] [--scratch DIR]
                 [--no-timing] [--node NAME]

Run where the validation split is (a worker pod, or any machine with the
dataset) and where the checkpoint store is readable (the worker's --checkpoints
URL: a shared directory or an object store). The top N DONE models of the run,
ranked by the accuracy the master observed (`aiperf.scoring.model_rank_key` without the
workers' predicted accuracies), and the model behind the regulated score when it is not among them, are each read from
their checkpoint (SHA-256 checked), checked against their recorded graph at
their kernel size, and re-evaluated on the validation split here; each finding
is recorded in the master (RecordAudit, with the admin token), which checks the
verdict. Each model's training steps are also timed on one device here (the
first GPU, else the CPU; `worker/throughput.py`) and the master compares the
rate with its worker's claims: run it on the workers' hardware (docs/spec.md,
"Audit"). `--no-timing` skips that, and the master records "not timed", which
never passes. `--node NAME` is a node audit instead (docs/spec.md, "Node
audits"): run on each worker node, it times the model the master drew for each worker
whose host is NAME and sends this node's inventory (NVML; the CPU without accelerators).
Exit code 0 when every model was audited and recorded, whatever the
verdicts (the scoreboard shows them); 2 for a bad dataset; 3 and 4 as for the
other control commands.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any, Optional

import typer

from aiperf import limits
from aiperf.api.control_session import AuditClaim, ControlSession
from aiperf.api.records import ModelRecord
from aiperf.scoring import model_rank_key
from aiperf.states import ModelState
from aiperf_cli.options import Control, ExitCode, UsageError, control_command, fail
from aiperf_cli.tables import audits_table
from aiperf_cli.values import RUN_ID, Backend, DatasetFormat, LogLevel, int_option

DEFAULT_TOP = 3
TOP = (1, 1000)


def ranked_done_models(session: ControlSession, run_id: int) -> list[tuple[int, ModelRecord]]:
    """The run's DONE models without their graphs, best first (the scoreboard's order), each with
    its place in the id order (where `with_graph` fetches it with its graph)."""
    placed = list(enumerate(session.all_model_records(run_id, state=ModelState.DONE)))
    # ranked by the accuracy the master observed, never by a worker's prediction
    placed.sort(key=lambda pm: model_rank_key(pm[1].model_id, None, pm[1].best_accuracy if pm[1].has_accuracy else None))
    return placed


def with_graph(session: ControlSession, run_id: int, position: int, model_id: int) -> ModelRecord:
    """The DONE model at `position` (id order) with its graph; it must still be `model_id`."""
    page = session.model_records(run_id, state=ModelState.DONE, limit=1, offset=position, include_graph=True)
    if not page.models or page.models[0].model_id != model_id:
        fail(f"the run's DONE models changed while auditing (model {model_id} moved); run the audit again",
             ExitCode.UNAVAILABLE)
    return page.models[0]


def chosen(ranked: list[tuple[int, Any]], top: int, regulated_model_id: int) -> list[tuple[int, Any]]:
    """The top `top` models, and the model behind the regulated score when it is not among them."""
    picked = ranked[:top]
    if regulated_model_id and all(m.model_id != regulated_model_id for _, m in picked):
        picked += [pm for pm in ranked if pm[1].model_id == regulated_model_id]
    return picked


def _dataset(kind: str, path: Optional[str], image_size: int) -> Any:
    from worker.data import DatasetError, load_dataset

    try:
        return load_dataset(kind, path, image_size=image_size)
    except DatasetError as exc:
        fail(str(exc))


@control_command()
def audit_cmd(
    ctl: Control,
    run: int = int_option(0, "--run", span=RUN_ID, help="Run id (0: the current or most recent run)."),
    top: int = int_option(DEFAULT_TOP, "--top", span=TOP, help="Audit this many of the run's best models."),
    dataset: Optional[str] = typer.Option(None, "--dataset", envvar="AIPERF_DATASET",
                                          help="Dataset path (as for aiperf worker)."),
    dataset_format: Optional[DatasetFormat] = typer.Option(
        None, "--dataset-format", envvar="AIPERF_DATASET_FORMAT", help="Dataset format (default: the profile's)."),
    scratch: Optional[Path] = typer.Option(None, "--scratch", help="Where checkpoints are copied while audited "
                                           "(default: the system's temporary directory)."),
    no_timing: bool = typer.Option(False, "--no-timing", help="Do not time the models' training steps (the "
                                   "master then records 'not timed', which never passes)."),
    no_retrain: bool = typer.Option(False, "--no-retrain", help="Do not re-train the models' first epoch from "
                                    "their seed (docs/spec.md, \"Weights from outside the run\")."),
    node: Optional[str] = typer.Option(None, "--node", help="A node audit: time the models the master drew for "
                                       "the workers whose host is NAME (\"\": this machine's host name) "
                                       "and send the node's inventory (docs/spec.md, \"Node audits\")."),
    log_level: LogLevel = typer.Option("warning", case_sensitive=False, help="Log level."),
    backend: Backend = typer.Option("tensorflow", "--backend", envvar="AIPERF_BACKEND", case_sensitive=False,
                                    help="The framework that evaluates and times the models (time on the "
                                         "backend the audited model's worker trained with)."),
) -> None:
    """Re-evaluate the run's best models from their stored weights and record the audit in the master."""
    from aiperf_cli.worker import _check_dataset, held_stderr, select_backend, setup_logging

    select_backend(backend.value)
    kind = dataset_format.value if dataset_format else None
    _check_dataset(dataset, kind, log_level.value)
    if scratch is not None:
        try:  # made here: the audit copies each checkpoint under it
            scratch.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # a file in the way, no permission
            fail(f"--scratch {scratch}: {exc.strerror or exc}")
    setup_logging(log_level.value)
    # TensorFlow's start-up lines (aiperf_cli/worker.py's docstring): shown on a crash or with --log-level debug
    job = ((lambda: ctl.call(node_audit_run, ctl.session(), run, node or socket.gethostname(), kind, dataset,
                             not no_timing)) if node is not None else
           (lambda: ctl.call(audit_run, ctl.session(), run, top, kind, dataset, scratch, not no_timing,
                             not no_retrain)))
    run_id, rows = held_stderr(job,
                               show=lambda exc: log_level.value == "debug" or not (
                                   exc is None or isinstance(exc, UsageError)))
    ctl.show({"run_id": run_id, "audits": rows}, lambda: audits_table(run_id, rows))


def audit_run(session: ControlSession, run: int, top: int, kind: Optional[str], dataset: Optional[str],
              scratch: Optional[Path] = None, timed: bool = True,
              retrain: bool = True) -> tuple[int, list[dict[str, Any]]]:
    """Audit the run's top models (and the regulated score's) and record each finding in the master:
    (run id, the recorded audits as rows). The master's refusals raise ApiError; a dataset that is not
    there or does not fit the graphs, one line (exit 2)."""
    from aiperf.profiles import get_profile
    from worker.audit import Retraining, Timing

    board = session.scoreboard(run)
    run_id, profile, precision = board["run_id"], get_profile(board["profile"]), board["precision"]
    ranked = ranked_done_models(session, run_id)
    picked = chosen(ranked, top, board["audit_model_id"] or 0)
    data = _dataset(kind or profile.dataset, dataset, profile.input_size) if picked else None
    timing = None
    if timed and picked:
        from worker.throughput import auditor_hardware, one_device

        device, strategy = one_device()
        timing = Timing(xla=board["xla"], profile=profile, strategy=strategy,
                        hardware=auditor_hardware(device)[:limits.MAX_HARDWARE_CHARS])
    retraining = Retraining(profile, int(board["limits"]["max_epochs_per_round"]),
                            bool(board["xla"])) if retrain else None
    ranks = {m.model_id: rank for rank, (_, m) in enumerate(ranked, 1)}
    return run_id, [{**_audit_one(session, run_id, position, model, precision, data, scratch, timing, retraining),
                     "why": why_audited(ranks.get(model.model_id, 0), top)}
                    for position, model in picked]


def node_audit_run(session: ControlSession, run: int, node: str, kind: Optional[str], dataset: Optional[str],
                   timed: bool = True) -> tuple[int, list[dict[str, Any]]]:
    """Time, on this node, the model the master drew for each worker whose host is `node`, and
    record each with the node's inventory (NVML; the CPU without accelerators): (run id, rows)."""
    from aiperf.api.client import Accelerator, NodeInventory
    from aiperf.profiles import get_profile
    from worker.inventory import inventory

    listed = session.audits(run)
    run_id, drawn = listed.run_id, listed.node_audit_model_ids
    here = {w["worker_id"] for w in session.all_workers(run_id) if node in (w["host"], w["name"])}
    mine = [(pos, m) for pos, m in enumerate(session.all_model_records(run_id))
            if m.model_id in drawn and m.worker_id in here]
    if not mine:
        return run_id, []
    board = session.scoreboard(run_id)
    profile, precision = get_profile(board["profile"]), board["precision"]
    inv = inventory()
    found = NodeInventory(tuple(Accelerator(a.model, a.memory_bytes, uuid=a.uuid, pci_bus_id=a.pci_bus_id)
                                for a in inv.accelerators), inv.cpu_model, inv.cpus)
    data = _dataset(kind or profile.dataset, dataset, profile.input_size)
    timing = None
    if timed:
        from worker.audit import Timing
        from worker.throughput import auditor_hardware, one_device

        device, strategy = one_device()
        timing = Timing(xla=board["xla"], profile=profile, strategy=strategy,
                        hardware=auditor_hardware(device)[:limits.MAX_HARDWARE_CHARS])
    rows = []
    for pos, m in mine:
        full = session.model_records(run_id, limit=1, offset=pos, include_graph=True).models[0]
        rate = timing.rate(full, precision, data) if timing is not None else 0.0
        rows.append(session.record_audit(m.model_id, AuditClaim(
            verdict="no checkpoint", architecture_ok=False, node=found,
            auditor_host=socket.gethostname()[:limits.MAX_NAME_CHARS], audited_images_per_second=rate,
            auditor_hardware=timing.hardware if timing is not None else "",
            detail=f"node audit on {node[:100]}")))
    return run_id, rows


def why_audited(rank: int, top: int) -> str:
    """Why `aiperf audit --top N` audits a model: its rank, or (beyond N) the regulated score."""
    if rank and rank <= top:
        return f"rank {rank} of the run's models"
    return f"behind the regulated score (rank {rank}, below the top {top})"


def _audit_one(session: ControlSession, run_id: int, position: int, model: Any, precision: str, data: Any,
               scratch: Optional[Path], timing: Any, retraining: Any = None) -> dict[str, Any]:
    """Audit one model and record it; the recorded audit as a row."""
    from worker.audit import audit_model

    full = with_graph(session, run_id, position, model.model_id)
    try:
        f = audit_model(full, precision, data, scratch, timing=timing, retraining=retraining)
    except (ValueError, TypeError) as exc:  # the dataset does not fit the graph: the auditor's mistake
        fail(f"model {model.model_id}: cannot evaluate on this dataset: {' '.join(str(exc).split())[:300]}")
    return session.record_audit(f.model_id, AuditClaim(
        verdict=f.verdict, architecture_ok=f.architecture_ok, audited_accuracy=f.audited_accuracy,
        validation_images=f.validation_images, auditor_host=socket.gethostname()[:limits.MAX_NAME_CHARS],
        detail=f.detail, audited_images_per_second=f.audited_images_per_second,
        auditor_hardware=f.auditor_hardware, retrained_accuracy=f.retrained_accuracy))


def register(app: typer.Typer) -> None:
    app.command("audit")(audit_cmd)
