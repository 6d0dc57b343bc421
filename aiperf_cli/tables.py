"""Readable views of the control API's records: the status line and the rich tables
of the scoreboard, the model list and the demo's live progress."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aiperf import audit, units
from aiperf.states import ModelState, RunState, WorkerState
from aiperf_cli.explain import checks_table, score_notes, validity_brief, validity_text
from aiperf_cli.format import format_duration, format_flops

if TYPE_CHECKING:  # pragma: no cover
    from rich.console import Group
    from rich.table import Table

RUN_COLUMNS = ("id", "state", "profile", "seed", "precision", "duration", "started", "stop reason")
WORKER_COLUMNS = ("id", "name", "host", "accelerators", "backend", "state", "last heartbeat", "model")
MODEL_COLUMNS = ("id", "parent", "worker", "round", "state", "batch", "kernel", "best acc", "pred acc", "hash")


def run_title(d: dict[str, Any]) -> str:
    """'AIPerf run 3 (official, mixed_fp16, XLA) - running' of a scoreboard dict: the precision
    is in the headline, since it changes the score several-fold on tensor-core accelerators."""
    return (f"AIPerf run {d['run_id']} ({d['profile']}{'' if d['official'] else ', unofficial'}, {d['precision']}"
            f"{', XLA' if d.get('xla') else ''}) - {d['state']}")


def official_text(d: dict[str, Any]) -> str:
    """'yes', or 'no: reason; reason' of a scoreboard or status dict."""
    return "yes" if d["official"] else "no: " + "; ".join(d["unofficial_reasons"])


def score_label(d: dict[str, Any]) -> str:
    """'Score (final)' once the run is over ('Score (final, short of the minimum running time)'
    when it ended before its minimum), 'Score (provisional)' while it runs short of its minimum
    running time (the score may still change), else 'Score'."""
    if d.get("final"):
        return "Score (final, short of the minimum running time)" if d.get("short_of_minimum") else "Score (final)"
    return "Score (provisional)" if d["provisional"] else "Score"


def stop_text(d: dict[str, Any]) -> str | None:
    """'deadline reached, after 1:00:00' of a stopped run dict; None while it has not stopped."""
    if d["stopped_at"] is None and d["state"] in (RunState.PENDING, RunState.RUNNING):
        return None
    after = f", after {format_duration(d['stopped_at'] - d['started_at'])}" if d["stopped_at"] and d["started_at"] \
        else ""
    return f"{d['state']}: {d['stop_reason'] or 'no reason given'}{after}"


def efficiency_text(d: dict[str, Any]) -> str:
    """The score as a share of the accelerators' datasheet peak (HPL's Rmax/Rpeak), or why there is none."""
    if d["efficiency"] is None:
        return f"n/a ({d['efficiency_unknown_reason'] or 'no datasheet peak'})"
    return f"{units.percent(d['efficiency'])} of {format_flops(d['datasheet_peak_flops'])} (datasheet)"


def measured_efficiency_text(d: dict[str, Any]) -> str:
    """The score as a share of the accelerators' accepted measured GEMM peak."""
    if d["efficiency_vs_measured"] is None:
        return "n/a (no measured peak for every accelerator)"
    verdict = d.get("peak_verdict")
    return (f"{units.percent(d['efficiency_vs_measured'])} of {format_flops(d['peak_flops'])} (measured"
            + (f", {verdict})" if verdict else ")"))


def rules_text(d: dict[str, Any]) -> str:
    """The rules version the run was started under, and the master's when it scores by others."""
    recorded = d["rules_version"] or "not recorded (the run predates rules versions)"
    now = d.get("scoring_rules_version")
    return recorded + (f"; this master scores by {now}" if now and now != d["rules_version"] else "")


