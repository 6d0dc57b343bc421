"""`aiperf worker`: one per accelerator node; trains children while a run is running."""

from __future__ import annotations

import logging
import os
import signal
from pathlib import Path
from typing import Any, Optional

import typer

from aiperf.profiles import DATASET_KINDS
from cli.options import fail, read_tls_ca

log = logging.getLogger(__name__)

DEFAULT_STATE_DIR = Path("~/.aiperf/worker")


def setup_logging(level: str, path: Path | None = None) -> None:
    """Log lines with times to stderr (or `path`); TensorFlow's C++ chatter stays quiet."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    handlers: list[logging.Handler] = [logging.FileHandler(path) if path else logging.StreamHandler()]
    logging.basicConfig(level=getattr(logging, level.upper(), logging.INFO), handlers=handlers, force=True,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")


def _token(token: Optional[str], token_file: Optional[Path]) -> str:
    """The worker token from --token-file, else --token / AIPERF_TOKEN; none: one line, exit 2."""
    if token_file is not None:
        try:
            token = token_file.read_text().strip()
        except OSError as exc:
            fail(f"cannot read token file {token_file}: {exc.strerror}")
    if not token:
        fail("no worker token: give --token, --token-file or set AIPERF_TOKEN")
    return token


def _check_dataset(dataset: Optional[str], dataset_format: Optional[str]) -> None:
    """A named dataset must exist in the named format before anything starts."""
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
    state_dir: Path = typer.Option(DEFAULT_STATE_DIR, envvar="AIPERF_WORKER_STATE_DIR",
                                   help="Where the worker keeps its credential (mode 0600), to get its name "
                                   "and id back after a restart."),
    log_level: str = typer.Option("info", help="debug | info | warning"),
) -> None:
    """Run a worker: register with the master and train children while a run is running."""
    from aiperf.api.client import ApiError
    from worker.agent import Agent, AgentConfig, default_name
    from worker.data import DatasetError

    if not master:
        fail("no master address: give --master HOST:PORT or set AIPERF_MASTER")
    token = _token(token, token_file)
    _check_dataset(dataset, dataset_format)
    root = read_tls_ca(tls_ca)
    setup_logging(log_level)
    agent = Agent(AgentConfig(master=master, token=token, name=name or default_name(),
                              dataset_kind=dataset_format, dataset_path=dataset,
                              generator_processes=generator_processes,
                              input_pipeline_cpus=input_pipeline_cpus, exit_when_run_ends=exit_when_done,
                              xla=xla, root_certificates=root, tls=tls, measure_peak=measure_peak,
                              state_dir=state_dir.expanduser()))

    def on_signal(signum: int, _frame: Any) -> None:
        log.info("event=signal signal=%d: finishing the epoch in flight", signum)
        agent.stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        agent.run()
    except ApiError as exc:
        fail(f"master {master}: {exc}")
    except DatasetError as exc:  # e.g. an official run on a worker started without --dataset
        fail(str(exc))


def register(app: typer.Typer) -> None:
    app.command("worker")(worker_cmd)
