"""`aiperf master serve / start / stop / status / scoreboard / models` as a user runs them."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from aiperf.hyperparameters import Hyperparameters
from aiperf_cli.format import parse_duration
from aiperf_cli.main import main
from tests.support.cli_runs import run_cli as run

SCOREBOARD_KEYS = {"run_id", "state", "profile", "elapsed_s", "flops", "score", "regulated_score", "valid_flops",
                   "error", "valid", "invalid_reason", "provisional", "workers", "accelerators", "models_done"}


@pytest.mark.parametrize("text,seconds", [("1h", 3600), ("90m", 5400), ("1h30m", 5400), ("3600", 3600),
                                          ("2.5h", 9000), ("45s", 45)])
def test_parse_duration(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["1x", "", "h", "0", "1h x", "-5m"])
def test_bad_durations_are_refused(text):
    with pytest.raises(ValueError):
        parse_duration(text)


def test_start_status_scoreboard_stop(cli, capsys):
    rc, out, err = run(capsys, "start", "--duration", "1h", "--seed", "5", "--json")
    assert rc == 0, err
    started = json.loads(out)
    assert started["state"] == "running" and started["profile"] == "official" and started["seed"] == 5
    assert started["duration_s"] == 3600
    assert started["precision"] == "mixed_fp16" and started["xla"] is True  # the official defaults

    rc, out, _ = run(capsys, "status", "--json")
    st = json.loads(out)
    assert rc == 0 and st["run_id"] == started["run_id"] and st["state"] == "running"
    assert st["official"] is True and st["unofficial_reasons"] == []
    rc, out, _ = run(capsys, "status")
    assert rc == 0 and f"run {started['run_id']} running" in out

    rc, out, _ = run(capsys, "scoreboard", "--json")
    sb = json.loads(out)
    assert rc == 0 and SCOREBOARD_KEYS <= set(sb)
    assert sb["provisional"] is True and sb["valid"] is False and sb["workers"] == 0
    rc, out, _ = run(capsys, "scoreboard", "--run", str(started["run_id"]))
    assert rc == 0 and "Score (provisional)" in out and "Regulated score" in out and "Valid FLOPS" in out
    assert "official, mixed_fp16, XLA)" in out  # the precision is in the headline

    rc, out, err = run(capsys, "start", "--duration", "1h")  # refused by the master: exit 4
    assert rc == 4 and "still active" in err and len(err.strip().splitlines()) == 1

    rc, out, _ = run(capsys, "stop")
    assert rc == 0 and ("finished" in out or "stopping" in out)
    rc, out, _ = run(capsys, "models", "--json")
    assert rc == 0 and json.loads(out)["total"] == 0


def test_deterministic_is_recorded_in_the_run_config(master_server, tmp_path, capsys, monkeypatch):
    from rich.console import Console

    import aiperf_cli.demo as demo
    from aiperf.api.client import ControlClient
    from aiperf.api.control_session import ControlSession

    db = f"sqlite:///{tmp_path / 'runs.db'}"
    h = master_server(db)
    monkeypatch.setenv("AIPERF_MASTER", h.address)
    monkeypatch.setenv("AIPERF_ADMIN_TOKEN", h.admin_token)
    rc, out, err = run(capsys, "start", "--duration", "1h", "--deterministic", "--json")
    assert rc == 0, err
    first = json.loads(out)
    assert first["deterministic"] is True
    rc, out, _ = run(capsys, "start", "--duration", "1h", "--deterministic")
    assert rc == 4  # refused by the master (a run is active): nothing recorded
    assert run(capsys, "stop", "--abort")[0] == 0
    rc, out, _ = run(capsys, "start", "--duration", "1h", "--json")
    second = json.loads(out)
    assert rc == 0 and second["deterministic"] is False
    assert run(capsys, "stop", "--abort")[0] == 0
    # `aiperf demo --deterministic` starts its run the same way
    monkeypatch.setattr(demo, "_watch", lambda *args: None)
    monkeypatch.setattr(demo, "fetch_report", lambda control, run_id: ({}, ""))
    monkeypatch.setattr(demo, "scoreboard_view", lambda board: "")
    with ControlClient(h.address, h.admin_token) as control:
        demo._run(Console(quiet=True), ControlSession(control), tmp_path, 5.0, 3, None, True)
    # what workers read comes from the run's config in SQL: a restarted master keeps it
    h.stop(grace_s=0)
    again = master_server(db)
    with ControlClient(again.address, again.admin_token) as control:
        recorded = {n: control.run_status(n).run.config.deterministic for n in (1, 2, 3)}
    assert recorded == {first["run_id"]: True, second["run_id"]: False, 3: True}


@pytest.mark.parametrize("argv,code,message", [
    (["start", "--duration", "1x"], 2, "bad duration '1x'"),
    (["start", "--duration", "30m"], 2, "at least 3600 s"),  # the master's INVALID_ARGUMENT
    (["start", "--duration", "1h", "--profile", "fast"], 2, "'fast' is not one of 'official', 'smoke'"),
    (["start", "--duration", "1h", "--precision", "fp4"], 2, "'fp4' is not one of 'fp32', 'mixed_fp16'"),
    (["models", "--state", "weird"], 2, "'weird' is not one of 'queued', 'training', 'done'"),
    (["scoreboard", "--run", "99"], 4, "run 99 not found"),  # refused by the master: NOT_FOUND
])
def test_bad_input_is_one_line_with_its_exit_code(cli, capsys, argv, code, message):
    rc, out, err = run(capsys, *argv)
    assert rc == code, err
    assert message in err and len(err.strip().splitlines()) == 1


def test_unreachable_master_and_wrong_token(cli, capsys, monkeypatch):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
    rc, _, err = run(capsys, "status", "--master", f"127.0.0.1:{free}")
    assert rc == 3 and "unreachable: nothing listens there" in err and len(err.strip().splitlines()) == 1
    rc, _, err = run(capsys, "status", "--admin-token", "wrong")
    assert rc == 4 and "refused the admin token" in err


@pytest.mark.parametrize("argv", [["start", "--duration", "1h"], ["stop"], ["status"], ["scoreboard"], ["models"],
                                  ["runs"], ["workers"],
                                  ["report"]])
def test_every_control_command_takes_the_shared_options(capsys, monkeypatch, tmp_path, argv):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("AIPERF_ADMIN_TOKEN", raising=False)
    shared = ["--master", "127.0.0.1:1", "--data-dir", str(tmp_path)]
    monkeypatch.delenv("AIPERF_ADMIN_TOKEN_FILE", raising=False)
    rc, _, err = run(capsys, *argv, *shared)
    assert rc == 2 and err == "aiperf: error: no admin token: pass --admin-token or --admin-token-file, set " \
                              "AIPERF_ADMIN_TOKEN or AIPERF_ADMIN_TOKEN_FILE, or run where " \
                              f"{tmp_path / 'admin.token'} exists\n"
    rc, _, err = run(capsys, *argv, *shared, "--admin-token", "t", "--tls-ca", "/no/ca.pem")
    assert rc == 2 and err == "aiperf: error: cannot read CA certificate /no/ca.pem: No such file or directory\n"


@pytest.mark.parametrize("frontends", [0, 2])
def test_serve_command_generates_tokens_and_serves(tmp_path: Path, frontends: int):
    import psutil

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if k not in ("AIPERF_TOKEN", "AIPERF_ADMIN_TOKEN", "AIPERF_MASTER")}
    data = tmp_path / "data"
    proc = subprocess.Popen(
        [sys.executable, "-m", "aiperf_cli", "master", "serve", "--port", str(port), "--host", "127.0.0.1",
         "--data-dir", str(data), "--heartbeat-interval", "1", "--frontends", str(frontends)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=tmp_path,
    )
    children: list[psutil.Process] = []
    try:
        lines = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            if "master listening" in line:
                break
        text = "".join(lines)
        assert "master listening on 127.0.0.1:" in text, text
        admin = (data / "admin.token").read_text().strip()
        assert f"generated admin token (saved in {data / 'admin.token'}): {admin}" in text
        status = subprocess.run(
            [sys.executable, "-m", "aiperf_cli", "start", "--duration", "2m", "--profile", "smoke", "--json",
             "--master", f"127.0.0.1:{port}", "--data-dir", str(data)],
            capture_output=True, text=True, env=env, timeout=60,
        )
        assert status.returncode == 0, status.stderr
        assert json.loads(status.stdout)["profile"] == "smoke"
        children = psutil.Process(proc.pid).children()
        assert len(children) == frontends  # the front ends; SIGTERM to the master stops them too
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert proc.returncode == 0
    assert all(not child.is_running() or child.status() == psutil.STATUS_ZOMBIE for child in children)
    assert (tmp_path / "data" / "master.db").exists()


@pytest.mark.parametrize("value", ["-1", "257", "two"])
def test_serve_refuses_a_bad_number_of_frontends(tmp_path: Path, capsys, value: str):
    rc = main(["master", "serve", "--port", "0", "--data-dir", str(tmp_path / "d"), "--frontends", value])
    err = capsys.readouterr().err
    assert rc == 2 and "--frontends" in err and len(err.strip().splitlines()) == 1


def test_serve_refuses_a_database_newer_than_it_knows(tmp_path: Path, capsys):
    from sqlalchemy import text

    from master.store.sql.sql_store import SqlStore

    url = f"sqlite:///{tmp_path / 'm.db'}"
    store = SqlStore(url)
    with store.engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '9999_future'"))
    store.close()
    rc = main(["master", "serve", "--db", url, "--port", "0", "--data-dir", str(tmp_path / "d")])
    err = capsys.readouterr().err
    assert rc == 2 and "newer than this master knows" in err


def test_report_writes_a_self_contained_html_file(cli, capsys, tmp_path, small_graph):
    from aiperf.api.client import ResourceSample, WorkerClient
    from aiperf.flops import count_flops

    assert run(capsys, "start", "--duration", "5m", "--profile", "smoke")[0] == 0
    w = WorkerClient(cli.address, cli.worker_token)
    wid = w.register(name="n1", host="n1").worker_id
    fc = count_flops(small_graph)
    mid = w.submit_model(wid, small_graph.to_json(), small_graph.hash(), 0, 1,
                         Hyperparameters(32, 3)).model_id
    w.report_progress(wid, mid, 1, 3200, 320, 1, fc.ops(3200, 320), val_accuracy=0.5)
    w.send_resource_samples(wid, [ResourceSample(cpu_util=0.4, memory_used=1 << 30)])
    w.finish_model(wid, mid, "done", best_accuracy=0.5)

    out = tmp_path / "r.html"
    rc, text, err = run(capsys, "report", "--out", str(out))
    assert rc == 0, err
    assert text.startswith(f"wrote {out} (run 1, running, score ")
    page = out.read_text()
    assert page.startswith("<!DOCTYPE html>") and "Invalid run" in page  # a 5-minute smoke run is never valid
    assert page.count("<svg") == 5  # score over time (Fig. 4), FLOPS, error, utilisation, memory
    assert "FLOPS(t)" in page and "n1" in page and small_graph.hash()[:12] in page
    assert "Score over time (the paper&#x27;s Fig. 4)" in page or "Score over time (the paper's Fig. 4)" in page
    assert "regulated score -ln(Error(t))·FLOPS(t)" in page
    assert "Unofficial because</th><td>the smoke profile is never official" in page
    # the checklist, one row per rule: running for seconds of its 2 minutes, the rule is pending
    assert "<h3>Validity checklist</h3>" in page and '<tr class="pending"><td>Running time</td><td>pending' in page
    assert '<tr class="not-applicable"><td>Audit</td>' in page  # smoke: the audit does not decide validity
    # what the numbers mean: a note per score, a glossary; the best models in the master's ranking, the rule
    # stated; the audits as a table (none yet); each worker's software
    assert "<h2>What the numbers mean</h2>" in page and "<h3>Glossary</h3>" in page
    assert "Error &lt; 1/e = 0.368" in page and "<dt>Regulated score</dt>" in page
    assert "Ranked as the master ranks a run&#x27;s finished models" in page
    assert f"<tr><td>1</td><td>{mid}</td><td>-</td><td>0.5000</td>" in page  # rank, id, predicted, best
    assert "<h2>Audits</h2>" in page and "No model of this run has been audited" in page
    assert "; software " in page
    assert "not rates of work" in page  # the score chart's caption: why two lines sit above FLOPS
    for external in ("<script", "<link", 'src="http', 'href="http'):  # nothing fetched from the web
        assert external not in page


@pytest.mark.parametrize("argv, code, message", [
    (["report", "--run", "999"], 4, "run 999 not found"),
    (["report", "--out", "/nonexistent-dir/r.html"], 2, "directory /nonexistent-dir does not exist"),
])
def test_report_errors_are_one_line_with_their_exit_code(cli, capsys, argv, code, message):
    assert run(capsys, "start", "--duration", "5m", "--profile", "smoke")[0] == 0
    rc, out, err = run(capsys, *argv)
    assert rc == code and message in err and len(err.strip().splitlines()) == 1


def test_overrides_make_an_official_run_unofficial_with_reasons(cli, capsys):
    rc, out, err = run(capsys, "start", "--duration", "1h", "--precision", "fp32", "--no-xla",
                       "--warmup-rounds", "2", "--max-epochs", "3", "--json")
    assert rc == 0, err
    assert json.loads(out)["xla"] is False
    rc, out, _ = run(capsys, "scoreboard", "--json")
    sb = json.loads(out)
    assert sb["official"] is False and sb["unofficial_reasons"] == [
        "--warmup-rounds 2 (official: 5)", "--max-epochs 3 (official: no cap)",
        "precision fp32 (official: mixed_fp16 or mixed_bf16)", "XLA off (official: on)"]
    rc, out, _ = run(capsys, "status")
    assert rc == 0 and "unofficial: --warmup-rounds 2 (official: 5)" in " ".join(out.split())
    rc, out, _ = run(capsys, "scoreboard")
    assert "(official, unofficial, fp32)" in out and "Official" in out
