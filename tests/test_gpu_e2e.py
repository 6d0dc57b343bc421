"""benchmarks/gpu_e2e.py rehearsed on the CPU at a tiny shape (the smoke profile, 10 classes of
40-px JPEGs, two rounds), so that the script the GPU runs cannot rot between GPU runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytest.importorskip("jax")


def test_gpu_e2e_rehearsal_on_cpu(tmp_path: Path) -> None:
    out = tmp_path / "out"
    argv = [sys.executable, "-m", "benchmarks.gpu_e2e", "--out", str(out), "--work",
            str(tmp_path / "work"), "--allow-cpu", "--profile", "smoke", "--backend", "jax", "--classes", "10",
            "--train-images", "200", "--val-images", "50", "--image-px", "40", "--rounds", "2", "--epochs", "1",
            "--warmup-rounds", "1", "--bench-size", "32", "--bench-classes", "10", "--bench-seconds", "0.5",
            "--budget-s", "900", "--input-cpus", "1"]
    env = dict(os.environ, KERAS_BACKEND="jax", PYTHONPATH=str(ROOT))
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=1200, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    lines = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")]
    assert len(lines) == 1 and (out / "result.txt").read_text().strip() == lines[0]
    result = dict(pair.split("=", 1) for pair in lines[0].split()[1:])
    # No NVML on this machine: no utilisation figure, and the CPU has no datasheet entry
    assert {"gpu_train_images_per_s", "gpu_train_images_per_s_all", "gpu_handover_gap_s", "audit_verdict",
            "peak_verdict", "efficiency_datasheet", "gpu_vs_bench_ratio"} <= set(result), result
    assert float(result["gpu_train_images_per_s"]) > 0 and float(result["gpu_vs_bench_ratio"]) > 0
    assert 0 < float(result["gpu_handover_gap_s"]) < 900
    assert result["peak_verdict"] == "unverified_peak" and result["efficiency_datasheet"] == "none"
    assert result["audit_verdict"] not in ("no_model",) and not result["audit_verdict"].startswith("failed")

    figures = [json.loads(x) for x in (out / "figures.jsonl").read_text().splitlines()]
    (models,) = [f["models"] for f in figures if f["what"] == "models"]
    assert [m["round"] for m in models] == [1, 2]
    assert models[1]["parent"] == models[0]["id"] and models[1]["inherited_from"] == models[0]["id"]
    board = json.loads((out / "scoreboard.json").read_text())
    assert board["profile"] == "smoke" and board["backends"] == "jax" and board["audit"] is not None
    assert any("smoke" in r for r in board["unofficial_reasons"])
    assert (out / "report.html").stat().st_size > 1000
    assert (out / "gpu_bench.jsonl").exists() and "event=round_end round=2" in (out / "worker.log").read_text()
