"""`aiperf worker` (one per accelerator node) and `aiperf demo` (everything on one machine)."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

import typer

from aiperf.cli import fail, read_tls_ca
from aiperf.profiles import DATASET_KINDS

log = logging.getLogger(__name__)



def register(app: typer.Typer) -> None:
    app.command("worker")(worker_cmd)
    app.command("demo")(demo_cmd)


def _setup_logging(level: str, path: Path | None = None) -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    handlers: list[logging.Handler] = [logging.FileHandler(path) if path else logging.StreamHandler()]
    logging.basicConfig(level=getattr(logging, level.upper(), logging.INFO), handlers=handlers, force=True,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")


def worker_cmd(
    master: str = typer.Option(None, envvar="AIPERF_MASTER", help="Master address HOST:PORT."),
    token: str = typer.Option(None, envvar="AIPERF_TOKEN", help="Worker token."),
    token_file: Optional[Path] = typer.Option(None, help="Read the worker token from this file."),
    name: Optional[str] = typer.Option(None, envvar="AIPERF_WORKER_NAME",
                                       help="Stable worker name (default: host name)."),
    dataset: Optional[str] = typer.Option(None, envvar="AIPERF_DATASET", help="Dataset path."),
    dataset_format: Optional[str] = typer.Option(
        None, envvar="AIPERF_DATASET_FORMAT",
        help="imagenet-tfrecord | imagenet-folder | cifar10 | digits (default: the profile's)."),
    generator_processes: Optional[int] = typer.Option(None, help="Processes generating children "
                                                      "(default: CPUs minus input-pipeline CPUs)."),
    input_pipeline_cpus: int = typer.Option(1, help="CPUs kept for the input pipeline."),
    exit_when_done: bool = typer.Option(False, help="Exit when the run ends instead of waiting for the next."),
    measure_peak: bool = typer.Option(True, help="Measure each accelerator's dense GEMM rate at start (a few "
                                      "seconds each), so the scoreboard can show efficiency."),
    xla: bool = typer.Option(False, help="Compile training steps with XLA."),
    tls_ca: Optional[Path] = typer.Option(None, help="CA certificate of the master's TLS."),
    tls: bool = typer.Option(False, help="Use TLS with the system's root certificates."),
    log_level: str = typer.Option("info", help="debug | info | warning"),
) -> None:
    """Run a worker: register with the master and train children while a run is running."""
    from worker.agent import Agent, AgentConfig, default_name

    if not master:
        fail("no master address: give --master HOST:PORT or set AIPERF_MASTER")
    if token_file is not None:
        try:
            token = token_file.read_text().strip()
        except OSError as exc:
            fail(f"cannot read token file {token_file}: {exc.strerror}")
    if not token:
        fail("no worker token: give --token, --token-file or set AIPERF_TOKEN")
    if dataset_format is not None and dataset_format not in DATASET_KINDS:
        fail(f"unknown dataset format {dataset_format!r} (expected one of {', '.join(DATASET_KINDS)})")
    if dataset is not None and dataset_format is None:
        fail("--dataset needs --dataset-format")
    if dataset_format not in (None, "digits"):
        from worker.data import DatasetError, validate

        try:
            validate(dataset_format, dataset)
        except DatasetError as exc:
            fail(str(exc))
    root = read_tls_ca(tls_ca)
    _setup_logging(log_level)
    agent = Agent(AgentConfig(master=master, token=token, name=name or default_name(),
                              dataset_kind=dataset_format, dataset_path=dataset,
                              generator_processes=generator_processes,
                              input_pipeline_cpus=input_pipeline_cpus, exit_when_run_ends=exit_when_done,
                              xla=xla, root_certificates=root, tls=tls, measure_peak=measure_peak))

    def on_signal(signum, _frame) -> None:
        log.info("event=signal signal=%d: finishing the epoch in flight", signum)
        agent.stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    from aiperf.api.client import ApiError
    from worker.data import DatasetError

    try:
        agent.run()
    except ApiError as exc:
        fail(f"master {master}: {exc}")
    except DatasetError as exc:  # e.g. an official run on a worker started without --dataset
        fail(str(exc))


def demo_cmd(
    minutes: float = typer.Option(5.0, help="Length of the smoke run in minutes."),
    directory: Optional[Path] = typer.Option(None, "--dir", help="Where the master keeps its SQLite "
                                             "database and logs (default: a temporary directory)."),
    seed: int = typer.Option(1, help="Run seed."),
    port: int = typer.Option(0, help="Master port (0: any free port)."),
) -> None:
    """Run the benchmark end to end on this machine: master on SQLite, one local worker,
    a smoke run on the built-in dataset; shows progress, then prints the scoreboard."""
    from rich.console import Console

    from aiperf.api.client import ControlClient
    from master.server import serve

    if minutes <= 0:
        fail(f"--minutes must be positive, got {minutes:g}")
    console = Console()
    workdir = directory or Path(tempfile.mkdtemp(prefix="aiperf-demo-"))
    workdir.mkdir(parents=True, exist_ok=True)
    _setup_logging("info", workdir / "master.log")
    console.print(f"[bold]AIPerf demo[/bold]: smoke profile, {minutes:g} min, files in {workdir}")
    try:
        handle = serve(port=port, host="127.0.0.1", data_dir=workdir, heartbeat_interval_s=2.0,
                       stop_grace_s=120.0)
    except OSError as exc:  # port taken, directory not writable
        fail(str(exc))
    env = dict(os.environ, AIPERF_MASTER=handle.address, AIPERF_TOKEN=handle.worker_token,
               AIPERF_WORKER_NAME="demo-worker", PYTHONUNBUFFERED="1")
    worker_log = open(workdir / "worker.log", "w")
    worker = subprocess.Popen([sys.executable, "-m", "aiperf", "worker", "--exit-when-done"],
                              env=env, stdout=worker_log, stderr=subprocess.STDOUT)
    control = ControlClient(handle.address, handle.admin_token)
    try:
        run = control.start_run(duration_s=minutes * 60, profile="smoke", seed=seed, min_workers=1)
        _watch(console, control, run.config.run_id, worker)
        console.print()
        from master.cli import report_html, scoreboard_table

        board, page = report_html(control, run.config.run_id)
        console.print(scoreboard_table(board))
        (workdir / "report.html").write_text(page, encoding="utf-8")
        console.print(f"report: {workdir / 'report.html'}")
    except KeyboardInterrupt:
        console.print("interrupted: stopping the run")
        control.stop_run(reason="interrupted")
    finally:
        if worker.poll() is None:
            worker.send_signal(signal.SIGTERM)
            try:
                worker.wait(timeout=120)
            except subprocess.TimeoutExpired:
                worker.kill()
        worker_log.close()
        control.close()
        handle.stop()
    console.print(f"logs: {workdir / 'master.log'}, {workdir / 'worker.log'}; database: {workdir / 'master.db'}")
    if worker.returncode not in (0, -signal.SIGTERM):
        fail(f"the worker exited with code {worker.returncode}; see {workdir / 'worker.log'}")


def _watch(console, control, run_id: int, worker: subprocess.Popen) -> None:
    """Live progress until the run is over."""
    from rich.live import Live
    from rich.table import Table

    from aiperf.api import aiperf_pb2 as pb
    from aiperf.api.enums import RUN_STATES

    def view(sb) -> Table:
        t = Table(title="AIPerf smoke run (unofficial)", show_header=False)
        t.add_row("state", RUN_STATES.get(sb.run.state, "?"))
        t.add_row("elapsed", f"{sb.elapsed_s:6.0f} s of {sb.run.config.duration_s:.0f} s")
        t.add_row("models done", str(sb.models_done))
        t.add_row("FLOPS", f"{sb.flops:.3e}")
        t.add_row("best accuracy", f"{sb.best_accuracy:.3f}")
        t.add_row("score", f"{sb.score:.3e}{' (provisional)' if sb.provisional else ''}")
        return t

    with Live(console=console, refresh_per_second=1, transient=False) as live:
        while True:
            sb = control.scoreboard(run_id)
            live.update(view(sb))
            if sb.run.state in (pb.RUN_FINISHED, pb.RUN_ABORTED):
                return
            if worker.poll() is not None and sb.run.state == pb.RUN_RUNNING:
                control.stop_run(run_id, reason=f"worker exited with code {worker.returncode}")
            time.sleep(2.0)
