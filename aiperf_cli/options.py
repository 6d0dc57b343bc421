"""What the commands share: one-line errors, exit codes and the options of the control commands.

Every handled failure is one line on stderr and an exit code that says what
kind of failure it was (`ExitCode`, documented in the README): a command calls
`fail` (or `fail_api` with the master's answer) and `aiperf_cli.main` prints the
message. The control commands (start, stop, status, runs, workers, scoreboard, models, report)
take the same options (--master, --admin-token, --admin-token-file, --data-dir,
--tls-ca and, except report, --json); `control_command` adds them to a command
and hands it one `Control` built from them.
"""

from __future__ import annotations

import enum
import functools
import inspect
import json
import logging
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, NoReturn, Optional

import typer

if TYPE_CHECKING:  # pragma: no cover
    from aiperf.api.control_session import ControlSession

DEFAULT_MASTER = "127.0.0.1:50051"
DEFAULT_DATA_DIR = Path(".aiperf")


class ExitCode(enum.IntEnum):
    """What `aiperf` exits with; scripts and the Kubernetes Jobs decide by it."""

    OK = 0
    BUG = 1           # unexpected: a traceback, or the master answered UNKNOWN/INTERNAL
    BAD_INPUT = 2     # the command line, a file it names or the request is wrong: fix it, do not retry
    UNAVAILABLE = 3   # the master (or master serve's database) did not answer: try again later
    REFUSED = 4       # the master (or database) answered and refused: state, credentials, not found
    INVALID = 5       # `aiperf wait`: the run ended and is not valid (its checklist says why)
    TIMEOUT = 6       # `aiperf wait`: --timeout passed before the run ended
    INTERRUPTED = 130


class UsageError(Exception):
    """A user-facing error: printed as one line; `code` is the exit code."""

    def __init__(self, message: str, code: ExitCode = ExitCode.BAD_INPUT) -> None:
        super().__init__(message)
        self.code = code


def fail(message: str, code: ExitCode = ExitCode.BAD_INPUT) -> NoReturn:
    """Print one line naming the problem on stderr and exit with `code` (default 2: bad input)."""
    raise UsageError(message, code)


# The exit code of each gRPC status a call can end with (by name: grpc is imported lazily).
_API_EXIT = {
    "UNAVAILABLE": ExitCode.UNAVAILABLE, "DEADLINE_EXCEEDED": ExitCode.UNAVAILABLE,
    "ABORTED": ExitCode.UNAVAILABLE, "CANCELLED": ExitCode.UNAVAILABLE,
    "INVALID_ARGUMENT": ExitCode.BAD_INPUT, "OUT_OF_RANGE": ExitCode.BAD_INPUT,
    "NOT_FOUND": ExitCode.REFUSED, "ALREADY_EXISTS": ExitCode.REFUSED, "FAILED_PRECONDITION": ExitCode.REFUSED,
    "PERMISSION_DENIED": ExitCode.REFUSED, "UNAUTHENTICATED": ExitCode.REFUSED,
    "RESOURCE_EXHAUSTED": ExitCode.REFUSED, "UNIMPLEMENTED": ExitCode.REFUSED,
}


def api_exit_code(status_name: str) -> ExitCode:
    """The exit code for a call that ended with the gRPC status `status_name`
    (UNKNOWN, INTERNAL, DATA_LOSS: the master failed, a bug)."""
    return _API_EXIT.get(status_name, ExitCode.BUG)


def unreachable_cause(details: str) -> str:
    """What gRPC's details of an unanswered call say, in words: a name that does not resolve, nothing
    listening, or (anything else) no answer."""
    lowered = details.lower()
    if any(w in lowered for w in ("resolv", "name or service not known", "domain name not found")):
        return ("unreachable: its host name does not resolve (check --master / AIPERF_MASTER; a Kubernetes "
                "Service not yet in DNS resolves later)")
    if "connection refused" in lowered:
        return "unreachable: nothing listens there (connection refused): is `aiperf master serve` running?"
    return "unreachable, try again later"


def fail_api(master: str, exc: Any, token: str = "token") -> NoReturn:
    """One line for a failed call to `master` (an aiperf.api ApiError), with its exit code."""
    name = exc.code.name
    details = " ".join(exc.details.split()) if exc.details else "no answer"
    if details.startswith(("database unavailable", "database full")) and name in ("UNAVAILABLE",
                                                                                  "RESOURCE_EXHAUSTED"):
        fail(f"master {master} is up but its {details}; try again later", ExitCode.UNAVAILABLE)
    if name in ("UNAVAILABLE", "DEADLINE_EXCEEDED"):
        fail(f"master {master} {unreachable_cause(details)} ({details})", ExitCode.UNAVAILABLE)
    if name == "UNAUTHENTICATED":
        fail(f"master {master} refused the {token}: {details}", ExitCode.REFUSED)
    code = api_exit_code(name)
    if code == ExitCode.BUG:
        details += "; this is a bug: please report it, with the master's log"
    fail(f"{details} ({name.lower()})", code)


