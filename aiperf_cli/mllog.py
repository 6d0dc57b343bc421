"""A run as an MLPerf Training log: open division, ResNet on ImageNet.

AIPerf is not one training run but many models trained at once, so the log maps
(docs/spec.md, "MLPerf logs", has the table and the reasons):

- the AIPerf run is the MLPerf run: init from StartRun to the start of the scored
  window, run_start/run_stop the window itself (run_stop only once the run is over);
- each model is one block (block_start/block_stop): a model trains its own epochs
  1..n, so `first_epoch_num` is 1 and `epoch_count` its epochs;
- each model's observed accuracy is one eval_accuracy, at its last epoch (`epoch_num`);
- what MLPerf has no key for keeps the `aiperf_` prefix (the checker skips keys it has
  no rule for: mlperf_logging.compliance_checker.mlp_compliance, "unknown key").

No epoch_start/epoch_stop or eval_start/eval_stop: the control API gives a model's
start, finish and epoch count, not the time of each epoch or evaluation, and the
ruleset accepts block markers in their place (`AT_LEAST_ONE_OR(block_start)`).

The lines are written by mlperf_logging's own MLLogger; the suite runs MLPerf's
compliance checker (ruleset `RULESET`) on the export of a real run.
"""

from __future__ import annotations

import io
import logging
from collections import Counter
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Iterable, Optional

from mlperf_logging.mllog import constants as mc
from mlperf_logging.mllog.mllog import MLLogger

from aiperf.profiles import Profile, get_profile
from aiperf.states import RunState

RULESET = "4.0.0"  # MLPerf Training's last ruleset with ResNet (4.1.0 dropped it)
BENCHMARK = mc.RESNET
DIVISION = "open"  # not the closed ResNet recipe: the architecture changes by search

# The ResNet rules' names of the SGD hyperparameters (training_3.1.0/closed_resnet_sgd.yaml,
# which closed_resnet.yaml of 4.0.0 loads for opt_name sgd); mllog's constants lack them.
SGD_BASE_LR = "sgd_opt_base_learning_rate"
SGD_END_LR = "sgd_opt_end_learning_rate"
SGD_POLY_POWER = "sgd_opt_learning_rate_decay_poly_power"
SGD_MOMENTUM = "sgd_opt_momentum"
SGD_WEIGHT_DECAY = "sgd_opt_weight_decay"

# Profile fields that are MLPerf hyperparameters, and the key each becomes; the rest of the
# training recipe (docs/spec.md, "The training recipe") has no MLPerf key and keeps the prefix.
PROFILE_KEYS = {"learning_rate": SGD_BASE_LR, "momentum": SGD_MOMENTUM, "weight_decay": SGD_WEIGHT_DECAY,
                "lr_decay": "aiperf_lr_decay", "label_smoothing": "aiperf_label_smoothing",
                "early_stop_monitor": "aiperf_early_stop_monitor",
                "early_stop_min_delta": "aiperf_early_stop_min_delta",
                "trials_per_architecture": "aiperf_trials_per_architecture"}
# The rest of the recipe, as the worker trains (worker/rounds.py: Keras SGD with momentum, the
# learning rate linear, polynomial power 1, without warm-up; its end in `hyperparameters`).
RECIPE = {mc.OPT_NAME: mc.SGD, SGD_POLY_POWER: 1.0, mc.OPT_LR_WARMUP_EPOCHS: 0}
# Profile fields no MLPerf key describes: the search, the run's rules and the data. A new
# Profile field must be added to PROFILE_KEYS or here (tests/test_mllog.py checks).
NOT_MLPERF = frozenset({
    "name", "official", "input_size", "channels", "num_classes", "width", "dataset", "epochs_per_round",
    "patience_base", "patience_step", "patience_max", "warmup_rounds", "batch_size", "batch_sizes",
    "batch_per_gib", "widen_fractions", "skip_new_add", "warmup_from_parent", "kernel_sizes", "kernel_size",
    "bn_momentum", "min_duration_s", "min_running_time_s", "max_error", "target_accuracy", "precision", "xla",
})
# What starts a log line; MLPerf's parser cuts a line at its last occurrence (mlp_parser,
# strip_and_dedup), so inside a value it is written with its first ':' escaped.
TOKEN = ":::MLLOG"
# The scoreboard's figures logged before run_stop.
BOARD_KEYS = ("score", "regulated_score", "valid_flops", "error", "valid", "invalid_reason", "provisional",
              "total_ops", "efficiency", "efficiency_unknown_reason", "efficiency_vs_measured")
# The run's record logged at init: what it is and the rules it is scored under.
RUN_KEYS = ("run_id", "profile", "precision", "duration_s", "rules_version")


@dataclass(frozen=True)
class Submission:
    """Who submits the log and on what (MLPerf's submission_* keys; cli/export.py's options)."""

    org: str
    platform: Optional[str]  # None: described from the run's registered workers
    status: str