def recipe_text(d: dict[str, Any]) -> str:
    """The run's training recipe in one line (docs/spec.md, "The training recipe")."""
    r = d.get("recipe")
    if not r:
        return "unknown (not a known profile)"
    decay = "linear to 0 over each round" if r["lr_decay"] == "round" else "linear per epoch over the longest round"
    trials = ("1 per architecture (TPE's)" if r["trials_per_architecture"] == 1 else
              f"{r['trials_per_architecture']} per architecture (the parent's, then TPE's)")
    return (f"SGD lr {r['learning_rate']:g} ({decay}), momentum {r['momentum']:g}, label smoothing "
            f"{r['label_smoothing']:g}, weight decay {r['weight_decay']:g} (kernels); early stop on "
            f"{r['early_stop_monitor']} (min delta {r['early_stop_min_delta']:g}); {r['warmup_rounds']} warm-up "
            f"rounds, then trials: {trials}")


def elapsed_text(d: dict[str, Any]) -> str:
    """Time run so far and the minimum a valid run needs."""
    return f"{format_duration(d['elapsed_s'])} (minimum {format_duration(d['min_running_time_s'])})"


def accuracy_text(value: float | None) -> str:
    """0.5 -> '0.5000'; unknown -> '-'."""
    return f"{value:.4f}" if value is not None else "-"


def downtime_text(d: dict[str, Any]) -> str:
    """'31.3 s in 1 outage (21.3 s inside the scored window)' of a run dict; 'none' without outages."""
    n = len(d["outages"])
    if not n:
        return "none"
    return (f"{d['downtime_s']:.1f} s in {n} outage{'s' if n > 1 else ''} "
            f"({d['downtime_in_window_s']:.1f} s inside the scored window)")


def status_line(d: dict[str, Any]) -> str:
    """One line of `run_status_to_dict` output: state, time, workers, models, master downtime."""
    models = ", ".join(f"{k} {v}" for k, v in d["models"].items() if v) or "none"
    remaining = ""
    if d["state"] == RunState.RUNNING and d["deadline"]:
        remaining = f", {format_duration(max(0.0, d['deadline'] - d['master_time']))} left"
    return (f"run {d['run_id']} {d['state']} ({d['profile']}, seed {d['seed']}): elapsed "
            f"{format_duration(d['elapsed_s'])}{remaining}; workers alive {d['workers_alive']}, "
            f"taken part {d['workers']}; models: {models}"
            + (f"; master down {downtime_text(d)}" if d["outages"] else "")
            + ("" if d.get("official", True) else f"; unofficial: {'; '.join(d['unofficial_reasons'])}"))


def scoreboard_table(d: dict[str, Any]) -> "Table":
    """The readable scoreboard (rich) of `scoreboard_to_dict` output."""
    from rich.table import Table

    table = Table(title=run_title(d), show_header=False)
    table.add_column("item", style="bold", overflow="fold")
    table.add_column("value", overflow="fold")
    best = f" (best accuracy {d['best_accuracy']:.4f})" if d["best_accuracy"] is not None else ""
    rows = [
        (score_label(d) + " [1]", format_flops(d["score"])),
        ("Regulated score [2]", format_flops(d["regulated_score"])),
        ("Valid FLOPS [3]", format_flops(d["valid_flops"])),
        ("FLOPS now", format_flops(d["flops"])),
        ("Error", f"{d['error']:.4f}{best}"),
        ("Valid", validity_text(d)),
        ("Official", official_text(d)),
        ("Audit", audit_text(d)),
        ("Efficiency [4]", efficiency_text(d)),
        ("Efficiency vs measured [4]", measured_efficiency_text(d)),
        ("Rules", rules_text(d)),
        ("Elapsed", elapsed_text(d)),
        ("Master downtime", downtime_text(d)),
        ("Workers", f"{d['workers']} ({d['workers_alive']} alive)"),
        ("Accelerators", str(d["accelerators"])),
        ("Models trained", f"{d['models_done']} done"
         + "".join(f", {v} {k}" for k, v in d["models"].items() if k != ModelState.DONE and v)),
        ("Images", f"{d['images_trained']:,} trained, {d['images_validated']:,} validated"),
        ("Seed / precision", f"{d['seed']} / {d['precision']}"),
        ("Training recipe", recipe_text(d)),
        ("Weight inheritance", "on (children start from their parent's weights)" if d.get("inherit")
         else "off (children train from scratch)"),
    ]
    stopped = stop_text(d)
    if stopped is not None:
        rows.insert(1, ("Stopped", stopped))
    for key, value in rows:
        table.add_row(key, value)
    for w in d["hardware"]:
        accs = ", ".join(a["model"] for a in w["accelerators"]) or "no accelerator"
        data = w["dataset"]
        # One fact per line: a wrapped line could split "backend" from its name.
        lines = [f"{w['host']}: {accs}", f"{w['cpus']} CPUs, {w['memory_bytes'] / 2**30:.0f} GiB",
                 f"backend {w['backend']}"]
        if data and data["kind"]:
            lines.append(f"dataset {data['kind']} {data['train_images']:,}/{data['validation_images']:,} "
                         f"({data['fingerprint'][:12]})")
        if w["implausible_reports"]:
            lines.append(f"{w['implausible_reports']} reports refused")
        if w["software"]:
            lines.append(software_text(w["software"]))
        table.add_row(f"Worker {w['worker_id']}", "\n".join(lines))
    table.add_row("Master software", ", ".join(f"{k} {v}" for k, v in d["software"].items() if k != "platform"))
    return table


