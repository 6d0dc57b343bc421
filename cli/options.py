"""What the commands share: one-line errors and the options of the control commands.

Bad input is one line on stderr and exit code 2: a command calls `fail`, and
`cli.main` prints the message. The control commands (start, stop, status,
scoreboard, models, report) take the same options (--master, --admin-token,
--data-dir, --tls-ca and, except report, --json); `control_command` adds them
to a command and hands it one `Control` built from them.
"""

from __future__ import annotations

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
    from aiperf.api.client import ControlClient

DEFAULT_MASTER = "127.0.0.1:50051"
DEFAULT_DATA_DIR = Path(".aiperf")


class UsageError(Exception):
    """A user-facing error: printed as one line, exit code 2."""


def fail(message: str) -> NoReturn:
    """Print one line naming the problem on stderr and exit with code 2."""
    raise UsageError(message)


def read_tls_ca(path: Path | None) -> bytes | None:
    """The --tls-ca file's bytes (None when not given); unreadable: one line, exit 2."""
    if path is None:
        return None
    try:
        return path.read_bytes()
    except OSError as exc:
        fail(f"cannot read CA certificate {path}: {exc.strerror}")


@dataclass(frozen=True)
class Control:
    """The master a control command talks to, and how it prints, from the shared options."""

    master: str
    admin_token: Optional[str]
    data_dir: Path
    tls_ca: Optional[Path]
    as_json: bool = False

    def client(self) -> "ControlClient":
        """A control client with the admin token; no token or an unreadable CA: one line, exit 2."""
        from aiperf.api.client import ControlClient

        # retries are logged by the client; the CLI reports the final error itself
        logging.getLogger("aiperf.api.client").addHandler(logging.NullHandler())
        logging.getLogger("aiperf.api.client").propagate = False
        root = read_tls_ca(self.tls_ca)
        return ControlClient(self.master, self._token(), root_certificates=root, retries=1)

    def _token(self) -> str:
        if self.admin_token:
            return self.admin_token
        path = self.data_dir / "admin.token"
        if path.exists():
            return path.read_text().strip()
        fail(f"no admin token: pass --admin-token, set AIPERF_ADMIN_TOKEN, or run where {path} exists")

    def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """fn(*args, **kwargs); the master's refusal or silence becomes one line, exit 2."""
        import grpc

        from aiperf.api.client import ApiError

        try:
            return fn(*args, **kwargs)
        except ApiError as exc:
            if exc.code == grpc.StatusCode.UNAVAILABLE:
                first = exc.details.splitlines()[0] if exc.details else "no answer"
                fail(f"master {self.master} unreachable ({first})")
            if exc.code == grpc.StatusCode.UNAUTHENTICATED:
                fail(f"master {self.master} refused the admin token: {exc.details}")
            fail(f"{exc.details} ({exc.code.name.lower()})")

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
        from rich.console import Console

        Console(file=sys.stdout).print(view)


def _option(name: str, annotation: Any, info: Any) -> inspect.Parameter:
    """A keyword parameter whose default is the typer option `info`."""
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=info, annotation=annotation)


_SHARED = (
    _option("master", str, typer.Option(
        DEFAULT_MASTER, "--master", envvar="AIPERF_MASTER", help="Master address host:port.")),
    _option("admin_token", Optional[str], typer.Option(
        None, "--admin-token", envvar="AIPERF_ADMIN_TOKEN", help="Admin token (default: <data-dir>/admin.token).")),
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
