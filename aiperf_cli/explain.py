"""What each number of a run means, where it is shown: the validity checklist as a table,
one footnote per score with its formula and inputs, the glossary (`aiperf scoreboard
--explain`, the report) and the one-line result (`aiperf scoreboard --summary`, the end
of `aiperf demo`), all read from a scoreboard dict (aiperf.api.views.scoreboard_to_dict).
"""

from __future__ import annotations

import math
import shlex
from typing import TYPE_CHECKING, Any

from aiperf import units
from aiperf.scoring import VALID_FLOPS_EXPONENT, VALIDITY_RULES
from aiperf.states import CheckState, ModelState

if TYPE_CHECKING:  # pragma: no cover
    from rich.table import Table

SUMMARY_PREFIX = "AIPERF_RESULT"
STATE_STYLES = {CheckState.PASSED: "green", CheckState.FAILED: "red", CheckState.PENDING: "yellow",
                CheckState.NOT_APPLICABLE: "dim"}
# 1/e: below this error -ln(Error) > 1, and the regulated score is above the FLOPS it weighs
REGULATED_BREAK_EVEN_ERROR = math.exp(-1.0)

GLOSSARY: tuple[tuple[str, str], ...] = (
    ("FLOPS(t)", "F(t) / (t - t0): the floating-point operations the master counted for every image trained "
                 "or validated by time t (from each model's architecture, not the worker's word), divided by "
                 "the time since the run's start t0."),
    ("Score", "The highest FLOPS(t) once the run has lasted its minimum running time (official 1 h): the "
              "benchmark's FLOPS. Provisional (its current value) before then."),
    ("Error", "1 - the best validation top-1 accuracy any model reported so far (1 before any report)."),
    ("Regulated score", "The highest -ln(Error(t)) x FLOPS(t) (AIPerf paper, Eq. 3): FLOPS weighted by how "
                        "well the search did. In FLOPS, but not a rate of work: it is above the score whenever "
                        "Error < 1/e = 0.368 (accuracy above 63.2%), e.g. 2.56 x at error 0.077."),
    ("Valid FLOPS", f"The highest FLOPS(t) x (accuracy(t) / target)^{VALID_FLOPS_EXPONENT} (HPC AI500 v3): "
                    "FLOPS discounted by the accuracy's shortfall from the profile's target (official 0.763 "
                    "top-1); above FLOPS when the accuracy beats the target."),
    ("FLOPS now", "F(now) / (now - t0): falls between reports and after the run stops."),
    ("Efficiency", "Score / Rpeak, Rpeak the sum of the accelerators' datasheet peaks at the run's precision "
                   "(HPL's Rmax/Rpeak)."),
    ("Efficiency vs measured", "Score / the sum of the workers' accepted measured GEMM peaks: how much of what "
                               "the hardware showed it can do the search used."),
    ("Valid", "Every rule of the checklist passed or not applicable; pending: the run may still meet it."),
    ("Official", "An official-profile run with nothing overridden; smoke runs never are."),
    ("Rules version", "The version of the profiles, peaks and scoring rules the run was started under."),
    (ModelState.CUT.value, "A model stopped by the run's deadline or a stop request before it finished training: "
            "its reports count, it was not a failure."),
)


def validity_text(d: dict[str, Any]) -> str:
    """'yes'; 'pending: running time, error' while only pending rules stand between the run
    and validity; 'no: error failed (0.4000 > 0.30)' otherwise."""
    checks = d.get("checks") or []
    if d["valid"]:
        return "yes"
    failed = [c for c in checks if c["state"] == CheckState.FAILED]
    pending = [c for c in checks if c["state"] == CheckState.PENDING]
    if not checks:  # a master from before the checklist
        return f"no: {d['invalid_reason']}"
    parts = [f"{c['title'].lower()} failed ({c['figure']}, limit {c['limit']})" for c in failed]
    parts += [f"{c['title'].lower()} pending ({c['figure']}, limit {c['limit']})" for c in pending]
    return ("no: " if failed else "not yet: ") + "; ".join(parts)


def validity_brief(d: dict[str, Any]) -> str:
    """'yes', 'no (error failed)' or 'not yet (running time, error pending)': the state so far."""
    if d["valid"]:
        return "yes"
    checks = d.get("checks") or []
    failed = [c["title"].lower() for c in checks if c["state"] == CheckState.FAILED]
    pending = [c["title"].lower() for c in checks if c["state"] == CheckState.PENDING]
    if failed:
        return f"no ({', '.join(failed)} failed)"
    return f"not yet ({', '.join(pending)} pending)" if pending else "no"