@dataclass(frozen=True)
class Event:
    """One log line before it is written: `kind` is MLLogger's start, end or event."""

    time_ms: int
    key: str
    value: Any = None
    metadata: Optional[dict[str, Any]] = None
    kind: str = "event"


def describe_platform(hardware: Iterable[dict[str, Any]]) -> str:
    """The run's registered workers as one platform string, e.g. "2 nodes, 16xNVIDIA H100 80GB HBM3"."""
    nodes = list(hardware)
    if not nodes:
        return "unknown"
    chips = Counter(a["model"] or "unnamed accelerator" for w in nodes for a in w["accelerators"])
    parts = [f"{n}x{model}" for model, n in sorted(chips.items())]
    cpu_only = [w for w in nodes if not w["accelerators"]]
    if cpu_only:
        parts.append(f"{sum(w['cpus'] for w in cpu_only)} CPUs without accelerator")
    return f"{len(nodes)} node{'s' if len(nodes) > 1 else ''}, " + " + ".join(parts)


def hyperparameters(profile: Profile) -> dict[str, Any]:
    """The run-wide training hyperparameters under the ResNet rules' key names. The end learning
    rate: 0 for "round" (each round ends at 0), the last epoch's lr/final_epochs for "max_epochs"."""
    end = 0.0 if profile.lr_decay == "round" else profile.learning_rate_at(profile.final_epochs - 1,
                                                                             profile.final_epochs)
    return {**RECIPE, SGD_END_LR: end, **{key: getattr(profile, name) for name, key in PROFILE_KEYS.items()}}


def unmapped_profile_fields() -> set[str]:
    """Profile fields neither logged nor declared as having no MLPerf key."""
    return {f.name for f in fields(Profile)} - set(PROFILE_KEYS) - NOT_MLPERF


def global_batch_size(models: list[dict[str, Any]], hardware: list[dict[str, Any]]) -> Optional[int]:
    """The global batch (batch_size per accelerator × the worker's accelerators: one replica per
    GPU, worker/trainer.py) when every model that trained used the same; None when they differ."""
    replicas = {w["worker_id"]: max(1, len(w["accelerators"])) for w in hardware}
    batches = {(m["hyperparameters"] or {}).get("batch_size", 0) * replicas.get(m["worker_id"], 1)
               for m in models if _trained(m)}
    return batches.pop() if len(batches) == 1 and 0 not in batches else None


def dataset_events(hardware: list[dict[str, Any]], time_ms: int) -> list[Event]:
    """train_samples / eval_samples: the split sizes the workers reported (most of them, when
    they differ); none when no worker reported its dataset."""
    reported = [(w["worker_id"], w["dataset"]) for w in hardware if w.get("dataset")]
    if not reported:
        return []
    sizes = Counter((d["train_images"], d["validation_images"]) for _, d in reported)
    (train, val), _ = max(sizes.items(), key=lambda kv: (kv[1], kv[0]))
    others = sorted(wid for wid, d in reported if (d["train_images"], d["validation_images"]) != (train, val))
    meta = {"aiperf_dataset": reported[0][1]["kind"]}
    if others:
        meta["aiperf_workers_with_another_split"] = others
    return [Event(time_ms, mc.TRAIN_SAMPLES, train, meta), Event(time_ms, mc.EVAL_SAMPLES, val, meta)]


def _trained(m: dict[str, Any]) -> bool:
    return bool(m["epochs"] or m["images_trained"])


def _ms(t: float) -> int:
    return int(round(t * 1000))


def model_events(m: dict[str, Any]) -> list[Event]:
    """One model as a block: its start, its accuracy at its last epoch, its finish."""
    if not _trained(m):
        return []
    hp = m["hyperparameters"] or {}
    epochs = max(1, m["epochs"])
    ids = {"aiperf_model_id": m["model_id"], "aiperf_worker_id": m["worker_id"], "aiperf_round": m["round"]}
    block = {"first_epoch_num": 1, **ids}
    events = [Event(_ms(m["created_at"]), mc.BLOCK_START, None,
                    {**block, "epoch_count": epochs, "aiperf_parent_id": m["parent_id"],
                     "aiperf_batch_size": hp.get("batch_size"), "aiperf_kernel_size": hp.get("kernel_size")},
                    "start")]
    if m["finished_at"] is None:
        return events  # still training: no accuracy or end known yet
    end = _ms(m["finished_at"])
    if m["best_accuracy"] is not None:
        # the best of the epochs validated so far, observed by the last one
        events.append(Event(end, mc.EVAL_ACCURACY, m["best_accuracy"], {mc.EPOCH_NUM: epochs, **ids}))
    events.append(Event(end, mc.BLOCK_STOP, None,
                        {**block, "aiperf_state": m["state"], "aiperf_images_trained": m["images_trained"],
                         "aiperf_images_validated": m["images_validated"]}, "end"))
    return events


