"""`aiperf` as a script or a Kubernetes Job sees it, through the real entry point
(`python -m aiperf_cli` in a subprocess; the property tests call `aiperf_cli.main.main`, the
function that entry point runs): every handled failure is one line on stderr
and an exit code per kind (README "Exit codes": 2 bad input, 3 master
unavailable, 4 refused), numbers outside their declared ranges never reach a
request, database passwords never reach a message, and TensorFlow's start-up
output does not bury a dataset error."""

from __future__ import annotations

import contextlib
import io
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aiperf import limits
from aiperf_cli.main import main
from tests.support.cli_runs import UNREACHABLE, aiperf, error_line
from tests.support.ports import free_port

CONTROL = ["--master", UNREACHABLE, "--admin-token", "t"]
CONTROL_COMMANDS = ["status", "stop", "models", "scoreboard", "report", "workers", "wait"]  # each takes --run
# The API's field types (protos/aiperf.proto) and the README's ranges.
INT64_MAX, UINT32_MAX, UINT64_MAX = 2**63 - 1, 2**32 - 1, 2**64 - 1
MAX_ID, MAX_SEED = limits.MAX_ID, limits.MAX_SEED  # the API's bounds, which the CLI's ranges follow
MAX_PAGE = limits.MAX_PAGE
SECRET = "s3cret-Passw0rd"


@pytest.fixture(scope="module")
def graph_file(tmp_path_factory: pytest.TempPathFactory) -> str:
    from aiperf.resnet import resnet50

    path = tmp_path_factory.mktemp("graph") / "small.json"
    path.write_text(resnet50(input_size=32, classes=10, width=0.25).to_json())
    return str(path)


# --------------------------------------------------------------------------- numbers out of range: 2


START = ["start", "--duration", "3m", "--profile", "smoke"]
BAD_CONTROL_NUMBERS = [
    *[([cmd, "--run", "-1"], "'--run'") for cmd in CONTROL_COMMANDS],
    *[([cmd, "--run", str(MAX_ID + 1)], "'--run'") for cmd in CONTROL_COMMANDS],
    ([*START, "--seed", str(MAX_SEED + 1)], "'--seed'"),
    ([*START, "--seed", "-1"], "'--seed'"),
    ([*START, "--max-models", str(UINT32_MAX + 1)], "'--max-models'"),
    ([*START, "--max-rounds", str(UINT32_MAX + 1)], "'--max-rounds'"),
    ([*START, "--max-rounds", "-1"], "'--max-rounds'"),
    ([*START, "--min-workers", str(UINT32_MAX + 1)], "'--min-workers'"),
    ([*START, "--min-workers", "-1"], "'--min-workers'"),
    ([*START, "--max-epochs", str(UINT32_MAX + 1)], "'--max-epochs'"),
    ([*START, "--warmup-rounds", "-1"], "'--warmup-rounds'"),
    (["models", "--limit", str(2**40)], "'--limit'"),
    (["models", "--limit", "0"], "'--limit'"),
    (["start", "--duration", "9" * 300], "at most 30d"),
    (["start", "--duration", "31d"], "at most 30d"),
    (["start", "--duration", "nan"], "bad duration 'nan'"),
    (["start", "--duration", "3m", "--profile", "fast"], "'fast' is not one of 'official', 'smoke'"),
    (["start", "--duration", "3m", "--precision", "fp4"], "is not one of 'fp32'"),
    (["models", "--state", "weird"], "is not one of 'queued'"),
]


@pytest.mark.parametrize("args,named", BAD_CONTROL_NUMBERS)
def test_control_numbers_out_of_range_exit_2_before_any_call(args: list[str], named: str) -> None:
    # The master is unreachable: had the value got through, the exit code would be 3.
    proc = aiperf(*args, *CONTROL)
    assert proc.returncode == 2, proc.stderr
    assert named in error_line(proc)


