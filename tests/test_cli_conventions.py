"""CLI conventions: shell completion as an installed `aiperf` runs it (typer's
--show-completion / --install-completion and the _AIPERF_COMPLETE protocol),
no `<bool>` in any help, choices as Enums."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from aiperf_cli.main import command, main

ROOT = Path(__file__).resolve().parent.parent


def _run(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """`aiperf ARGS` started from bash (typer detects the shell from its parent process)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("AIPERF_", "_AIPERF"))}
    line = " ".join(shlex.quote(a) for a in (sys.executable, "-m", "aiperf_cli", *args))
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    # `; exit $?`: bash would exec a lone command in its own place, and the shell typer looks for
    # would then be whatever started the tests (none when they run detached from a terminal)
    return subprocess.run(["bash", "-c", line + "; exit $?"], env={**base, "PYTHONPATH": path, **(env or {})},
                          capture_output=True, text=True, timeout=120, cwd=cwd)


def _complete(words: str, shell: str = "bash") -> list[str]:
    """What the shell gets back for the command line `words` (the cursor after its last word)."""
    parts = words.split(" ")
    proc = _run(env={"_AIPERF_COMPLETE": f"complete_{shell}", "COMP_WORDS": words,
                     "COMP_CWORD": str(len(parts) - 1), "_TYPER_COMPLETE_ARGS": words})
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()


def test_show_completion_prints_a_script_for_aiperf():
    proc = _run("--show-completion")
    assert proc.returncode == 0, proc.stderr
    assert "_AIPERF_COMPLETE=complete_bash" in proc.stdout
    assert "complete -o default -F _aiperf_completion aiperf" in proc.stdout


def test_install_completion_writes_the_shell_rc(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    proc = _run("--install-completion", env={"HOME": str(home)})
    assert proc.returncode == 0, proc.stderr
    assert "completion installed" in proc.stdout
    assert "aiperf" in (home / ".bashrc").read_text()


def test_completion_of_commands_options_and_choices():
    assert set(_complete("aiperf st")) == {"start", "status", "stop"}
    assert {"runs", "report"} <= set(_complete("aiperf r"))
    assert "--precision" in _complete("aiperf start --pr")
    assert _complete("aiperf start --profile ") == ["official", "smoke"]
    assert set(_complete("aiperf workers --state ")) == {"alive", "lost"}
    assert set(_complete("aiperf worker --log-level ")) == {"debug", "info", "warning", "error"}
    assert set(_complete("aiperf graph morph - --kernel-size ")) == {"3", "5", "7"}


def _commands(cmd: Any, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    out = [path]
    for name, sub in getattr(cmd, "commands", {}).items():
        out += _commands(sub, (*path, name))
    return out


@pytest.mark.parametrize("path", _commands(command()), ids=lambda p: " ".join(p) or "aiperf")
def test_no_help_shows_bool_as_a_type(path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    assert main([*path, "-h"]) == 0
    out = capsys.readouterr().out
    assert "Usage" in out and "<bool>" not in out
    flags = [p for p in _params(path) if getattr(p, "is_flag", False)]
    for p in flags:  # each flag is still listed
        assert p.opts[0] in out


def _params(path: tuple[str, ...]) -> list[Any]:
    cmd = command()
    for name in path:
        cmd = cmd.commands[name]
    return cmd.params


def test_worker_log_level_is_a_choice(capsys):
    assert main(["worker", "--master", "127.0.0.1:1", "--token", "t", "--log-level", "loud"]) == 2
    err = capsys.readouterr().err
    assert "'loud' is not one of 'debug', 'info', 'warning', 'error'" in err and len(err.splitlines()) == 1
