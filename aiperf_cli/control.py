"""Run control through the master's control API.

    aiperf start --duration 1h [--profile official|smoke] [--seed N] [--precision P] [--deterministic]
                 [--no-inherit] [--keep-checkpoints K]
    aiperf stop [--run ID] [--abort]
    aiperf status [--run ID] [--json] [--watch [--interval S]]
    aiperf runs [--limit N] [--json]
    aiperf workers [--run ID] [--state alive|lost] [--limit N] [--json]
    aiperf scoreboard [--run ID] [--json] [--explain | --summary]
    aiperf models [--run ID] [--state S] [--json]
    aiperf report [--run ID] [--out FILE]

The master's address and token come from options or AIPERF_MASTER,
AIPERF_ADMIN_TOKEN (or AIPERF_ADMIN_TOKEN_FILE); without a token the admin token
file in the data directory (written by `aiperf master serve`) is used. These
options are defined once, in aiperf_cli.options; every numeric option's range and every
choice, in aiperf_cli.values.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Optional

import typer

from aiperf.api.control_session import ControlSession, Page
from aiperf.retention import DEFAULT_KEEP_CHECKPOINTS
from aiperf.run_spec import RunLimits, RunSpec
from aiperf.states import ModelState, WorkerState
from aiperf_cli.explain import checks_table, explain_text, summary_line
from aiperf_cli.format import format_duration, format_flops, parse_duration
from aiperf_cli.options import Control, control_command, fail, fail_api
from aiperf_cli.report import fetch_report
from aiperf_cli.tables import models_table, runs_table, scoreboard_view, status_line, workers_table
from aiperf_cli.values import (
    COUNT,
    KEEP,
    PAGE,
    PROGRESS_SECONDS,
    RUN_ID,
    SEED,
    Precision,
    Profile,
    float_option,
    int_option,
)
from aiperf_cli.watch import DEFAULT_INTERVAL_S, watch_status

RunOpt = int_option(0, "--run", span=RUN_ID, help="Run id (0: the current or most recent run).")


@control_command()
def start_cmd(
    ctl: Control,
    duration: str = typer.Option(..., "--duration", help="Run length, e.g. 1h, 90m, 3600 (official: >= 1h; "
                                 "at most 30d)."),
    profile: Profile = typer.Option("official", "--profile", help="Run profile."),
    seed: int = int_option(0, "--seed", span=SEED, help="Run seed."),
    precision: Optional[Precision] = typer.Option(
        None, "--precision", help="Training precision (default: the profile's, official mixed_fp16, smoke fp32; "
        "official runs: mixed_fp16 or mixed_bf16, others make the run unofficial; fp8/int8 make it invalid)."),
    xla: Optional[bool] = typer.Option(None, "--xla/--no-xla", help="Workers compile training steps with XLA "
                                       "(default: the profile's, official on, smoke off; official runs: on)."),
    max_models: int = int_option(0, "--max-models", span=COUNT, help="Stop accepting models after this many "
                                 "(0: no limit)."),
    max_rounds: int = int_option(0, "--max-rounds", span=COUNT, help="Rounds per worker (0: no limit)."),
    max_epochs: int = int_option(0, "--max-epochs", span=COUNT, help="Epochs per round cap (0: profile default)."),
    warmup_rounds: int = int_option(0, "--warmup-rounds", span=COUNT, help="Warm-up rounds per worker (0: 5)."),
    min_workers: int = int_option(0, "--min-workers", span=COUNT, help="Stay pending until this many workers "
                                  "are alive."),
    allow_concurrent: bool = typer.Option(False, "--allow-concurrent", help="Allow a second active run."),
    deterministic: bool = typer.Option(False, "--deterministic",
                                       help="Reproducible run: TensorFlow op determinism and seeded rounds "
                                            "on the workers (slower; recorded in the run's configuration)."),
    no_inherit: bool = typer.Option(False, "--no-inherit",
                                    help="Children train from scratch instead of from their parent's weights "
                                         "(recorded in the run's configuration and the scoreboard)."),
    keep_checkpoints: int = int_option(0, "--keep-checkpoints", span=KEEP,
                                       help=f"Checkpoints kept: the top this-many models plus the parents of "
                                            f"models in training (0: {DEFAULT_KEEP_CHECKPOINTS})."),
) -> None:
    """Start a timed run."""
    try:
        seconds = parse_duration(duration)
    except ValueError as exc:
        fail(str(exc))
    spec = RunSpec(seconds, profile=profile.value, seed=seed, precision=precision.value if precision else "",
                   xla=xla, limits=RunLimits(max_models, max_rounds, max_epochs), warmup_rounds=warmup_rounds,
                   min_workers=min_workers, allow_concurrent=allow_concurrent, deterministic=deterministic,
                   inherit=not no_inherit, keep_checkpoints=keep_checkpoints)
    d: dict[str, Any] = ctl.call(ctl.session().start_run, spec)
    short = short_run_warning(d)
    if short:
        print(f"aiperf: warning: {short}", file=sys.stderr)
    ctl.show(d, lambda: f"run {d['run_id']} {d['state']}: profile {d['profile']}, duration "
                        f"{format_duration(d['duration_s'])}, seed {d['seed']}, precision {d['precision']}, "
                        f"XLA {'on' if d['xla'] else 'off'}"
                        f"{', deterministic' if d['deterministic'] else ''}"
                        f"{'' if d['inherit'] else ', no inheritance'}")


@control_command()
def stop_cmd(
    ctl: Control,
    run: int = RunOpt,
    abort: bool = typer.Option(False, "--abort", help="Abort at once instead of letting workers finish."),
    reason: str = typer.Option("", "--reason", help="Recorded with the run."),
) -> None:
    """Stop the current run (or --run ID)."""
    d: dict[str, Any] = ctl.call(ctl.session().stop_run, run, abort=abort, reason=reason)
    ctl.show(d, lambda: f"run {d['run_id']} {d['state']}")


def short_run_warning(d: dict[str, Any]) -> str | None:
    """Why a run just started cannot be valid, when its duration is below its profile's minimum
    running time (the master refuses that only for official runs: a smoke run may be a quick look)."""
    if d["duration_s"] >= d["min_running_time_s"]:
        return None
    return (f"run {d['run_id']} lasts {format_duration(d['duration_s'])}, less than the {d['profile']} profile's "
            f"minimum running time of {format_duration(d['min_running_time_s'])}: it cannot be valid "
            f"(its running-time rule will fail)")


STATUS_WORKERS = 50  # `aiperf status` lists this many workers; `aiperf workers --limit` shows more


def _current_status(ctl: Control, session: ControlSession, run: int) -> dict[str, Any] | None:
    """The status of --run, or of the current (or latest) run; None before the first run."""
    from aiperf.api.client import ApiError

    if run:
        status: dict[str, Any] = ctl.call(session.run_status, run)
        return status
    try:
        return session.run_status(0)
    except ApiError as exc:
        if exc.code.name == "NOT_FOUND":  # the master has no run yet: status is still worth showing
            return None
        fail_api(ctl.master, exc, "admin token")


def _status_text(d: dict[str, Any]) -> Any:
    from rich.console import Group

    alive = d["workers_alive"]
    head = status_line(d) if d["has_run"] else f"no run yet; {alive} worker{'' if alive == 1 else 's'} alive"
    parts: list[Any] = [head]
    if d.get("checks"):
        parts.append(checks_table(d))
    if not d["registered_workers"]:
        parts[0] = head + "; no worker registered"
    else:
        parts.append(workers_table(d["registered_workers"], d["workers_registered"], d["master_time"]))
    return parts[0] if len(parts) == 1 else Group(*parts)


@control_command()
def status_cmd(
    ctl: Control,
    run: int = RunOpt,
    watch: bool = typer.Option(False, "--watch", help="Follow the run until it is over: a live table on a "
                               "terminal, else one progress line every --interval seconds."),
    interval: float = float_option(DEFAULT_INTERVAL_S, "--interval", span=PROGRESS_SECONDS,
                                   help="With --watch: seconds between progress lines."),
) -> None:
    """Show the state of the current run (or --run ID), its validity checklist and the registered workers."""
    if watch:
        if ctl.as_json:
            fail("--watch prints progress lines, not JSON: drop --json")
        watch_status(ctl, run, interval)
        return
    session = ctl.session()
    st = _current_status(ctl, session, run)
    page: Page = ctl.call(session.workers, limit=STATUS_WORKERS)
    d: dict[str, Any] = st if st is not None else {
        "run_id": None, "state": None, "master_time": page.master_time,
        "workers_alive": ctl.call(session.workers, state=WorkerState.ALIVE, limit=1).total,
    }
    d.update({"has_run": st is not None, "workers_registered": page.total, "registered_workers": page.rows})
    if st is not None:  # the validity checklist, as the scoreboard has it
        board = ctl.call(session.scoreboard, st["run_id"])
        d.update({k: board[k] for k in ("valid", "invalid_reason", "checks")})
    ctl.show(d, lambda: _status_text(d))


@control_command()
def runs_cmd(ctl: Control, limit: int = int_option(100, "--limit", span=PAGE, help="At most this many runs.")
             ) -> None:
    """List the runs, newest first."""
    page: Page = ctl.call(ctl.session().runs, limit=limit)
    rows = page.rows
    ctl.show({"total": page.total, "runs": rows}, lambda: runs_table(rows, page.total) if rows else "no run yet")


@control_command()
def workers_cmd(
    ctl: Control,
    run: int = int_option(0, "--run", span=RUN_ID, help="Only the workers that took part in this run (0: all)."),
    state: Optional[WorkerState] = typer.Option(None, "--state", help="Only workers in this state."),
    limit: int = int_option(1000, "--limit", span=PAGE, help="At most this many workers."),
) -> None:
    """List the registered workers: hardware, state, last heartbeat, current model."""
    page: Page = ctl.call(ctl.session().workers, state=state.value if state else None, run_id=run, limit=limit)
    rows = page.rows
    ctl.show({"total": page.total, "master_time": page.master_time, "workers": rows},
             lambda: workers_table(rows, page.total, page.master_time) if rows else "no worker registered")


@control_command()
def scoreboard_cmd(
    ctl: Control,
    run: int = RunOpt,
    explain: bool = typer.Option(False, "--explain", help="Say what each number means: the formulas with "
                                 "this run's inputs, the validity rules and a glossary."),
    summary: bool = typer.Option(False, "--summary", help="Print one parseable line, AIPERF_RESULT key=value "
                                 "... (run, profile, precision, scores, efficiency, validity, rules version)."),
) -> None:
    """Print the scoreboard of a run, its validity checklist and what each score means."""
    if explain and summary:
        fail("--explain and --summary print different things: give one")
    d: dict[str, Any] = ctl.call(ctl.session().scoreboard, run)
    if summary and not ctl.as_json:
        print(summary_line(d))
        return
    ctl.show(d, lambda: explain_text(d) if explain else scoreboard_view(d))


@control_command()
def models_cmd(
    ctl: Control,
    run: int = RunOpt,
    state: Optional[ModelState] = typer.Option(None, "--state", help="Only models in this state."),
    limit: int = int_option(100, "--limit", span=PAGE, help="At most this many models."),
) -> None:
    """List the models of a run."""
    page: Page = ctl.call(ctl.session().models, run, state=state.value if state else None, limit=limit)
    rows = page.rows
    ctl.show({"run_id": page.run_id, "total": page.total, "models": rows},
             lambda: models_table(page.run_id, page.total, rows))


@control_command(json_option=False)
def report_cmd(
    ctl: Control,
    run: int = RunOpt,
    out: Path = typer.Option(Path("aiperf-report.html"), "--out", "-o", help="HTML file to write."),
) -> None:
    """Write a run's report: scores, validity, FLOPS and error over time, resource use, hardware, best models."""
    if out.is_dir():
        fail(f"--out {out} is a directory; give a file name")
    if not out.parent.exists():
        fail(f"--out {out}: directory {out.parent} does not exist")
    board, text = ctl.call(fetch_report, ctl.session(), run)
    try:
        out.write_text(text, encoding="utf-8")
    except OSError as exc:
        fail(f"cannot write {out}: {exc.strerror}")
    print(f"wrote {out} (run {board['run_id']}, {board['state']}, score {format_flops(board['score'])}"
          f"{', final' if board.get('final') else ', provisional' if board['provisional'] else ''})")


def register(app: typer.Typer) -> None:
    app.command("start")(start_cmd)
    app.command("stop")(stop_cmd)
    app.command("status")(status_cmd)
    app.command("runs")(runs_cmd)
    app.command("workers")(workers_cmd)
    app.command("scoreboard")(scoreboard_cmd)
    app.command("models")(models_cmd)
    app.command("report")(report_cmd)
