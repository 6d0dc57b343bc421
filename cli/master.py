"""`aiperf master serve`: run the master service in the foreground until SIGTERM or Ctrl-C.

    aiperf master serve --db URL --port N [--metrics-port N] [--data-dir DIR] ...
"""

from __future__ import annotations

import logging
import signal
from pathlib import Path
from typing import Any, Optional

import typer

from cli.options import DEFAULT_DATA_DIR, fail

master_app = typer.Typer(help="Run the master service.", no_args_is_help=True)


def _check(log_level: str, heartbeat_interval: float, tls_cert: Optional[Path], tls_key: Optional[Path]) -> int:
    """The logging level of --log-level; bad options: one line, exit 2."""
    level = getattr(logging, log_level.upper(), None)
    if not isinstance(level, int):
        fail(f"bad log level {log_level!r}")
    if heartbeat_interval <= 0:
        fail(f"--heartbeat-interval must be positive, got {heartbeat_interval}")
    if (tls_cert is None) != (tls_key is None):
        fail("TLS needs both --tls-cert and --tls-key")
    for path in (tls_cert, tls_key):
        if path is not None and not path.is_file():
            fail(f"no such file: {path}")
    return level


def _start(db: Optional[str], **options: Any) -> Any:
    """master.server.serve(db, **options); a refused database or port: one line, exit 2."""
    from master.server import serve
    from master.store import SchemaError

    try:
        return serve(db, **options)
    except (SchemaError, OSError, ValueError) as exc:
        fail(str(exc))
    except Exception as exc:  # database unreachable and friends: one line, not a traceback
        import sqlalchemy.exc

        if isinstance(exc, sqlalchemy.exc.SQLAlchemyError):
            fail(f"database {db}: {str(exc).splitlines()[0]}")
        raise


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
    level = _check(log_level, heartbeat_interval, tls_cert, tls_key)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    handle = _start(
        db, port=port, host=host, data_dir=data_dir, heartbeat_interval_s=heartbeat_interval,
        stop_grace_s=stop_grace, metrics_port=metrics_port, tls_cert=tls_cert, tls_key=tls_key,
        worker_token_file=token_file, admin_token_file=admin_token_file,
    )
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


def register(app: typer.Typer) -> None:
    app.add_typer(master_app, name="master")
