"""`aiperf worker`: one per accelerator node; trains children while a run is running.

TensorFlow's start-up chatter: TensorFlow and CUDA write a dozen lines to file
descriptor 2 when they load (absl, cudart, CPU features), below Python's
logging. While the dataset is validated (the first thing that imports
TensorFlow) that output is held back: when the dataset is bad, the one-line
error is all that is printed; when it is good, the held lines are written out
unchanged, so a normal start shows everything TensorFlow said (e.g. that no
CUDA driver was found). TF_CPP_MIN_LOG_LEVEL is set before TensorFlow is
imported: 2 (errors only) at --log-level info, since TensorFlow's C++ warnings
repeat every epoch in training (end-of-sequence rendezvous), and TensorFlow's
own errors (out of memory, XLA) still show; 3 (none: its start-up lines about
CUDA plugins are errors too) at warning and error, where a failure still ends
as a Python exception and one line; 0 (everything) with debug. gRPC's C++ log
(GRPC_VERBOSITY) shows errors only unless debug. A value already in the
environment is kept.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Optional, TypeVar

import typer

from aiperf_cli.options import (
    DEFAULT_DATA_DIR,
    ExitCode,
    checked_token,
    fail,
    fail_api,
    master_address,
    read_tls_ca,
    read_token_file,
    token_source,
)
from aiperf_cli.values import CPUS, PORT, PROCESSES, Backend, DatasetFormat, LogLevel, int_option

log = logging.getLogger(__name__)
T = TypeVar("T")

DEFAULT_STATE_DIR = Path("~/.aiperf/worker")


def setup_logging(level: str, path: Path | None = None) -> None:
    """Log lines with times to stderr (or `path`); TensorFlow's C++ logs: see the module's docstring."""
    quiet_tensorflow(level)
    handlers: list[logging.Handler] = [logging.FileHandler(path) if path else logging.StreamHandler()]
    logging.basicConfig(level=getattr(logging, level.upper(), logging.INFO), handlers=handlers, force=True,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")


def quiet_tensorflow(level: str) -> None:
    """TF_CPP_MIN_LOG_LEVEL for `level`, unless the environment sets it; before TensorFlow is imported."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", {"debug": "0", "info": "2"}.get(level, "3"))
    if level != "debug":
        os.environ.setdefault("GRPC_VERBOSITY", "ERROR")


def held_stderr(fn: Callable[[], T], show: Callable[[Optional[BaseException]], bool]) -> T:
    """fn() with file descriptor 2 (where C++ libraries log) captured; afterwards the
    captured bytes are written to stderr when show(the exception fn raised, or None)
    is true, else dropped."""
    sys.stderr.flush()
    saved = os.dup(2)
    raised: Optional[BaseException] = None
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            return fn()
        except BaseException as exc:
            raised = exc
            raise
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            if show(raised):  # back to file descriptor 2, where it was going
                held.seek(0)
                with os.fdopen(os.dup(2), "wb") as out:
                    shutil.copyfileobj(held, out)


def _token(token: Optional[str], token_file: Optional[Path]) -> str:
    """The worker token: --token / AIPERF_TOKEN, else the file of --token-file / AIPERF_TOKEN_FILE
    (the token first: the SLURM script exports both, and the file's path may not exist inside a
    worker's container), else .aiperf/worker.token in the current directory (where `aiperf master
    serve` writes it, as the control commands read .aiperf/admin.token); none: one line, exit 2."""
    from master.rpc.tokens import WORKER_TOKEN_FILE

    if token:
        return checked_token(token, token_source("--token", "AIPERF_TOKEN", token))
    default = DEFAULT_DATA_DIR / WORKER_TOKEN_FILE
    if token_file is None and default.exists():
        token_file = default
    if token_file is not None:
        return read_token_file(token_file, "worker")
    fail(f"no worker token: give --token or --token-file, set AIPERF_TOKEN or AIPERF_TOKEN_FILE, or run "
         f"where {default} is (aiperf master serve writes it)")


def _check_dataset(dataset: Optional[str], dataset_format: Optional[str], log_level: str) -> None:
    """A named dataset must exist in the named format before anything starts; TensorFlow's
    start-up output is held back while it is checked (see the module's docstring)."""
    if dataset is not None and dataset_format is None:
        fail("--dataset needs --dataset-format")
    if dataset_format == "digits" and dataset is not None:  # before Register, which would hold the name
        from worker.data import DatasetError
        from worker.data.spec import DatasetSpec, normalise

        try:
            normalise(DatasetSpec(kind="digits", path=dataset))
        except DatasetError as exc:
            fail(str(exc))
    if dataset_format in (None, "digits"):
        return
    from worker.data import DatasetError, validate

    quiet_tensorflow(log_level)
    try:
        held_stderr(lambda: validate(dataset_format, dataset),
                    show=lambda exc: not isinstance(exc, DatasetError) or log_level == "debug")
    except DatasetError as exc:
        fail(str(exc))


def select_backend(name: str) -> None:
    """Make `name` the process's Keras backend, before anything imports Keras; its framework not
    installed: one line, exit 2 (the master's install leaves both out)."""
    from worker.backend import BackendError, select

    try:
        select(name)
    except BackendError as exc:
        extra = "worker" if name == "tensorflow" else name
        fail(f"{exc}: pip install 'aiperf[{extra}]' (or use the aiperf-worker image)")


