"""Running the `aiperf` command line in the test's process."""

from __future__ import annotations

from typing import Any


def run_cli(capsys: Any, *argv: str) -> tuple[int, str, str]:
    """`aiperf ARGV...` through `aiperf_cli.main.main`: (exit code, stdout, stderr) as captured."""
    from aiperf_cli.main import main

    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err
