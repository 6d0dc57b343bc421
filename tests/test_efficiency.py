"""Efficiency as HPL's Rmax/Rpeak: the score over the sum of the accelerators' datasheet
peaks at the run's precision, with the measured-GEMM figure beside it
(master/core/run_rules.py `datasheet_peaks`, aiperf/scoring.py), and the rules version
a run records: over mixes of accelerators and precisions, and through a real master,
the CLI and every export."""

from __future__ import annotations

import csv
import io
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aiperf import scoring, units
from aiperf.hyperparameters import Hyperparameters
from aiperf.precision import PRECISIONS
from aiperf.ruleset import RULES_VERSION
from aiperf.states import RunState, WorkerState
from aiperf_cli.main import main
from master.core.run_rules import datasheet_peaks
from master.store.records import RunRecord, RunWorker, WorkerRecord
from tests.fake_clock import FakeClock

# Dense datasheet figures (FLOPS) per GEMM compute type, from the vendors' documents, not from
# aiperf/peaks.py. float32 is TF32 where the chip has it (TensorFlow's default for float32 matrix
# products); a chip without bfloat16 units is rated at its fastest 16-bit-or-wider figure.
DATASHEETS = {
    # NVIDIA H100 datasheet, SXM: TF32 989, BF16/FP16 1,979 TFLOPS with sparsity; dense is half
    "NVIDIA H100 80GB HBM3": {"float32": 494.5e12, "float16": 989.5e12, "bfloat16": 989.5e12},
    # NVIDIA A100 datasheet: TF32 312, BF16/FP16 624 TFLOPS with sparsity
    "NVIDIA A100-SXM4-80GB": {"float32": 156e12, "float16": 312e12, "bfloat16": 312e12},
    # NVIDIA V100 datasheet, SXM2: single precision 15.7, tensor performance 125 TFLOPS; no bfloat16
    "Tesla V100-SXM2-32GB": {"float32": 15.7e12, "float16": 125e12, "bfloat16": 125e12},
    # AMD Instinct MI300X datasheet: TF32 653.7, FP16/BF16 1,307.4 TFLOPS dense
    "AMD Instinct MI300X": {"float32": 653.7e12, "float16": 1307.4e12, "bfloat16": 1307.4e12},
}
# Not in the table: an unknown vendor, and names only a loose match would take for a known chip.
NO_ENTRY = ("Acme Tensor 9000", "NVIDIA H20", "NVIDIA GH200 480GB", "NVIDIA A10")
CPU = "cpu"  # a worker without accelerators

_worker = st.one_of(
    st.tuples(st.just(CPU), st.sampled_from(["", "Intel Xeon Gold 6338"])),
    st.lists(st.sampled_from(sorted(DATASHEETS) + list(NO_ENTRY)), min_size=1, max_size=3),
)


def _run(precision: str) -> RunRecord:
    return RunRecord("official", 1, 3600.0, precision, {}, {}, id=1, state=RunState.RUNNING, created_at=0.0,
                     started_at=0.0, deadline=3600.0, stopped_at=None, finished_at=None, stop_reason="")


def _joined(workers: list) -> list[RunWorker]:
    out = []
    for i, w in enumerate(workers):
        if isinstance(w, tuple):
            accelerators, cpu = [], ({"model": w[1]} if w[1] else {})
        else:
            accelerators, cpu = [{"model": m, "memory_bytes": 1 << 30, "peak_flops": 0.0} for m in w], {}
        record = WorkerRecord(f"w{i}", "h", accelerators, 4, 1 << 30, {}, id=i + 1, state=WorkerState.ALIVE,
                              registered_at=0.0, last_heartbeat=0.0, cpu=cpu)
        out.append(RunWorker(record, 0.0, {"accelerators": accelerators, "cpu": cpu}))
    return out


@settings(max_examples=300, deadline=None)
@given(workers=st.lists(_worker, max_size=4), precision=st.sampled_from(sorted(PRECISIONS)),
       score=st.floats(0.0, 1e16))