def header_events(data: dict[str, Any], sub: Submission) -> list[Event]:
    """What comes before run_start: who and what, the hyperparameters, init."""
    board = data["scoreboard"]
    t = _ms(board["created_at"])
    platform = sub.platform if sub.platform is not None else describe_platform(board["hardware"])
    head = [
        Event(t, mc.CACHE_CLEAR, False),  # nothing clears the workers' page cache before a run
        Event(t, mc.INIT_START, None, None, "start"),
        Event(t, mc.SUBMISSION_BENCHMARK, BENCHMARK), Event(t, mc.SUBMISSION_DIVISION, DIVISION),
        Event(t, mc.SUBMISSION_ORG, sub.org), Event(t, mc.SUBMISSION_PLATFORM, platform),
        Event(t, mc.SUBMISSION_STATUS, sub.status), Event(t, mc.SEED, board["seed"]),
    ]
    head += [Event(t, f"aiperf_{key}", board[key]) for key in RUN_KEYS]
    if board.get("backends"):  # the frameworks the run's workers trained with
        head.append(Event(t, "aiperf_backends", board["backends"]))
    try:
        profile: Optional[Profile] = get_profile(board["profile"])
    except ValueError:  # a profile this aiperf does not know: its hyperparameters are not logged
        profile = None
    if profile is not None:
        head += [Event(t, key, value) for key, value in hyperparameters(profile).items()]
    batch = global_batch_size(data["models"], board["hardware"])
    if batch is not None:
        head.append(Event(t, mc.GLOBAL_BATCH_SIZE, batch))
    head += dataset_events(board["hardware"], t)
    if board["started_at"] is not None:  # a pending run has not left init
        start = _ms(board["started_at"])
        head += [Event(start, mc.INIT_STOP, None, None, "end"), Event(start, mc.RUN_START, None, None, "start")]
    return head


def run_events(data: dict[str, Any], sub: Submission) -> list[Event]:
    """Every line of the log in the order it is written: the header up to run_start, then the
    rest by time, run_stop among them (a tie keeps the order in which they are listed here)."""
    board = data["scoreboard"]
    t0 = board["started_at"] or board["created_at"]
    timed = [e for m in data["models"] for e in model_events(m)]
    timed += [Event(_ms(t0 + p["elapsed_s"]), "aiperf_flops", p["flops"], {"elapsed_s": p["elapsed_s"],
                                                                          "ops": p["ops"]})
              for p in data["timeline"]["points"]]
    over = board["state"] in (RunState.FINISHED, RunState.ABORTED)
    end = _ms(board["stopped_at"] or board["finished_at"] or t0 + board["elapsed_s"]) if over else \
        _ms(t0 + board["elapsed_s"])
    timed += [Event(end, f"aiperf_{key}", board[key]) for key in BOARD_KEYS]
    # the validity checklist, one line per rule (aiperf.scoring.VALIDITY_RULES): its state, figure and limit
    timed += [Event(end, f"aiperf_check_{c['rule']}", c["state"], {"figure": c["figure"], "limit": c["limit"]})
              for c in board.get("checks") or []]
    if over:
        # MLPerf's success is a run that reached its quality target: here, a valid run.
        status = mc.SUCCESS if board["state"] == RunState.FINISHED and board["valid"] else mc.ABORTED
        timed.append(Event(end, mc.RUN_STOP, None, {mc.STATUS: status, "aiperf_state": board["state"],
                                                    "aiperf_stop_reason": board["stop_reason"]}, "end"))
    by_time = sorted(enumerate(timed), key=lambda ie: (ie[1].time_ms, ie[0]))
    return header_events(data, sub) + [e for _, e in by_time]


def write(events: Iterable[Event]) -> str:
    """The events as ":::MLLOG {...}" lines, through mlperf_logging's MLLogger."""
    stream = io.StringIO()
    sink = logging.Logger("aiperf.mllog", logging.INFO)  # not in logging's registry: nothing else sees it
    sink.addHandler(logging.StreamHandler(stream))
    # root_dir: each line's "file" metadata relative to the project, not this machine's path
    ml = MLLogger(logger=sink, root_dir=str(Path(__file__).resolve().parents[1]))
    log = {"start": ml.start, "end": ml.end, "event": ml.event}
    for e in events:
        log[e.kind](key=e.key, value=e.value, metadata=e.metadata, time_ms=e.time_ms)
    # A value holding the token (a stop reason, an accelerator's name: text from the network)
    # would split its line for the parser; JSON's \u003a is the same ':' once decoded.
    return "".join(line[:len(TOKEN)] + line[len(TOKEN):].replace(TOKEN, "\\u003a" + TOKEN[1:])
                   for line in stream.getvalue().splitlines(keepends=True))


def to_mllog(data: dict[str, Any], sub: Submission) -> str:
    """An export (aiperf_cli.export.fetch_export's dict) as an MLPerf Training log."""
    return write(run_events(data, sub))
