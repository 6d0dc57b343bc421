"""The validity checklist: one definition (aiperf.scoring.VALIDITY_RULES), each rule's state,
figure and limit, shown by the scoreboard, status, the report and quoted by the docs."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aiperf.scoring import (
    PROFILES,
    VALIDITY_RULES,
    Point,
    audit_check,
    node_audits_check,
    rules_markdown,
    score_run,
    throughput_check,
    with_checks,
)
from aiperf.states import CheckState
from aiperf_cli.explain import SUMMARY_PREFIX, summary_line
from tests.support.cli_runs import run_cli as _run

ROOT = Path(__file__).resolve().parents[1]
SMOKE = PROFILES["smoke"]  # minimum running time 120 s, maximum error 0.30
OFFICIAL = PROFILES["official"]
T0 = 1000.0
DOCS = ("README.md", "docs/deploy.md", "docs/spec.md")
BLOCK = re.compile(r"<!-- validity-rules:[^\n]*-->\n(.*?)\n<!-- /validity-rules -->", re.S)


def _states(result) -> dict[str, CheckState]:
    return {c.rule: c.state for c in result.checks}


def test_short_of_the_minimum_is_pending_while_running_and_failed_once_over():
    pts = [Point(T0 + 30, ops=10**9, worker_ops=10**9, accuracy=0.9)]
    running = score_run(T0, T0 + 34, pts, SMOKE, "fp32", end=T0 + 600)  # deadline ahead
    assert _states(running)["running_time"] == CheckState.PENDING and not running.valid
    c = next(c for c in running.checks if c.rule == "running_time")
    assert (c.figure, c.limit) == ("0:00:34", ">= 0:02:00")
    stopped = score_run(T0, T0 + 40, pts, SMOKE, "fp32", end=T0 + 34)  # stopped at 34 s
    assert _states(stopped)["running_time"] == CheckState.FAILED
    assert stopped.invalid_reasons == ("ran 34 s < minimum 120 s",)


def test_error_above_the_limit_is_pending_then_failed_and_every_rule_is_listed_in_order():
    pts = [Point(T0 + 200, ops=10**9, worker_ops=10**9, accuracy=0.5)]
    running = score_run(T0, T0 + 300, pts, SMOKE, "fp32", end=T0 + 600)
    assert _states(running)["error"] == CheckState.PENDING
    over = score_run(T0, T0 + 700, pts, SMOKE, "fp32", end=T0 + 600)
    assert _states(over)["error"] == CheckState.FAILED and "error 0.5000 > maximum 0.30" in over.invalid_reason
    # the score-time rules, then the three the master adds after the audits
    assert [c.rule for c in over.checks] == [r.key for r in VALIDITY_RULES][:6]
    full = with_checks(over, [node_audits_check(False, 0, [], []), throughput_check(0, []),
                              audit_check(False, 3, False, None)])
    assert [c.rule for c in full.checks] == [r.key for r in VALIDITY_RULES]


def test_a_passing_run_passes_or_does_not_apply_every_rule():
    pts = [Point(T0 + 200, ops=10**12, worker_ops=10**12, accuracy=0.9)]
    r = score_run(T0, T0 + 300, pts, SMOKE, "fp32", end=T0 + 300, peaks=[1e12], datasheet_peaks=[0.0])
    states = _states(r)
    assert r.valid and states["measured_peak"] == CheckState.PASSED
    assert states["datasheet_peak"] == CheckState.NOT_APPLICABLE  # an unknown datasheet peak: nothing to judge
    assert next(c for c in r.checks if c.rule == "measured_peak").figure == "0.500%"  # 1e12 operations by 200 s: 5e9 FLOPS


def test_the_audit_rule_states():
    assert audit_check(False, 5, False, None).state == CheckState.NOT_APPLICABLE  # smoke: shown, not required
    assert audit_check(True, 5, True, "passed").state == CheckState.PASSED
    pending = audit_check(True, 5, False, None)
    assert pending.state == CheckState.PENDING and "model 5) is not audited" in pending.detail
    assert audit_check(True, 5, False, "corrupt").state == CheckState.FAILED
    assert throughput_check(2, []).state == CheckState.PASSED
    assert throughput_check(1, ["model 4 ..."]).state == CheckState.FAILED


@settings(max_examples=200, deadline=None)
@given(st.floats(0, 400), st.floats(0, 1), st.integers(0, 10**12), st.integers(0, 10**12), st.booleans(),
       st.sampled_from(["fp32", "mixed_fp16", "fp8"]))
def test_valid_exactly_when_no_rule_is_failed_or_pending(elapsed, acc, ops, worker_ops, over, precision):
    pts = [Point(T0 + elapsed / 2, ops=ops, worker_ops=worker_ops, accuracy=acc)]
    now = T0 + elapsed
    r = score_run(T0, now, pts, SMOKE, precision, end=now if over else now + 1)
    blocking = [c for c in r.checks if c.state in (CheckState.FAILED, CheckState.PENDING)]
    assert r.valid == (not blocking)
    assert len(r.invalid_reasons) == len(blocking) and all(r.invalid_reasons)
    assert {c.state for c in r.checks} <= set(CheckState)
    if over:  # nothing can change any more: no rule is pending
        assert all(c.state != CheckState.PENDING for c in r.checks)


@pytest.mark.parametrize("doc", DOCS)
def test_the_docs_quote_the_one_list(doc):
    found = BLOCK.findall((ROOT / doc).read_text())
    assert found == [rules_markdown()], f"{doc}: replace its validity-rules block with aiperf.scoring.rules_markdown()"


def test_rules_markdown_has_one_line_per_rule():
    lines = rules_markdown().splitlines()
    assert len(lines) == len(VALIDITY_RULES) and all(f"**{r.title}**" in lines[i] for i, r in enumerate(VALIDITY_RULES))


def test_scoreboard_status_summary_and_explain_show_the_checklist(cli, capsys):
    rc, out, err = _run(capsys, "start", "--duration", "1h", "--json")
    assert rc == 0, err
    rc, out, _ = _run(capsys, "scoreboard", "--json")
    board = json.loads(out)
    assert [c["rule"] for c in board["checks"]] == [r.key for r in VALIDITY_RULES]
    states = {c["rule"]: c["state"] for c in board["checks"]}
    assert states["running_time"] == "pending" and states["precision"] == "passed"
    assert states["audit"] == "pending"  # official: no model has reported an accuracy yet
    rc, out, _ = _run(capsys, "scoreboard")
    assert rc == 0 and "Validity checklist: not yet:" in out and "Running time" in out and "pending" in out
    assert "[2] Regulated score = max -ln(Error(t)) x FLOPS(t)" in out  # the footnotes
    rc, out, _ = _run(capsys, "status")
    assert rc == 0 and "Validity checklist" in out and "Datasheet peak" in out
    rc, out, _ = _run(capsys, "status", "--json")
    assert [c["rule"] for c in json.loads(out)["checks"]] == [r.key for r in VALIDITY_RULES]

    rc, out, _ = _run(capsys, "scoreboard", "--summary")
    line = out.strip()
    assert rc == 0 and len(out.strip().splitlines()) == 1 and line.startswith(SUMMARY_PREFIX + " ")
    fields = dict(item.split("=", 1) for item in shlex.split(line)[1:])
    assert fields["run_id"] == str(board["run_id"]) and fields["profile"] == "official"
    assert fields["precision"] == "mixed_fp16" and fields["valid"] == "false"
    assert fields["rules_version"] == board["rules_version"] and float(fields["score_flops"]) == board["score"]
    assert fields["efficiency"] == "none" and fields["workers"] == "0"

    rc, out, _ = _run(capsys, "scoreboard", "--explain")
    assert rc == 0 and "Validity rules" in out and "Glossary:" in out and "Error < 1/e" in out
    rc, _, err = _run(capsys, "scoreboard", "--explain", "--summary")
    assert rc == 2 and "give one" in err


def test_the_summary_line_parses_with_values_holding_spaces():
    d = {"run_id": 3, "state": "finished", "profile": "smoke", "precision": "fp32", "backends": "jax, tensorflow",
         "workers": 2, "accelerators": 0, "score": 3.735e9, "regulated_score": 9.54e9, "valid_flops": 1.2e9,
         "error": 0.077, "efficiency": None, "efficiency_vs_measured": 0.0123, "elapsed_s": 600.0,
         "valid": True, "official": False, "rules_version": "aiperf-rules 1.0"}
    fields = dict(item.split("=", 1) for item in shlex.split(summary_line(d))[1:])
    assert fields["rules_version"] == "aiperf-rules 1.0" and fields["backends"] == "jax,tensorflow"
    assert float(fields["regulated_score_flops"]) == pytest.approx(9.54e9) and fields["efficiency"] == "none"
    assert fields["valid"] == "true" and float(fields["efficiency_vs_measured"]) == pytest.approx(0.0123)


def test_node_audits_are_pending_until_each_worker_is_audited_and_fail_on_a_bad_one():
    assert node_audits_check(False, 2, ["w1: none"], []).state == CheckState.NOT_APPLICABLE
    assert node_audits_check(True, 0, [], []).state == CheckState.PENDING  # no drawn model yet
    pending = node_audits_check(True, 2, ["worker 2 (b): no node audit of its drawn model 7"], [])
    assert pending.state == CheckState.PENDING and "model 7" in pending.detail
    failed = node_audits_check(True, 2, ["worker 2 (b): none"], ["worker 1 (a): the node's inventory differs"])
    assert failed.state == CheckState.FAILED and "inventory" in failed.detail
    passed = node_audits_check(True, 2, [], [])
    assert passed.state == CheckState.PASSED and passed.figure == "2 workers passed"
