"""Commands of the master and of run control.

    aiperf master serve --db URL --port N [--metrics-port N] [--data-dir DIR] ...
    aiperf start --duration 1h [--profile official|smoke] [--seed N] [--precision P]
    aiperf stop [--run ID] [--abort]
    aiperf status [--run ID] [--json]
    aiperf scoreboard [--run ID] [--json]
    aiperf models [--run ID] [--state S] [--json]

The master's address and tokens come from options or AIPERF_MASTER,
AIPERF_TOKEN, AIPERF_ADMIN_TOKEN; without a token the admin token file in
the data directory (written by `aiperf master serve`) is used.
"""

from __future__ import annotations

import json
import logging
import re
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import typer

from aiperf.cli import fail, read_tls_ca

if TYPE_CHECKING:  # pragma: no cover
    from rich.table import Table

master_app = typer.Typer(help="Run the master service.", no_args_is_help=True)

DEFAULT_MASTER = "127.0.0.1:50051"
DEFAULT_DATA_DIR = Path(".aiperf")
_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}

MasterOpt = typer.Option(DEFAULT_MASTER, "--master", envvar="AIPERF_MASTER", help="Master address host:port.")
AdminTokenOpt = typer.Option(None, "--admin-token", envvar="AIPERF_ADMIN_TOKEN",
                             help="Admin token (default: <data-dir>/admin.token).")
DataDirOpt = typer.Option(DEFAULT_DATA_DIR, "--data-dir", help="Where the master keeps its token files.")
TlsCaOpt = typer.Option(None, "--tls-ca", envvar="AIPERF_TLS_CA", help="CA certificate: connect with TLS.")
JsonOpt = typer.Option(False, "--json", help="Print one JSON object.")
RunOpt = typer.Option(0, "--run", help="Run id (default: the current or most recent run).")


def parse_duration(text: str) -> float:
    """'1h', '90m', '1h30m', '3600', '2.5h' -> seconds; ValueError otherwise."""
    s = text.strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", s):
        value = float(s)
    else:
        parts = re.findall(r"(\d+(?:\.\d+)?)([smhd])", s)
        if not parts or "".join(n + u for n, u in parts) != s:
            raise ValueError(f"bad duration {text!r}: use e.g. 90s, 30m, 1h, 1h30m")
        value = sum(float(n) * _UNITS[u] for n, u in parts)
    if value <= 0:
        raise ValueError(f"bad duration {text!r}: must be positive")
    return value


def _admin_token(token: Optional[str], data_dir: Path) -> str:
    if token:
        return token
    path = data_dir / "admin.token"
    if path.exists():
        return path.read_text().strip()
    fail(f"no admin token: pass --admin-token, set AIPERF_ADMIN_TOKEN, or run where {path} exists")


def _control(master: str, token: Optional[str], data_dir: Path, tls_ca: Optional[Path]) -> Any:
    from aiperf.api.client import ControlClient

    # retries are logged by the client; the CLI reports the final error itself
    logging.getLogger("aiperf.api.client").addHandler(logging.NullHandler())
    logging.getLogger("aiperf.api.client").propagate = False
    root = read_tls_ca(tls_ca)
    return ControlClient(master, _admin_token(token, data_dir), root_certificates=root, retries=1)