def software_text(software: dict[str, str]) -> str:
    """'python 3.12.3, tensorflow 2.21.0, keras 3.12.0': a worker's or the master's software, platform left out."""
    return ", ".join(f"{k} {v}" for k, v in software.items() if k != "platform")


def scoreboard_view(d: dict[str, Any]) -> "Group":
    """`aiperf scoreboard`: the table, the validity checklist and one footnote per score."""
    from rich.console import Group
    from rich.text import Text

    return Group(scoreboard_table(d), checks_table(d), *(Text(line) for line in score_notes(d)))


def clock_text(t: float | None) -> str:
    """A master timestamp as UTC, '2026-11-23 18:37:10Z'; unknown -> '-'."""
    if not t:
        return "-"
    import datetime

    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")


def age_text(t: float | None, now: float) -> str:
    """How long before `now` (the master's clock) `t` was: '3 s ago'; unknown -> 'never'."""
    if not t:
        return "never"
    return f"{format_duration(max(0.0, now - t))} ago"


def accelerators_text(accelerators: list[dict[str, Any]]) -> str:
    """'2 x NVIDIA H100 80GB HBM3', 'A, B' when they differ, 'none' without any."""
    names = [a["model"] or "unknown" for a in accelerators]
    if not names:
        return "none"
    return f"{len(names)} x {names[0]}" if len(set(names)) == 1 else ", ".join(names)


def runs_table(runs: list[dict[str, Any]], total: int) -> "Table":
    """`aiperf runs`: one row per run dict (run_info_to_dict), newest first."""
    from rich.table import Table

    table = Table(title=f"{total} run{'s' if total != 1 else ''}" + (f" (newest {len(runs)})" if len(runs) < total
                                                                      else ""))
    for col in RUN_COLUMNS:
        table.add_column(col, overflow="fold")
    for r in runs:
        table.add_row(str(r["run_id"]), r["state"], r["profile"], str(r["seed"]), r["precision"],
                      format_duration(r["duration_s"]), clock_text(r["started_at"]), r["stop_reason"] or "-")
    return table


def workers_table(workers: list[dict[str, Any]], total: int, now: float, title: str = "") -> "Table":
    """`aiperf workers` and `aiperf status`: one row per worker_entry_to_dict."""
    from rich.table import Table

    alive = sum(1 for w in workers if w["state"] == WorkerState.ALIVE)
    table = Table(title=title or f"{total} worker{'s' if total != 1 else ''} registered ({alive} alive"
                                 + (f" of the {len(workers)} shown)" if len(workers) < total else ")"))
    for col in WORKER_COLUMNS:
        table.add_column(col, overflow="fold")
    for w in workers:
        model = f"{w['current_model_id']} (run {w['current_run_id']})" if w["current_model_id"] else "-"
        table.add_row(str(w["worker_id"]), w["name"], w["host"], accelerators_text(w["accelerators"]), w["backend"],
                      w["state"], age_text(w["last_heartbeat"], now), model)
    return table


