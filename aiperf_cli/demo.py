"""`aiperf demo`: the whole benchmark on one machine.

A master on SQLite in this process, one worker as a child process (`python -m
aiperf_cli worker`), a smoke run on the built-in dataset; live progress, then the
audit of the best models' stored weights, the scoreboard and the HTML report. The
worker keeps its checkpoints in --dir (``checkpoints/``), where the children of the
run inherit from them.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import typer

from aiperf.run_spec import RunSpec
from aiperf_cli.control import short_run_warning
from aiperf_cli.explain import summary_line
from aiperf_cli.options import ExitCode, fail, fail_api
from aiperf_cli.options import console as make_console
from aiperf_cli.report import fetch_report
from aiperf_cli.tables import progress_table, scoreboard_view
from aiperf_cli.values import DEMO_MINUTES, PORT, PROGRESS_SECONDS, SEED, Backend, float_option, int_option
from aiperf_cli.watch import DEFAULT_INTERVAL_S, Follow, follow
from aiperf_cli.worker import select_backend, setup_logging

if TYPE_CHECKING:  # pragma: no cover
    from rich.console import Console

    from aiperf.api.control_session import ControlSession

WORKER_STOP_S = 120.0  # how long the worker may take to finish its epoch after SIGTERM


def demo_cmd(
    minutes: float = float_option(5.0, "--minutes", span=DEMO_MINUTES, exclusive_low=True,
                                  help="Length of the smoke run in minutes."),
    directory: Optional[Path] = typer.Option(None, "--dir", help="Where the master keeps its SQLite "
                                             "database and logs (default: a temporary directory)."),
    seed: int = int_option(1, "--seed", span=SEED, help="Run seed."),
    port: int = int_option(0, "--port", span=PORT, help="Master port (0: any free port)."),
    deterministic: bool = typer.Option(False, "--deterministic",
                                       help="Reproducible run: TensorFlow op determinism and seeded rounds "
                                            "(slower; recorded in the run's configuration)."),
    no_inherit: bool = typer.Option(False, "--no-inherit",
                                    help="Children train from scratch instead of from their parent's weights."),
    progress_interval: float = float_option(DEFAULT_INTERVAL_S, "--progress-interval", span=PROGRESS_SECONDS,
                                            help="Seconds between progress lines when the output is not a "
                                                 "terminal (a log, CI)."),
    backend: Backend = typer.Option("tensorflow", "--backend", envvar="AIPERF_BACKEND", case_sensitive=False,
                                    help="The framework the worker trains with and the audit runs on."),
) -> None:
    """Run the benchmark end to end on this machine: master on SQLite, one local worker,
    a smoke run on the built-in dataset; shows progress, audits the best models, then prints the scoreboard."""
    from aiperf.api.calls import ApiError
    from aiperf.api.control_session import ControlSession
    from master.server import MasterConfig, serve

    select_backend(backend.value)  # the worker's, and this process's for the audit
    console = make_console()
    workdir = directory or Path(tempfile.mkdtemp(prefix="aiperf-demo-"))
    try:
        workdir.mkdir(parents=True, exist_ok=True)
        setup_logging("info", workdir / "master.log")
    except OSError as exc:  # a file of that name, no permission
        fail(f"--dir {workdir}: {exc.strerror}")
    console.print(f"[bold]AIPerf demo[/bold]: smoke profile, {minutes:g} min, {backend.value} backend, "
                  f"files in {workdir}")
    try:
        handle = serve(MasterConfig(port=port, host="127.0.0.1", data_dir=workdir, heartbeat_interval_s=2.0,
                                    stop_grace_s=120.0))
    except OSError as exc:  # port taken, directory not writable
        fail(str(exc))
    env = dict(os.environ, AIPERF_MASTER=handle.address, AIPERF_TOKEN=handle.worker_token,
               AIPERF_WORKER_NAME="demo-worker", AIPERF_WORKER_STATE_DIR=str(workdir / "worker-state"),
               AIPERF_CHECKPOINTS=str(workdir / "checkpoints"), AIPERF_BACKEND=backend.value,
               PYTHONUNBUFFERED="1")
    worker_log = open(workdir / "worker.log", "w")
    worker = subprocess.Popen([sys.executable, "-m", "aiperf_cli", "worker", "--exit-when-done"],
                              env=env, stdout=worker_log, stderr=subprocess.STDOUT)
    control = ControlSession.open(handle.address, handle.admin_token)
    board = None
    try:
        board = _run(console, control, workdir, minutes, seed, worker, deterministic, inherit=not no_inherit,
                     interval=progress_interval)
    except ApiError as exc:  # e.g. the seed refused by the master
        fail_api(handle.address, exc, "admin token")
    except KeyboardInterrupt:
        console.print("interrupted: stopping the run")
        control.stop_run(reason="interrupted")
    finally:
        _stop_worker(worker)
        worker_log.close()
        control.close()
        handle.stop()
    console.print(f"logs: {workdir / 'master.log'}, {workdir / 'worker.log'}; database: {workdir / 'master.db'}; "
                  f"checkpoints: {workdir / 'checkpoints'}")
    if board:  # the last line: the result, one key=value line for a log or a script
        print(summary_line(board), flush=True)
    if worker.returncode not in (0, -signal.SIGTERM):
        # the worker's own kind of failure (2, 3, 4) carries over; a crash is a bug
        known = {int(c) for c in (ExitCode.BAD_INPUT, ExitCode.UNAVAILABLE, ExitCode.REFUSED)}
        fail(f"the worker exited with code {worker.returncode}; see {workdir / 'worker.log'}",
             ExitCode(worker.returncode) if worker.returncode in known else ExitCode.BUG)


def _run(console: "Console", control: "ControlSession", workdir: Path, minutes: float, seed: int,
         worker: subprocess.Popen[Any], deterministic: bool = False, inherit: bool = True,
         interval: float = DEFAULT_INTERVAL_S) -> dict[str, Any]:
    """Start the smoke run, watch it to its end, print the scoreboard and write the report;
    returns the scoreboard dict."""
    run = control.start_run(RunSpec(minutes * 60, profile="smoke", seed=seed, min_workers=1,
                                    deterministic=deterministic, inherit=inherit))
    short = short_run_warning(run)
    if short:
        console.print(f"[yellow]note[/yellow]: {short}")
    _watch(console, control, run["run_id"], worker, interval)
    console.print()
    _audit(console, control, run["run_id"], workdir)
    board, page = fetch_report(control, run["run_id"])
    console.print(scoreboard_view(board))
    (workdir / "report.html").write_text(page, encoding="utf-8")
    console.print(f"report: {workdir / 'report.html'}")
    return board


def _audit(console: "Console", control: "ControlSession", run_id: int, workdir: Path) -> None:
    """`aiperf audit` of the run's best models, here: their weights are in the worker's store under
    `workdir` (docs/spec.md, "Audit"); then the node audit of this machine, the demo worker's node
    (docs/spec.md, "Node audits"); the scoreboard and the report then show the verdicts."""
    from aiperf_cli.audit import DEFAULT_TOP, audit_run, node_audit_run
    from aiperf_cli.tables import audits_table
    from aiperf_cli.worker import held_stderr

    console.print("auditing the best models' stored weights on the validation split ...")
    # TensorFlow's start-up lines (it loads here for the first time) are shown only on a failure
    _, rows = held_stderr(lambda: audit_run(control, run_id, DEFAULT_TOP, "digits", None, scratch=workdir),
                          show=lambda exc: exc is not None)
    console.print("node audit of this machine: the model the master drew for its worker, timed here ...")
    _, node_rows = held_stderr(lambda: node_audit_run(control, run_id, socket.gethostname(), "digits", None),
                               show=lambda exc: exc is not None)
    console.print(audits_table(run_id, rows + node_rows))


def _watch(console: "Console", control: "ControlSession", run_id: int, worker: subprocess.Popen[Any],
           interval: float = DEFAULT_INTERVAL_S) -> None:
    """Progress until the run is over: a live table on a terminal, else one line every `interval`
    seconds (a log, CI); a worker that dies stops the run."""
    from aiperf.states import RunState

    def on_board(d: dict[str, Any]) -> None:
        if worker.poll() is not None and d["state"] == RunState.RUNNING:
            control.stop_run(run_id, reason=f"worker exited with code {worker.returncode}")

    if not console.is_terminal:
        follow(control, run_id, Follow(interval_s=interval, on_line=lambda line: print(line, flush=True),
                                       on_board=on_board))
        return
    from rich.live import Live

    with Live(console=console, refresh_per_second=1, transient=False) as live:
        def show(d: dict[str, Any]) -> None:
            live.update(progress_table(d))
            on_board(d)

        follow(control, run_id, Follow(interval_s=interval, on_line=lambda line: None, on_board=show))


def _stop_worker(worker: subprocess.Popen[Any]) -> None:
    """SIGTERM: the worker finishes its epoch; killed if it takes longer than WORKER_STOP_S."""
    if worker.poll() is None:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(timeout=WORKER_STOP_S)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()


def register(app: typer.Typer) -> None:
    app.command("demo")(demo_cmd)
