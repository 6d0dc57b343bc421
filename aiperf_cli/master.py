"""`aiperf master serve`: run the master service in the foreground until SIGTERM or Ctrl-C.

    aiperf master serve --db URL --port N [--metrics-port N] [--data-dir DIR] ...

Everything that can be checked before the master starts is checked first, in
this order, each failure one line with exit code 2: option ranges (parser),
TLS files (readable PEM), the metrics port (free), the database URL (parsable,
a known kind, a synchronous driver that is installed). Database URLs are shown
with the password masked (master.store.sql.urls), in errors and logs.
"""

from __future__ import annotations

import errno
import logging
import signal
import socket
from pathlib import Path
from typing import Any, Optional

import typer

from aiperf_cli.database import check_db_url, database_failure
from aiperf_cli.options import DEFAULT_DATA_DIR, ExitCode, fail, read_pem, require_command
from aiperf_cli.values import (
    FRONTENDS,
    HEARTBEAT_S,
    PORT,
    RESUME_OUTAGE_S,
    STOP_GRACE_S,
    LogLevel,
    float_option,
    int_option,
)

master_app = typer.Typer(help="Run the master service.")
master_app.callback(invoke_without_command=True)(require_command)

ALL_INTERFACES = ("", "0.0.0.0", "::", "[::]")
KEY_BLOCKS = ("PRIVATE KEY", "RSA PRIVATE KEY", "EC PRIVATE KEY", "ENCRYPTED PRIVATE KEY")


def _check_tls(tls_cert: Optional[Path], tls_key: Optional[Path]) -> None:
    """Both or neither, each a readable PEM file of the right kind (gRPC alone says "Failed to bind")."""
    if (tls_cert is None) != (tls_key is None):
        fail("TLS needs both --tls-cert and --tls-key")
    if tls_cert is not None and tls_key is not None:
        read_pem(tls_cert, "--tls-cert", ("CERTIFICATE",))
        key = read_pem(tls_key, "--tls-key", KEY_BLOCKS)
        if b"ENCRYPTED" in key:
            fail(f"--tls-key {tls_key} is encrypted; gRPC needs an unencrypted key (openssl pkey -in KEY -out NEW)")
        _check_pair(tls_cert, tls_key)


def _check_pair(tls_cert: Path, tls_key: Path) -> None:
    """The key must be the certificate's (OpenSSL loads them as gRPC will)."""
    import ssl

    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(tls_cert, tls_key, password=lambda: b"")
    except ssl.SSLError as exc:
        if exc.reason == "KEY_VALUES_MISMATCH":
            fail(f"--tls-key {tls_key} is not the key of --tls-cert {tls_cert}")
        fail(f"--tls-cert {tls_cert} / --tls-key {tls_key}: OpenSSL cannot load them ({exc.reason or exc})")


def _check_metrics_port(port: Optional[int]) -> None:
    """A busy metrics port, named, before the gRPC server starts (bound as Prometheus's server binds it)."""
    if not port:
        return
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("0.0.0.0", port))
        except OSError as exc:
            fail(f"cannot serve metrics on 0.0.0.0:{port}: {exc.strerror}")


def _start(db: str, metrics_port: Optional[int], **options: Any) -> Any:
    """master.server.serve(db, **options); a refused database or port: one line (master.store.sql.urls masks the URL)."""
    from sqlalchemy.exc import SQLAlchemyError

    from master.server import MasterConfig, serve
    from master.store.errors import SchemaError, StorageFull, Unavailable
    from master.store.sql.urls import mask_url

    try:
        return serve(MasterConfig(db, metrics_port=metrics_port, **options))
    except SQLAlchemyError as exc:
        database_failure(exc, db)
    except (Unavailable, StorageFull) as exc:  # while starting: the outage, which may pass
        fail(f"database {mask_url(db)}: {exc}; try again later", ExitCode.UNAVAILABLE)
    except SchemaError as exc:
        fail(str(exc))
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE and metrics_port:  # the gRPC port's error names its address
            fail(f"cannot serve metrics on 0.0.0.0:{metrics_port}: {exc.strerror}")
        what = f"{exc.strerror}: {exc.filename}" if exc.strerror and exc.filename else (exc.strerror or str(exc))
        fail(what)
    except ValueError as exc:
        fail(str(exc))


