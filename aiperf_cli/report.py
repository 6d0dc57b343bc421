"""The run report: one self-contained HTML file with the scoreboard, the
validity checks, FLOPS(t), error(t) and resource use over time (SPEC
sections 7 and 8), the hardware and the best models.

`render_report` is a function of the data the control API returns (as the
plain dicts of aiperf.api.views); `fetch_report` gets them through a control
client, for `aiperf report` and `aiperf demo`. Charts are SVG drawn by
matplotlib and embedded inline, so the file opens anywhere without network
access.
"""

from __future__ import annotations

import html
import io
from typing import TYPE_CHECKING, Any, Sequence

from aiperf import units
from aiperf.profiles import OFFICIAL
from aiperf.scoring import model_rank_key
from aiperf.states import ModelState
from aiperf.timeline import CurvePoint, score_curve
from aiperf_cli.explain import GLOSSARY, score_notes, validity_text
from aiperf_cli.format import format_flops
from aiperf_cli.tables import (
    accuracy_text,
    audit_text,
    downtime_text,
    efficiency_text,
    elapsed_text,
    measured_efficiency_text,
    recipe_text,
    rules_text,
    run_title,
    score_label,
    software_text,
    stop_text,
)

if TYPE_CHECKING:  # pragma: no cover
    from aiperf.api.control_session import ControlSession

REPORT_MODELS = 10  # best models listed


def _svg(fig: Any) -> str:
    import matplotlib.pyplot as plt

    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})  # same data, same file
    plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg"):]  # drop the XML prologue: the SVG is inline


def _figure(title: str, xlabel: str = "time since the run's start (min)") -> tuple[Any, Any]:
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["svg.fonttype"] = "none"  # text stays text: smaller, searchable
    matplotlib.rcParams["svg.hashsalt"] = "aiperf"  # same data, same file
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 3.2))
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.grid(alpha=0.3)
    return fig, ax


def _flops_axis(ax: Any, values: Sequence[float]) -> float:
    """Label the y axis in the unit of the largest value ("GFLOPS", aiperf.units.scale) and return
    the factor to divide by: the axis then has no "1e10" offset text to read."""
    factor, prefix = units.scale(max((abs(v) for v in values), default=0.0))
    ax.set_ylabel(f"{prefix}FLOPS")
    ax.ticklabel_format(axis="y", style="plain", useOffset=False)
    return factor


def flops_chart(board: dict[str, Any], points: Sequence[dict[str, Any]]) -> str:
    fig, ax = _figure("FLOPS(t)")
    t = [p["elapsed_s"] / 60 for p in points]
    factor = _flops_axis(ax, [p["flops"] for p in points] + [board["score"]])
    ax.plot(t, [p["flops"] / factor for p in points], color="tab:blue", label="FLOPS(t)")
    ax.axvline(board["min_running_time_s"] / 60, color="gray", linestyle="--", label="minimum running time")
    if board["score"] > 0:
        label = "score (final)" if board.get("final") else "score (provisional)" if board["provisional"] else "score"
        ax.plot([board["score_time_s"] / 60], [board["score"] / factor], "o", color="tab:red",
                label=f"{label}: {units.flops(board['score'])}")
    ax.legend(loc="best")
    return _svg(fig)


def score_chart(board: dict[str, Any], points: Sequence[dict[str, Any]]) -> str:
    """FLOPS(t), the regulated score -ln(Error(t))·FLOPS(t) and valid FLOPS over time, each
    with its reported maximum marked: the AIPerf paper's Fig. 4 (aiperf.timeline.score_curve)."""
    curve = score_curve([CurvePoint(p["elapsed_s"], int(p["ops"]), p["flops"], p["best_accuracy"]) for p in points],
                        board["target_accuracy"])
    fig, ax = _figure("Score over time (the paper's Fig. 4)")
    t = [s.elapsed_s / 60 for s in curve]
    series = (("flops", "score", "score_time_s", "tab:blue", "FLOPS(t)"),
              ("regulated_score", "regulated_score", "regulated_score_time_s", "tab:red",
               "regulated score -ln(Error(t))·FLOPS(t)"),
              ("valid_flops", "valid_flops", "valid_flops_time_s", "tab:green",
               f"valid FLOPS, FLOPS(t)·(acc(t)/{board['target_accuracy']:g})^5"))
    factor = _flops_axis(ax, [getattr(s, attr) for s in curve for attr, *_ in series]
                         + [board[key] for _, key, *_ in series])
    for attr, key, time_key, color, label in series:
        ax.plot(t, [getattr(s, attr) / factor for s in curve], color=color, label=label)
        if board[key] > 0:
            ax.plot([board[time_key] / 60], [board[key] / factor], "o", color=color,
                    label=f"its maximum, reported: {units.flops(board[key])}")
    ax.axvline(board["min_running_time_s"] / 60, color="gray", linestyle="--", label="minimum running time")
    ax.legend(loc="best", fontsize="small")
    return _svg(fig)