def master_address(value: Optional[str]) -> Optional[str]:
    """Typer callback of --master: HOST:PORT ([V6]:PORT), or a gRPC target with a scheme
    (dns:///, unix:); refused here, with one line naming the option: empty, white space or
    control characters, a missing or out-of-range port. A name that does not resolve is
    the master being unreachable (exit 3), as a Service not yet in DNS is."""
    if value is None:
        return None
    if not value or not value.isprintable() or any(c.isspace() for c in value):
        raise typer.BadParameter(f"{value!r} is not an address: use HOST:PORT")
    if value.startswith(("unix:", "unix-abstract:", "vsock:")) or "://" in value:
        return value
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise typer.BadParameter(f"{value!r} is not HOST:PORT with a port in 1..65535")
    if ":" in host and not (host.startswith("[") and host.endswith("]")):
        raise typer.BadParameter(f"{value!r}: write an IPv6 address in brackets, [ADDRESS]:PORT")
    return value


MAX_SMALL_FILE_BYTES = 1 << 20  # tokens, certificates and keys are a few kB; /dev/zero is not


def require_command(ctx: typer.Context) -> None:
    """The callback of a command group: called without a command, it prints the group's
    help on stdout, then one line naming its commands on stderr, exit code 2 (click
    alone prints an empty "error: ")."""
    if ctx.invoked_subcommand is not None or ctx.resilient_parsing:
        return
    typer.echo(ctx.get_help())
    names = ", ".join(ctx.command.list_commands(ctx))  # type: ignore[attr-defined]
    fail(f"`{ctx.command_path}` needs a command: one of {names} (`{ctx.command_path} -h` for help)")


def read_small_file(path: Path, what: str) -> bytes:
    """The bytes of a token, certificate or key file; unreadable or over 1 MiB: one line, exit 2."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_SMALL_FILE_BYTES + 1)
    except OSError as exc:
        fail(f"cannot read {what} {path}: {exc.strerror or exc}")
    if len(data) > MAX_SMALL_FILE_BYTES:
        fail(f"{what} {path} is larger than {MAX_SMALL_FILE_BYTES} bytes")
    return data


def read_token_file(path: Path, kind: str) -> str:
    """The token in `path` (surrounding white space dropped); unreadable or empty: one line, exit 2."""
    try:
        token = read_small_file(path, f"{kind} token file").decode("utf-8").strip()
    except UnicodeDecodeError:
        fail(f"{kind} token file {path} is not text")
    if not token:
        fail(f"{kind} token file {path} is empty")
    return checked_token(token, f"{kind} token file {path}")


def checked_token(token: str, source: str) -> str:
    """`token` when it can be sent (aiperf.api.tokens: printable ASCII, no white space, a
    length bound); else one line naming `source`, exit 2: gRPC itself would fail the call
    on this side with "invalid metadata", and a worker would retry it forever."""
    from aiperf.api.tokens import token_problem

    problem = token_problem(token)
    if problem:
        fail(f"the token from {source} cannot be used: {problem}")
    return token


def token_source(option: str, envvar: str, value: str) -> str:
    """Where an option's value came from: the variable when it holds that value, else the option."""
    import os

    return f"variable {envvar}" if os.environ.get(envvar) == value else option


def read_pem(path: Path, what: str, kinds: tuple[str, ...]) -> bytes:
    """A PEM file holding a block of one of `kinds` (e.g. "CERTIFICATE"); otherwise one line,
    exit 2 (gRPC itself only says that it failed to bind or to connect)."""
    data = read_small_file(path, what)
    if not any(f"-----BEGIN {kind}-----".encode() in data for kind in kinds):
        fail(f"{what} {path} is not a PEM {kinds[0].lower()}: no -----BEGIN {kinds[0]}----- line")
    return data


def read_tls_ca(path: Path | None) -> bytes | None:
    """The --tls-ca file's bytes (None when not given); unreadable or not PEM: one line, exit 2."""
    if path is None:
        return None
    data = read_pem(path, "CA certificate", ("CERTIFICATE",))
    import ssl

    try:  # as gRPC will load it; gRPC itself only logs and reports the master unreachable
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cadata=data.decode("ascii", "replace"))
    except (ssl.SSLError, ValueError) as exc:
        fail(f"CA certificate {path} cannot be loaded: {getattr(exc, 'reason', None) or exc}")
    return data


