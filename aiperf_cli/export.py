"""Exports of finished (or running) runs, through the master's control API.

    aiperf export [--run ID] --format json|csv|mllog [--table T] [--out FILE]
                  [--org ORG] [--platform TEXT] [--status research|onprem|cloud|preview]
    aiperf compare RUN RUN... [--json]

json: one object {scoreboard, timeline, models}. csv: one table (--table models,
timeline or scoreboard), one row per model / FLOPS(t) point / run. mllog: an
MLPerf Training log (open division, ResNet) that MLPerf's compliance checker
passes; aiperf_cli/mllog.py maps the run onto MLPerf's keys (docs/spec.md, "MLPerf logs").
"""

from __future__ import annotations

import csv
import enum
import io
import json
from pathlib import Path
from typing import Any, Optional

import typer

from aiperf import units
from aiperf.api.control_session import ControlSession
from aiperf.scoring import VALIDITY_RULES
from aiperf_cli.options import Control, control_command, fail
from aiperf_cli.values import RUN_ID, int_option

# Declared, not made by values._choices, so that the options' annotations are types to mypy.
ExportFormat = enum.Enum("ExportFormat", [("json", "json"), ("csv", "csv"), ("mllog", "mllog")], type=str)
CsvTable = enum.Enum("CsvTable", [("models", "models"), ("timeline", "timeline"), ("scoreboard", "scoreboard")],
                     type=str)
# mllog's submission_status: the values MLPerf's training 4.0.0 rules accept (common.yaml);
# the default is MLPerf's research, development or internal category.
SubmissionStatus = enum.Enum("SubmissionStatus", [("research", "research"), ("onprem", "onprem"),
                                                  ("cloud", "cloud"), ("preview", "preview")], type=str)
DEFAULT_ORG = "unknown"  # submission_org: the run's record names no organisation
MAX_SUBMISSION_TEXT = 256  # --org, --platform
MAX_COMPARE = 16

# The scoreboard's figures in `compare` and in the scoreboard CSV row, in order.
BOARD_FIELDS = ("run_id", "state", "profile", "precision", "seed", "duration_s", "elapsed_s", "score",
                "provisional", "regulated_score", "valid_flops", "flops", "error", "best_accuracy", "valid",
                "invalid_reason", "efficiency", "efficiency_unknown_reason", "efficiency_vs_measured", "workers",
                "accelerators", "models_done", "images_trained", "images_validated", "total_ops", "backends",
                "rules_version")
CHECK_FIELDS = tuple(f"check_{r.key}" for r in VALIDITY_RULES)
MODEL_FIELDS = ("model_id", "parent_id", "worker_id", "round", "state", "best_accuracy", "predicted_accuracy",
                "batch_size", "kernel_size", "epochs", "images_trained", "images_validated",
                "flops_per_train_image", "flops_per_eval_image", "created_at", "finished_at", "graph_hash", "reason",
                "inherited_from", "checkpoint_uri", "checkpoint_sha256")
POINT_FIELDS = ("elapsed_s", "ops", "flops", "best_accuracy")


def fetch_export(session: ControlSession, run: int) -> dict[str, Any]:
    """The run's scoreboard, its full timeline and every model (paged through ListModels)."""
    board = session.scoreboard(run)
    run_id = board["run_id"]
    return {"scoreboard": board, "timeline": session.timeline(run_id), "models": session.all_models(run_id)}


def _model_row(m: dict[str, Any]) -> dict[str, Any]:
    hp = m["hyperparameters"] or {}
    ckpt = m.get("checkpoint") or {}
    row = {k: (hp.get(k) if k in ("batch_size", "kernel_size") else m.get(k)) for k in MODEL_FIELDS}
    row.update(checkpoint_uri=ckpt.get("uri"), checkpoint_sha256=ckpt.get("sha256"))
    return row