SCORE_CHART_NOTE = ("The regulated score and valid FLOPS are weighted scores written in FLOPS, not rates of "
                    "work: the regulated score lies above FLOPS(t) whenever Error < 1/e = 0.368 (accuracy above "
                    "63.2%), valid FLOPS whenever the accuracy is above the profile's target.")


def error_chart(points: Sequence[dict[str, Any]]) -> str:
    fig, ax = _figure("Error(t) = 1 - best validation accuracy")
    known = [p for p in points if p["best_accuracy"] is not None]
    ax.step([p["elapsed_s"] / 60 for p in known], [1 - p["best_accuracy"] for p in known], where="post",
            color="tab:green", label="error")
    limit = OFFICIAL.max_error
    ax.axhline(limit, color="tab:red", linestyle="--", label=f"validity limit ({limit:.0%})")
    ax.set_ylim(0, 1)
    ax.legend(loc="upper right")
    return _svg(fig)


def _resource_chart(title: str, ylabel: str, resources: Sequence[dict[str, Any]], accelerator_key: str,
                    host_key: str, scale: float, labels: tuple[str, str]) -> tuple[Any, Any]:
    """Accelerator and host lines of one resource figure (each drawn when sampled)."""
    fig, ax = _figure(title)
    for key, color, label in ((accelerator_key, "tab:purple", labels[0]), (host_key, "tab:orange", labels[1])):
        known = [r for r in resources if r[key] is not None]
        if known:
            ax.plot([r["elapsed_s"] / 60 for r in known], [r[key] * scale for r in known], color=color, label=label)
    ax.set_ylabel(ylabel)
    ax.legend(loc="best")
    return fig, ax


def utilisation_chart(resources: Sequence[dict[str, Any]]) -> str:
    fig, ax = _resource_chart("Utilisation (mean over all workers)", "%", resources, "accelerator_util",
                              "cpu_util", 100, ("accelerators", "CPUs"))
    ax.set_ylim(0, 105)
    return _svg(fig)


def memory_chart(resources: Sequence[dict[str, Any]]) -> str:
    fig, _ = _resource_chart("Memory in use (mean per worker / accelerator)", "GiB", resources,
                             "accelerator_memory_used", "memory_used", 1 / 2**30, ("accelerator", "host"))
    return _svg(fig)


def _rows(rows: Sequence[tuple[str, str]]) -> str:
    return "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in rows)


def _validity(board: dict[str, Any]) -> list[tuple[str, str]]:
    return ([("Valid", validity_text(board)), ("Official", "yes" if board["official"] else "no")]
            + [("Unofficial because", r) for r in board["unofficial_reasons"]])


def _checks(board: dict[str, Any]) -> str:
    """The validity checklist (aiperf.scoring.VALIDITY_RULES): one row per rule."""
    head = "".join(f"<th>{h}</th>" for h in ("rule", "state", "figure", "limit", "why"))
    rows = "".join(
        f'<tr class="{html.escape(c["state"].replace(" ", "-"))}">'
        + "".join(f"<td>{html.escape(v or '')}</td>" for v in (c["title"], c["state"], c["figure"], c["limit"],
                                                                c["detail"]))
        + "</tr>" for c in board.get("checks") or [])
    return f"<table><tr>{head}</tr>{rows}</table>"