BAD_LOCAL_NUMBERS = [
    (["graph", "morph", "{graph}", "--seed", "1", "--max-params", "-5"], "'--max-params'"),
    (["graph", "morph", "{graph}", "--seed", "-1"], "'--seed'"),
    (["graph", "morph", "{graph}", "--seed", str(UINT64_MAX + 1)], "'--seed'"),
    (["graph", "morph", "{graph}", "--seed", "1", "--steps", "0"], "'--steps'"),
    (["graph", "morph", "{graph}", "--seed", "1", "--max-layers", "0"], "'--max-layers'"),
    (["graph", "resnet50", "--width", "nan"], "'--width'"),
    (["graph", "resnet50", "--width", "inf"], "'--width'"),
    (["graph", "resnet50", "--width", "0"], "'--width'"),
    (["graph", "resnet50", "--input-size", str(10**20)], "'--input-size'"),
    (["graph", "resnet50", "--classes", "1"], "'--classes'"),
    (["master", "serve", "--port", "99999"], "'--port'"),
    (["master", "serve", "--port", "-1"], "'--port'"),
    (["master", "serve", "--metrics-port", "65536"], "'--metrics-port'"),
    (["master", "serve", "--heartbeat-interval", "nan"], "'--heartbeat-interval'"),
    (["master", "serve", "--heartbeat-interval", "inf"], "'--heartbeat-interval'"),
    (["master", "serve", "--heartbeat-interval=-inf"], "'--heartbeat-interval'"),
    (["master", "serve", "--heartbeat-interval", "0"], "'--heartbeat-interval'"),
    (["master", "serve", "--heartbeat-interval", "1e9"], "'--heartbeat-interval'"),
    (["master", "serve", "--stop-grace", "nan"], "'--stop-grace'"),
    (["master", "serve", "--stop-grace", "-1"], "'--stop-grace'"),
    (["master", "serve", "--log-level", "loud"], "'loud' is not one of 'debug'"),
    (["worker", "--master", UNREACHABLE, "--token", "t", "--generator-processes", "0"], "'--generator-processes'"),
    (["worker", "--master", UNREACHABLE, "--token", "t", "--input-pipeline-cpus", "-1"],
     "'--input-pipeline-cpus'"),
    (["worker", "--master", UNREACHABLE, "--token", "t", "--log-level", "loud"], "'loud' is not one of"),
    (["demo", "--minutes", "nan"], "'--minutes'"),
    (["demo", "--minutes", "0"], "'--minutes'"),
    (["demo", "--minutes", "1e9"], "'--minutes'"),
    (["demo", "--port", "70000"], "'--port'"),
    (["demo", "--seed", "-1"], "'--seed'"),
]