def test_datasheet_efficiency_over_mixes_of_accelerators_and_precisions(workers, precision, score):
    sheets = datasheet_peaks(_run(precision), _joined(workers))
    dtype = PRECISIONS[precision].gemm_dtype
    missing = {("CPU (" + w[1] + ")" if w[1] else "CPU") if isinstance(w, tuple) else None for w in workers}
    missing |= {m for w in workers if not isinstance(w, tuple) for m in w if m not in DATASHEETS}
    missing.discard(None)
    if dtype is None:
        assert sheets.total is None and sheets.unknown_reason == f"precision {precision} has no GEMM compute type " \
                                                                 f"to look up"
    elif not workers:
        assert sheets.total is None and sheets.unknown_reason == "no accelerator took part"
    elif missing:  # one accelerator without an entry is enough: no Rpeak for part of the hardware
        assert sheets.total is None
        assert sheets.unknown_reason == "no datasheet entry for " + ", ".join(sorted(missing))
    else:
        expected = sum(DATASHEETS[m][dtype] for w in workers for m in w)
        assert sheets.total == pytest.approx(expected) and sheets.unknown_reason == ""
    # through the scoring: an efficiency exactly when every figure is known, never a made-up number
    pts = [scoring.Point(3600.0, ops=int(score * 3600), worker_ops=int(score * 3600), accuracy=0.8)]
    r = scoring.score_run(0.0, 3600.0, pts, scoring.PROFILES["official"], precision,
                          datasheet_peaks=sheets.for_scoring())
    if sheets.total is None:
        assert r.efficiency is None
    else:
        assert r.efficiency == pytest.approx(r.score / sheets.total)


def test_a_reason_names_a_bounded_number_of_models():
    """Workers name their accelerators freely: the reason names the first few, sorted, and counts the rest."""
    from aiperf.limits import MAX_NAMED_WITHOUT_DATASHEET

    names = [f"Acme {i:02d}" for i in range(MAX_NAMED_WITHOUT_DATASHEET + 4)]
    sheets = datasheet_peaks(_run("fp32"), _joined([[n] for n in reversed(names)] + [[H100]]))
    assert sheets.total is None
    assert sheets.unknown_reason == ("no datasheet entry for " + ", ".join(names[:MAX_NAMED_WITHOUT_DATASHEET])
                                     + " and 4 more")


# ----------------------------------------------------------------- through a real master and the CLI

H100 = "NVIDIA H100 80GB HBM3"
MEASURED = 3e14  # the worker's float32 GEMM rate: below the datasheet's 494.5e12 (+5%), so "checked"
HP = Hyperparameters(32, 3)


def cli(capsys, *argv: str) -> str:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    assert rc == 0, err
    return out


@pytest.fixture
def scored_run(master_server, monkeypatch, capsys, small_graph):
    """A smoke (fp32) run started with the CLI, one H100 worker that measured its float32 rate,
    five minutes of its reports on the master's clock."""
    from aiperf.api.client import Accelerator, WorkerClient
    from aiperf.flops import count_flops

    clock = FakeClock()
    h = master_server(clock=clock, heartbeat_interval_s=10_000.0, metrics_port=0)
    monkeypatch.setenv("AIPERF_MASTER", h.address)
    monkeypatch.setenv("AIPERF_ADMIN_TOKEN", h.admin_token)
    monkeypatch.setenv("COLUMNS", "200")  # the table's rows on one line each
    cli(capsys, "start", "--duration", "10m", "--profile", "smoke", "--seed", "3")
    w = WorkerClient(h.address, h.worker_token, retries=0)
    wid = w.register(name="gpu-1", host="gpu-1",
                     accelerators=[Accelerator(H100, 80 << 30, 0.0, {"float32": MEASURED})]).worker_id
    fc = count_flops(small_graph)
    mid = w.submit_model(wid, small_graph.to_json(), small_graph.hash(), 0, 1, HP).model_id
    clock.t += 150
    w.report_progress(wid, mid, 1, 5000, 500, 1, fc.ops(5000, 500), val_accuracy=0.5)
    clock.t += 150
    yield {"h": h, "w": w, "clock": clock, "fc": fc, "graph": small_graph}
    w.close()