@dataclass(frozen=True)
class Control:
    """The master a control command talks to, and how it prints, from the shared options."""

    master: str
    admin_token: Optional[str]
    admin_token_file: Optional[Path]
    data_dir: Path
    tls_ca: Optional[Path]
    as_json: bool = False

    def session(self) -> "ControlSession":
        """A control session with the admin token; no token or an unreadable CA: one line, exit 2."""
        from aiperf.api.control_session import ControlSession

        # retries are logged by the client; the CLI reports the final error itself
        logging.getLogger("aiperf.api.client").addHandler(logging.NullHandler())
        logging.getLogger("aiperf.api.client").propagate = False
        root = read_tls_ca(self.tls_ca)
        return ControlSession.open(self.master, self._token(), root_certificates=root, retries=1)

    def _token(self) -> str:
        """--admin-token, else --admin-token-file, else <data-dir>/admin.token."""
        if self.admin_token:
            return checked_token(self.admin_token,
                                 token_source("--admin-token", "AIPERF_ADMIN_TOKEN", self.admin_token))
        path = self.admin_token_file or self.data_dir / "admin.token"
        if self.admin_token_file is not None or path.exists():
            return read_token_file(path, "admin")
        fail(f"no admin token: pass --admin-token or --admin-token-file, set AIPERF_ADMIN_TOKEN or "
             f"AIPERF_ADMIN_TOKEN_FILE, or run where {path} exists")

    def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """fn(*args, **kwargs); the master's refusal or silence becomes one line with its
        exit code (3: unreachable, 4: refused, 2: the master found the request invalid)."""
        from aiperf.api.client import ApiError

        try:
            return fn(*args, **kwargs)
        except ApiError as exc:
            fail_api(self.master, exc, "admin token")

    def show(self, record: dict[str, Any], readable: Callable[[], Any]) -> None:
        """Print `record` as one JSON object with --json, else what `readable()` returns:
        a line of text or a rich table."""
        if self.as_json:
            print(json.dumps(record))
            return
        view = readable()
        if isinstance(view, str):
            print(view)
            return
        console().print(view)


LOG_COLUMNS = 160  # the width of tables written to a file or a pipe: logs are read wider than 80 columns


def console(file: Any = None) -> Any:
    """A rich Console on `file` (stdout): a terminal's width on a terminal; elsewhere (a log,
    a pipe, CI) $COLUMNS or LOG_COLUMNS, so that a table is not squeezed into 80 columns."""
    import os

    from rich.console import Console

    out = file or sys.stdout
    if out.isatty():
        return Console(file=out)
    columns = os.environ.get("COLUMNS", "")
    return Console(file=out, width=int(columns) if columns.isdigit() and int(columns) > 0 else LOG_COLUMNS)


def _option(name: str, annotation: Any, info: Any) -> inspect.Parameter:
    """A keyword parameter whose default is the typer option `info`."""
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=info, annotation=annotation)


_SHARED = (
    _option("master", str, typer.Option(
        DEFAULT_MASTER, "--master", envvar="AIPERF_MASTER", callback=master_address,
        help="Master address host:port.")),
    _option("admin_token", Optional[str], typer.Option(
        None, "--admin-token", envvar="AIPERF_ADMIN_TOKEN", help="Admin token (default: <data-dir>/admin.token).")),
    _option("admin_token_file", Optional[Path], typer.Option(
        None, "--admin-token-file", envvar="AIPERF_ADMIN_TOKEN_FILE", help="Read the admin token from this file.")),
    _option("data_dir", Path, typer.Option(
        DEFAULT_DATA_DIR, "--data-dir", help="Where the master keeps its token files.")),
    _option("tls_ca", Optional[Path], typer.Option(
        None, "--tls-ca", envvar="AIPERF_TLS_CA", help="CA certificate: connect with TLS.")),
)
_JSON = _option("as_json", bool, typer.Option(False, "--json", help="Print one JSON object."))


def control_command(json_option: bool = True) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Decorate `fn(ctl: Control, **own_options)`: the command typer sees takes fn's own
    options followed by the shared ones, and calls fn with one Control built from them."""
    shared = (*_SHARED, _JSON) if json_option else _SHARED

    def decorate(fn: Callable[..., None]) -> Callable[..., None]:
        own = list(inspect.signature(fn, eval_str=True).parameters.values())[1:]  # [0] is ctl

        @functools.wraps(fn)
        def command(**options: Any) -> None:
            ctl = Control(**{p.name: options.pop(p.name) for p in shared})
            fn(ctl, **options)

        params = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own] + list(shared)
        command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in params}
        return command

    return decorate
