"""The mapping of a run onto MLPerf's log keys (aiperf_cli/mllog.py, docs/spec.md "MLPerf logs"),
on export dicts built here; the export of real runs, checked by MLPerf's own compliance
checker, is in tests/test_export.py and tests/test_e2e.py."""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aiperf.profiles import OFFICIAL, SMOKE
from aiperf_cli import mllog
from tests.support.mlperf_checker import check_log

T0 = 1_700_000_000.0
SUB = mllog.Submission(org="org", platform=None, status="research")
H100 = {"model": "NVIDIA H100 80GB HBM3", "memory_bytes": 80 << 30, "peak_flops": None}
DIGITS = {"kind": "digits", "train_images": 1437, "validation_images": 360}


def node(worker_id: int, accelerators: list[dict] = (), cpus: int = 4, dataset: dict | None = DIGITS) -> dict:
    return {"worker_id": worker_id, "accelerators": list(accelerators), "cpus": cpus, "dataset": dataset}


def model(model_id: int, worker_id: int = 1, epochs: int = 2, accuracy: float | None = 0.6, start: float = 10,
          end: float | None = 50, batch: int = 32, state: str = "done") -> dict:
    return {"model_id": model_id, "worker_id": worker_id, "round": model_id, "parent_id": None,
            "hyperparameters": {"batch_size": batch, "kernel_size": 3}, "epochs": epochs,
            "images_trained": 1437 * epochs, "images_validated": 360 * epochs, "created_at": T0 + start,
            "finished_at": None if end is None else T0 + end, "best_accuracy": accuracy, "state": state}


def export(models: list[dict], hardware: list[dict] = None, state: str = "finished", valid: bool = True,
           started: float | None = 0.0, stopped: float | None = 100.0, stop_reason: str = "deadline reached") -> dict:
    board = {"run_id": 3, "state": state, "profile": "smoke", "precision": "fp32", "seed": 7, "duration_s": 100.0,
             "created_at": T0 - 5, "started_at": None if started is None else T0 + started,
             "stopped_at": None if stopped is None else T0 + stopped, "finished_at": None,
             "elapsed_s": 100.0 if stopped is not None else 60.0, "valid": valid, "stop_reason": stop_reason,
             "hardware": [node(1)] if hardware is None else hardware, "invalid_reason": None,
             "rules_version": "aiperf-rules 1.0"}
    board.update({key: 1.0 for key in mllog.BOARD_KEYS if key not in board})
    return {"scoreboard": board, "models": models,
            "timeline": {"points": [{"elapsed_s": 50.0, "ops": 1e12, "flops": 2e10, "best_accuracy": 0.6}]}}


def lines(text: str) -> list[dict]:
    assert text.endswith("\n")
    out = []
    for line in text.splitlines():
        assert line.startswith(":::MLLOG {")
        out.append(json.loads(line[len(":::MLLOG "):]))
    return out


def keys(text: str) -> list[str]:
    return [d["key"] for d in lines(text)]


def test_every_profile_field_is_logged_or_declared_without_an_mlperf_key():
    assert mllog.unmapped_profile_fields() == set(), "map it in aiperf_cli/mllog.py (PROFILE_KEYS or NOT_MLPERF)"
    assert not set(mllog.PROFILE_KEYS) & mllog.NOT_MLPERF


def test_hyperparameters_are_the_profiles_and_the_workers_recipe():
    # paper Table IV: "Optimizer: gradient descent with momentum", "Learning rate: 0.1"; the original's
    # label smoothing 0.1, weight decay 1e-4, early stopping on val_loss (min_delta 0.001), 2 trials
    assert mllog.hyperparameters(OFFICIAL) == {
        "opt_name": "sgd", "sgd_opt_base_learning_rate": 0.1, "sgd_opt_momentum": 0.9,
        "sgd_opt_end_learning_rate": 0.0, "sgd_opt_learning_rate_decay_poly_power": 1.0,
        "sgd_opt_weight_decay": 1e-4, "opt_learning_rate_warmup_epochs": 0, "aiperf_lr_decay": "round",
        "aiperf_label_smoothing": 0.1, "aiperf_early_stop_monitor": "val_loss",
        "aiperf_early_stop_min_delta": 0.001, "aiperf_trials_per_architecture": 2}
    assert mllog.hyperparameters(SMOKE)["sgd_opt_base_learning_rate"] == SMOKE.learning_rate == 0.05
    assert mllog.hyperparameters(SMOKE)["sgd_opt_weight_decay"] == 0.0
    # the paper's schedule ends a 60-epoch round at 0.1/60
    paper = dataclasses.replace(OFFICIAL, lr_decay="max_epochs")
    assert mllog.hyperparameters(paper)["sgd_opt_end_learning_rate"] == pytest.approx(0.1 / 60)


