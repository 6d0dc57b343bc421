"""The `aiperf` entry point (console script `cli.main:main`, or `python -m cli`).

Each command module registers its commands here. None of them imports
TensorFlow at module level: the worker's heavy imports happen inside its
command. Bad input: one line on stderr and exit code 2 (see cli.options.fail).
"""

from __future__ import annotations

import sys

import typer

from cli import control, demo, graph, master, worker
from cli.options import UsageError

app = typer.Typer(
    name="aiperf",
    help="AIPerf: AutoML benchmark for AI-HPC clusters.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
for _commands in (graph, master, control, worker, demo):  # the order `aiperf --help` lists them in
    _commands.register(app)


def main(argv: list[str] | None = None) -> int:
    """Run one command; returns the exit code (2: bad input, 130: aborted)."""
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
