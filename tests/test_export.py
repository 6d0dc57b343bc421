"""`aiperf export` and `aiperf compare` against a real master on a real port."""

from __future__ import annotations

import csv
import io
import json

import pytest

from aiperf_cli.main import main
from tests.support.master_clients import HP

# what a smoke worker reports of its dataset (tests/test_dataset_fingerprint.py)
DIGITS = {"kind": "digits", "train_images": 1437, "validation_images": 360, "num_classes": 10, "image_size": 32,
          "fingerprint": "0" * 64}


@pytest.fixture
def runs(master_server, monkeypatch, small_graph, capsys):
    """Run 1 (aborted): two models, one done at accuracy 0.5, three progress reports;
    run 2: running, nothing reported."""
    from aiperf.api.client import WorkerClient
    from aiperf.flops import count_flops

    h = master_server()
    monkeypatch.setenv("AIPERF_MASTER", h.address)
    monkeypatch.setenv("AIPERF_ADMIN_TOKEN", h.admin_token)
    assert main(["start", "--duration", "5m", "--profile", "smoke", "--seed", "7"]) == 0
    w = WorkerClient(h.address, h.worker_token)
    wid = w.register(name="n1", host="n1").worker_id
    fc = count_flops(small_graph)
    graph, digest = small_graph.to_json(), small_graph.hash()
    m1 = w.submit_model(wid, graph, digest, 0, 1, HP, dataset=DIGITS).model_id
    w.report_progress(wid, m1, 1, 3200, 320, 1, fc.ops(3200, 320), val_accuracy=0.5)
    w.finish_model(wid, m1, "done", best_accuracy=0.5)
    m2 = w.submit_model(wid, graph, digest, m1, 2, HP, dataset=DIGITS).model_id
    w.report_progress(wid, m2, 1, 640, 0, 0, fc.ops(640, 0))
    w.report_progress(wid, m2, 2, 640, 0, 0, fc.ops(640, 0))
    assert main(["stop", "--abort"]) == 0
    assert main(["start", "--duration", "5m", "--profile", "smoke"]) == 0
    capsys.readouterr()
    return {"h": h, "models": (m1, m2), "ops": fc.ops(3200, 320) + 2 * fc.ops(640, 0)}


def run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_json_export_holds_scoreboard_timeline_and_every_model(runs, capsys, monkeypatch):
    from aiperf.api.control_session import ControlSession

    monkeypatch.setattr(ControlSession, "page_size", 1)  # one model per ListModels call: the paging is exercised
    rc, out, err = run(capsys, "export", "--run", "1", "--format", "json")
    assert rc == 0, err
    data = json.loads(out)
    board = data["scoreboard"]
    assert board["run_id"] == 1 and board["state"] == "aborted" and board["seed"] == 7
    assert board["total_ops"] == runs["ops"] and not board["valid"]
    checks = {c["rule"]: c["state"] for c in board["checks"]}  # the checklist, as the scoreboard has it
    assert checks["running_time"] == "failed" and checks["audit"] == "not applicable"  # aborted at once; smoke
    assert sorted(m["model_id"] for m in data["models"]) == sorted(runs["models"])
    assert len(data["timeline"]["points"]) == 3
    assert data["timeline"]["points"][-1]["ops"] == runs["ops"]


def test_csv_tables(runs, capsys, tmp_path):
    out = tmp_path / "models.csv"
    rc, text, err = run(capsys, "export", "--run", "1", "--format", "csv", "--out", str(out))
    assert rc == 0 and text == f"wrote {out} ({out.stat().st_size:,} bytes)\n", err
    rows = list(csv.DictReader(out.open()))
    by_id = {int(r["model_id"]): r for r in rows}
    m1, m2 = runs["models"]
    assert set(by_id) == {m1, m2}
    # raw values, each column's unit in its name
    assert by_id[m1]["state"] == "done" and float(by_id[m1]["best_accuracy_fraction"]) == 0.5
    assert by_id[m2]["parent_id"] == str(m1) and by_id[m2]["batch_size"] == "32"
    assert by_id[m2]["best_accuracy_fraction"] == ""  # not known: an empty cell, not 0
    assert float(by_id[m1]["created_at_unix_s"]) > 0 and int(by_id[m1]["flops_per_train_image_flop"]) > 0

    rc, text, _ = run(capsys, "export", "--run", "1", "--format", "csv", "--table", "timeline")
    points = list(csv.DictReader(io.StringIO(text)))
    assert rc == 0 and len(points) == 3 and float(points[-1]["ops_flop"]) == runs["ops"]
    assert list(points[0]) == ["elapsed_s", "ops_flop", "flops", "best_accuracy_fraction"]
    rc, text, _ = run(capsys, "export", "--run", "1", "--format", "csv", "--table", "scoreboard")
    (row,) = list(csv.DictReader(io.StringIO(text)))
    assert rc == 0 and row["run_id"] == "1" and row["state"] == "aborted" and float(row["total_ops_flop"]) == runs["ops"]
    assert "score_flops" in row and "efficiency_fraction" in row and "elapsed_s" in row
    assert row["check_running_time"] == "failed" and row["check_precision"] == "passed"  # one column per rule