@pytest.mark.parametrize("hardware, platform", [
    ([], "unknown"),
    ([node(1, [H100] * 8), node(2, [H100] * 8)], "2 nodes, 16xNVIDIA H100 80GB HBM3"),
    ([node(1, [H100] * 8), node(2, cpus=64)], "2 nodes, 8xNVIDIA H100 80GB HBM3 + 64 CPUs without accelerator"),
    ([node(1, cpus=2)], "1 node, 2 CPUs without accelerator"),
])
def test_the_default_platform_describes_the_registered_workers(hardware, platform):
    assert mllog.describe_platform(hardware) == platform


def test_global_batch_size_only_when_every_model_used_one():
    hardware = [node(1, [H100] * 8), node(2)]
    assert mllog.global_batch_size([model(1, batch=448), model(2, batch=448)], hardware) == 8 * 448
    assert mllog.global_batch_size([model(1, batch=448), model(2, worker_id=2, batch=448)], hardware) is None
    assert mllog.global_batch_size([model(1, batch=448), model(2, batch=400)], hardware) is None
    assert mllog.global_batch_size([model(1, batch=448), model(2, epochs=0, batch=400) | {"images_trained": 0}],
                                   hardware) == 8 * 448  # a model that never trained has no batch


def test_a_finished_run_passes_the_checker_and_a_model_after_the_window_stays_after_run_stop(tmp_path):
    late = model(2, start=90, end=130)  # drained after the window ended at 100 s
    text = mllog.to_mllog(export([model(1), late]), SUB)
    k = keys(text)
    assert k.index("init_start") < k.index("init_stop") < k.index("run_start") < k.index("run_stop")
    assert k[-1] == "block_stop" and k.index("run_stop") < len(k) - 1
    times = [d["time_ms"] for d in lines(text)][k.index("run_start"):]
    assert times == sorted(times)
    log = tmp_path / "run.log"
    log.write_text(text)
    assert check_log(log).passed


def test_split_sizes_follow_the_workers_and_are_absent_when_none_reported(tmp_path):
    other = {"kind": "digits", "train_images": 1000, "validation_images": 300}
    text = mllog.to_mllog(export([model(1)], [node(1), node(2), node(3, dataset=other)]), SUB)
    (train,) = [d for d in lines(text) if d["key"] == "train_samples"]
    assert train["value"] == 1437 and train["metadata"]["aiperf_workers_with_another_split"] == [3]
    text = mllog.to_mllog(export([model(1)], [node(1, dataset=None)]), SUB)
    assert "train_samples" not in keys(text)
    log = tmp_path / "run.log"
    log.write_text(text)
    verdict = check_log(log)  # the rules want the split: a log without it is refused
    assert verdict.returncode == 1 and "train_samples" in verdict.output


def test_status_is_success_only_for_a_valid_finished_run():
    def status(**kw) -> str:
        (stop,) = [d for d in lines(mllog.to_mllog(export([model(1)], **kw), SUB)) if d["key"] == "run_stop"]
        return stop["metadata"]["status"]

    assert status() == "success"
    assert status(valid=False) == "aborted"
    assert status(state="aborted", valid=False) == "aborted"


def test_a_run_not_over_has_no_run_stop_and_a_pending_run_no_run_start(tmp_path):
    text = mllog.to_mllog(export([model(1), model(2, end=None)], state="running", stopped=None), SUB)
    k = keys(text)
    assert "run_stop" not in k and k.count("block_start") == 2 and k.count("block_stop") == 1
    log = tmp_path / "running.log"
    log.write_text(text)
    verdict = check_log(log)
    assert verdict.returncode == 1 and "run_stop" in verdict.output
    k = keys(mllog.to_mllog(export([], state="pending", started=None, stopped=None), SUB))
    assert "init_start" in k and not {"init_stop", "run_start", "run_stop"} & set(k)


