"""The API's bounds (aiperf/api/bounds.py): every request field has one, each
is enforced at its edge, the JSON depth is found without parsing, the
physical ceiling of a report, and a poisoned batch fails only its own report.
Through the real server on a loopback port where the master is involved."""

from __future__ import annotations

import json
import logging
import math
import re
import threading
import time
from pathlib import Path
from typing import Any

import grpc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aiperf import limits, peaks
from aiperf.api import aiperf_pb2 as pb
from aiperf.api import bounds
from aiperf.api.client import Accelerator, ApiError
from aiperf.flops import count_flops
from master.core.progress_writer import ProgressWriter
from master.store.records import NewModel, NewRun, ProgressInput, WorkerInput
from master.store.sql.sql_store import SqlStore
from tests.support.fake_clock import FakeClock
from tests.support.master_clients import HP, clients

ROOT = Path(__file__).resolve().parent.parent
INT_RANGES = {  # the wire range of each integer field type
    "int32": (-2**31, 2**31 - 1), "int64": (-2**63, 2**63 - 1), "uint32": (0, 2**32 - 1), "uint64": (0, 2**64 - 1),
}


def request_types() -> set[Any]:
    """Every message a client can send to WorkerService or ControlService, nested ones too."""
    out: set[Any] = set()

    def walk(desc: Any) -> None:
        if desc.full_name in {d.full_name for d in out}:
            return
        out.add(desc)
        for f in desc.fields:
            if f.message_type is not None and not f.message_type.GetOptions().map_entry:
                walk(f.message_type)

    for service in ("WorkerService", "ControlService"):
        for method in pb.DESCRIPTOR.services_by_name[service].methods:
            walk(method.input_type)
    return out


def int_type(field: Any) -> str:
    return {field.TYPE_INT32: "int32", field.TYPE_INT64: "int64", field.TYPE_UINT32: "uint32",
            field.TYPE_UINT64: "uint64", field.TYPE_ENUM: "int32"}[field.type]


# ---------------------------------------------------------------- the table


def test_every_field_of_every_request_has_a_bound():
    by_name = {m.DESCRIPTOR.full_name: rules for m, rules in bounds.RULES.items()}
    for desc in request_types():
        assert desc.full_name in by_name, f"{desc.full_name} has no bounds"
        assert set(by_name[desc.full_name]) == {f.name for f in desc.fields}, desc.full_name
        for f in desc.fields:
            rule = by_name[desc.full_name][f.name]
            if f.type == f.TYPE_BOOL:
                assert rule is None
            elif f.is_repeated:
                assert isinstance(rule, (bounds.Repeated, bounds.Mapping)), f"{desc.name}.{f.name}"
            elif f.type == f.TYPE_STRING:
                assert isinstance(rule, (bounds.Text, bounds.GraphJson, bounds.HexDigest)), f"{desc.name}.{f.name}"
            elif f.type == f.TYPE_DOUBLE:
                assert isinstance(rule, bounds.Real) and math.isfinite(rule.hi), f"{desc.name}.{f.name}"
            elif f.type == f.TYPE_MESSAGE:
                assert isinstance(rule, bounds.Nested), f"{desc.name}.{f.name}"
            else:  # integers: inside SQL BIGINT whatever the wire type allows
                assert isinstance(rule, (bounds.Integer, bounds.Enum)), f"{desc.name}.{f.name}"
                if isinstance(rule, bounds.Integer):
                    assert -2**63 <= rule.lo <= rule.hi <= 2**63 - 1, f"{desc.name}.{f.name}"


def test_ids_fit_their_sql_keys_and_zero_only_where_it_means_none_or_current():
    assert bounds.MAX_ID == 2**31 - 1 and bounds.MAX_SEQ == 2**63 - 1  # INTEGER keys, BIGINT seq
    for message, rules in bounds.RULES.items():
        for name, rule in rules.items():
            if (name.endswith("_id") and name != "pci_bus_id") or name == "seq":  # a PCI bus id is text
                top = bounds.MAX_SEQ if name == "seq" else bounds.MAX_ID
                assert isinstance(rule, bounds.Integer) and rule.hi == top, f"{message.DESCRIPTOR.name}.{name}"
                zero_means_none = name in ("run_id", "parent_id", "since_model_id") or (
                    message is pb.HeartbeatRequest and name == "model_id")
                assert rule.lo == (0 if zero_means_none else 1), f"{message.DESCRIPTOR.name}.{name}"