def _summary(b: dict[str, Any]) -> list[tuple[str, str]]:
    stopped = stop_text(b)
    return [
        (score_label(b), format_flops(b["score"])),
        *([("Stopped", stopped)] if stopped is not None else []),
        ("Regulated score", format_flops(b["regulated_score"])),
        ("Valid FLOPS", format_flops(b["valid_flops"])),
        ("Error", f"{b['error']:.4f}"),
        ("Audit", audit_text(b)),
        ("Efficiency", efficiency_text(b)),
        ("Efficiency vs measured", measured_efficiency_text(b)),
        ("Rules", rules_text(b)),
        ("Elapsed", elapsed_text(b)),
        ("Master downtime", downtime_text(b)),
        ("Total operations", f"{units.operations(b['total_ops'])} (workers' own count: {units.operations(b['worker_ops'])}; "
                             f"{b['flops_mismatch_reports']} reports disagree by more than 1%; "
                             f"{b['implausible_reports']} refused above the worker's accepted peak)"),
        ("Images", f"{b['images_trained']:,} trained, {b['images_validated']:,} validated"),
        ("Models", ", ".join(f"{v} {k}" for k, v in b["models"].items() if v) or "none"),
        ("Workers / accelerators", f"{b['workers']} / {b['accelerators']}"),
        ("Profile / precision / XLA / seed", f"{b['profile']} / {b['precision']} / "
                                              f"{'on' if b['xla'] else 'off'} / {b['seed']}"),
        ("Training recipe", recipe_text(b)),
    ]


def _hardware(b: dict[str, Any]) -> list[tuple[str, str]]:
    return [
        (f"Worker {w['worker_id']} ({w['host']})",
         (", ".join(f"{a['model']} ({a['memory_bytes'] / 2**30:.0f} GiB)" for a in w["accelerators"])
          or "no accelerator") + f"; {w['cpus']} CPUs, {w['memory_bytes'] / 2**30:.0f} GiB; backend {w['backend']}"
         + (f"; dataset {w['dataset']['kind']}, {w['dataset']['train_images']:,} training / "
            f"{w['dataset']['validation_images']:,} validation images, fingerprint {w['dataset']['fingerprint']}"
            if w["dataset"] else "")
         + (f"; {w['implausible_reports']} reports refused as implausible" if w["implausible_reports"] else "")
         + "; software " + (software_text(w["software"]) or "not reported"))
        for w in b["hardware"]
    ] + [("Master software", ", ".join(f"{k} {v}" for k, v in b["software"].items()))]


RANK_RULE = ("Ranked as the master ranks a run's finished models (aiperf.scoring.model_rank_key; `aiperf audit` "
             "audits the top of this order): by predicted final accuracy, the best observed one when there is no "
             "prediction; then by the best observed accuracy; then the lower id.")


def _model_rows(models: Sequence[dict[str, Any]]) -> str:
    return "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in (
            rank, m["model_id"], accuracy_text(m["predicted_accuracy"]), accuracy_text(m["best_accuracy"]),
            m["parent_id"] or "-", m["worker_id"], m["round"],
            m["hyperparameters"]["batch_size"], m["hyperparameters"]["kernel_size"],
            m["epochs"], m["graph_hash"][:12])) + "</tr>"
        for rank, m in enumerate(models, 1))


AUDIT_COLUMNS = ("model", "claimed accuracy", "audited", "architecture", "images/s claimed", "images/s timed",
                 "throughput", "verdict", "auditor", "detail")


def _audit_rows(audits: Sequence[dict[str, Any]]) -> str:
    """Every audit of the run, one row each (`aiperf audit`'s findings as the master recorded them)."""
    if not audits:
        return "<p>No model of this run has been audited (<code>aiperf audit</code>).</p>"
    head = "".join(f"<th>{c}</th>" for c in AUDIT_COLUMNS)
    rows = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in (
            a["model_id"], accuracy_text(a["claimed_accuracy"]), accuracy_text(a["audited_accuracy"]),
            "ok" if a["architecture_ok"] else "wrong", units.si(a["claimed_images_per_second"], ""),
            units.si(a["audited_images_per_second"], ""), a["throughput"] or "-", a["verdict"],
            f"{a['auditor_host']} ({a['auditor_hardware'] or 'hardware not given'})", a["detail"] or "")) + "</tr>"
        for a in audits)
    return f"<table><tr>{head}</tr>{rows}</table>"