def test_mllog_export_is_read_back_by_the_mlperf_parser(runs, capsys, tmp_path):
    from mlperf_logging.compliance_checker.mlp_parser import parse_file

    out = tmp_path / "run1.log"
    rc, _, err = run(capsys, "export", "--run", "1", "--format", "mllog", "--out", str(out))
    assert rc == 0, err
    lines = out.read_text().splitlines()
    assert lines and all(line.startswith(":::MLLOG {") for line in lines)
    loglines, errors = parse_file(str(out), ruleset="4.0.0")
    assert errors == [] and len(loglines) == len(lines)  # every line read back
    keys = [ll.key for ll in loglines]
    assert keys.index("init_start") < keys.index("init_stop") < keys.index("run_start") < keys.index("block_start")
    assert keys.count("run_start") == keys.count("run_stop") == 1
    assert keys.count("aiperf_flops") == 3
    value = {ll.key: ll.value["value"] for ll in loglines}
    assert (value["submission_benchmark"], value["submission_division"]) == ("resnet", "open")
    assert (value["submission_org"], value["submission_status"]) == ("unknown", "research")
    assert value["submission_platform"] == "1 node, 0 CPUs without accelerator"  # n1 registered no hardware
    assert (value["train_samples"], value["eval_samples"]) == (1437, 360)  # the worker's reported split
    assert value["global_batch_size"] == 32  # both models: batch 32 on a worker without accelerators
    assert value["sgd_opt_base_learning_rate"] == 0.05 and value["opt_name"] == "sgd"  # the smoke profile's
    m1, m2 = runs["models"]
    (acc,) = [ll for ll in loglines if ll.key == "eval_accuracy"]
    assert acc.value["value"] == 0.5 and acc.value["metadata"]["aiperf_model_id"] == m1
    assert acc.value["metadata"]["epoch_num"] == 1  # m1 reported epoch 1
    starts = [ll.value["metadata"] for ll in loglines if ll.key == "block_start"]
    assert [(b["aiperf_model_id"], b["first_epoch_num"], b["epoch_count"]) for b in starts] == [(m1, 1, 1), (m2, 1, 1)]
    stop = next(ll for ll in loglines if ll.key == "run_stop")
    assert stop.value["metadata"]["status"] == "aborted"  # an aborted smoke run is no success
    start = next(ll for ll in loglines if ll.key == "run_start")
    assert start.timestamp <= stop.timestamp
    timed = loglines[keys.index("run_start"):]
    assert [ll.timestamp for ll in timed] == sorted(ll.timestamp for ll in timed)  # after init: by time
    total = next(ll for ll in loglines if ll.key == "aiperf_total_ops")
    assert total.value["value"] == runs["ops"]


def test_mllog_export_passes_the_mlperf_compliance_checker(runs, capsys, tmp_path):
    from tests.support.mlperf_checker import check_log

    out = tmp_path / "run1.log"
    rc, _, err = run(capsys, "export", "--run", "1", "--format", "mllog", "--out", str(out), "--org", "ACME Labs",
                     "--platform", "laptop", "--status", "onprem")
    assert rc == 0, err
    verdict = check_log(out)
    assert verdict.passed, verdict.output
    assert '"value": "ACME Labs"' in out.read_text() and '"value": "onprem"' in out.read_text()
    # The checker can fail: the same log without its run_stop is rejected.
    broken = tmp_path / "no-run-stop.log"
    broken.write_text("".join(line for line in out.read_text().splitlines(keepends=True) if '"key": "run_stop"' not in line))
    verdict = check_log(broken)
    assert verdict.returncode == 1 and "run_stop" in verdict.output, verdict.output


def test_compare_prints_runs_side_by_side(runs, capsys):
    rc, out, err = run(capsys, "compare", "1", "2", "--json")
    assert rc == 0, err
    boards = json.loads(out)["runs"]
    assert [b["run_id"] for b in boards] == [1, 2]
    assert [b["state"] for b in boards] == ["aborted", "running"]
    assert boards[0]["total_ops"] == runs["ops"] and boards[1]["total_ops"] == 0
    data = json.loads(out)
    assert data["ratios"]["score"][0] == 1.0  # the first run over itself
    assert data["ratios"]["score"][1] == 0.0  # run 2 has scored nothing yet
    differ = {d["key"]: d["values"] for d in data["differences"]}
    assert differ["seed"] == [7, 0] and "profile" not in differ  # both smoke; seeds 7 and 0
    rc, out, err = run(capsys, "compare", "1", "2")
    assert rc == 0, err
    assert "run 1" in out and "run 2" in out and "aborted" in out and "running" in out
    assert "score / run 1's" in out and "1.00x" in out and "0x" in out  # the ratios, as aiperf.units writes them
    assert "What differs between the runs" in out and "seed" in out
    assert "e+" not in out and "FLOPS" in out  # SI prefixes, never e-notation


@pytest.mark.parametrize("argv, code, message", [
    (["export", "--run", "999", "--format", "json"], 4, "run 999 not found"),
    (["export", "--format", "xml"], 2, "xml"),
    (["export", "--format", "mllog", "--org", " "], 2, "--org must not be empty"),
    (["export", "--format", "mllog", "--platform", "x" * 257], 2, "--platform is longer than 256 characters"),
    (["export", "--format", "mllog", "--org", "a\nb"], 2, "--org holds a control character"),
    (["export", "--format", "mllog", "--status", "closed"], 2, "closed"),
    (["export", "--format", "csv", "--out", "/nonexistent-dir/x.csv"], 2, "directory /nonexistent-dir does not exist"),
    (["compare", "1"], 2, "2 to 16 run ids"),
    (["compare", "1", "--", "-3"], 2, "out of range"),
    (["compare", "1", "9223372036854775808"], 2, "out of range"),
    (["compare", "1", "999"], 4, "run 999 not found"),
])
def test_errors_are_one_line_with_their_exit_code(runs, capsys, argv, code, message):
    rc, out, err = run(capsys, *argv)
    assert rc == code, (out, err)
    assert message in err and len(err.strip().splitlines()) == 1