def test_each_model_is_a_block_with_its_epochs_and_its_accuracy_at_the_last():
    text = mllog.to_mllog(export([model(1, epochs=3, accuracy=0.7), model(2, accuracy=None, state="abandoned"),
                                  model(3, epochs=0) | {"images_trained": 0}]), SUB)
    d = lines(text)
    starts = [x["metadata"] for x in d if x["key"] == "block_start"]
    assert [(s["aiperf_model_id"], s["first_epoch_num"], s["epoch_count"]) for s in starts] == [(1, 1, 3), (2, 1, 2)]
    (acc,) = [x for x in d if x["key"] == "eval_accuracy"]
    assert acc["value"] == 0.7 and acc["metadata"]["epoch_num"] == 3 and acc["metadata"]["aiperf_model_id"] == 1
    stops = [x["metadata"] for x in d if x["key"] == "block_stop"]
    assert [s["aiperf_state"] for s in stops] == ["done", "abandoned"]


texts = st.text(min_size=1, max_size=256).filter(lambda s: s.strip() and s.isprintable())


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(org=texts, platform=texts, reason=st.text(max_size=300), chip=st.text(max_size=300))
def test_any_text_comes_back_through_mlperfs_parser_unchanged(tmp_path, org, platform, reason, chip):
    # --org/--platform from the command line; a stop reason and an accelerator's name from the
    # network: none may split a line or change on the way through the parser (":::MLLOG " in one
    # once cut its line at the token).
    from mlperf_logging.compliance_checker.mlp_parser import parse_file

    hardware = [node(1, [{"model": chip, "memory_bytes": 1, "peak_flops": None}])]
    text = mllog.to_mllog(export([model(1)], hardware, stop_reason=reason),
                          mllog.Submission(org=org, platform=platform, status="cloud"))
    log = tmp_path / "hostile.log"
    log.write_text(text)
    loglines, errors = parse_file(str(log), ruleset=mllog.RULESET)
    assert errors == [] and len(loglines) == len(text.splitlines())
    value = {ll.key: ll.value for ll in loglines}
    assert value["submission_org"]["value"] == org and value["submission_platform"]["value"] == platform
    assert value["run_stop"]["metadata"]["aiperf_stop_reason"] == reason
    default = mllog.to_mllog(export([model(1)], hardware), SUB)
    (platform_line,) = [d for d in lines(default) if d["key"] == "submission_platform"]
    assert platform_line["value"] == f"1 node, 1x{chip or 'unnamed accelerator'}"


def test_a_profile_this_aiperf_does_not_know_logs_no_hyperparameters(tmp_path):
    data = export([model(1)])
    data["scoreboard"]["profile"] = "unknown"  # a newer master's profile, as cli.records names it
    text = mllog.to_mllog(data, SUB)
    assert not {"opt_name", "sgd_opt_base_learning_rate"} & set(keys(text))
    log = tmp_path / "run.log"
    log.write_text(text)
    assert check_log(log).passed  # the open rules do not require them


def test_the_validity_checklist_is_logged_and_the_checker_still_passes(tmp_path):
    data = export([model(1)])
    data["scoreboard"]["checks"] = [
        {"rule": "running_time", "title": "Running time", "state": "passed", "figure": "0:01:40", "limit": ">= 0:01:40",
         "detail": None},
        {"rule": "error", "title": "Error", "state": "failed", "figure": "0.4000", "limit": "<= 0.30",
         "detail": "error 0.4000 > maximum 0.30"}]
    text = mllog.to_mllog(data, SUB)
    logged = {d["key"]: d for d in lines(text)}
    assert logged["aiperf_check_running_time"]["value"] == "passed"
    assert logged["aiperf_check_error"]["value"] == "failed"
    assert logged["aiperf_check_error"]["metadata"]["figure"] == "0.4000"
    assert logged["aiperf_check_error"]["metadata"]["limit"] == "<= 0.30"
    log = tmp_path / "run.log"
    log.write_text(text)
    assert check_log(log).passed