def audit_text(d: dict[str, Any]) -> str:
    """The audit of the model behind the regulated score: passed / failed / not audited, audited accuracy."""
    if not d.get("audit_status"):
        return "-"
    a = d.get("audit")
    text = f"model {d['audit_model_id']}: {d['audit_status']}"
    if a is not None:
        if a["verdict"] not in (audit.PASSED, audit.FAILED):
            text += f" ({a['verdict']})"
        if a["audited_accuracy"] is not None:
            text += f", audited accuracy {a['audited_accuracy']:.4f} (claimed {a['claimed_accuracy']:.4f})"
    return text


def audits_table(run_id: int, rows: list[dict[str, Any]]) -> "Table":
    """`aiperf audit`'s rows (rich)."""
    from rich.table import Table

    table = Table(title=f"run {run_id}: audit of {units.plural(len(rows), 'model')}")
    for col in ("model", "why audited", "claimed", "audited", "architecture", "img/s claimed/timed", "verdict",
                "detail"):
        table.add_column(col, overflow="fold")
    for r in rows:
        timed = units.si(r["audited_images_per_second"] or None, "")
        table.add_row(str(r["model_id"]), r.get("why") or "-", accuracy_text(r["claimed_accuracy"]),
                      accuracy_text(r["audited_accuracy"]),
                      "ok" if r["architecture_ok"] else "wrong" if r["verdict"] == "wrong architecture" else "-",
                      f"{units.si(r['claimed_images_per_second'], '')}/{timed}", r["verdict"],
                      f"node audit, inventory {r.get('inventory') or '-'}" if r.get("node_audit")
                      else r.get("detail") or "")
    return table


def models_table(run_id: int, total: int, models: list[dict[str, Any]]) -> "Table":
    """The model list (rich) of `model_to_dict` outputs."""
    from rich.table import Table

    table = Table(title=f"run {run_id}: {units.plural(total, 'model')}")
    for col in MODEL_COLUMNS:
        table.add_column(col, overflow="fold")
    for m in models:
        table.add_row(
            str(m["model_id"]), str(m["parent_id"] or "-"), str(m["worker_id"]), str(m["round"]), m["state"],
            str(m["hyperparameters"]["batch_size"]), str(m["hyperparameters"]["kernel_size"]),
            accuracy_text(m["best_accuracy"]), accuracy_text(m["predicted_accuracy"]), m["graph_hash"][:12],
        )
    return table


def progress_table(d: dict[str, Any]) -> "Table":
    """The live view (the demo, `aiperf status --watch` on a terminal) of a scoreboard dict."""
    from rich.table import Table

    title = f"AIPerf run {d['run_id']} ({d['profile']}{'' if d['official'] else ', unofficial'})"
    t = Table(title=title, show_header=False)
    t.add_column("item", style="bold")
    t.add_column("value", overflow="fold")
    models = d["models"]
    t.add_row("state", d["state"])
    t.add_row("elapsed", f"{format_duration(d['elapsed_s'])} of {format_duration(d['duration_s'])}")
    t.add_row("models", f"{models.get(ModelState.DONE, 0)} done, {models.get(ModelState.TRAINING, 0)} training")
    t.add_row("FLOPS now", format_flops(d["flops"]))
    t.add_row("best accuracy", accuracy_text(d["best_accuracy"]))
    label = " (final)" if d.get("final") else " (provisional)" if d["provisional"] else ""
    t.add_row("score", format_flops(d["score"]) + label)
    t.add_row("valid", validity_brief(d))
    return t
