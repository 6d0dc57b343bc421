"""The bounds of every field of every request of the master's API, declared once.

The master applies `check(request)` to every request of WorkerService and
ControlService before anything reads it (master/rpc/servicers.py); a field out of
its bound is refused with INVALID_ARGUMENT naming the field, e.g.
``RegisterRequest.accelerators[3].peak_flops: must be a finite number in
[0, 1e+16], got inf``. The limits themselves are the table of aiperf/limits.py.
Clients share this module: `clip_text` keeps a worker's free text (a failure
reason) inside its bound.

What needs the master's state is checked by the Master on top of these: a
report's images × the model's FLOPs per image against the time since the
model's previous report (`report_ops_ceiling`, master/core/budget.py), a graph's
FLOPs per image and layer count after it was parsed.

Why hand-written and not protovalidate (buf.validate annotations): measured
with benchmarks/validation_bench.py, which turns this table into buf.validate
annotations and times both on the same requests (docs/spec.md section 10).
This module costs half the CPU of protovalidate 2.1 on the hot path (1.7 vs
3.9 µs per heartbeat, 3.5 vs 6.6 µs per progress report) and about the same
on the larger requests; protovalidate also cannot express the JSON depth
check, and would add a native dependency and a vendored validate.proto to
every build and split the bounds between the .proto and Python.
"""

from __future__ import annotations

from typing import Any, Callable

from aiperf.api import aiperf_pb2 as pb
from aiperf.limits import (
    MAX_ACCELERATOR_MEMORY_BYTES,
    MAX_ACCELERATOR_UUID_CHARS,
    MAX_ACCELERATORS_PER_WORKER,
    MAX_AUDIT_IMAGES,
    MAX_AUDIT_IMAGES_PER_S,
    MAX_BATCH_SIZE,
    MAX_CHECKPOINT_URI_CHARS,
    MAX_CPUS,
    MAX_CREDENTIAL_CHARS,
    MAX_DATASET_CLASSES,
    MAX_DATASET_IMAGES,
    MAX_DATASET_KIND_CHARS,
    MAX_DTYPES_PER_ACCELERATOR,
    MAX_EPOCH,
    MAX_FLOPS_PER_IMAGE,
    MAX_GRAPH_HASH_CHARS,
    MAX_GRAPH_JSON_CHARS,
    MAX_GRAPH_JSON_DEPTH,
    MAX_HARDWARE_CHARS,
    MAX_HOST_MEMORY_BYTES,
    MAX_ID,
    MAX_IMAGE_SIZE,
    MAX_IMAGES_PER_REPORT,
    MAX_INTERVAL_S,
    MAX_KEEP_CHECKPOINTS,
    MAX_KERNEL_SIZE,
    MAX_MODEL_NAME_CHARS,
    MAX_MODELS,
    MAX_NAME_CHARS,
    MAX_OFFSET,
    MAX_OPS_PER_REPORT,
    MAX_OPS_PER_S_PER_ACCELERATOR,
    MAX_PAGE,
    MAX_PCI_BUS_ID_CHARS,
    MAX_REASON_CHARS,
    MAX_ROUND,
    MAX_RUN_DURATION_S,
    MAX_SAMPLE_AGE_S,
    MAX_SAMPLES_PER_CALL,
    MAX_SEED,
    MAX_SEQ,
    MAX_SOFTWARE_ENTRIES,
    MAX_SOFTWARE_NAME_CHARS,
    MAX_SOFTWARE_VERSION_CHARS,
    MAX_STOP_REASON_CHARS,
    MAX_TIMELINE_BUCKETS,
    MAX_TIMELINE_POINTS,
    MAX_UNDELETED_PER_FINISH,
    MAX_VERDICT_CHARS,
    MAX_WORKERS,
    SHA256_HEX_CHARS,
)


