"""The `aiperf` entry point (console script `aiperf_cli.main:main`, or `python -m aiperf_cli`).

Each command module registers its commands here. None of them imports
TensorFlow at module level: the worker's heavy imports happen inside its
command. Every handled failure is one line on stderr and an exit code of
aiperf_cli.options.ExitCode (2: bad input, 3: master unavailable, 4: refused by the
master); a traceback and exit code 1 mean a bug.
"""

from __future__ import annotations

import sys
from typing import Any, Optional

import typer

from aiperf_cli import audit, control, demo, export, graph, master, watch, worker
from aiperf_cli.options import ExitCode, UsageError, require_command

CONTEXT = {"help_option_names": ["-h", "--help"]}  # inherited by every subcommand

app = typer.Typer(
    name="aiperf",
    help="AIPerf: AutoML benchmark for AI-HPC clusters.",
    add_completion=True,  # --install-completion / --show-completion (bash, zsh, fish, PowerShell)
    pretty_exceptions_enable=False,
    context_settings=CONTEXT,
)


def version_text() -> str:
    """'aiperf 0.1.0 (API v1)': the installed package's version and the gRPC API's."""
    from importlib.metadata import PackageNotFoundError, version

    from aiperf.api.enums import API_VERSION

    try:
        number = version("aiperf")
    except PackageNotFoundError:  # run from a source tree that was never installed
        number = "(not installed)"
    return f"aiperf {number} (API v{API_VERSION})"


def _show_version(value: bool) -> None:
    if value:
        typer.echo(version_text())
        raise typer.Exit()


@app.callback(invoke_without_command=True)
def root(
    ctx: typer.Context,
    _version: Optional[bool] = typer.Option(None, "--version", is_eager=True, callback=_show_version,
                                            help="Print the version and exit."),
) -> None:
    """AIPerf: AutoML benchmark for AI-HPC clusters."""
    require_command(ctx)


for _commands in (graph, master, control, watch, audit, export, worker, demo):  # the order `aiperf --help` lists them in
    _commands.register(app)


def _hide_flag_types(command: Any) -> None:
    """No type column for a flag anywhere under `command`: typer's help would print `<bool>`
    next to every --flag/--no-flag, which takes no value."""
    for param in command.params:
        if getattr(param, "is_flag", False):
            param.metavar = ""
    make_help = command.get_help_option  # -h/--help is made per context, not kept in params

    def get_help_option(ctx: Any) -> Any:
        option = make_help(ctx)
        if option is not None:
            option.metavar = ""
        return option

    command.get_help_option = get_help_option
    for sub in getattr(command, "commands", {}).values():
        _hide_flag_types(sub)


_COMMAND: Any = None


def command() -> Any:
    """The click command of `app`, built once, flags without a type in the help."""
    global _COMMAND
    if _COMMAND is None:
        _COMMAND = typer.main.get_command(app)
        _hide_flag_types(_COMMAND)
    return _COMMAND


def one_line(message: str) -> str:
    """`message` on one line: every run of white space (newlines included) becomes one space."""
    return " ".join(message.split())


def usage_message(exc: Any) -> str:
    """Click's usage error on one line, without the "Value error, " its Enum conversion leaks,
    and for a value that is not one of an option's choices the closest choice."""
    import difflib
    import re

    message = one_line(exc.format_message()).replace("Value error, ", "")
    given = re.search(r"'([^']*)' is not one of ((?:'[^']*'(?:, )?)+)", message)
    if given:
        choices = re.findall(r"'([^']*)'", given[2])
        close = difflib.get_close_matches(given[1].lower(), choices, n=1, cutoff=0.5)
        if close:
            message = message.rstrip(".") + f"; did you mean '{close[0]}'?"
    return message


def main(argv: list[str] | None = None) -> int:
    """Run one command; returns its exit code (aiperf_cli.options.ExitCode)."""
    try:
        # prog_name: completion reads _AIPERF_COMPLETE whether started as `aiperf` or `python -m aiperf_cli`
        rv: Any = command()(args=argv, standalone_mode=False, prog_name="aiperf")
    except UsageError as exc:
        print(f"aiperf: error: {one_line(str(exc))}", file=sys.stderr)
        return int(exc.code)
    except typer.Exit as exc:
        return exc.exit_code
    except SystemExit as exc:  # typer's --install-completion / --show-completion end with sys.exit(0)
        return exc.code if isinstance(exc.code, int) else int(ExitCode.OK)
    except (typer.Abort, KeyboardInterrupt):
        print("aiperf: aborted", file=sys.stderr)
        return int(ExitCode.INTERRUPTED)
    except Exception as exc:
        # Click's usage errors (typer vendors click in recent releases, so the
        # class is matched by shape, not by import).
        if callable(getattr(exc, "format_message", None)) and hasattr(exc, "exit_code"):
            print(f"aiperf: error: {usage_message(exc)}", file=sys.stderr)
            return int(ExitCode.BAD_INPUT)
        raise
    return rv if isinstance(rv, int) else int(ExitCode.OK)