@pytest.mark.parametrize("args,named", BAD_LOCAL_NUMBERS)
def test_local_numbers_out_of_range_exit_2(args: list[str], named: str, graph_file: str, tmp_path: Path) -> None:
    # Had the value got through, serve and demo would start (and time out here).
    proc = aiperf(*[a.replace("{graph}", graph_file) for a in args], timeout=60, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert named in error_line(proc)
    assert not list(tmp_path.iterdir()), "nothing may be created before the arguments are checked"


@pytest.mark.parametrize("master", ["", "a b", "host:99999", "host:0", "host", "[::1", "::1:50051"])
def test_master_address_is_checked(master: str) -> None:
    proc = aiperf("status", "--master", master, "--admin-token", "t")
    assert proc.returncode == 2 and "'--master'" in error_line(proc)


# --------------------------------------------------------------------------- exit codes 3 and 4


@pytest.mark.parametrize("args", [["start", "--duration", "1h"], ["runs"], *[[c] for c in CONTROL_COMMANDS]])
def test_an_unreachable_master_is_exit_3(args: list[str], tmp_path: Path) -> None:
    proc = aiperf(*args, "--master", f"127.0.0.1:{free_port()}", "--admin-token", "t", cwd=tmp_path)
    assert proc.returncode == 3
    assert "unreachable: nothing listens there (connection refused)" in error_line(proc)


def test_refusals_by_the_master_are_exit_4(master_server: Any, tmp_path: Path) -> None:
    h = master_server()
    env = {"AIPERF_MASTER": h.address, "AIPERF_ADMIN_TOKEN": h.admin_token}
    first = aiperf("start", "--duration", "3m", "--profile", "smoke", env=env)
    assert first.returncode == 0, first.stderr
    again = aiperf("start", "--duration", "3m", "--profile", "smoke", env=env)
    assert again.returncode == 4 and "still active" in error_line(again)
    missing = aiperf("scoreboard", "--run", str(MAX_ID), env=env)  # the largest id: NOT_FOUND, not UNKNOWN
    assert missing.returncode == 4 and f"run {MAX_ID} not found" in error_line(missing)
    wrong = aiperf("status", env={**env, "AIPERF_ADMIN_TOKEN": "wrong"})
    assert wrong.returncode == 4 and "refused the admin token" in error_line(wrong)
    invalid = aiperf("start", "--duration", "30m", "--allow-concurrent", env=env)  # INVALID_ARGUMENT
    assert invalid.returncode == 2 and "3600" in error_line(invalid)


def test_the_largest_seed_is_not_a_bug_at_the_master(master_server: Any) -> None:
    h = master_server()
    env = {"AIPERF_MASTER": h.address, "AIPERF_ADMIN_TOKEN": h.admin_token}
    proc = aiperf("start", "--duration", "3m", "--profile", "smoke", "--seed", str(UINT64_MAX), env=env)
    # a seed beyond int64 (what SQL stores) is refused by the CLI's range, which follows the API's bound
    assert proc.returncode == 2 and "seed" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


# The README's table, by status.
EXPECTED_EXIT = {
    "UNAVAILABLE": 3, "DEADLINE_EXCEEDED": 3, "ABORTED": 3, "CANCELLED": 3,
    "INVALID_ARGUMENT": 2, "OUT_OF_RANGE": 2,
    "NOT_FOUND": 4, "ALREADY_EXISTS": 4, "FAILED_PRECONDITION": 4, "PERMISSION_DENIED": 4,
    "UNAUTHENTICATED": 4, "RESOURCE_EXHAUSTED": 4, "UNIMPLEMENTED": 4,
    "UNKNOWN": 1, "INTERNAL": 1, "DATA_LOSS": 1,
}


@pytest.mark.parametrize("status", [s for s in grpc.StatusCode if s != grpc.StatusCode.OK], ids=lambda s: s.name)
def test_every_grpc_status_has_its_documented_exit_code(status: grpc.StatusCode, capsys: Any) -> None:
    from aiperf.api.client import ApiError
    from aiperf_cli.options import Control, UsageError

    ctl = Control(master="m:1", admin_token="t", admin_token_file=None, data_dir=Path("."), tls_ca=None)

    def refuse() -> None:
        raise ApiError(status, "first line\nsecond line", "GetRunStatus")

    with pytest.raises(UsageError) as caught:
        ctl.call(refuse)
    assert int(caught.value.code) == EXPECTED_EXIT[status.name]
    assert "\n" not in str(caught.value)
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    assert f"| {EXPECTED_EXIT[status.name]} |" in readme


# --------------------------------------------------------------------------- conventions


@pytest.mark.parametrize("group,commands", [
    ([], "start, stop, status"), (["master"], "serve"), (["graph"], "resnet50, show, flops, morph")])
def test_a_group_without_a_command_names_its_commands(group: list[str], commands: str) -> None:
    proc = aiperf(*group)
    assert proc.returncode == 2
    line = error_line(proc)
    assert f"`{' '.join(['aiperf', *group])}` needs a command: one of {commands}" in line
    assert "Usage:" in proc.stdout


def test_version_and_short_help() -> None:
    import configparser

    cfg = configparser.ConfigParser()
    cfg.read(Path(__file__).resolve().parent.parent / "setup.cfg")
    proc = aiperf("--version")
    assert proc.returncode == 0 and proc.stdout.strip() == f"aiperf {cfg['metadata']['version']} (API v1)"
    for args in ([], ["start"], ["master"], ["master", "serve"], ["graph", "morph"], ["worker"]):
        proc = aiperf(*args, "-h")
        assert proc.returncode == 0 and "Usage:" in proc.stdout, (args, proc.stderr)


def test_worker_reads_token_file_and_ca_from_the_environment(tmp_path: Path) -> None:
    env = {"AIPERF_MASTER": UNREACHABLE}
    proc = aiperf("worker", env={**env, "AIPERF_TOKEN_FILE": "/no/such/token"})
    assert proc.returncode == 2 and "cannot read worker token file /no/such/token" in error_line(proc)
    (tmp_path / "empty").write_text("\n")
    proc = aiperf("worker", env={**env, "AIPERF_TOKEN_FILE": str(tmp_path / "empty")})
    assert proc.returncode == 2 and "is empty" in error_line(proc)
    proc = aiperf("worker", "--token", "t", env={**env, "AIPERF_TLS_CA": "/no/ca.pem"})
    assert proc.returncode == 2 and "cannot read CA certificate /no/ca.pem" in error_line(proc)
    (tmp_path / "ca.pem").write_text("not a certificate")
    proc = aiperf("worker", "--token", "t", env={**env, "AIPERF_TLS_CA": str(tmp_path / "ca.pem")})
    assert proc.returncode == 2 and "is not a PEM certificate" in error_line(proc)
    (tmp_path / "ca.pem").write_text("-----BEGIN CERTIFICATE-----\nZ2FyYmFnZQ==\n-----END CERTIFICATE-----\n")
    proc = aiperf("worker", "--token", "t", env={**env, "AIPERF_TLS_CA": str(tmp_path / "ca.pem")})
    assert proc.returncode == 2 and "cannot be loaded" in error_line(proc)


def test_control_commands_read_the_admin_token_file_and_ca_from_the_environment(
        master_server: Any, tmp_path: Path) -> None:
    h = master_server()
    (tmp_path / "admin").write_text(h.admin_token + "\n")
    env = {"AIPERF_MASTER": h.address, "AIPERF_ADMIN_TOKEN_FILE": str(tmp_path / "admin")}
    proc = aiperf("start", "--duration", "3m", "--profile", "smoke", env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    (tmp_path / "ca.pem").write_bytes(b"\0" * 100)
    proc = aiperf("status", env={**env, "AIPERF_TLS_CA": str(tmp_path / "ca.pem")}, cwd=tmp_path)
    assert proc.returncode == 2 and "is not a PEM certificate" in error_line(proc)


def _serve(args: list[str], env: dict[str, str], cwd: Path) -> tuple[subprocess.Popen, str]:
    """`aiperf master serve ARGS` started; its output up to the listening line."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("AIPERF_")}
    proc = subprocess.Popen([sys.executable, "-m", "aiperf_cli", "master", "serve", *args], env={**base, **env},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=cwd)
    lines: list[str] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if "master listening" in line:
            break
    return proc, "".join(lines)


def test_serve_says_where_it_listens_and_reads_token_files_from_the_environment(tmp_path: Path) -> None:
    port, metrics = free_port(), free_port()
    env = {"AIPERF_TOKEN_FILE": str(tmp_path / "w.token"), "AIPERF_ADMIN_TOKEN_FILE": str(tmp_path / "a.token")}
    proc, text = _serve(["--port", str(port), "--host", "0.0.0.0", "--metrics-port", str(metrics),
                         "--data-dir", str(tmp_path / "data")], env, tmp_path)
    try:
        assert f"master listening on 0.0.0.0:{port} (all interfaces) (tls=off), " \
               f"metrics on 0.0.0.0:{metrics} (all interfaces)" in text, text
        assert f"saved in {tmp_path / 'w.token'}" in text and f"saved in {tmp_path / 'a.token'}" in text
        start = aiperf("start", "--duration", "3m", "--profile", "smoke", cwd=tmp_path,
                       env={"AIPERF_MASTER": f"127.0.0.1:{port}", "AIPERF_ADMIN_TOKEN_FILE": str(tmp_path / "a.token")})
        assert start.returncode == 0, start.stderr
        # the metrics port is now busy: a second master names it, before listening anywhere
        busy = aiperf("master", "serve", "--port", str(free_port()), "--metrics-port", str(metrics),
                      "--data-dir", str(tmp_path / "d2"), cwd=tmp_path)
        assert busy.returncode == 2
        assert f"cannot serve metrics on 0.0.0.0:{metrics}: Address already in use" in error_line(busy)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl is not installed: cannot make certificates")
    d = tmp_path_factory.mktemp("tls")
    for name in ("a", "b"):
        subprocess.run([openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(d / f"{name}.key"),
                        "-out", str(d / f"{name}.crt"), "-days", "1", "-subj", "/CN=localhost"],
                       check=True, capture_output=True)
    subprocess.run([openssl, "pkey", "-in", str(d / "a.key"), "-aes256", "-passout", "pass:x",
                    "-out", str(d / "enc.key")], check=True, capture_output=True)
    (d / "junk.key").write_text("not a key")
    return d


def test_a_good_certificate_and_key_serve_tls(tls_files: Path, tmp_path: Path) -> None:
    port = free_port()
    proc, text = _serve(["--port", str(port), "--host", "127.0.0.1", "--data-dir", str(tmp_path / "data"),
                         "--tls-cert", str(tls_files / "a.crt"), "--tls-key", str(tls_files / "a.key")], {}, tmp_path)
    try:
        assert f"master listening on 127.0.0.1:{port} (tls=on)" in text, text
        env = {"AIPERF_MASTER": f"localhost:{port}", "AIPERF_TLS_CA": str(tls_files / "a.crt")}  # CN=localhost
        start = aiperf("start", "--duration", "3m", "--profile", "smoke", "--data-dir", str(tmp_path / "data"),
                       env=env, cwd=tmp_path)
        assert start.returncode == 0, start.stderr
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.mark.parametrize("key,message", [
    ("junk.key", "is not a PEM private key"),
    ("a.crt", "is not a PEM private key"),
    ("enc.key", "is encrypted"),
    ("b.key", "is not the key of --tls-cert"),
])
def test_tls_key_problems_are_named(tls_files: Path, tmp_path: Path, key: str, message: str) -> None:
    proc = aiperf("master", "serve", "--port", "0", "--tls-cert", str(tls_files / "a.crt"),
                  "--tls-key", str(tls_files / key), "--data-dir", str(tmp_path / "d"), timeout=60)
    assert proc.returncode == 2 and message in error_line(proc)
    assert not (tmp_path / "d").exists()


# --------------------------------------------------------------------------- databases: driver, masking


@pytest.mark.parametrize("url,code,message", [
    ("mysql://u:p@127.0.0.1:1/x", 2, "pip install 'mysqlclient'"),
    (f"mysql://u:{SECRET}@127.0.0.1:1/x", 2, "mysql://u:***@127.0.0.1:1/x"),
    (f"postgresql+asyncpg://u:{SECRET}@127.0.0.1:1/x", 2, "use postgresql+psycopg:// instead"),
    (f"notadb://u:{SECRET}@h/x", 2, "unknown database kind 'notadb'"),
    (f"postgresql//u:{SECRET}@h/x", 2, "--db is not a database URL"),
    (f"postgresql+psycopg://u:{SECRET}@127.0.0.1:{{port}}/x", 3, "postgresql+psycopg://u:***@127.0.0.1:"),
    (f"postgresql+psycopg://u@127.0.0.1:{{port}}/x?password={SECRET}", 3, "?password=***"),
])
def test_database_urls_are_checked_and_masked(url: str, code: int, message: str, tmp_path: Path) -> None:
    url = url.replace("{port}", str(free_port()))
    for args, env in ((["--db", url], {}), ([], {"AIPERF_DB": url})):
        proc = aiperf("master", "serve", "--port", "0", "--data-dir", str(tmp_path / "d"), *args, env=env, timeout=60)
        assert proc.returncode == code, proc.stderr
        assert SECRET not in proc.stdout + proc.stderr
        line = proc.stderr.strip().splitlines()[-1]  # after the master's start-up log lines
        assert line.startswith("aiperf: error: ") and message in line, proc.stderr
        assert "Traceback" not in proc.stderr


def test_a_refusing_postgresql_is_exit_4_and_masked(tmp_path: Path) -> None:
    from sqlalchemy.engine import make_url

    from tests.conftest import postgres_url

    base = postgres_url()
    if base is None:
        pytest.skip("AIPERF_TEST_POSTGRES_URL not set")
    url = make_url(base).set(username="aiperf_no_such_role", password=SECRET).render_as_string(hide_password=False)
    proc = aiperf("master", "serve", "--port", "0", "--db", url, "--data-dir", str(tmp_path / "d"), timeout=60)
    assert proc.returncode == 4, proc.stderr
    assert SECRET not in proc.stdout + proc.stderr
    assert "refused" in proc.stderr.strip().splitlines()[-1]


def test_the_master_logs_its_database_url_masked(postgres_schema_url: str, tmp_path: Path, caplog: Any) -> None:
    import logging

    from sqlalchemy.engine import make_url

    from master.server import MasterConfig, serve

    # the test server trusts local connections: the password is sent and ignored
    url = make_url(postgres_schema_url).set(password=SECRET).render_as_string(hide_password=False)
    with caplog.at_level(logging.INFO):
        h = serve(MasterConfig(url, port=0, host="127.0.0.1", data_dir=tmp_path, worker_token="w", admin_token="a",
                               env={}))
        h.stop(grace_s=0)
    assert "event=master_listening" in caplog.text and ":***@" in caplog.text
    assert SECRET not in caplog.text


def test_make_engine_does_not_quote_an_unparsable_url() -> None:
    from sqlalchemy.exc import ArgumentError

    from master.store.sql.engine import make_engine

    with pytest.raises(ArgumentError) as caught:
        make_engine(f"://u:{SECRET}@host/db")
    assert SECRET not in str(caught.value) and "://u:***@host/db" in str(caught.value)


PASSWORDS = st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), min_size=1, max_size=30)


@given(password=PASSWORDS, in_query=st.booleans())
@settings(max_examples=200, deadline=None)
def test_masked_urls_never_contain_the_password(password: str, in_query: bool) -> None:
    from urllib.parse import quote

    from master.store.sql.urls import mask_url, scrub

    encoded = quote(password, safe="")
    url = (f"postgresql+psycopg://user@db.example:5432/aiperf?password={encoded}" if in_query
           else f"postgresql+psycopg://user:{encoded}@db.example:5432/aiperf")
    masked = ("postgresql+psycopg://user@db.example:5432/aiperf?password=***",
              "postgresql+psycopg://user:***@db.example:5432/aiperf")
    assert mask_url(url) == masked[0 if in_query else 1]
    if any(password in m or encoded in m for m in masked):
        return  # a "password" such as "user" or "5432" is part of any masked URL
    if len(password) >= 4:  # master.store.sql.urls.MIN_SCRUBBED
        text = scrub(f"connecting as {password} to {url} failed ({encoded})", url)
        assert password not in text and encoded not in text, text


# --------------------------------------------------------------------------- TensorFlow's start-up output


@pytest.mark.slow
def test_a_dataset_error_is_one_line_without_tensorflow_logs(tmp_path: Path) -> None:
    empty = tmp_path / "imagenet"
    empty.mkdir()  # exists, so TensorFlow is imported to look for shards
    proc = aiperf("worker", "--master", UNREACHABLE, "--token", "t", "--dataset", str(empty),
                  "--dataset-format", "imagenet-tfrecord")
    assert proc.returncode == 2
    assert error_line(proc) == f"aiperf: error: {empty}: no train-* shards found"


def test_held_output_is_shown_unless_the_dataset_is_bad(capfd: Any) -> None:
    from aiperf_cli.worker import held_stderr
    from worker.data import DatasetError

    def chatty(fail: bool) -> str:
        os.write(2, b"I0000 cudart_stub.cc:31] Could not find cuda drivers\n")
        if fail:
            raise DatasetError("/data: no train-* shards found")
        return "opened"

    def show(exc: BaseException | None) -> bool:
        return not isinstance(exc, DatasetError)

    assert held_stderr(lambda: chatty(False), show) == "opened"
    assert "cudart_stub" in capfd.readouterr().err  # a good dataset: everything TensorFlow said
    with pytest.raises(DatasetError):
        held_stderr(lambda: chatty(True), show)
    assert capfd.readouterr().err == ""  # a bad one: nothing but the error (printed by the caller)
    with pytest.raises(ZeroDivisionError):  # a bug: the held output helps, it is shown
        held_stderr(lambda: (os.write(2, b"context\n"), 1 / 0), show)
    assert "context" in capfd.readouterr().err


# --------------------------------------------------------------------------- property: no traceback, no exit 1


def _options(graph: str, a_file: str) -> list[tuple[list[str], str, type, float, float, bool, set[int]]]:
    """(command, option, type, low, high, low excluded, exit codes of a valid value): every
    numeric option, each command arranged to end quickly once its arguments are accepted."""
    serve = ["master", "serve", "--db", "mysql://u:p@127.0.0.1:1/x"]  # stops at the missing driver: 2
    worker = ["worker"]  # stops at "no master address": 2
    demo = ["demo", "--dir", a_file]  # stops at --dir being a file: 2
    start = ["start", "--duration", "3m", *CONTROL]
    return [
        *[([c, *CONTROL], "--run", int, 0, MAX_ID, False, {3}) for c in CONTROL_COMMANDS],
        (start, "--seed", int, 0, MAX_SEED, False, {3}),
        *[(start, o, int, 0, UINT32_MAX, False, {3})
          for o in ("--max-models", "--max-rounds", "--max-epochs", "--warmup-rounds", "--min-workers")],
        *[([c, *CONTROL], "--limit", int, 1, MAX_PAGE, False, {3}) for c in ("runs", "workers", "models")],
        (["graph", "morph", graph, "--seed", "1"], "--max-params", int, 1, INT64_MAX, False, {0, 2}),
        (["graph", "morph", graph, "--seed", "1"], "--max-layers", int, 1, 10**6, False, {0, 2}),
        (["graph", "morph", graph], "--seed", int, 0, MAX_SEED, False, {0}),
        (["graph", "resnet50"], "--input-size", int, 32, 8192, False, {0}),
        (["graph", "resnet50"], "--classes", int, 2, 10**6, False, {0}),
        (["graph", "resnet50"], "--width", float, 0, 16, True, {0}),
        (serve, "--port", int, 0, 65535, False, {2}),
        (serve, "--metrics-port", int, 0, 65535, False, {2}),
        (serve, "--heartbeat-interval", float, 0.1, 3600, False, {2}),
        (serve, "--stop-grace", float, 0, 86400, False, {2}),
        (serve, "--resume-outage", float, 0, 30 * 86400, False, {2}),
        (worker, "--generator-processes", int, 1, 1024, False, {2}),
        (worker, "--input-pipeline-cpus", int, 0, 1024, False, {2}),
        (worker, "--health-port", int, 0, 65535, False, {2}),
        (demo, "--minutes", float, 0, 43200, True, {2}),
        (demo, "--seed", int, 0, MAX_SEED, False, {2}),
        (demo, "--port", int, 0, 65535, False, {2}),
    ]


def _numbers(kind: type, low: float, high: float) -> st.SearchStrategy[str]:
    edges = [int(low) - 1, int(low), int(high), int(high) + 1, INT64_MAX, INT64_MAX + 1, UINT64_MAX + 1,
             -(2**63) - 1, 10**400]
    ints = st.one_of(st.integers(), st.integers(-(2**70), 2**70), st.sampled_from(edges))
    if kind is int:
        return ints.map(str)
    floats = st.floats(allow_nan=True, allow_infinity=True).map(repr)
    return st.one_of(ints.map(str), floats, st.sampled_from(["nan", "-nan", "inf", "-inf", "1e400", "-0.0",
                                                             repr(low), repr(high)]))


def _in_range(text: str, kind: type, low: float, high: float, exclusive: bool) -> bool:
    value = int(text) if kind is int else float(text)
    return value == value and (low < value if exclusive else low <= value) and value <= high


def _run_main(argv: list[str]) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    return rc, err.getvalue()


@pytest.fixture(scope="module")
def option_table(graph_file: str, tmp_path_factory: pytest.TempPathFactory) -> list[Any]:
    a_file = tmp_path_factory.mktemp("demo") / "not-a-directory"
    a_file.write_text("")
    return _options(graph_file, str(a_file))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_numeric_options_never_traceback_or_exit_1(option_table: list[Any], data: st.DataObject) -> None:
    command, option, kind, low, high, exclusive, valid_codes = data.draw(st.sampled_from(option_table))
    text = data.draw(_numbers(kind, low, high))
    rc, err = _run_main([*command, f"{option}={text}"])  # --opt=value: a value may start with "-"
    assert rc != 1 and "Traceback" not in err
    assert len(err.strip().splitlines()) <= 1 or rc == 0, err
    if _in_range(text, kind, low, high, exclusive):
        assert rc in valid_codes, (command, option, text, err)
        assert f"'{option}'" not in err, err
    else:
        assert rc == 2 and f"'{option}'" in err, (command, option, text, err)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_text_for_a_numeric_option_is_an_answer_not_a_crash(option_table: list[Any], data: st.DataObject) -> None:
    command, option, _kind, _low, _high, _exclusive, valid_codes = data.draw(st.sampled_from(option_table))
    text = data.draw(st.text(max_size=40) | st.from_regex(r"\s*[+-]?[0-9_.eE]{0,30}\s*", fullmatch=True))
    rc, err = _run_main([*command, f"{option}={text}"])
    assert rc in valid_codes | {2}, (command, option, text, err)
    assert "Traceback" not in err and len(err.strip().splitlines()) <= 1, err
    assert re.match(r"(aiperf: error: .*)?$", err.strip()), err