def checks_table(d: dict[str, Any]) -> "Table":
    """The checklist: one row per rule, its state, the figure judged, the limit and why."""
    from rich.table import Table

    table = Table(title=f"Validity checklist: {validity_text(d)}", title_justify="left")
    for name in ("rule", "state"):  # short words that a narrow terminal must not split
        table.add_column(name, no_wrap=True)
    for name in ("figure", "limit", "why"):
        table.add_column(name, overflow="fold")
    for c in d.get("checks") or []:
        style = STATE_STYLES.get(CheckState(c["state"]), "") if c["state"] in set(CheckState) else ""
        table.add_row(c["title"], f"[{style}]{c['state']}[/]" if style else c["state"], c["figure"], c["limit"],
                      c["detail"] or "")
    return table


def score_notes(d: dict[str, Any]) -> list[str]:
    """One footnote per score of the scoreboard: its formula and the inputs that gave it."""
    err = d["error"]
    weight = -math.log(max(err, 1e-6)) if err < 1.0 else 0.0
    acc = d["best_accuracy"]
    target = d["target_accuracy"] or None
    factor = (acc / target) ** VALID_FLOPS_EXPONENT if acc is not None and target else None
    notes = [
        f"[1] Score = max FLOPS(t) = F(t) / (t - t0) after the minimum running time "
        f"({units.duration(d['min_running_time_s'])}): {units.operations(d['total_ops'])} counted by the master "
        f"over {units.duration(d['elapsed_s'])}; the highest at {units.duration(d['score_time_s'])}.",
        f"[2] Regulated score = max -ln(Error(t)) x FLOPS(t) (AIPerf, Eq. 3): with Error {err:.4f}, "
        f"-ln(Error) = {weight:.2f}; it exceeds the score whenever Error < 1/e = {REGULATED_BREAK_EVEN_ERROR:.3f} "
        "(a weighted score, not a rate of work).",
        f"[3] Valid FLOPS = max FLOPS(t) x (accuracy / target)^{VALID_FLOPS_EXPONENT} (HPC AI500 v3): accuracy "
        f"{'-' if acc is None else f'{acc:.4f}'}, target {target or '-'}, factor "
        f"{'-' if factor is None else f'{factor:.3g}'}; above FLOPS when the accuracy beats the target.",
        "[4] Efficiency = score / the sum of the datasheet peaks (HPL's Rmax/Rpeak); vs measured: / the sum of "
        "the accepted measured GEMM peaks.",
    ]
    return notes


def glossary_lines() -> list[str]:
    return [f"{term}: {text}" for term, text in GLOSSARY]


def explain_text(d: dict[str, Any]) -> str:
    """`aiperf scoreboard --explain`: the run's scores with their footnotes, then the rules and the glossary."""
    lines = [f"Run {d['run_id']} ({d['profile']}, {d['precision']}): score {units.flops(d['score'])}, "
             f"regulated score {units.flops(d['regulated_score'])}, valid FLOPS {units.flops(d['valid_flops'])}.",
             *score_notes(d), "", "Validity rules (every one must pass or not apply):"]
    by_rule = {c["rule"]: c for c in d.get("checks") or []}
    for r in VALIDITY_RULES:
        c = by_rule.get(r.key)
        state = f" -> {c['state']} ({c['figure']}, limit {c['limit']})" if c else ""
        lines.append(f"- {r.title}: {r.text}{state}")
    return "\n".join([*lines, "", "Glossary:", *(f"- {line}" for line in glossary_lines())])


def _value(v: Any) -> str:
    if v is None:
        return "none"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return f"{v:.6g}"
    return shlex.quote(str(v).replace(", ", ","))


def summary_fields(d: dict[str, Any]) -> list[tuple[str, Any]]:
    """The result line's fields, raw values with their unit in the key (as the CSV's columns)."""
    return [
        ("run_id", d["run_id"]), ("state", d["state"]), ("profile", d["profile"]), ("precision", d["precision"]),
        ("backends", d.get("backends")), ("workers", d["workers"]), ("accelerators", d["accelerators"]),
        ("score_flops", d["score"]), ("regulated_score_flops", d["regulated_score"]),
        ("valid_flops", d["valid_flops"]), ("error", d["error"]), ("efficiency", d["efficiency"]),
        ("efficiency_vs_measured", d["efficiency_vs_measured"]), ("elapsed_s", d["elapsed_s"]),
        ("valid", d["valid"]), ("official", d["official"]), ("rules_version", d["rules_version"]),
    ]


def summary_line(d: dict[str, Any]) -> str:
    """One HPL-style line, `AIPERF_RESULT key=value ...`: values quoted as a shell would
    (shlex.split parses it), None as "none", numbers raw with 6 significant digits."""
    return " ".join([SUMMARY_PREFIX, *(f"{k}={_value(v)}" for k, v in summary_fields(d))])
