"""benchmarks/fuzz_bench.py: a small run against a real master reports no
UNKNOWN, no master death, no stored row out of bounds and no failed call of
the good worker; and its audit does find rows out of bounds."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import fuzz_bench
from master.store.records import NewModel, NewRun, ProgressInput, WorkerInput
from master.store.sql.sql_store import SqlStore

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
@pytest.mark.parametrize("frontends", [0, 2])
def test_a_small_fuzz_run_reports_the_zeros(frontends):
    """Also through two front ends: what reaches the master over the relay is as hostile."""
    out = subprocess.run([sys.executable, "-m", "benchmarks.fuzz_bench", "--quick", "--seed", "7", "--frontends", str(frontends)],
                         capture_output=True, text=True, timeout=300, cwd=ROOT)
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")), None)
    assert line is not None, out.stdout + out.stderr[-3000:]
    result = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", line)}
    assert result["fuzz_requests"] >= 600
    assert result["unknown"] == result["master_deaths"] == 0, out.stdout
    assert result["rows_out_of_bounds"] == 0 and result["good_worker_failures"] == 0, out.stdout
    assert out.returncode == 0
    assert "INVALID_ARGUMENT" in out.stdout and "OK" in out.stdout and "INTERNAL" not in out.stdout


def test_the_audit_finds_rows_out_of_bounds(tmp_path):
    url = f"sqlite:///{tmp_path / 'a.db'}"
    store = SqlStore(url)  # the store itself checks no bounds: the API does
    run = store.start_run(store.create_run(NewRun("smoke", 1, 600.0, "fp32", {}, {}), 0.0).id, 0.0)
    ok, _ = store.register_worker(WorkerInput("ok", "ok", [], 1, 1, {}), 0.0)
    store.register_worker(WorkerInput("evil\x1b[2J", "h", [], 1, 1, {}), 0.0)
    model = store.add_model(NewModel(run.id, None, ok.id, 1, "{}", "h", 32, 3, "training", 10**6, 10**5), 0.0)
    assert fuzz_bench.rows_out_of_bounds(url) == ["worker 2"]
    # 1e17 operations 1 s after submission: 10 s of work at one accelerator's ceiling, > 1 s + the slack
    images = 10**11
    store.add_progress([ProgressInput(model.id, ok.id, 1, 1.0, 1, images, 0, None, 0, 10**6 * images, False)])
    found = fuzz_bench.rows_out_of_bounds(url)
    assert found[0] == "worker 2" and found[1].startswith(f"model {model.id}: ") and len(found) == 2
    store.close()