def worker_cmd(
    master: str = typer.Option(None, envvar="AIPERF_MASTER", callback=master_address,
                               help="Master address HOST:PORT."),
    token: str = typer.Option(None, envvar="AIPERF_TOKEN", help="Worker token."),
    token_file: Optional[Path] = typer.Option(None, envvar="AIPERF_TOKEN_FILE",
                                              help="Read the worker token from this file (when no --token; "
                                                   "default: .aiperf/worker.token when it exists)."),
    name: Optional[str] = typer.Option(None, envvar="AIPERF_WORKER_NAME",
                                       help="Stable worker name (default: host name)."),
    dataset: Optional[str] = typer.Option(None, envvar="AIPERF_DATASET", help="Dataset path."),
    dataset_format: Optional[DatasetFormat] = typer.Option(
        None, envvar="AIPERF_DATASET_FORMAT", help="Dataset format (default: the profile's)."),
    generator_processes: Optional[int] = int_option(None, "--generator-processes", span=PROCESSES,
                                                    help="Processes generating children "
                                                    "(default: CPUs minus input-pipeline CPUs)."),
    input_pipeline_cpus: int = int_option(1, "--input-pipeline-cpus", span=CPUS,
                                          help="CPUs kept for the input pipeline."),
    exit_when_done: bool = typer.Option(False, help="Exit when the run ends instead of waiting for the next."),
    measure_peak: bool = typer.Option(True, help="Measure each accelerator's dense GEMM rate at start (a few "
                                      "seconds each), so the scoreboard can show the efficiency vs measured."),
    tls_ca: Optional[Path] = typer.Option(None, envvar="AIPERF_TLS_CA", help="CA certificate of the master's TLS."),
    tls: bool = typer.Option(False, help="Use TLS with the system's root certificates."),
    state_dir: Path = typer.Option(DEFAULT_STATE_DIR, envvar="AIPERF_WORKER_STATE_DIR",
                                   help="Where the worker keeps its credential (mode 0600), to get its name "
                                   "and id back after a restart, the checkpoints it could not delete "
                                   "until the master has them, and the deletes it was doing."),
    checkpoints: Optional[str] = typer.Option(
        None, "--checkpoints", envvar="AIPERF_CHECKPOINTS",
        help="Checkpoint store URL: a directory (shared by all workers in a cluster) or an fsspec URL such as "
             "s3://bucket/prefix (needs aiperf\\[object-store]); default: checkpoints under --state-dir."),
    log_level: LogLevel = typer.Option("info", case_sensitive=False, help="Log level (debug also shows "
                                       "TensorFlow's C++ logs)."),
    backend: Backend = typer.Option("tensorflow", "--backend", envvar="AIPERF_BACKEND", case_sensitive=False,
                                    help="The framework that trains, through Keras 3 (recorded at Register; "
                                         "jax needs aiperf\\[jax] or JAX installed)."),
    health_port: Optional[int] = int_option(None, "--health-port", span=PORT, envvar="AIPERF_WORKER_HEALTH_PORT",
                                            help="Serve GET /healthz on this port (all interfaces) for a "
                                                 "liveness probe: 200 while the heartbeat loop turns, else 503 "
                                                 "(default: not served)."),
    phase_reports: bool = typer.Option(False, "--phase-reports", envvar="AIPERF_PHASE_REPORTS",
                                       help="Also report after each round's first training step and each epoch's "
                                            "last, so the master's timestamps delimit the training steps "
                                            "(for benchmarks: benchmarks/gpu_e2e.py)."),
) -> None:
    """Run a worker: register with the master and train children while a run is running."""
    if not master:
        fail("no master address: give --master HOST:PORT or set AIPERF_MASTER")
    token = _token(token, token_file)
    root = read_tls_ca(tls_ca)
    select_backend(backend.value)
    kind = dataset_format.value if dataset_format else None
    _check_dataset(dataset, kind, log_level.value)
    _run_agent(master, token, name, dataset, kind, root, log_level.value, tls=tls,
               generator_processes=generator_processes, input_pipeline_cpus=input_pipeline_cpus,
               exit_when_run_ends=exit_when_done, measure_peak=measure_peak,
               state_dir=state_dir.expanduser(), health_port=health_port, checkpoints=checkpoints,
               phase_reports=phase_reports)


def _run_agent(master: str, token: str, name: Optional[str], dataset: Optional[str], kind: Optional[str],
               root: Optional[bytes], log_level: str, health_port: Optional[int] = None, **config: Any) -> None:
    """Run the agent until the run ends or a signal stops it; the master's refusal: one line,
    with its exit code (3: unreachable, 4: refused)."""
    from aiperf.api.client import ApiError
    from worker.agent import Agent, AgentConfig, default_name
    from worker.checkpoints import CheckpointError
    from worker.data import DatasetError

    setup_logging(log_level)
    try:
        agent = Agent(AgentConfig(master=master, token=token, name=name or default_name(), dataset_kind=kind,
                                  dataset_path=dataset, root_certificates=root, **config))
    except CheckpointError as exc:  # a bad --checkpoints URL, or fsspec missing for it
        fail(str(exc), ExitCode.BAD_INPUT)

    def on_signal(signum: int, _frame: Any) -> None:
        name = signal.Signals(signum).name
        log.info("event=signal signal=%s: stopping within a batch, then the last report", name)
        agent.stop(reason=name)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    health = _health_server(agent, health_port)
    try:
        agent.run()
    except ApiError as exc:
        fail_api(master, exc, "worker token")
    except DatasetError as exc:  # e.g. an official run on a worker started without --dataset
        fail(str(exc), ExitCode.BAD_INPUT)
    finally:
        if health is not None:
            health.stop()


def _health_server(agent: Any, port: Optional[int]) -> Any:
    """worker/health.py's /healthz on `port` (None: not served); a taken port: one line, exit 2."""
    if port is None:
        return None
    from worker.health import HealthServer

    try:
        return HealthServer(agent.health_state, port).start()
    except OSError as exc:
        fail(f"cannot serve the health endpoint on port {port}: {exc.strerror or exc}")


def register(app: typer.Typer) -> None:
    app.command("worker")(worker_cmd)