def to_csv(data: dict[str, Any], table: str) -> str:
    """One table of the export as CSV (header first; empty cell for an unknown value)."""
    fields: tuple[str, ...]
    if table == "models":
        fields, rows = MODEL_FIELDS, [_model_row(m) for m in data["models"]]
    elif table == "timeline":
        fields, rows = POINT_FIELDS, data["timeline"]["points"]
    else:
        board = data["scoreboard"]
        # one column per validity rule, its state (aiperf.scoring.VALIDITY_RULES)
        checks = {f"check_{c['rule']}": c["state"] for c in board.get("checks") or []}
        fields, rows = (*BOARD_FIELDS, *CHECK_FIELDS), [{**board, **checks}]
    out = io.StringIO()
    # raw values; each column's unit in its name (aiperf.units.csv_name: score -> score_flops)
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([units.csv_name(f) for f in fields])
    writer.writerows([["" if r.get(f) is None else r.get(f) for f in fields] for r in rows])
    return out.getvalue()


def to_mllog(data: dict[str, Any], org: str, platform: Optional[str], status: str) -> str:
    """The run as an MLPerf Training log (aiperf_cli.mllog holds the mapping)."""
    try:
        from aiperf_cli import mllog
    except ModuleNotFoundError as exc:
        if exc.name != "mlperf_logging" and not (exc.name or "").startswith("mlperf_logging."):
            raise
        fail("--format mllog needs the mlperf-logging package: pip install 'aiperf[export]' (in a source tree's "
             ".venv: make install-export, which keeps its editable install)")
    return mllog.to_mllog(data, mllog.Submission(org=org, platform=platform, status=status))


def _text_problem(option: str, value: str) -> Optional[str]:
    """Why `value` cannot be a submission_* text (None: it can): not empty, printable, bounded."""
    if not value.strip():
        return f"{option} must not be empty"
    if len(value) > MAX_SUBMISSION_TEXT:
        return f"{option} is longer than {MAX_SUBMISSION_TEXT} characters"
    if not value.isprintable():
        return f"{option} holds a control character"
    return None


def _write(text: str, out: Optional[Path]) -> None:
    if out is None:
        print(text, end="")
        return
    if out.is_dir():
        fail(f"--out {out} is a directory; give a file name")
    if not out.parent.exists():
        fail(f"--out {out}: directory {out.parent} does not exist")
    try:
        out.write_text(text, encoding="utf-8")
    except OSError as exc:
        fail(f"cannot write {out}: {exc.strerror}")
    print(f"wrote {out} ({len(text.encode('utf-8')):,} bytes)")


@control_command(json_option=False)
def export_cmd(
    ctl: Control,
    run: int = int_option(0, "--run", span=RUN_ID, help="Run id (0: the current or most recent run)."),
    fmt: ExportFormat = typer.Option(..., "--format", help="json (everything), csv (one --table) or mllog."),
    table: CsvTable = typer.Option("models", "--table", help="The table --format csv writes."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="File to write (default: standard output)."),
    org: str = typer.Option(DEFAULT_ORG, "--org", help="mllog: submission_org (the run does not record it)."),
    platform: Optional[str] = typer.Option(
        None, "--platform", help="mllog: submission_platform (default: the run's workers, e.g. '2 nodes, 16xH100')."),
    status: SubmissionStatus = typer.Option("research", "--status", help="mllog: submission_status."),
) -> None:
    """Export a run: its scoreboard, FLOPS(t) timeline and models."""
    for option, value in (("--org", org), ("--platform", platform)):
        problem = None if value is None else _text_problem(option, value)
        if problem:
            fail(problem)
    data = ctl.call(fetch_export, ctl.session(), run)
    if fmt.value == "json":
        text = json.dumps(data, indent=1) + "\n"
    elif fmt.value == "csv":
        text = to_csv(data, table.value)
    else:
        text = to_mllog(data, org, platform, status.value)
    _write(text, out)


# How `compare` writes each figure (aiperf.units): one way to write a number.
_FLOPS_KEYS = {"score", "regulated_score", "valid_flops", "flops"}
_PERCENT_KEYS = {"efficiency", "efficiency_vs_measured"}
_DURATION_KEYS = {"duration_s", "elapsed_s"}
_COUNT_KEYS = {"images_trained", "images_validated", "models_done"}
RATIO_KEYS = ("score", "regulated_score", "valid_flops")  # each run's, over the first run's
# What makes two runs' scores differ, when it differs: `compare` names it.
CAUSE_KEYS = ("profile", "precision", "xla", "backends", "workers", "accelerators", "hardware",
              "datasheet_peak_flops", "peak_flops", "duration_s", "elapsed_s", "inherit", "deterministic", "seed",
              "rules_version")


