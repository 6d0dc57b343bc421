"""The `aiperf` command line.

Each area owns its commands and registers them here, so the master's commands
never import TensorFlow and the worker's are loaded only when needed.
Bad input: one line on stderr and exit code 2 (see `fail`).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import NoReturn

import typer

app = typer.Typer(
    name="aiperf",
    help="AIPerf: AutoML benchmark for AI-HPC clusters.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


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


def _register() -> None:
    # Imported here (not at module top) so that each area's heavy imports stay
    # inside its own commands: none of these modules imports TensorFlow.
    from aiperf import graph_cli
    from master import cli as master_cli
    from worker import cli as worker_cli

    for area in (graph_cli, master_cli, worker_cli):
        area.register(app)


def main(argv: list[str] | None = None) -> int:
    _register()
    try:
        app(args=argv, standalone_mode=False)
    except UsageError as exc:
        print(f"aiperf: error: {exc}", file=sys.stderr)
        return 2
    except typer.Exit as exc:
        return exc.exit_code
    except typer.Abort:
        print("aiperf: aborted", file=sys.stderr)
        return 130
    except Exception as exc:
        # Click's usage errors (typer vendors click in recent releases, so the
        # class is matched by shape, not by import).
        if callable(getattr(exc, "format_message", None)) and hasattr(exc, "exit_code"):
            print(f"aiperf: error: {exc.format_message()}", file=sys.stderr)
            return 2
        raise
    return 0


if __name__ == "__main__":  # `python -m aiperf.cli`: use the importable module's classes
    from aiperf.cli import main as _main

    sys.exit(_main())
