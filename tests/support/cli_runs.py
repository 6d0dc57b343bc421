"""Running the `aiperf` command line: in the test's process, or as a script sees it (`python -m
aiperf_cli` in a subprocess, with no AIPERF_ variable of the test's environment)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

UNREACHABLE = "127.0.0.1:1"  # nothing listens on port 1: connection refused at once


def run_cli(capsys: Any, *argv: str) -> tuple[int, str, str]:
    """`aiperf ARGV...` through `aiperf_cli.main.main`: (exit code, stdout, stderr) as captured."""
    from aiperf_cli.main import main

    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def aiperf(*args: str, env: dict[str, str] | None = None, timeout: float = 120,
           cwd: Path | None = None) -> subprocess.CompletedProcess:
    """`python -m aiperf_cli ARGS...` in a subprocess, its output captured."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("AIPERF_")}
    return subprocess.run([sys.executable, "-m", "aiperf_cli", *args], env={**base, **(env or {})},
                          capture_output=True, text=True, timeout=timeout, cwd=cwd)


def error_line(proc: subprocess.CompletedProcess) -> str:
    """The one line a handled failure prints (no traceback, nothing else on stderr)."""
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("aiperf: error: "), proc.stderr
    return lines[0]