def compare_cell(key: str, v: Any) -> str:
    """One figure of `compare`, written as the scoreboard writes it."""
    if v is None:
        return units.MISSING
    if key in _FLOPS_KEYS or key in ("datasheet_peak_flops", "peak_flops"):
        return units.flops(v)
    if key in _PERCENT_KEYS:
        return units.percent(v)
    if key in _DURATION_KEYS:
        return units.duration(v)
    if key in _COUNT_KEYS:
        return units.count(v)
    if key == "total_ops":
        return units.operations(v)
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.4f}"
    return str(v)


def _hardware_of(b: dict[str, Any]) -> str:
    """'2 x NVIDIA H100, 1 x CPU-only': the accelerators that took part, counted by model."""
    from collections import Counter

    names = Counter(a["model"] or "unknown" for w in b.get("hardware") or [] for a in w["accelerators"])
    names.update("CPU-only" for w in b.get("hardware") or [] if not w["accelerators"])
    return ", ".join(f"{n} x {m}" for m, n in sorted(names.items())) or "none"


def compare_data(boards: list[dict[str, Any]]) -> dict[str, Any]:
    """The runs' figures, each score's ratio to the first run's, and the settings that differ
    between them (what explains the ratios): what `compare --json` prints."""
    first = boards[0]
    ratios = {k: [b[k] / first[k] if first[k] else None for b in boards] for k in RATIO_KEYS}
    seen = [{**b, "hardware": _hardware_of(b)} for b in boards]
    differences = [{"key": k, "values": [b.get(k) for b in seen]} for k in CAUSE_KEYS
                   if len({json.dumps(b.get(k), sort_keys=True) for b in seen}) > 1]
    return {"runs": [{k: b[k] for k in BOARD_FIELDS} for b in boards], "ratios": ratios,
            "differences": differences}


def compare_table(boards: list[dict[str, Any]]) -> Any:
    """The scoreboards side by side, one column per run; each score's ratio to the first run's;
    then the settings that differ between the runs."""
    from rich.console import Group
    from rich.table import Table

    data = compare_data(boards)
    table = Table(title="AIPerf runs")
    table.add_column("", overflow="fold")
    for b in boards:
        table.add_column(f"run {b['run_id']}", justify="right", overflow="fold")
    for key in BOARD_FIELDS[1:]:
        table.add_row(key, *(compare_cell(key, b[key]) for b in boards))
    for key in RATIO_KEYS:
        table.add_row(f"{key} / run {boards[0]['run_id']}'s", *(units.ratio(r) for r in data["ratios"][key]))
    if not data["differences"]:
        return Group(table, "The runs differ in none of: " + ", ".join(CAUSE_KEYS) + ".")
    diff = Table(title="What differs between the runs (what explains the ratios)")
    diff.add_column("setting", overflow="fold")
    for b in boards:
        diff.add_column(f"run {b['run_id']}", overflow="fold")
    for d in data["differences"]:
        diff.add_row(d["key"], *(compare_cell(d["key"], v) for v in d["values"]))
    return Group(table, diff)


@control_command()
def compare_cmd(
    ctl: Control,
    runs: list[int] = typer.Argument(..., help=f"Run ids (2 to {MAX_COMPARE})."),
) -> None:
    """Print the scoreboards of several runs side by side, each score's ratio to the first run's and the
    settings that differ between them."""
    if not 2 <= len(runs) <= MAX_COMPARE:
        fail(f"compare takes 2 to {MAX_COMPARE} run ids, got {len(runs)}")
    bad = [r for r in runs if not RUN_ID[0] <= r <= RUN_ID[1]]
    if bad:
        fail(f"run id {bad[0]} is out of range [{RUN_ID[0]}, {RUN_ID[1]}]")
    session = ctl.session()
    boards = [ctl.call(session.scoreboard, r) for r in runs]
    ctl.show(compare_data(boards), lambda: compare_table(boards))


def register(app: typer.Typer) -> None:
    app.command("export")(export_cmd)
    app.command("compare")(compare_cmd)