def report_ops_ceiling(accelerators: int) -> float:
    """Operations per second a worker with this many registered accelerators can
    claim at most (the constant per accelerator; at least one accelerator)."""
    return MAX_OPS_PER_S_PER_ACCELERATOR * max(1, accelerators)


def clip_text(text: str, max_chars: int) -> str:
    """`text` made to pass a multiline text bound: other control characters
    become spaces and it is cut to max_chars (a client's own free text)."""
    clean = "".join(c if c.isprintable() or c in "\n\t" else " " for c in text)
    return clean if len(clean) <= max_chars else clean[:max_chars - 1] + "…"


# ---------------------------------------------------------------- rules


class BoundsError(ValueError):
    """A field out of its bound; str() names the field: 'Message.field[3].sub: problem'."""

    def __init__(self, problem: str) -> None:
        super().__init__(problem)
        self.problem = problem
        self.path: list[str] = []
        self.message_type = ""

    @property
    def field(self) -> str:
        out = self.message_type
        for part in self.path:
            out += part if part.startswith("[") else ("." + part if out else part)
        return out

    def __str__(self) -> str:
        return f"{self.field}: {self.problem}" if self.field else self.problem


class Integer:
    """An integer in lo..hi."""

    __slots__ = ("lo", "hi")

    def __init__(self, lo: int, hi: int) -> None:
        self.lo, self.hi = lo, hi

    def check(self, v: int) -> None:
        if not self.lo <= v <= self.hi:
            raise BoundsError(f"must be in {self.lo}..{self.hi}, got {v}")


class Real:
    """A finite float in [lo, hi] (NaN fails the comparison)."""

    __slots__ = ("lo", "hi")

    def __init__(self, lo: float, hi: float) -> None:
        self.lo, self.hi = lo, hi

    def check(self, v: float) -> None:
        if not self.lo <= v <= self.hi:
            raise BoundsError(f"must be a finite number in [{self.lo:g}, {self.hi:g}], got {v!r}")


class Text:
    """At most max_chars printable characters (multiline: newlines and tabs too)."""

    __slots__ = ("max_chars", "multiline")

    def __init__(self, max_chars: int, multiline: bool = False) -> None:
        self.max_chars, self.multiline = max_chars, multiline

    def check(self, v: str) -> None:
        if len(v) > self.max_chars:
            raise BoundsError(f"at most {self.max_chars} characters, got {len(v)}")
        if not v.isprintable():
            bad = next((i for i, c in enumerate(v) if not (c.isprintable() or (self.multiline and c in "\n\t"))),
                       None)
            if bad is not None:
                raise BoundsError(f"must be printable text: character U+{ord(v[bad]):04X} at {bad}")


class AsciiText(Text):
    """At most max_chars printable ASCII characters: a device's name or identity, compared
    with a table or with another device's, where a look-alike letter (a Cyrillic "Н" in
    "H100") would pass for what it is not."""

    __slots__ = ()

    def check(self, v: str) -> None:
        super().check(v)
        bad = next((i for i, c in enumerate(v) if not " " <= c <= "~"), None)
        if bad is not None:
            raise BoundsError(f"must be printable ASCII: character U+{ord(v[bad]):04X} at {bad}")


class HexDigest:
    """Empty, or exactly `chars` lowercase hex digits (a SHA-256 in hex)."""

    __slots__ = ("chars",)

    _DIGITS = frozenset("0123456789abcdef")

    def __init__(self, chars: int) -> None:
        self.chars = chars

    def check(self, v: str) -> None:
        if v and (len(v) != self.chars or not self._DIGITS.issuperset(v)):
            raise BoundsError(f"must be empty or {self.chars} lowercase hex digits, got {v[:80]!r}")


class Enum:
    """One of the given enum numbers."""

    __slots__ = ("values", "names")

    def __init__(self, enum: Any, *only: int) -> None:
        self.values = frozenset(only or enum.values())
        self.names = ", ".join(enum.Name(v) for v in sorted(self.values))

    def check(self, v: int) -> None:
        if v not in self.values:
            raise BoundsError(f"must be one of {self.names}, got {v}")


