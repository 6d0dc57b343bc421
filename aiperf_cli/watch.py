"""Following a run: one progress line every N seconds where there is no terminal (a log,
CI, a Kubernetes Job), and waiting for its end.

    aiperf wait [--run ID] [--timeout 2h] [--interval 30] [--report FILE|DIR] [--scoreboard]
    aiperf status --watch [--interval 30]

`aiperf wait` returns when the run is over (finished or aborted): exit 0 when it is
valid, 5 (ExitCode.INVALID) when it is not, 6 (ExitCode.TIMEOUT) when --timeout
passed first; a master that does not answer the first call is exit 3 at once, one
that stops answering later (a restart) is retried until the timeout (then 3).
"""

from __future__ import annotations

import datetime
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import typer

from aiperf import units
from aiperf.api.control_session import ControlSession
from aiperf.states import ModelState
from aiperf_cli.explain import summary_line, validity_brief
from aiperf_cli.format import parse_duration
from aiperf_cli.options import Control, ExitCode, control_command, fail, fail_api
from aiperf_cli.values import PROGRESS_SECONDS, RUN_ID, float_option, int_option

DEFAULT_INTERVAL_S = 30.0  # a progress line this often: a 1-hour run writes 120 lines
POLL_S = 2.0  # how often the scoreboard is read; a run's end is seen within this
_TRANSIENT = ("UNAVAILABLE", "DEADLINE_EXCEEDED")


def progress_line(d: dict[str, Any], now: Optional[float] = None) -> str:
    """One line of a scoreboard dict: time, state, elapsed, models, FLOPS, score, accuracy, validity."""
    stamp = datetime.datetime.fromtimestamp(time.time() if now is None else now, datetime.timezone.utc)
    models = d["models"]
    acc = d["best_accuracy"]
    label = "final" if d.get("final") else "provisional" if d["provisional"] else "so far"
    return (f"{stamp:%H:%M:%SZ} run {d['run_id']} {d['state']}: elapsed {units.duration(d['elapsed_s'])} of "
            f"{units.duration(d['duration_s'])}; models {models.get(ModelState.DONE, 0)} done, "
            f"{models.get(ModelState.TRAINING, 0)} training; FLOPS {units.flops(d['flops'])}; score "
            f"{units.flops(d['score'])} ({label}); best accuracy {'-' if acc is None else f'{acc:.4f}'}; "
            f"valid: {validity_brief(d)}")


@dataclass
class Follow:
    """How to follow a run: read its scoreboard every `poll_s`, call `on_line` with a progress
    line every `interval_s` (and at the end), give up after `timeout_s` (None: never)."""

    interval_s: float = DEFAULT_INTERVAL_S
    timeout_s: Optional[float] = None
    poll_s: float = POLL_S
    on_line: Callable[[str], None] = print
    on_board: Callable[[dict[str, Any]], None] = lambda d: None
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    unreachable: list[Any] = field(default_factory=list)  # the errors of a master that did not answer


def follow(session: ControlSession, run: int, how: Follow) -> Optional[dict[str, Any]]:
    """Follow the run (0: the current or latest one, fixed at the first answer) until it is over;
    its last scoreboard dict, or None when the timeout passed first (`how.unreachable` then
    holds the error of a master that did not answer at the end)."""
    from aiperf.api.client import ApiError

    start = how.clock()
    last_line = None
    while True:
        try:
            d = session.scoreboard(run)
            how.unreachable.clear()
        except ApiError as exc:
            if exc.code.name not in _TRANSIENT or last_line is None:
                raise  # a master never reached is a wrong address or one not started: say so at once
            how.unreachable[:] = [exc]  # retried: a master restarting comes back
            d = None
        now = how.clock()
        if d is not None:
            run = d["run_id"]
            how.on_board(d)
            if d["final"] or last_line is None or now - last_line >= how.interval_s:
                how.on_line(progress_line(d))
                last_line = now
            if d["final"]:
                return d
        if how.timeout_s is not None and now - start >= how.timeout_s:
            return None
        wait = how.poll_s if how.timeout_s is None else min(how.poll_s, max(0.0, start + how.timeout_s - now))
        how.sleep(wait)


def _flush_print(line: str) -> None:
    print(line, flush=True)  # a pipe buffers: a Job's log would show nothing until the end


@control_command(json_option=False)
def wait_cmd(
    ctl: Control,
    run: int = int_option(0, "--run", span=RUN_ID, help="Run id (0: the current or most recent run)."),
    timeout: Optional[str] = typer.Option(None, "--timeout", help="Give up after this long, e.g. 90m, 2h "
                                          "(exit 6; default: wait for the run's end)."),
    interval: float = float_option(DEFAULT_INTERVAL_S, "--interval", span=PROGRESS_SECONDS,
                                   help="Seconds between progress lines."),
    report: Optional[Path] = typer.Option(None, "--report", help="When the run is over, write its HTML "
                                          "report to this file, or to aiperf-run-ID.html in this directory "
                                          "(valid or not)."),
    scoreboard: bool = typer.Option(False, "--scoreboard", help="When the run is over, print its scoreboard "
                                    "(with the validity checklist) before the result line."),
) -> None:
    """Wait for a run to end, printing a progress line every --interval seconds; exit 0 when it
    is valid, 5 when it ended invalid, 6 when --timeout passed first."""
    try:
        timeout_s = parse_duration(timeout) if timeout is not None else None
    except ValueError as exc:
        fail(f"--timeout: {exc}")
    if report is not None and not report.is_dir() and not report.parent.is_dir():
        fail(f"--report {report}: directory {report.parent} does not exist")
    how = Follow(interval_s=interval, timeout_s=timeout_s, on_line=_flush_print)
    session = ctl.session()
    d = ctl.call(follow, session, run, how)
    if d is None:
        if how.unreachable:
            fail_api(ctl.master, how.unreachable[0], "admin token")
        fail(f"the run did not end within {timeout}", ExitCode.TIMEOUT)
    if report is not None:
        _write_report(ctl, session, d["run_id"], report / f"aiperf-run-{d['run_id']}.html" if report.is_dir()
                      else report)
    if scoreboard:
        from aiperf_cli.options import console
        from aiperf_cli.tables import scoreboard_view

        console().print(scoreboard_view(d))
    print(summary_line(d), flush=True)
    if not d["valid"]:
        fail(f"run {d['run_id']} {d['state']} and is not valid: {d['invalid_reason']}", ExitCode.INVALID)


def _write_report(ctl: Control, session: ControlSession, run_id: int, out: Path) -> None:
    from aiperf_cli.report import fetch_report

    _, text = ctl.call(fetch_report, session, run_id)
    try:
        out.write_text(text, encoding="utf-8")
    except OSError as exc:
        fail(f"cannot write {out}: {exc.strerror}")
    print(f"wrote {out}", flush=True)


def watch_status(ctl: Control, run: int, interval: float) -> None:
    """`aiperf status --watch`: progress lines until the run is over (a live table on a terminal)."""
    session = ctl.session()
    if not sys.stdout.isatty():
        ctl.call(follow, session, run, Follow(interval_s=interval, on_line=_flush_print))
        return
    from rich.live import Live

    from aiperf_cli.options import console
    from aiperf_cli.tables import progress_table

    with Live(console=console(), refresh_per_second=1, transient=False) as live:
        ctl.call(follow, session, run, Follow(interval_s=interval, on_line=lambda line: None,
                                              on_board=lambda d: live.update(progress_table(d))))


def register(app: typer.Typer) -> None:
    app.command("wait")(wait_cmd)