def _call(master: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
    import grpc

    from aiperf.api.client import ApiError

    try:
        return fn(*args, **kwargs)
    except ApiError as exc:
        if exc.code == grpc.StatusCode.UNAVAILABLE:
            fail(f"master {master} unreachable ({exc.details.splitlines()[0] if exc.details else 'no answer'})")
        if exc.code == grpc.StatusCode.UNAUTHENTICATED:
            fail(f"master {master} refused the admin token: {exc.details}")
        fail(f"{exc.details} ({exc.code.name.lower()})")


def format_flops(value: float, unit: str = "FLOPS") -> str:
    for factor, prefix in ((1e18, "E"), (1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.3f} {prefix}{unit}"
    return f"{value:.3f} {unit}"


def format_duration(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


# ---------------------------------------------------------------- master serve


@master_app.command("serve")
def serve_cmd(
    db: Optional[str] = typer.Option(None, "--db", envvar="AIPERF_DB",
                                     help="SQLAlchemy URL (default: SQLite in the data dir)."),
    port: int = typer.Option(50051, "--port", help="gRPC port (0: any free port)."),
    host: str = typer.Option("[::]", "--host", help="Address to listen on."),
    metrics_port: Optional[int] = typer.Option(None, "--metrics-port", help="Prometheus HTTP port."),
    data_dir: Path = typer.Option(DEFAULT_DATA_DIR, "--data-dir", help="Token files and the default database."),
    heartbeat_interval: float = typer.Option(5.0, "--heartbeat-interval", help="Seconds between worker heartbeats."),
    stop_grace: float = typer.Option(300.0, "--stop-grace",
                                     help="Seconds a stopping run waits for workers to finish."),
    tls_cert: Optional[Path] = typer.Option(None, "--tls-cert", help="TLS certificate (PEM)."),
    tls_key: Optional[Path] = typer.Option(None, "--tls-key", help="TLS private key (PEM)."),
    token_file: Optional[Path] = typer.Option(None, "--token-file", help="Worker token file."),
    admin_token_file: Optional[Path] = typer.Option(None, "--admin-token-file", help="Admin token file."),
    log_level: str = typer.Option("info", "--log-level", help="debug, info, warning or error."),
) -> None:
    """Serve the master: gRPC worker + control API, health, metrics."""
    from master.server import serve
    from master.store import SchemaError

    level = getattr(logging, log_level.upper(), None)
    if not isinstance(level, int):
        fail(f"bad log level {log_level!r}")
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    if heartbeat_interval <= 0:
        fail(f"--heartbeat-interval must be positive, got {heartbeat_interval}")
    if (tls_cert is None) != (tls_key is None):
        fail("TLS needs both --tls-cert and --tls-key")
    for path in (tls_cert, tls_key):
        if path is not None and not path.is_file():
            fail(f"no such file: {path}")
    try:
        handle = serve(
            db, port=port, host=host, data_dir=data_dir, heartbeat_interval_s=heartbeat_interval,
            stop_grace_s=stop_grace, metrics_port=metrics_port, tls_cert=tls_cert, tls_key=tls_key,
            worker_token_file=token_file, admin_token_file=admin_token_file,
        )
    except SchemaError as exc:
        fail(str(exc))
    except (OSError, ValueError) as exc:
        fail(str(exc))
    except Exception as exc:  # database unreachable and friends: one line, not a traceback
        import sqlalchemy.exc

        if isinstance(exc, sqlalchemy.exc.SQLAlchemyError):
            fail(f"database {db}: {str(exc).splitlines()[0]}")
        raise
    for kind, path in handle.tokens.generated.items():
        token = handle.worker_token if kind == "worker" else handle.admin_token
        print(f"generated {kind} token (saved in {path}): {token}", flush=True)
    print(f"master listening on {handle.address} (tls={'on' if handle.tls else 'off'})"
          + (f", metrics on :{handle.metrics_port}" if handle.metrics_port is not None else ""), flush=True)

    def _stop(_sig: int, _frame: Any) -> None:
        handle.stop()

    signal.signal(signal.SIGTERM, _stop)
    try:
        handle.wait()
    except KeyboardInterrupt:
        pass
    finally:
        handle.stop()


# ---------------------------------------------------------------- run control


def start_cmd(
    duration: str = typer.Option(..., "--duration", help="Run length, e.g. 1h, 90m, 3600 (official: >= 1h)."),
    profile: str = typer.Option("official", "--profile", help="official or smoke."),
    seed: int = typer.Option(0, "--seed", help="Run seed."),
    precision: str = typer.Option("fp32", "--precision",
                                  help="fp32, mixed_fp16, mixed_bf16, fp16, bf16 (fp8/int8 make the run invalid)."),
    max_models: int = typer.Option(0, "--max-models", help="Stop accepting models after this many (0: no limit)."),
    max_rounds: int = typer.Option(0, "--max-rounds", help="Rounds per worker (0: no limit)."),
    max_epochs: int = typer.Option(0, "--max-epochs", help="Epochs per round cap (0: profile default)."),
    warmup_rounds: int = typer.Option(0, "--warmup-rounds", help="Warm-up rounds per worker (0: 5)."),
    min_workers: int = typer.Option(0, "--min-workers", help="Stay pending until this many workers are alive."),
    allow_concurrent: bool = typer.Option(False, "--allow-concurrent", help="Allow a second active run."),
    master: str = MasterOpt,
    admin_token: Optional[str] = AdminTokenOpt,
    data_dir: Path = DataDirOpt,
    tls_ca: Optional[Path] = TlsCaOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Start a timed run."""
    from aiperf.api.client import run_info_to_dict
    from aiperf.api.enums import PRECISION_VALUES, PROFILE_VALUES

    try:
        seconds = parse_duration(duration)
    except ValueError as exc:
        fail(str(exc))
    if profile not in PROFILE_VALUES:
        fail(f"unknown profile {profile!r}: use official or smoke")
    if precision not in PRECISION_VALUES:
        fail(f"unknown precision {precision!r}: use one of {', '.join(PRECISION_VALUES)}")
    for name, v in (("--seed", seed), ("--max-models", max_models), ("--max-rounds", max_rounds),
                    ("--max-epochs", max_epochs), ("--warmup-rounds", warmup_rounds), ("--min-workers", min_workers)):
        if v < 0:
            fail(f"{name} must be >= 0, got {v}")
    client = _control(master, admin_token, data_dir, tls_ca)
    run = _call(master, client.start_run, seconds, profile=profile, seed=seed, precision=precision,
                max_models=max_models, max_rounds_per_worker=max_rounds, max_epochs_per_round=max_epochs,
                warmup_rounds=warmup_rounds, min_workers=min_workers, allow_concurrent=allow_concurrent)
    d = run_info_to_dict(run)
    if as_json:
        print(json.dumps(d))
    else:
        print(f"run {d['run_id']} {d['state']}: profile {d['profile']}, duration {format_duration(d['duration_s'])}, "
              f"seed {d['seed']}, precision {d['precision']}")


def stop_cmd(
    run: int = RunOpt,
    abort: bool = typer.Option(False, "--abort", help="Abort at once instead of letting workers finish."),
    reason: str = typer.Option("", "--reason", help="Recorded with the run."),
    master: str = MasterOpt,
    admin_token: Optional[str] = AdminTokenOpt,
    data_dir: Path = DataDirOpt,
    tls_ca: Optional[Path] = TlsCaOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Stop the current run (or --run ID)."""
    from aiperf.api.client import run_info_to_dict

    client = _control(master, admin_token, data_dir, tls_ca)
    info = _call(master, client.stop_run, run, abort=abort, reason=reason)
    d = run_info_to_dict(info)
    print(json.dumps(d) if as_json else f"run {d['run_id']} {d['state']}")


def status_cmd(
    run: int = RunOpt,
    master: str = MasterOpt,
    admin_token: Optional[str] = AdminTokenOpt,
    data_dir: Path = DataDirOpt,
    tls_ca: Optional[Path] = TlsCaOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Show the state of the current run."""
    from aiperf.api.client import run_status_to_dict

    client = _control(master, admin_token, data_dir, tls_ca)
    d = run_status_to_dict(_call(master, client.run_status, run))
    if as_json:
        print(json.dumps(d))
        return
    models = ", ".join(f"{k} {v}" for k, v in d["models"].items() if v) or "none"
    remaining = ""
    if d["state"] == "running" and d["deadline"]:
        remaining = f", {format_duration(max(0.0, d['deadline'] - d['master_time']))} left"
    print(f"run {d['run_id']} {d['state']} ({d['profile']}, seed {d['seed']}): elapsed {format_duration(d['elapsed_s'])}"
          f"{remaining}; workers alive {d['workers_alive']}, taken part {d['workers']}; models: {models}")


def scoreboard_table(d: dict[str, Any]) -> "Table":
    """The readable scoreboard (rich) of `scoreboard_to_dict` output."""
    from rich.table import Table

    title = f"AIPerf run {d['run_id']} ({d['profile']}{'' if d['official'] else ', unofficial'}) - {d['state']}"
    table = Table(title=title, show_header=False)
    table.add_column("item", style="bold")
    table.add_column("value")
    score_label = "Score (provisional)" if d["provisional"] else "Score"
    rows = [
        (score_label, format_flops(d["score"])),
        ("Regulated score", format_flops(d["regulated_score"])),
        ("Valid FLOPS", format_flops(d["valid_flops"])),
        ("FLOPS now", format_flops(d["flops"])),
        ("Error", f"{d['error']:.4f}" + (f" (best accuracy {d['best_accuracy']:.4f})" if d["best_accuracy"] is not None else "")),
        ("Valid", "yes" if d["valid"] else f"no: {d['invalid_reason']}"),
        ("Efficiency", f"{d['efficiency']:.2%} of {format_flops(d['peak_flops'])}" if d["efficiency"] else "peak unknown"),
        ("Elapsed", f"{format_duration(d['elapsed_s'])} (minimum {format_duration(d['min_running_time_s'])})"),
        ("Workers", f"{d['workers']} ({d['workers_alive']} alive)"),
        ("Accelerators", str(d["accelerators"])),
        ("Models trained", f"{d['models_done']} done"
         + "".join(f", {v} {k}" for k, v in d["models"].items() if k != "done" and v)),
        ("Images", f"{d['images_trained']:,} trained, {d['images_validated']:,} validated"),
        ("Seed / precision", f"{d['seed']} / {d['precision']}"),
    ]
    for key, value in rows:
        table.add_row(key, value)
    for w in d["hardware"]:
        accs = ", ".join(a["model"] for a in w["accelerators"]) or "no accelerator"
        table.add_row(f"Worker {w['worker_id']}", f"{w['host']}: {accs}; {w['cpus']} CPUs, "
                      f"{w['memory_bytes'] / 2**30:.0f} GiB")
    table.add_row("Master software", ", ".join(f"{k} {v}" for k, v in d["software"].items() if k != "platform"))
    return table


def scoreboard_cmd(
    run: int = RunOpt,
    master: str = MasterOpt,
    admin_token: Optional[str] = AdminTokenOpt,
    data_dir: Path = DataDirOpt,
    tls_ca: Optional[Path] = TlsCaOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Print the scoreboard of a run."""
    from aiperf.api.client import scoreboard_to_dict

    client = _control(master, admin_token, data_dir, tls_ca)
    d = scoreboard_to_dict(_call(master, client.scoreboard, run))
    if as_json:
        print(json.dumps(d))
        return
    from rich.console import Console

    Console(file=sys.stdout).print(scoreboard_table(d))


def models_cmd(
    run: int = RunOpt,
    state: Optional[str] = typer.Option(None, "--state", help="queued, training, done, failed or abandoned."),
    limit: int = typer.Option(100, "--limit", help="At most this many models."),
    master: str = MasterOpt,
    admin_token: Optional[str] = AdminTokenOpt,
    data_dir: Path = DataDirOpt,
    tls_ca: Optional[Path] = TlsCaOpt,
    as_json: bool = JsonOpt,
) -> None:
    """List the models of a run."""
    from aiperf.api.client import model_to_dict
    from aiperf.api.enums import MODEL_STATE_VALUES

    if state is not None and state not in MODEL_STATE_VALUES:
        fail(f"unknown state {state!r}: use one of {', '.join(MODEL_STATE_VALUES)}")
    if limit < 1:
        fail(f"--limit must be >= 1, got {limit}")
    client = _control(master, admin_token, data_dir, tls_ca)
    resp = _call(master, client.list_models, run, state=state, limit=limit)
    rows = [model_to_dict(m) for m in resp.models]
    if as_json:
        print(json.dumps({"run_id": resp.run_id, "total": resp.total, "models": rows}))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"run {resp.run_id}: {resp.total} models")
    for col in ("id", "parent", "worker", "round", "state", "batch", "kernel", "best acc", "pred acc", "hash"):
        table.add_column(col)
    for m in rows:
        table.add_row(
            str(m["model_id"]), str(m["parent_id"] or "-"), str(m["worker_id"]), str(m["round"]), m["state"],
            str(m["hyperparameters"]["batch_size"]), str(m["hyperparameters"]["kernel_size"]),
            f"{m['best_accuracy']:.4f}" if m["best_accuracy"] is not None else "-",
            f"{m['predicted_accuracy']:.4f}" if m["predicted_accuracy"] is not None else "-",
            m["graph_hash"][:12],
        )
    Console(file=sys.stdout).print(table)


REPORT_MODELS = 10


def report_cmd(
    run: int = RunOpt,
    out: Path = typer.Option(Path("aiperf-report.html"), "--out", "-o", help="HTML file to write."),
    master: str = MasterOpt,
    admin_token: Optional[str] = AdminTokenOpt,
    data_dir: Path = DataDirOpt,
    tls_ca: Optional[Path] = TlsCaOpt,
) -> None:
    """Write a run's report: scores, validity, FLOPS and error over time, resource use, hardware, best models."""
    if out.is_dir():
        fail(f"--out {out} is a directory; give a file name")
    if not out.parent.exists():
        fail(f"--out {out}: directory {out.parent} does not exist")
    client = _control(master, admin_token, data_dir, tls_ca)
    board, text = _call(master, report_html, client, run)
    try:
        out.write_text(text, encoding="utf-8")
    except OSError as exc:
        fail(f"cannot write {out}: {exc.strerror}")
    print(f"wrote {out} (run {board['run_id']}, {board['state']}, score {format_flops(board['score'])}"
          f"{', provisional' if board['provisional'] else ''})")


def report_html(client: Any, run: int = 0) -> tuple[dict[str, Any], str]:
    """(scoreboard dict, report HTML) of a run, fetched through a ControlClient."""
    from aiperf.api.client import model_to_dict, scoreboard_to_dict, timeline_to_dict
    from master.report import render_report

    board = scoreboard_to_dict(client.scoreboard(run))
    run_id = board["run_id"]
    timeline = timeline_to_dict(client.timeline(run_id, max_points=2000))
    done = [model_to_dict(m) for m in client.list_models(run_id, state="done", limit=10000).models]
    # the master's ranking (GetHistory): predicted accuracy, then best observed, then id
    done.sort(key=lambda m: (-(m["predicted_accuracy"] or m["best_accuracy"] or 0.0), -(m["best_accuracy"] or 0.0),
                             m["model_id"]))
    return board, render_report(board, timeline, done[:REPORT_MODELS])


def register(app: typer.Typer) -> None:
    app.add_typer(master_app, name="master")
    app.command("start")(start_cmd)
    app.command("stop")(stop_cmd)
    app.command("status")(status_cmd)
    app.command("scoreboard")(scoreboard_cmd)
    app.command("models")(models_cmd)
    app.command("report")(report_cmd)