class Nested:
    """A message field: its own rules."""

    __slots__ = ("type_name",)

    def __init__(self, message: Any) -> None:
        self.type_name: str = message.DESCRIPTOR.full_name

    def check(self, v: Any) -> None:
        _CHECKERS[self.type_name](v)


class Repeated:
    """At most max_items elements, each checked by `each`."""

    __slots__ = ("max_items", "each")

    def __init__(self, max_items: int, each: Any) -> None:
        self.max_items, self.each = max_items, each

    def check(self, v: Any) -> None:
        if len(v) > self.max_items:
            raise BoundsError(f"at most {self.max_items} items, got {len(v)}")
        check = self.each.check
        for i, item in enumerate(v):
            try:
                check(item)
            except BoundsError as exc:
                exc.path.insert(0, f"[{i}]")
                raise


class Mapping:
    """A map of at most max_items pairs; keys and values checked."""

    __slots__ = ("max_items", "key", "value")

    def __init__(self, max_items: int, key: Any, value: Any) -> None:
        self.max_items, self.key, self.value = max_items, key, value

    def check(self, v: Any) -> None:
        if len(v) > self.max_items:
            raise BoundsError(f"at most {self.max_items} entries, got {len(v)}")
        for k, item in v.items():
            try:
                self.key.check(k)
                self.value.check(item)
            except BoundsError as exc:
                exc.path.insert(0, f"[{k[:32]!r}]")
                raise


class GraphJson:
    """JSON text of at most max_chars characters, nested at most max_depth deep;
    the depth is found without parsing (json.loads recurses once per level)."""

    __slots__ = ("max_chars", "max_depth")

    def __init__(self, max_chars: int, max_depth: int) -> None:
        self.max_chars, self.max_depth = max_chars, max_depth

    def check(self, v: str) -> None:
        if len(v) > self.max_chars:
            raise BoundsError(f"at most {self.max_chars} characters, got {len(v)}")
        depth = json_depth(v, self.max_depth)
        if depth is None:
            raise BoundsError(f"nested deeper than {self.max_depth} levels, or unbalanced brackets")


_NOT_STRUCTURE = bytes(b for b in range(256) if b not in b'[]{}"')  # bytes json_depth drops
_SQUARE = bytes.maketrans(b"{}", b"[]")  # one kind of bracket: json.loads refuses a mismatched pair


def json_depth(text: str, limit: int) -> int | None:
    """How deep the arrays and objects of JSON `text` nest, when at most `limit`
    and balanced; else None. A few linear passes of bytes operations, no
    recursion: escaped backslashes and quotes, then everything but brackets and
    quotes, then the strings go, and each pass removes one level of innermost pairs."""
    data = text.encode("utf-8", "surrogatepass").replace(b"\\\\", b"").replace(b'\\"', b"")
    brackets = b"".join(data.translate(_SQUARE, _NOT_STRUCTURE).split(b'"')[::2])  # even pieces: outside strings
    if b"[" * (limit + 1) in brackets:  # a run of openers nests deeper than the limit: no need to count
        return None
    depth = 0
    while brackets:
        if depth == limit:
            return None
        inner = brackets.replace(b"[]", b"")
        if len(inner) == len(brackets):
            return None  # unbalanced
        brackets, depth = inner, depth + 1
    return depth


# ---------------------------------------------------------------- every request's fields

Rule = Any  # one of the classes above, or None: nothing to check (bool)

_ID = Integer(1, MAX_ID)
_ID_OR_0 = Integer(0, MAX_ID)
_ACCURACY = Real(0.0, 1.0)
_UTIL = Real(0.0, 1.0)