def test_the_scoreboard_shows_both_efficiencies_and_the_rules_version(scored_run, capsys):
    board = json.loads(cli(capsys, "scoreboard", "--json"))
    assert board["score"] > 0
    assert board["datasheet_peak_flops"] == pytest.approx(494.5e12) and board["efficiency_unknown_reason"] is None
    assert board["efficiency"] == pytest.approx(board["score"] / 494.5e12)
    assert board["peak_flops"] == pytest.approx(MEASURED) and board["peak_verdict"] == "checked"
    assert board["efficiency_vs_measured"] == pytest.approx(board["score"] / MEASURED)
    assert board["rules_version"] == board["scoring_rules_version"] == RULES_VERSION == "aiperf-rules 1.0"
    table = cli(capsys, "scoreboard")
    # one way to write a number (aiperf.units): 3 significant digits, fractions as %
    assert f"{units.percent(board['efficiency'])} of 494 TFLOPS (datasheet)" in table
    assert f"{units.percent(board['efficiency_vs_measured'])} of 300 TFLOPS (measured, checked)" in table
    assert "Rules" in table and "aiperf-rules 1.0" in table and "this master scores by" not in table
    # Prometheus: both, by their names
    from tests.test_run_metrics import scrape

    series = scrape(scored_run["h"].metrics_port)
    labels = '{profile="smoke",run_id="1"}'
    assert series[f"aiperf_run_efficiency{labels}"] == pytest.approx(board["efficiency"])
    assert series[f"aiperf_run_efficiency_vs_measured{labels}"] == pytest.approx(board["efficiency_vs_measured"])
    # the run's record, as `aiperf runs` lists it, carries the version too
    (listed,) = json.loads(cli(capsys, "runs", "--json"))["runs"]
    assert listed["rules_version"] == RULES_VERSION


def test_an_accelerator_without_a_datasheet_entry_leaves_no_efficiency(scored_run, capsys):
    from aiperf.api.client import Accelerator

    w, fc, graph = scored_run["w"], scored_run["fc"], scored_run["graph"]
    other = w.register(name="odd", host="odd",
                       accelerators=[Accelerator("Acme Tensor 9000", 1 << 30, 0.0, {"float32": 1e14})]).worker_id
    mid = w.submit_model(other, graph.to_json(), graph.hash(), 0, 1, HP).model_id
    scored_run["clock"].t += 10
    w.report_progress(other, mid, 1, 500, 0, 1, fc.ops(500, 0))
    board = json.loads(cli(capsys, "scoreboard", "--json"))
    assert board["efficiency"] is None and board["datasheet_peak_flops"] is None
    assert board["efficiency_unknown_reason"] == "no datasheet entry for Acme Tensor 9000"
    assert board["efficiency_vs_measured"] == pytest.approx(board["score"] / (MEASURED + 1e14))  # both measured
    assert "n/a (no datasheet entry for Acme Tensor 9000)" in cli(capsys, "scoreboard")


def test_every_export_and_the_report_carry_both_efficiencies_and_the_rules_version(scored_run, capsys, tmp_path):
    from mlperf_logging.compliance_checker.mlp_parser import parse_file

    data = json.loads(cli(capsys, "export", "--format", "json"))
    board = data["scoreboard"]
    assert board["rules_version"] == RULES_VERSION and board["efficiency"] and board["efficiency_vs_measured"]
    (row,) = csv.DictReader(io.StringIO(cli(capsys, "export", "--format", "csv", "--table", "scoreboard")))
    assert row["rules_version"] == RULES_VERSION and row["efficiency_unknown_reason"] == ""
    assert float(row["efficiency_fraction"]) == pytest.approx(board["efficiency"])
    assert float(row["efficiency_vs_measured_fraction"]) == pytest.approx(board["efficiency_vs_measured"])
    log = tmp_path / "run.log"
    cli(capsys, "export", "--format", "mllog", "--out", str(log))
    lines, errors = parse_file(str(log), ruleset="4.0.0")
    assert errors == []
    value = {ll.key: ll.value["value"] for ll in lines}
    assert value["aiperf_rules_version"] == RULES_VERSION
    keys = [ll.key for ll in lines]
    assert keys.index("aiperf_rules_version") < keys.index("run_start")  # the run's record, logged at init
    assert value["aiperf_efficiency"] == pytest.approx(board["efficiency"])
    assert value["aiperf_efficiency_vs_measured"] == pytest.approx(board["efficiency_vs_measured"])
    compared = json.loads(cli(capsys, "compare", "1", "1", "--json"))["runs"][0]
    assert compared["rules_version"] == RULES_VERSION and compared["efficiency_vs_measured"]
    page = tmp_path / "r.html"
    cli(capsys, "report", "--out", str(page))
    html = page.read_text()
    assert "<th>Efficiency</th><td>" in html and "(datasheet)" in html
    assert "<th>Efficiency vs measured</th><td>" in html and "(measured, checked)" in html
    assert f"<th>Rules</th><td>{RULES_VERSION}</td>" in html