def listening_text(host: str, port: int, tls: bool, metrics_port: Optional[int]) -> str:
    """What `serve` prints once it listens: the addresses as bound (not a loopback address
    when every interface is bound)."""
    everywhere = host in ALL_INTERFACES
    shown = f"{host}:{port}" + (" (all interfaces)" if everywhere else "")
    text = f"master listening on {shown} (tls={'on' if tls else 'off'})"
    if metrics_port is not None:  # Prometheus's endpoint binds every IPv4 interface
        text += f", metrics on 0.0.0.0:{metrics_port} (all interfaces)"
    return text


@master_app.command("serve")
def serve_cmd(
    db: Optional[str] = typer.Option(None, "--db", envvar="AIPERF_DB",
                                     help="SQLAlchemy URL (default: SQLite in the data dir)."),
    port: int = int_option(50051, "--port", span=PORT, help="gRPC port (0: any free port)."),
    host: str = typer.Option("[::]", "--host", help="Address to listen on ([::]: every interface)."),
    metrics_port: Optional[int] = int_option(None, "--metrics-port", span=PORT, help="Prometheus HTTP port."),
    data_dir: Path = typer.Option(DEFAULT_DATA_DIR, "--data-dir", help="Token files and the default database."),
    heartbeat_interval: float = float_option(5.0, "--heartbeat-interval", span=HEARTBEAT_S,
                                             help="Seconds between worker heartbeats."),
    stop_grace: float = float_option(300.0, "--stop-grace", span=STOP_GRACE_S,
                                     help="Seconds a stopping run waits for workers to finish."),
    resume_outage: float = float_option(600.0, "--resume-outage", span=RESUME_OUTAGE_S,
                                        help="After a master outage up to this many seconds, the models in "
                                             "training go on (their workers reconnect); after a longer one "
                                             "they end as abandoned."),
    tls_cert: Optional[Path] = typer.Option(None, "--tls-cert", help="TLS certificate (PEM)."),
    tls_key: Optional[Path] = typer.Option(None, "--tls-key", help="TLS private key (PEM, unencrypted)."),
    token_file: Optional[Path] = typer.Option(None, "--token-file", envvar="AIPERF_TOKEN_FILE",
                                              help="Worker token file (read, or generated if missing)."),
    admin_token_file: Optional[Path] = typer.Option(None, "--admin-token-file", envvar="AIPERF_ADMIN_TOKEN_FILE",
                                                    help="Admin token file (read, or generated if missing)."),
    frontends: int = int_option(0, "--frontends", span=FRONTENDS,
                                help="Processes that serve gRPC on the port and relay each call to the master "
                                     "(0: the master serves it itself); for thousands of workers, about one per "
                                     "core left after the master's."),
    log_level: LogLevel = typer.Option("info", "--log-level", case_sensitive=False, help="Log level."),
) -> None:
    """Serve the master: gRPC worker + control API, health, metrics.

    Tokens: AIPERF_TOKEN (workers') and AIPERF_ADMIN_TOKEN (control commands'), or the token files.
    """
    from master.server import default_db_url

    _check_tls(tls_cert, tls_key)
    _check_metrics_port(metrics_port)
    url = db or default_db_url(data_dir)
    check_db_url(url)
    logging.basicConfig(level=getattr(logging, log_level.value.upper()),
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    logging.getLogger("alembic.runtime.plugins").setLevel(logging.WARNING)  # two lines of noise per start
    handle = _start(
        url, metrics_port, port=port, host=host, data_dir=data_dir, heartbeat_interval_s=heartbeat_interval,
        stop_grace_s=stop_grace, resume_outage_s=resume_outage, tls_cert=tls_cert, tls_key=tls_key,
        worker_token_file=token_file, admin_token_file=admin_token_file, frontends=frontends,
    )
    for kind, path in handle.tokens.generated.items():
        token = handle.worker_token if kind == "worker" else handle.admin_token
        print(f"generated {kind} token (saved in {path}): {token}", flush=True)
    print(listening_text(host, handle.port, handle.tls, handle.metrics_port), flush=True)

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
