"""benchmarks/gpu_bench.py on the CPU (TensorFlow), at a size this machine trains in seconds: the
figures a GPU run prints, and its SKIP where no accelerator is visible. The GPU figures themselves
are in docs/benchmarks.md."""

from __future__ import annotations

import json

import pytest

from benchmarks import gpu_bench


def test_without_an_accelerator_it_skips_unless_asked_to_run_on_the_cpu(monkeypatch, capsys):
    monkeypatch.setattr(gpu_bench, "accelerator_name", lambda: "CPU")
    assert gpu_bench.main([]) == 2
    assert capsys.readouterr().out.startswith("SKIP no NVIDIA accelerator")


def test_both_resnets_train_and_every_figure_is_printed_and_recorded(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(gpu_bench, "accelerator_name", lambda: "CPU")
    out = tmp_path / "gpu.jsonl"
    # XLA off: compiling three full-width ResNet-50 training steps with XLA took two thirds of this
    # test on the CPU; the setting is handed through unchanged (asserted below) and XLA's own
    # compiled round is tested in tests/test_trainer.py
    assert gpu_bench.main(["--allow-cpu", "--batch", "2", "--size", "32", "--classes", "10", "--precisions", "fp32",
                           "--xla", "off", "--gemm-n", "64", "--gemm-types", "float32,float32_strict",
                           "--seconds", "0.05", "--windows", "1", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    result = dict(pair.split("=") for pair in text.strip().splitlines()[-1].removeprefix("RESULT ").split())
    assert set(result) == {"gemm_tflops_float32", "gemm_tflops_float32_strict", "images_per_s_fp32",
                           "path_ratio_fp32", "efficiency_fp32", "worker_images_per_s_fp32",
                           "worker_vs_keras_applications_fp32"}
    assert float(result["images_per_s_fp32"]) > 0 and 0 < float(result["path_ratio_fp32"]) < 10
    # the worker's own round (its compile_round, its loop) against keras.applications
    # from the recorded rates: the printed images/s has one decimal, 2% of a loaded CPU's 2.4 images/s
    assert float(result["worker_vs_keras_applications_fp32"]) == pytest.approx(
        lines_rate(out, "worker") / lines_rate(out, "keras"), rel=0.01)
    assert float(result["worker_images_per_s_fp32"]) == pytest.approx(lines_rate(out, "worker"), abs=0.051)
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    # efficiency = analytic training FLOPs per image x images/s / the float32 GEMM rate
    flops = gpu_bench.count_flops(gpu_bench.resnet50(input_size=32, classes=10)).train
    expected = flops * lines[2]["images_per_s"] / lines[0]["flops"]
    assert float(result["efficiency_fp32"]) == pytest.approx(expected, rel=0.01)
    assert [line.get("gemm") or line["train"] for line in lines] == ["float32", "float32_strict", "aiperf", "keras",
                                                                     "worker"]
    assert all(line["accelerator"] == "CPU" and line["backend"] == "tensorflow" for line in lines)
    assert lines[2]["loop"] == "async" and lines[2]["batch"] == 2 and lines[2]["gpu_util"] == []
    assert [line["xla"] for line in lines[2:]] == [False, False, False]
    import tensorflow as tf

    assert tf.config.experimental.tensor_float_32_execution_enabled()  # restored after float32_strict


def lines_rate(out, path: str) -> float:
    return next(json.loads(line)["images_per_s"] for line in out.read_text().splitlines()
                if json.loads(line).get("train") == path)


def test_the_audits_loop_waits_for_each_step(monkeypatch, capsys):
    monkeypatch.setattr(gpu_bench, "accelerator_name", lambda: "CPU")
    waited = []
    monkeypatch.setattr(gpu_bench, "_sync_steps", lambda model, x, y, steps: waited.append(steps) or
                        [model.train_on_batch(x, y) for _ in range(steps)])
    assert gpu_bench.main(["--allow-cpu", "--batch", "2", "--size", "32", "--width", "0.25", "--classes", "10",
                           "--precisions", "mixed_bf16", "--xla", "off", "--gemm-types", "", "--seconds", "0.05",
                           "--windows", "2", "--loop", "sync"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert "images_per_s_mixed_bf16=" in last and "path_ratio" not in last  # width < 1: ours only
    assert "worker_images_per_s_mixed_bf16=" in last and "worker_vs_keras" not in last
    assert waited[:2] == [2, 3] and len(waited) == 4  # compile, sizing, two windows


def test_a_budget_spent_starts_no_further_configuration(monkeypatch, capsys):
    monkeypatch.setattr(gpu_bench, "accelerator_name", lambda: "CPU")
    assert gpu_bench.main(["--allow-cpu", "--size", "32", "--precisions", "fp32,mixed_bf16", "--xla", "on",
                           "--gemm-types", "", "--budget-s", "0"]) == 0
    text = capsys.readouterr().out
    assert "budget: fp32 xla=True not started" in text and "budget: mixed_bf16 xla=True not started" in text
    assert text.strip().splitlines()[-1] == "RESULT"