RULES: dict[Any, dict[str, Rule]] = {
    pb.Accelerator: {
        "model": AsciiText(MAX_MODEL_NAME_CHARS),
        "memory_bytes": Integer(0, MAX_ACCELERATOR_MEMORY_BYTES),
        "uuid": AsciiText(MAX_ACCELERATOR_UUID_CHARS),
        "pci_bus_id": AsciiText(MAX_PCI_BUS_ID_CHARS),
        "peak_flops": Real(0.0, MAX_OPS_PER_S_PER_ACCELERATOR),
        "peak_flops_by_dtype": Mapping(MAX_DTYPES_PER_ACCELERATOR, Text(16),
                                       Real(0.0, MAX_OPS_PER_S_PER_ACCELERATOR)),
    },
    pb.DatasetInfo: {
        "kind": Text(MAX_DATASET_KIND_CHARS),
        "train_images": Integer(0, MAX_DATASET_IMAGES),
        "validation_images": Integer(0, MAX_DATASET_IMAGES),
        "num_classes": Integer(0, MAX_DATASET_CLASSES),
        "image_size": Integer(0, MAX_IMAGE_SIZE),
        "fingerprint": Text(MAX_GRAPH_HASH_CHARS),
    },
    pb.SoftwareVersion: {
        "name": Text(MAX_SOFTWARE_NAME_CHARS),
        "version": Text(MAX_SOFTWARE_VERSION_CHARS),
    },
    pb.Hyperparameters: {
        "batch_size": Integer(0, MAX_BATCH_SIZE),  # 0 and even kernels: the library's rule names them
        "kernel_size": Integer(0, MAX_KERNEL_SIZE),
    },
    pb.Limits: {
        "max_models": Integer(0, MAX_MODELS),
        "max_rounds_per_worker": Integer(0, MAX_ROUND),
        "max_epochs_per_round": Integer(0, MAX_EPOCH),
    },
    pb.ResourceSample: {
        "age_s": Real(0.0, MAX_SAMPLE_AGE_S),
        "accelerator_index": Integer(-1, MAX_ACCELERATORS_PER_WORKER - 1),
        "accelerator_util": _UTIL,
        "accelerator_memory_used": Integer(0, MAX_ACCELERATOR_MEMORY_BYTES),
        "cpu_util": _UTIL,
        "memory_used": Integer(0, MAX_HOST_MEMORY_BYTES),
    },
    # ------------------------------------------------ WorkerService
    pb.RegisterRequest: {
        "api_version": Integer(0, 2**31 - 1),  # an unknown version is FAILED_PRECONDITION (conversions)
        "name": Text(MAX_NAME_CHARS),
        "host": Text(MAX_NAME_CHARS),
        "accelerators": Repeated(MAX_ACCELERATORS_PER_WORKER, Nested(pb.Accelerator)),
        "cpus": Integer(0, MAX_CPUS),
        "memory_bytes": Integer(0, MAX_HOST_MEMORY_BYTES),
        "software": Repeated(MAX_SOFTWARE_ENTRIES, Nested(pb.SoftwareVersion)),
        "credential": Text(MAX_CREDENTIAL_CHARS),
        "cpu_peak_flops_by_dtype": Mapping(MAX_DTYPES_PER_ACCELERATOR, Text(16),
                                           Real(0.0, MAX_OPS_PER_S_PER_ACCELERATOR)),
        "cpu_model": Text(MAX_MODEL_NAME_CHARS),
        "backend": Enum(pb.Backend),  # UNSPECIFIED: a worker from before the field (TensorFlow)
    },
    pb.HeartbeatRequest: {"worker_id": _ID, "model_id": _ID_OR_0, "leaving": None},
    pb.ProgressReport: {
        "worker_id": _ID,
        "model_id": _ID,
        "seq": Integer(1, MAX_SEQ),
        "images_trained": Integer(0, MAX_IMAGES_PER_REPORT),
        "images_validated": Integer(0, MAX_IMAGES_PER_REPORT),
        "has_accuracy": None,
        "val_accuracy": _ACCURACY,
        "epoch": Integer(0, MAX_EPOCH),
        "worker_flops": Integer(0, MAX_OPS_PER_REPORT),
        "weights_sha256": HexDigest(SHA256_HEX_CHARS),
    },
    pb.WorkerMessage: {"heartbeat": Nested(pb.HeartbeatRequest), "progress": Nested(pb.ProgressReport)},
    pb.GetHistoryRequest: {
        "worker_id": _ID, "run_id": _ID_OR_0, "since_model_id": _ID_OR_0, "limit": Integer(0, MAX_PAGE),
        "without_ranking": None,
    },
    pb.SubmitModelRequest: {
        "worker_id": _ID,
        "run_id": _ID_OR_0,
        "graph_json": GraphJson(MAX_GRAPH_JSON_CHARS, MAX_GRAPH_JSON_DEPTH),
        "graph_hash": Text(MAX_GRAPH_HASH_CHARS),
        "parent_id": _ID_OR_0,
        "round": Integer(1, MAX_ROUND),
        "hyperparameters": Nested(pb.Hyperparameters),
        "queue": None,
        "dataset": Nested(pb.DatasetInfo),
        "has_dataset": None,
        "inherited_from": _ID_OR_0,  # the Master checks it is 0 or parent_id
    },
    pb.GetHyperparameterHistoryRequest: {"worker_id": _ID, "run_id": _ID_OR_0},
    pb.FinishModelRequest: {
        "worker_id": _ID,
        "model_id": _ID,
        "state": Enum(pb.ModelState, pb.MODEL_DONE, pb.MODEL_FAILED, pb.MODEL_CUT),
        "reason": Text(MAX_REASON_CHARS, multiline=True),
        "best_accuracy": _ACCURACY,
        "predicted_accuracy": _ACCURACY,
        "has_accuracy": None,
        "checkpoint_uri": Text(MAX_CHECKPOINT_URI_CHARS),
        "checkpoint_sha256": HexDigest(SHA256_HEX_CHARS),  # the Master checks both or neither
        "undeleted_checkpoints": Repeated(MAX_UNDELETED_PER_FINISH, Nested(pb.CheckpointNotDeleted)),
        "checkpoint_weights_sha256": HexDigest(SHA256_HEX_CHARS),  # the Master checks it was stamped
    },
    pb.CheckpointNotDeleted: {"model_id": _ID, "error": Text(MAX_REASON_CHARS, multiline=True)},
    pb.SendResourceSamplesRequest: {
        "worker_id": _ID, "samples": Repeated(MAX_SAMPLES_PER_CALL, Nested(pb.ResourceSample)),
    },
    # ------------------------------------------------ ControlService
    pb.StartRunRequest: {
        "duration_s": Real(0.0, MAX_RUN_DURATION_S),
        "profile": Enum(pb.Profile),
        "seed": Integer(0, MAX_SEED),
        "limits": Nested(pb.Limits),
        "precision": Enum(pb.Precision),
        "warmup_rounds": Integer(0, MAX_ROUND),
        "min_workers": Integer(0, MAX_WORKERS),
        "allow_concurrent": None,
        "deterministic": None,  # a bool: nothing to bound
        "xla": Enum(pb.Toggle),
        "no_inherit": None,
        "keep_checkpoints": Integer(0, MAX_KEEP_CHECKPOINTS),
        "report_interval_s": Real(0.0, MAX_INTERVAL_S),
        "resource_interval_s": Real(0.0, MAX_INTERVAL_S),
    },
    pb.StopRunRequest: {"run_id": _ID_OR_0, "abort": None, "reason": Text(MAX_STOP_REASON_CHARS)},
    pb.GetRunStatusRequest: {"run_id": _ID_OR_0},
    pb.GetScoreboardRequest: {"run_id": _ID_OR_0},
    pb.ListModelsRequest: {
        "run_id": _ID_OR_0, "state": Enum(pb.ModelState), "limit": Integer(0, MAX_PAGE),
        "offset": Integer(0, MAX_OFFSET), "include_graph": None,
    },
    pb.GetTimelineRequest: {
        "run_id": _ID_OR_0, "max_points": Integer(0, MAX_TIMELINE_POINTS),
        "buckets": Integer(0, MAX_TIMELINE_BUCKETS),
    },
    pb.ListRunsRequest: {"limit": Integer(0, MAX_PAGE), "offset": Integer(0, MAX_OFFSET)},
    pb.ListWorkersRequest: {
        "state": Enum(pb.WorkerState), "run_id": _ID_OR_0, "limit": Integer(0, MAX_PAGE),
        "offset": Integer(0, MAX_OFFSET),
    },
    pb.RecordAuditRequest: {
        "model_id": _ID,
        "has_audited_accuracy": None,
        "audited_accuracy": _ACCURACY,
        "architecture_ok": None,
        "verdict": Text(MAX_VERDICT_CHARS),  # the Master checks it is one of aiperf.audit.VERDICTS
        "auditor_host": Text(MAX_NAME_CHARS),
        "validation_images": Integer(0, MAX_AUDIT_IMAGES),
        "detail": Text(MAX_REASON_CHARS, multiline=True),
        "audited_images_per_second": Real(0.0, MAX_AUDIT_IMAGES_PER_S),
        "auditor_hardware": Text(MAX_HARDWARE_CHARS),
        "has_retrained_accuracy": None,
        "retrained_accuracy": _ACCURACY,
        "node_audit": None,
        "node_accelerators": Repeated(MAX_ACCELERATORS_PER_WORKER, Nested(pb.Accelerator)),
        "node_cpu_model": AsciiText(MAX_HARDWARE_CHARS),
        "node_cpus": Integer(0, MAX_CPUS),
    },
    pb.ListAuditsRequest: {"run_id": _ID_OR_0},
}


