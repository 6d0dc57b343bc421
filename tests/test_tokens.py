"""Tokens are checked where they are read (aiperf/api/tokens.py): printable ASCII, no white
space, at most MAX_TOKEN_CHARS. A bad one is exit 2 with one line naming its source (an
option, a variable or a file) for the control commands, the worker and the master; the
worker exits instead of retrying. A digits worker given a dataset path fails before it
registers (it would hold its name for three heartbeats)."""

from __future__ import annotations

import contextlib
import io
import time
from pathlib import Path
from typing import Any

import grpc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aiperf import limits
from aiperf.api.client import ControlClient, WorkerClient
from aiperf.api.tokens import token_problem
from aiperf_cli.main import main
from master.rpc.tokens import load_tokens
from tests.support.cli_runs import UNREACHABLE, aiperf, error_line

BAD = ["tok en", "token\n", "tök", "tok\ten", "\x1b[31m", "\u200btoken", "x" * (limits.MAX_TOKEN_CHARS + 1)]


def _is_token(text: str) -> bool:
    return 0 < len(text) <= limits.MAX_TOKEN_CHARS and all(33 <= ord(c) <= 126 for c in text)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40) | st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=127), max_size=40)
       | st.integers(limits.MAX_TOKEN_CHARS - 1, limits.MAX_TOKEN_CHARS + 1).map(lambda n: "t" * n))
def test_a_token_is_printable_ascii_without_white_space_and_bounded(text: str) -> None:
    problem = token_problem(text)
    assert (problem == "") == _is_token(text), (text, problem)


def test_every_accepted_character_travels_in_grpc_metadata(master_server: Any) -> None:
    """The rule is what gRPC metadata carries: a token of every accepted character works."""
    token = "".join(chr(c) for c in range(33, 127))
    h = master_server(worker_token="w-" + token, admin_token=token)
    assert ControlClient(h.address, token, retries=0).list_runs().total == 0


def _run_main(argv: list[str]) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    return rc, err.getvalue()


@pytest.mark.parametrize("bad", BAD, ids=range(len(BAD)))
def test_a_control_command_names_the_source_of_a_bad_admin_token(bad: str, tmp_path: Path, monkeypatch: Any) -> None:
    rc, err = _run_main(["status", "--master", UNREACHABLE, "--admin-token", bad])
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "token from --admin-token cannot be used" in err, err
    monkeypatch.setenv("AIPERF_ADMIN_TOKEN", bad)
    rc, err = _run_main(["status", "--master", UNREACHABLE])
    assert rc == 2 and "token from variable AIPERF_ADMIN_TOKEN cannot be used" in err, err
    monkeypatch.delenv("AIPERF_ADMIN_TOKEN")
    path = tmp_path / "admin.token"
    path.write_text(f"\n {bad} \n" if bad.strip() == bad else bad + "x\n")  # surrounding white space is dropped
    rc, err = _run_main(["status", "--master", UNREACHABLE, "--admin-token-file", str(path)])
    assert rc == 2 and f"admin token file {path} cannot be used" in err, err


def test_a_worker_with_a_bad_token_exits_2_at_once(tmp_path: Path) -> None:
    start = time.monotonic()
    proc = aiperf("worker", "--master", UNREACHABLE, env={"AIPERF_TOKEN": "tok\u00e9n"})
    assert proc.returncode == 2 and "token from variable AIPERF_TOKEN cannot be used" in error_line(proc)
    path = tmp_path / "w.token"
    path.write_text("two words\n")
    proc = aiperf("worker", "--master", UNREACHABLE, "--token-file", str(path))
    assert proc.returncode == 2 and f"worker token file {path} cannot be used" in error_line(proc)
    assert time.monotonic() - start < 60  # no retry loop


def test_a_client_refuses_a_token_grpc_cannot_send() -> None:
    with pytest.raises(ValueError, match="client token argument cannot be used: character 4 is U\\+000A"):
        WorkerClient(UNREACHABLE, "tok\n")


def test_the_master_names_a_bad_token_from_a_variable_or_a_file(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="token from variable AIPERF_TOKEN cannot be used"):
        load_tokens(tmp_path, env={"AIPERF_TOKEN": "a b"})
    (tmp_path / "admin.token").write_bytes(b"\xff\xfe")
    with pytest.raises(ValueError, match=f"token from file {tmp_path / 'admin.token'} cannot be used: it is not"):
        load_tokens(tmp_path, env={})
    (tmp_path / "admin.token").write_text("caf\u00e9\n")
    with pytest.raises(ValueError, match="cannot be used: character 4 is U\\+00E9"):
        load_tokens(tmp_path, env={})
    proc = aiperf("master", "serve", "--db", f"sqlite:///{tmp_path / 'm.db'}", "--port", "0", "--data-dir",
                  str(tmp_path / "d"), env={"AIPERF_ADMIN_TOKEN": "line\nbreak"}, cwd=tmp_path)
    assert proc.returncode == 2 and "token from variable AIPERF_ADMIN_TOKEN cannot be used" in error_line(proc)


def test_a_digits_worker_given_a_dataset_path_fails_before_it_registers(master_server: Any, tmp_path: Path) -> None:
    h = master_server()
    proc = aiperf("worker", "--master", h.address, "--token", h.worker_token, "--dataset-format", "digits",
                  "--dataset", str(tmp_path), "--name", "digits-worker")
    assert proc.returncode == 2 and "'digits' is built in and takes no path" in error_line(proc)
    assert ControlClient(h.address, h.admin_token, retries=0).list_workers().total == 0


def test_a_wrong_but_well_formed_token_is_still_the_masters_refusal(master_server: Any) -> None:
    h = master_server()
    with pytest.raises(Exception) as e:
        ControlClient(h.address, "wrong-token", retries=0).list_runs()
    assert e.value.code == grpc.StatusCode.UNAUTHENTICATED  # type: ignore[attr-defined]