def test_docs_quote_every_limit():
    spec = (ROOT / "docs" / "spec.md").read_text()
    names = {n for n in dir(limits) if re.fullmatch(r"(MAX|MIN)_[A-Z_]+|CLOCK_SLACK_S", n)}
    assert names == {name for name, _ in limits.LIMITS}, "every named limit is in LIMITS"
    for name, value, _ in limits.limits_table():
        assert name in spec, f"docs/spec.md does not quote {name}"


# ---------------------------------------------------------------- each bound at its edge


def _edges(rule: Any, field: Any) -> tuple[list[Any], list[Any]]:
    """Values of the field just inside and just outside its bound (representable on the wire)."""
    if isinstance(rule, bounds.Integer):
        lo, hi = INT_RANGES[int_type(field)]
        return [rule.lo, rule.hi], [v for v in (rule.lo - 1, rule.hi + 1) if lo <= v <= hi]
    if isinstance(rule, bounds.Real):
        return [rule.lo, rule.hi], [math.nextafter(rule.lo, -math.inf), math.nextafter(rule.hi, math.inf),
                                    math.nan, math.inf, -math.inf, 1e308, -1e308]
    if isinstance(rule, bounds.Enum):
        return sorted(rule.values), [max(rule.values) + 1, -1]
    if isinstance(rule, bounds.AsciiText):  # a device's name or identity: look-alike letters refused
        return ["x" * rule.max_chars, " ~A-z_0/9"], ["x" * (rule.max_chars + 1), "a\x00b", "\x1b[31m", "a\rb",
                                                     "\u041d100", "é"]
    if isinstance(rule, bounds.Text):
        return ["x" * rule.max_chars, "é ü 漢"], ["x" * (rule.max_chars + 1), "a\x00b", "\x1b[31m", "a\rb"]
    if isinstance(rule, bounds.HexDigest):
        return ["", "0" * rule.chars, "0123456789abcdef" * (rule.chars // 16)], [
            "A" * rule.chars, "0" * (rule.chars - 1), "0" * (rule.chars + 1), "g" * rule.chars, "é" * rule.chars]
    if isinstance(rule, bounds.GraphJson):
        deep = "[" * rule.max_depth + "]" * rule.max_depth
        return [deep, '{"a": "[[[[[["}'], ["[" * (rule.max_depth + 1) + "]" * (rule.max_depth + 1),
                                          "[" * 100_000 + "]" * 100_000, " " * (rule.max_chars + 1), "[[]"]
    raise AssertionError(rule)


def _scalar_cases() -> list[tuple[Any, str]]:
    return [(m, f.name) for m in bounds.RULES for f in m.DESCRIPTOR.fields
            if not f.is_repeated and f.type not in (f.TYPE_BOOL, f.TYPE_MESSAGE)]


def _valid(message: Any) -> Any:
    """A message of this type inside every bound: each field at its lower edge (one oneof set)."""
    msg = message()
    for f in message.DESCRIPTOR.fields:
        rule = bounds.RULES[message][f.name]
        if f.containing_oneof is not None and msg.WhichOneof(f.containing_oneof.name) is not None:
            continue
        if isinstance(rule, bounds.Nested):
            getattr(msg, f.name).CopyFrom(_valid(getattr(pb, f.message_type.name)))
        elif isinstance(rule, (bounds.Integer, bounds.Real)):
            setattr(msg, f.name, rule.lo)
        elif isinstance(rule, bounds.Enum):
            setattr(msg, f.name, min(rule.values))
    return msg


@pytest.mark.parametrize("message, name", _scalar_cases(),
                         ids=[f"{m.DESCRIPTOR.name}.{n}" for m, n in _scalar_cases()])
def test_each_scalar_bound_at_its_edge(message, name):
    field = message.DESCRIPTOR.fields_by_name[name]
    inside, outside = _edges(bounds.RULES[message][name], field)
    for v in inside:
        msg = _valid(message)
        setattr(msg, name, v)
        bounds.check(msg)
    for v in outside:
        msg = _valid(message)
        setattr(msg, name, v)
        with pytest.raises(bounds.BoundsError) as e:
            bounds.check(msg)
        assert str(e.value).startswith(f"{message.DESCRIPTOR.name}.{name}: "), str(e.value)


def test_counts_of_repeated_fields_and_nested_paths():
    acc = pb.Accelerator(model="H100", peak_flops=1e15)
    bounds.check(pb.RegisterRequest(name="n", accelerators=[acc] * bounds.MAX_ACCELERATORS_PER_WORKER))
    with pytest.raises(bounds.BoundsError, match=r"^RegisterRequest.accelerators: at most 64 items, got 65$"):
        bounds.check(pb.RegisterRequest(name="n", accelerators=[acc] * (bounds.MAX_ACCELERATORS_PER_WORKER + 1)))
    with pytest.raises(bounds.BoundsError, match=r"^RegisterRequest.accelerators\[2\].model: at most 256"):
        bounds.check(pb.RegisterRequest(accelerators=[acc, acc, pb.Accelerator(model="m" * 257)]))
    with pytest.raises(bounds.BoundsError, match=r"software\[0\].version: must be printable text: character U\+0000"):
        bounds.check(pb.RegisterRequest(software=[pb.SoftwareVersion(name="tf", version="2\x00")]))
    with pytest.raises(bounds.BoundsError, match=r"accelerators\[0\].peak_flops_by_dtype: at most 3 entries"):
        bounds.check(pb.RegisterRequest(accelerators=[pb.Accelerator(
            peak_flops_by_dtype={f"d{i}": 1.0 for i in range(4)})]))
    with pytest.raises(bounds.BoundsError, match=r"peak_flops_by_dtype\['float16'\]: must be a finite number"):
        bounds.check(pb.RegisterRequest(accelerators=[pb.Accelerator(peak_flops_by_dtype={"float16": math.nan})]))
    sample = pb.ResourceSample(accelerator_index=-1)
    bounds.check(pb.SendResourceSamplesRequest(worker_id=1, samples=[sample] * bounds.MAX_SAMPLES_PER_CALL))
    with pytest.raises(bounds.BoundsError, match=r"^SendResourceSamplesRequest.samples: at most 1024 items"):
        bounds.check(pb.SendResourceSamplesRequest(worker_id=1, samples=[sample] * 1025))
    with pytest.raises(bounds.BoundsError,
                       match=r"samples\[1\].age_s: must be a finite number in \[0, 86400\], got -1e\+308"):
        bounds.check(pb.SendResourceSamplesRequest(worker_id=1, samples=[sample, pb.ResourceSample(age_s=-1e308)]))
    with pytest.raises(bounds.BoundsError, match=r"^StartRunRequest.limits.max_models: must be in 0..10000000"):
        bounds.check(pb.StartRunRequest(duration_s=60, limits=pb.Limits(max_models=2**32 - 1)))
    with pytest.raises(bounds.BoundsError, match=r"^SubmitModelRequest.hyperparameters.batch_size: must be in 0.."):
        bounds.check(pb.SubmitModelRequest(worker_id=1, round=1,
                                           hyperparameters=pb.Hyperparameters(batch_size=2**32 - 1)))


def test_a_connect_message_must_carry_one_body():
    with pytest.raises(bounds.BoundsError, match=r"^WorkerMessage.body: set one of heartbeat, progress$"):
        bounds.check(pb.WorkerMessage())
    with pytest.raises(bounds.BoundsError, match=r"^WorkerMessage.progress.seq: must be in 1.."):
        bounds.check(pb.WorkerMessage(progress=pb.ProgressReport(worker_id=1, model_id=1)))
    bounds.check(pb.WorkerMessage(heartbeat=pb.HeartbeatRequest(worker_id=1)))


def test_reason_text_allows_newlines_and_the_client_clips_its_own():
    bounds.check(pb.FinishModelRequest(worker_id=1, model_id=1, state=pb.MODEL_FAILED, reason="a\n\tb"))
    wild = "out of memory\x1b[0m\x00" + "x" * 1000
    clipped = bounds.clip_text(wild, bounds.MAX_REASON_CHARS)
    assert len(clipped) == bounds.MAX_REASON_CHARS and clipped.startswith("out of memory ")
    bounds.check(pb.FinishModelRequest(worker_id=1, model_id=1, state=pb.MODEL_FAILED, reason=clipped))


# ---------------------------------------------------------------- JSON depth without parsing


def _json_values(max_leaves: int = 30) -> st.SearchStrategy[Any]:
    leaves = st.none() | st.booleans() | st.integers() | st.text(alphabet='[]{}"\\ab,:\né\u2028', max_size=8)
    return st.recursive(leaves, lambda inner: st.lists(inner, max_size=3)
                        | st.dictionaries(st.text(alphabet='[]{}"\\k', max_size=4), inner, max_size=3),
                        max_leaves=max_leaves)


def _depth(value: Any) -> int:
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    return 0


@settings(max_examples=300, deadline=None)
@given(_json_values(), st.integers(0, 8), st.sampled_from([None, 0, 2]), st.booleans())
def test_json_depth_agrees_with_parsing(value, limit, indent, ascii_only):
    text = json.dumps(value, indent=indent, ensure_ascii=ascii_only)
    depth = _depth(value)
    assert bounds.json_depth(text, limit) == (depth if depth <= limit else None)


def test_json_depth_of_hostile_text_is_fast_and_refused():
    assert bounds.json_depth("[" * 1_000_000 + "]" * 1_000_000, 16) is None
    assert bounds.json_depth("[" * 1_000_000, 16) is None
    assert bounds.json_depth("[]" * 1_000_000, 16) == 1
    assert bounds.json_depth('"' + "[" * 1000 + '"', 16) == 0  # brackets inside a string do not nest
    assert bounds.json_depth('["\\"[[[["]', 16) == 1  # nor after an escaped quote


# ---------------------------------------------------------------- through the real server


def refusal(fn: Any, *args: Any, **kwargs: Any) -> ApiError:
    with pytest.raises(ApiError) as e:
        fn(*args, **kwargs)
    return e.value


def raw_call(h: Any, service: str, method: str, payload: bytes) -> grpc.StatusCode:
    token = h.worker_token if service == "WorkerService" else h.admin_token
    with grpc.insecure_channel(h.address) as channel:
        call = channel.unary_unary(f"/aiperf.v1.{service}/{method}", request_serializer=lambda b: b,
                                   response_deserializer=lambda b: b)
        try:
            call(payload, metadata=(("authorization", f"Bearer {token}"),), timeout=30)
        except grpc.RpcError as exc:
            return exc.code()
    return grpc.StatusCode.OK


def test_undecodable_payloads_are_invalid_argument(master_server):
    h = master_server()
    for service in ("WorkerService", "ControlService"):
        for method in pb.DESCRIPTOR.services_by_name[service].methods:
            if method.client_streaming:
                continue
            assert raw_call(h, service, method.name, b"\xff\xff\xff\xff") == grpc.StatusCode.INVALID_ARGUMENT


def test_extreme_values_through_the_server_name_the_field(master_server, small_graph):
    h = master_server()
    w, c = clients(h)
    e = refusal(w.register, name="n\x00", host="h")
    assert e.code == grpc.StatusCode.INVALID_ARGUMENT and "RegisterRequest.name: must be printable" in e.details
    e = refusal(w.register, name="n" * (1 << 20), host="h")
    assert e.code == grpc.StatusCode.INVALID_ARGUMENT and "at most 253 characters" in e.details
    e = refusal(w.register, name="n", host="h", accelerators=[Accelerator("X", 1)] * 20_000)
    assert "RegisterRequest.accelerators: at most 64 items, got 20000" in e.details
    e = refusal(w.register, name="n", host="h", memory_bytes=2**63 - 1)
    assert "RegisterRequest.memory_bytes" in e.details
    wid = w.register(name="n", host="h", accelerators=[Accelerator("X", 1 << 30)]).worker_id
    e = refusal(c.start_run, 1e308)
    assert "StartRunRequest.duration_s: must be a finite number in [0, 2.592e+06]" in e.details
    e = refusal(c.run_status, 2**31)
    assert e.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "GetRunStatusRequest.run_id: must be in 0..2147483647" in e.details
    assert refusal(c.run_status, 2**31 - 1).code == grpc.StatusCode.NOT_FOUND
    c.start_run(600)
    js = small_graph.to_json()
    deep = json.dumps({**json.loads(js), "meta": {"x": json.loads("[" * 20 + "]" * 20)}})
    e = refusal(w.submit_model, wid, deep, small_graph.hash(), 0, 1, HP)
    assert "SubmitModelRequest.graph_json: nested deeper than 16 levels" in e.details
    e = refusal(w.submit_model, wid, "[" * 100_000 + "]" * 100_000, small_graph.hash(), 0, 1, HP)
    assert e.code == grpc.StatusCode.INVALID_ARGUMENT
    e = refusal(w.submit_model, wid, js, small_graph.hash(), 0, 2**32 - 1, HP)
    assert "SubmitModelRequest.round: must be in 1..10000000" in e.details
    mid = w.submit_model(wid, js, small_graph.hash(), 0, 1, HP).model_id
    e = refusal(w.report_progress, wid, mid, 2**63 - 1 + 1, 1, 0, 1, 0)
    assert "seq" in e.details and e.code == grpc.StatusCode.INVALID_ARGUMENT
    e = refusal(w.report_progress, wid, mid, 1, 2**63 - 1, 0, 1, 0)
    assert "WorkerMessage.progress.images_trained: must be in 0..1099511627776" in e.details
    assert c.scoreboard().reports == 0 and c.list_models().total == 1


def test_graph_flops_and_layers_are_bounded(master_server, small_graph, monkeypatch):
    h = master_server()
    w, c = clients(h)
    wid = w.register(name="n", host="h").worker_id
    c.start_run(600)
    huge = json.loads(small_graph.to_json())
    huge["input_shape"] = [100_000, 100_000, 3]
    from aiperf.graph import Graph

    g = Graph.from_dict(huge)
    e = refusal(w.submit_model, wid, g.to_json(), g.hash(), 0, 1, HP)
    assert e.code == grpc.StatusCode.INVALID_ARGUMENT and "operations per trained image exceed" in e.details
    monkeypatch.setattr(limits, "MAX_GRAPH_LAYERS", len(small_graph.layers) - 1)
    e = refusal(w.submit_model, wid, small_graph.to_json(), small_graph.hash(), 0, 1, HP)
    assert f"{len(small_graph.layers)} layers exceed the bound" in e.details
    assert c.list_models().total == 0


def test_images_per_report_are_bounded_by_physics(master_server, small_graph):
    clock = FakeClock()
    h = master_server(clock=clock)
    w, c = clients(h)
    wid = w.register(name="n", host="h", accelerators=[Accelerator("X", 1 << 30)] * 2).worker_id
    c.start_run(3600)
    fc = count_flops(small_graph)
    # two accelerators without a peak: each bounded by the datasheet table's fastest float32 entry
    rate = 2 * peaks.largest_bound("float32")
    mid = w.submit_model(wid, small_graph.to_json(), small_graph.hash(), 0, 1, HP).model_id
    clock.t += 10.0  # 10 s after submission (+ the slack)
    fits = int(rate * (10.0 + limits.CLOCK_SLACK_S) / fc.train)
    e = refusal(w.report_progress, wid, mid, 1, fits + 1000, 0, 1, fc.ops(fits + 1000, 0))
    assert e.code == grpc.StatusCode.FAILED_PRECONDITION and "above its accepted peak" in e.details
    w.report_progress(wid, mid, 1, fits // 2, 0, 1, fc.ops(fits // 2, 0))
    # what is left of the interval (+ slack) after the first half, and no more
    w.report_progress(wid, mid, 2, fits // 4, 0, 1, fc.ops(fits // 4, 0))
    clock.t += 1.0
    per_s = int(rate / fc.train)
    e = refusal(w.report_progress, wid, mid, 3, 7 * per_s, 0, 1, fc.ops(7 * per_s, 0))
    assert "above its accepted peak" in e.details
    w.report_progress(wid, mid, 3, per_s, 0, 1, fc.ops(per_s, 0))
    assert c.scoreboard().reports == 3


def test_after_a_restart_the_bound_counts_from_the_submission(master_server, small_graph, tmp_path):
    clock = FakeClock()
    db = f"sqlite:///{tmp_path / 'm.db'}"
    h = master_server(db, clock=clock, data_dir=tmp_path / "d", heartbeat_interval_s=3600.0)
    w, c = clients(h)
    wid = w.register(name="n", host="h").worker_id
    c.start_run(3600)
    fc = count_flops(small_graph)
    mid = w.submit_model(wid, small_graph.to_json(), small_graph.hash(), 0, 1, HP).model_id
    clock.t += 100.0
    per_s = int(peaks.CPU_MAX_FLOPS_PER_CPU / fc.train)  # no accelerator: one CPU's physical bound
    w.report_progress(wid, mid, 1, 60 * per_s, 0, 1, fc.ops(60 * per_s, 0))
    h.stop(grace_s=0)
    h2 = master_server(db, clock=clock, data_dir=tmp_path / "d", heartbeat_interval_s=3600.0)
    w2, c2 = clients(h2)
    w2.set_credential(wid, w.credential(wid))  # kept across the restart, as the agent does
    # 100 s since submission, 60 of them taken by the first report: 40 s (+ slack) remain
    e = refusal(w2.report_progress, wid, mid, 2, 50 * per_s, 0, 1, fc.ops(50 * per_s, 0))
    assert "above its accepted peak" in e.details
    w2.report_progress(wid, mid, 2, 40 * per_s, 0, 1, fc.ops(40 * per_s, 0))
    assert c2.scoreboard().reports == 2


def test_a_bad_worker_on_the_stream_never_fails_a_good_one(master_server, small_graph):
    h = master_server()
    w, c = clients(h)
    good = w.register(name="good", host="good").worker_id
    bad = w.register(name="bad", host="bad").worker_id
    c.start_run(600)
    fc = count_flops(small_graph)
    js, hs = small_graph.to_json(), small_graph.hash()
    good_mid = w.submit_model(good, js, hs, 0, 1, HP).model_id
    bad_mid = w.submit_model(bad, js, hs, 0, 1, HP).model_id
    failures: list[str] = []
    stop = threading.Event()

    def misbehave() -> None:
        with w.connect() as s:
            seq = 0
            while not stop.is_set():
                seq += 1
                for args in ((bad, bad_mid, seq, 2**63 - 1, 0), (bad, good_mid, seq, 10, 0), (bad, bad_mid, 0, 1, 0)):
                    try:
                        s.report_progress(*args, 1, 0)
                    except ApiError:
                        pass

    thread = threading.Thread(target=misbehave)
    thread.start()
    try:
        with w.connect() as s:
            for seq in range(1, 101):
                try:
                    s.report_progress(good, good_mid, seq, 100, 0, 1, fc.ops(100, 0))
                except ApiError as exc:
                    failures.append(str(exc))
    finally:
        stop.set()
        thread.join()
    assert failures == []
    m = h.store.get_model(good_mid)
    assert m.images_trained == 100 * 100 and h.store.get_model(bad_mid).images_trained == 0


# ---------------------------------------------------------------- group commit isolation


def test_a_poisoned_report_in_a_batch_does_not_fail_a_good_one(tmp_path, caplog):
    store = SqlStore(f"sqlite:///{tmp_path / 'b.db'}")
    run = store.start_run(store.create_run(NewRun("smoke", 1, 600.0, "fp32", {}, {}), 0.0).id, 0.0)
    w1, _ = store.register_worker(WorkerInput("a", "a", [], 1, 1, {}), 0.0)
    w2, _ = store.register_worker(WorkerInput("b", "b", [], 1, 1, {}), 0.0)
    models = [store.add_model(NewModel(run.id, None, w.id, 1, "{}", "h", 32, 3, "training", 10, 5), 0.0)
              for w in (w1, w2)]

    def item(model: Any, epoch: int) -> ProgressInput:
        # a report the bounds never let through: an epoch beyond SQL BIGINT (the store's own
        # overflow check covers the counts, so the batch fails in the database itself)
        return ProgressInput(model.id, model.worker_id, 1, 1.0, epoch, 100, 0, None, 0, 1000, False)

    writer = ProgressWriter(store, linger_s=0.3)  # both reports surely share one batch
    outcomes: dict[str, Any] = {}
    done = threading.Event()

    def collect(name: str) -> Any:
        def callback(results: Any, error: Any) -> None:
            outcomes[name] = error if error is not None else results
            if len(outcomes) == 2:
                done.set()
        return callback

    with caplog.at_level(logging.WARNING, logger="master.core.progress_writer"):
        writer.submit([item(models[0], 1)], collect("good"))
        writer.submit([item(models[1], 2**64)], collect("poisoned"))
        assert done.wait(30)
    writer.close()
    assert "event=progress_batch_failed reports=2 callers=2" in caplog.text
    assert isinstance(outcomes["poisoned"], OverflowError)
    assert [r.error for r in outcomes["good"]] == [None]
    assert store.get_model(models[0].id).images_trained == 100
    assert store.get_model(models[1].id).images_trained == 0
    store.close()


def test_reports_queued_during_a_commit_form_the_next_batch_without_a_wait():
    """The writer waits for nothing before a batch (no linger by default): a lone report is
    committed at once, and the reports that queue while it commits go in one next batch."""
    batches: list[list[int]] = []
    committing, release = threading.Event(), threading.Event()

    class SlowStore:
        def add_progress(self, items: list[Any]) -> list[Any]:
            batches.append([i.model_id for i in items])
            if len(batches) == 1:
                committing.set()
                assert release.wait(30)
            return [None] * len(items)

    writer = ProgressWriter(SlowStore())  # type: ignore[arg-type]
    answered = threading.Semaphore(0)
    report = lambda model_id: ProgressInput(model_id, 1, 1, 1.0, 1, 10, 0, None, 0, 100, False)  # noqa: E731
    begin = time.monotonic()
    writer.submit([report(1)], lambda results, error: answered.release())
    assert committing.wait(30)
    first_batch_s = time.monotonic() - begin
    for model_id in (2, 3, 4):
        writer.submit([report(model_id)], lambda results, error: answered.release())
    release.set()
    for _ in range(4):
        assert answered.acquire(timeout=30)
    writer.close()
    assert batches == [[1], [2, 3, 4]]
    assert first_batch_s < 1.0  # nothing waited for company (a linger of 0.3 s would show here)


def test_a_committed_report_counts_even_when_its_caller_is_gone(master_server, small_graph):
    """The run's operations total (the live FLOPS gauge) and the report counter are kept by the
    progress writer's hook at the commit: a caller gone after queueing its report (a closed
    stream cancels its coroutine) leaves neither short."""
    import asyncio

    from master.core.requests import ProgressReport

    h = master_server()
    w, c = clients(h)
    wid = w.register(name="n", host="h", accelerators=[Accelerator("Tesla V100", 32 << 30)]).worker_id
    c.start_run(3600)
    fc = count_flops(small_graph)
    mid = w.submit_model(wid, small_graph.to_json(), small_graph.hash(), 0, 1, HP).model_id
    run_id = h.master.current_run().id
    assert h.master.operations.total(run_id) == 0  # read now: later commits add to it
    counted = h.master.metrics.reports._value.get()

    async def report_and_go() -> None:
        report = ProgressReport(wid, mid, 1, 1, 64, 0, None, fc.ops(64, 0))
        task = asyncio.ensure_future(h.master.report_progress(report, credential=w.credential(wid)))
        await asyncio.sleep(0)  # the task's first step checks the report and queues it for the writer
        assert not task.done()  # it waits for the commit; cancel it as a closed stream would
        task.cancel()
        deadline = time.monotonic() + 10
        while h.master.operations.total(run_id) == 0 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)

    asyncio.run(report_and_go())
    assert h.master.operations.total(run_id) == fc.ops(64, 0)
    assert h.master.metrics.reports._value.get() == counted + 1
    assert c.scoreboard().reports == 1


def test_the_progress_writer_outlives_an_event_loop_closed_before_its_commit(tmp_path):
    """A caller's event loop closed while its report waits for the commit (a master stopping,
    a test's loop): the report is recorded and the writer goes on serving other loops."""
    import asyncio

    store = SqlStore(f"sqlite:///{tmp_path / 'c.db'}")
    run = store.start_run(store.create_run(NewRun("smoke", 1, 600.0, "fp32", {}, {}), 0.0).id, 0.0)
    worker, _ = store.register_worker(WorkerInput("a", "a", [], 1, 1, {}), 0.0)
    model = store.add_model(NewModel(run.id, None, worker.id, 1, "{}", "h", 32, 3, "training", 10, 5), 0.0)
    writer = ProgressWriter(store, linger_s=0.3)  # the first loop is closed before this commit

    def item(seq: int) -> ProgressInput:
        return ProgressInput(model.id, worker.id, seq, float(seq), 1, 100, 0, None, 0, 1000, False)

    async def queue_and_leave() -> None:
        asyncio.ensure_future(writer.write_async([item(1)]))
        await asyncio.sleep(0)

    try:
        asyncio.run(queue_and_leave())
        [result] = asyncio.run(writer.write_async([item(2)]))
        assert result.error is None and not result.duplicate
    finally:
        writer.close()
        store.close()
    assert SqlStore(f"sqlite:///{tmp_path / 'c.db'}").get_model(model.id).images_trained == 200