def _compile(message: Any, rules: dict[str, Rule]) -> Callable[[Any], None]:
    """The checker of one message type: every plain field, and the one field set
    of each oneof (a request's oneof must be set)."""
    desc = message.DESCRIPTOR
    plain = tuple((f.name, rules[f.name].check) for f in desc.fields
                  if f.containing_oneof is None and rules[f.name] is not None)
    oneofs = tuple((o.name, {f.name: rules[f.name].check for f in o.fields}) for o in desc.oneofs)

    def check(msg: Any) -> None:
        for name, rule in plain:
            try:
                rule(getattr(msg, name))
            except BoundsError as exc:
                exc.path.insert(0, name)
                raise
        for oneof, by_field in oneofs:
            which = msg.WhichOneof(oneof)
            if which is None:
                unset = BoundsError(f"set one of {', '.join(by_field)}")
                unset.path.insert(0, oneof)
                raise unset
            try:
                by_field[which](getattr(msg, which))
            except BoundsError as exc:
                exc.path.insert(0, which)
                raise

    return check


_CHECKERS: dict[str, Callable[[Any], None]] = {m.DESCRIPTOR.full_name: _compile(m, r) for m, r in RULES.items()}


def check(message: Any) -> None:
    """BoundsError (a ValueError naming the field) unless every field of the
    request is inside its bound; KeyError for a message type without rules."""
    try:
        _CHECKERS[message.DESCRIPTOR.full_name](message)
    except BoundsError as exc:
        exc.message_type = message.DESCRIPTOR.name
        raise


def check_flops_per_image(train: int, evaluate: int) -> None:
    """BoundsError unless a graph's per-image counts are inside MAX_FLOPS_PER_IMAGE."""
    for what, n in (("trained", train), ("validated", evaluate)):
        if not 0 <= n <= MAX_FLOPS_PER_IMAGE:
            raise BoundsError(f"graph_json: {n:.3g} operations per {what} image exceed "
                              f"the bound of {MAX_FLOPS_PER_IMAGE:.3g}")


__all__ = ["BoundsError", "RULES", "check", "check_flops_per_image", "clip_text", "json_depth", "report_ops_ceiling"]
