"""benchmarks/summary.py: RESULT lines parsed, one table with baseline, ratio and goal; `make bench`'s runner."""

from __future__ import annotations

import textwrap

from hypothesis import given
from hypothesis import strategies as st

from benchmarks import summary


def test_result_lines_give_rows_with_baseline_ratio_and_goal():
    text = textwrap.dedent("""\
        look-ahead on : worker 1: 12 models
        RESULT training_share=0.750 training_share_without_lookahead=0.500 ratio_vs_without=1.500
        RESULT data_ratio_vs_plain=0.95 images_per_cpu_second=260 plain_images_per_cpu_second=273
        not a RESULT line=3
        RESULT unknown=0 master_deaths=2 note=fine
    """)
    results = summary.parse_results(text)
    assert results["training_share"] == "0.750" and "line" not in results
    rows = {r.key: r for r in summary.rows_for("b", results)}
    share = rows["training_share"]
    assert (share.baseline, share.ratio, share.goal, share.verdict) == ("0.500", "1.5x", ">= 0.7 (5-min demo)", "met")
    assert "training_share_without_lookahead" not in rows, "a baseline is shown on its figure's row"
    assert rows["data_ratio_vs_plain"].verdict == "MISSED"
    assert rows["images_per_cpu_second"].ratio == "0.952x" and rows["images_per_cpu_second"].verdict == "met"
    assert rows["master_deaths"].verdict == "MISSED" and rows["unknown"].verdict == "met"
    assert rows["note"].verdict == "" and rows["ratio_vs_without"].goal == ""
    table = summary.format_table(rows.values(), {"master_bench": "no RESULT line"})
    lines = table.splitlines()
    assert lines[0].split()[:3] == ["benchmark", "figure", "value"] and set(lines[1]) <= {"-", " "}
    assert any("training_share" in l and "1.5x" in l and "met" in l for l in lines)
    assert lines[-1].split()[:2] == ["master_bench", "(failed)"] and lines[-1].endswith("FAILED")


@given(st.dictionaries(st.from_regex(r"[a-z_][a-z0-9_]{0,20}", fullmatch=True),
                       st.from_regex(r"[0-9a-z.eE+-]{1,12}", fullmatch=True), min_size=1, max_size=8))
def test_any_result_line_round_trips(pairs):
    line = "RESULT " + " ".join(f"{k}={v}" for k, v in pairs.items())
    assert summary.parse_results(f"noise\n{line}\nmore noise") == pairs


def test_outputs_read_from_files_and_the_exit_status(tmp_path, capsys):
    good = tmp_path / "idle_bench.txt"
    good.write_text("RESULT training_share=0.4 training_share_without_lookahead=0.2\n")
    assert summary.main([str(good)]) == 0
    out = capsys.readouterr().out
    assert "idle_bench" in out and "2x" in out and "MISSED" in out
    empty = tmp_path / "master_bench.txt"
    empty.write_text("held 250 workers\n")
    assert summary.main([str(good), str(empty)]) == 1
    assert "no RESULT line" in capsys.readouterr().out


def test_run_executes_every_benchmark_with_its_short_options_and_keeps_the_outputs(tmp_path, capsys):
    bench = tmp_path / "benchmarks"
    bench.mkdir()
    (bench / "__init__.py").write_text("")  # a package, first on the runner's path (it runs `-m benchmarks.x`)
    (bench / "idle_bench.py").write_text(
        "import sys\nprint('RESULT training_share=0.8 training_share_without_lookahead=0.4 args=' + ','.join(sys.argv[1:]))\n")
    (bench / "validation_bench.py").write_text("import sys\nprint('SKIP protovalidate is not installed')\nsys.exit(2)\n")
    (bench / "broken_bench.py").write_text("raise SystemExit(3)\n")
    (bench / "helper.py").write_text("raise AssertionError('not a benchmark')\n")
    logs = tmp_path / "logs"
    assert summary.main(["--run", "--dir", str(bench), "--logs", str(logs)]) == 1  # broken_bench failed
    out = capsys.readouterr().out
    table = out[out.rindex("benchmark"):]
    assert "args=--minutes,2" in (logs / "idle_bench.txt").read_text()
    assert "2x" in table and "met" in table
    assert "(skipped)" in table and "protovalidate is not installed" in table
    assert "broken_bench" in table and "exit 3" in table
    assert sorted(p.name for p in logs.iterdir()) == ["broken_bench.txt", "idle_bench.txt", "validation_bench.txt"]

    assert summary.main(["--run", "--full", "--only", "idle", "--dir", str(bench), "--logs", str(logs)]) == 0
    assert (logs / "idle_bench.txt").read_text().rstrip().endswith("args="), "--full: the defaults"


def test_gpu_figures_measured_with_xla_on_and_off_share_their_precisions_goal():
    results = summary.parse_results("RESULT path_ratio_mixed_bf16_xla=0.99 path_ratio_mixed_bf16_noxla=0.90 "
                                    "path_ratio_fp32=0.96 gpu_util_mean=72.1 efficiency_mixed_fp16_xla=0.24 "
                                    "images_per_s_fp32_xla=3717.9 mixed_bf16_xlax=1")
    rows = {r.key: r for r in summary.rows_for("gpu_bench", results)}
    assert rows["path_ratio_mixed_bf16_xla"].verdict == "met" and rows["path_ratio_mixed_bf16_noxla"].verdict == "MISSED"
    assert rows["path_ratio_fp32"].verdict == "met" and rows["gpu_util_mean"].verdict == "MISSED"
    assert rows["efficiency_mixed_fp16_xla"].verdict == "MISSED"
    assert rows["images_per_s_fp32_xla"].goal == "" and rows["mixed_bf16_xlax"].goal == ""
    worker = summary.rows_for("gpu_bench", summary.parse_results(
        "RESULT worker_vs_keras_applications_mixed_bf16=0.97 worker_vs_keras_applications_fp32=0.91"))
    assert [(r.key, r.verdict) for r in worker] == [("worker_vs_keras_applications_mixed_bf16", "met"),
                                                    ("worker_vs_keras_applications_fp32", "MISSED")]