def _charts(board: dict[str, Any], timeline: dict[str, Any]) -> str:
    points, resources = timeline["points"], timeline["resources"]
    charts = [(score_chart(board, points), SCORE_CHART_NOTE), (flops_chart(board, points), ""),
              (error_chart(points), "")] if points else []
    if resources:
        charts += [(utilisation_chart(resources), ""), (memory_chart(resources), "")]
    return "".join(f"<figure>{c}" + (f"<figcaption>{html.escape(note)}</figcaption>" if note else "") + "</figure>"
                   for c, note in charts) or "<p>No progress reported yet.</p>"


def render_report(board: dict[str, Any], timeline: dict[str, Any], models: Sequence[dict[str, Any]],
                  audits: Sequence[dict[str, Any]] = ()) -> str:
    """The report as HTML. board: ControlSession.scoreboard; timeline: ControlSession.timeline;
    models: the run's best models, best first; audits: its audits (as ControlSession answers them)."""
    b = board
    title = run_title(b)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>
body {{ font-family: system-ui, sans-serif; max-width: 60rem; margin: 2rem auto; padding: 0 1rem; color: #222; }}
table {{ border-collapse: collapse; margin: 1rem 0; }}
th, td {{ border: 1px solid #ccc; padding: .3rem .6rem; text-align: left; vertical-align: top; }}
th {{ background: #f4f4f4; }}
.valid, .passed td:nth-child(2) {{ color: #176f2c; }} .invalid, .failed td:nth-child(2) {{ color: #a3121d; }}
.pending td:nth-child(2) {{ color: #8a6100; }} .not-applicable td:nth-child(2) {{ color: #777; }}
figure {{ margin: 1rem 0; }}
</style></head><body>
<h1>{html.escape(title)}</h1>
<h2 class="{'valid' if b['valid'] else 'invalid'}">{'Valid run' if b['valid'] else 'Invalid run'}</h2>
<table>{_rows(_validity(b))}</table>
<h3>Validity checklist</h3>
{_checks(b)}
<h2>Scores</h2>
<table>{_rows(_summary(b))}</table>
<h2>Over time</h2>
{_charts(b, timeline)}
<h2>Best models</h2>
<p>{html.escape(RANK_RULE)}</p>
<table><tr><th>rank</th><th>id</th><th>predicted accuracy</th><th>best accuracy</th><th>parent</th><th>worker</th>
<th>round</th><th>batch</th><th>kernel</th><th>epochs</th><th>architecture hash</th></tr>{_model_rows(models)}</table>
<h2>Audits</h2>
{_audit_rows(audits)}
<h2>Hardware and software</h2>
<table>{_rows(_hardware(b))}</table>
<h2>What the numbers mean</h2>
<ul class="notes">{"".join(f"<li>{html.escape(n.split('] ', 1)[-1])}</li>" for n in score_notes(b))}</ul>
<h3>Glossary</h3>
<dl>{"".join(f"<dt>{html.escape(t)}</dt><dd>{html.escape(d)}</dd>" for t, d in GLOSSARY)}</dl>
</body></html>
"""


def fetch_report(session: "ControlSession", run: int = 0) -> tuple[dict[str, Any], str]:
    """(scoreboard dict, report HTML) of a run, fetched through a control session."""
    board = session.scoreboard(run)
    run_id = board["run_id"]
    timeline = session.timeline(run_id, max_points=2000)
    done = session.all_models(run_id, state=ModelState.DONE)
    # the master's ranking (GetHistory), from the one rule in aiperf.scoring
    done.sort(key=lambda m: model_rank_key(m["model_id"], m["predicted_accuracy"], m["best_accuracy"]))
    audits = session.audits(run_id).audits
    return board, render_report(board, timeline, done[:REPORT_MODELS], audits)
