"""Property-based tests over every RPC of WorkerService and ControlService,
against one real master on a loopback port: generated messages with extreme
integers, floats (nan, inf, ±1e308), strings (NUL, ESC, 1 MB, 100,000-deep
JSON), nested messages and long repeated fields, and random bytes. Every
call ends with a status the API documents (never UNKNOWN or INTERNAL), each
Connect message gets exactly one reply with the stream still open, and the
master answers its health check after every example."""

from __future__ import annotations

import math
import uuid
from pathlib import Path
from typing import Any, Iterator

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from aiperf.api import aiperf_pb2 as pb
from aiperf.api.calls import CREDENTIAL_METADATA
from aiperf.api.client import Accelerator, ControlClient, WorkerClient
from aiperf.hyperparameters import Hyperparameters
from aiperf.limits import MAX_REQUEST_BYTES
from tests.conftest import POSTGRES_ENV, postgres_url

ALLOWED = {
    grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.ALREADY_EXISTS,
    grpc.StatusCode.UNAUTHENTICATED,
}
ALLOWED_NUMBERS = {c.value[0] for c in ALLOWED}
WORKER_TOKEN, ADMIN_TOKEN = "fuzz-worker-token", "fuzz-admin-token"
FUZZ = settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))

MB = 1 << 20
DEEP_JSON = "[" * 100_000 + "]" * 100_000
INTS = {
    "uint64": [0, 1, 2, 3, 2**31 - 1, 2**32, 2**53 + 1, 2**63 - 1, 2**63, 2**64 - 1],
    "uint32": [0, 1, 2, 3, 448, 2**31 - 1, 2**31, 2**32 - 1],
    "int64": [0, 1, -1, 3, 2**31, 2**62, 2**63 - 1, -2**63],
    "int32": [0, 1, -1, 2, 64, 2**31 - 1, -2**31],
}
RANGES = {"uint64": (0, 2**64 - 1), "uint32": (0, 2**32 - 1), "int64": (-2**63, 2**63 - 1),
          "int32": (-2**31, 2**31 - 1)}
FLOATS = [math.nan, math.inf, -math.inf, 1e308, -1e308, 0.0, -0.0, 5e-324, 0.5, 1.0, 1.0000001, 600.0, 3600.0]
STRINGS = ["", "node-1", "\x00", "a\x00b", "\x1b[2J\x1b[31mred", "x" * MB, "é" * 300, "{}", DEEP_JSON,
           '{"format": "aiperf.graph"}', "float16", "float32", "\n\t", "\u202e\u200b"]


def _int_type(f: Any) -> str:
    return {f.TYPE_INT32: "int32", f.TYPE_INT64: "int64", f.TYPE_UINT32: "uint32", f.TYPE_UINT64: "uint64"}[f.type]


def _scalar(f: Any, graph_json: str) -> st.SearchStrategy[Any]:
    if f.type == f.TYPE_BOOL:
        return st.booleans()
    if f.type == f.TYPE_DOUBLE:
        return st.sampled_from(FLOATS) | st.floats()
    if f.type == f.TYPE_STRING:
        return (st.sampled_from(STRINGS + [graph_json])
                | st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=40))
    if f.type == f.TYPE_ENUM:
        return st.sampled_from([v.number for v in f.enum_type.values] + [-1, 99, 2**31 - 1])
    lo, hi = RANGES[_int_type(f)]
    return st.sampled_from(INTS[_int_type(f)]) | st.integers(lo, hi)


def messages(desc: Any, graph_json: str, depth: int = 0) -> st.SearchStrategy[Any]:
    """Messages of this type with any subset of their fields set to extreme values."""
    cls = getattr(pb, desc.name)
    fields: dict[str, st.SearchStrategy[Any]] = {}
    for f in desc.fields:
        if f.message_type is not None and f.message_type.GetOptions().map_entry:
            key, value = f.message_type.fields_by_name["key"], f.message_type.fields_by_name["value"]
            fields[f.name] = st.dictionaries(_scalar(key, graph_json), _scalar(value, graph_json), max_size=5)
        elif f.message_type is not None:
            inner = messages(f.message_type, graph_json, depth + 1)
            if f.is_repeated:  # a few, or far too many
                empty = getattr(pb, f.message_type.name)()
                fields[f.name] = (st.lists(inner, max_size=3)
                                  | st.sampled_from([65, 1025, 20_000]).map(lambda n, e=empty: [e] * n))
            else:
                fields[f.name] = inner
        elif f.is_repeated:
            fields[f.name] = st.lists(_scalar(f, graph_json), max_size=4)
        else:
            fields[f.name] = _scalar(f, graph_json)

    def build(values: dict[str, Any]) -> Any:
        msg = cls()
        for name, v in values.items():
            target = getattr(msg, name) if not isinstance(v, (bool, int, float, str)) else None
            if isinstance(v, dict):
                target.update(v)
            elif isinstance(v, list):
                target.extend(v)
            elif target is not None:
                target.CopyFrom(v)
            else:
                setattr(msg, name, v)
        return msg

    return st.fixed_dictionaries({}, optional=fields).map(build)


@pytest.fixture(scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """SQLite, or a fresh PostgreSQL schema (AIPERF_TEST_POSTGRES_URL), for the module."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path_factory.mktemp('fuzzdb') / 'fuzz.db'}"
        return
    base = postgres_url()
    if base is None:
        pytest.skip(f"{POSTGRES_ENV} not set")
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    schema = f"t_{uuid.uuid4().hex[:16]}"
    admin = create_engine(base, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    try:
        yield make_url(base).update_query_dict({"options": f"-csearch_path={schema}"}).render_as_string(
            hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
        admin.dispose()


@pytest.fixture(scope="module")
def master(database: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One master for the module, with a worker, a running run and a model, so
    that small generated ids hit real rows."""
    from aiperf.resnet import resnet50
    from master.server import MasterConfig, serve

    d: Path = tmp_path_factory.mktemp("fuzz")
    h = serve(MasterConfig(database, port=0, host="127.0.0.1", data_dir=d, heartbeat_interval_s=3600.0,
                           worker_token=WORKER_TOKEN, admin_token=ADMIN_TOKEN, env={}))
    graph = resnet50(input_size=32, channels=3, classes=10, width=0.125)  # the smoke seed: submitted without a parent
    w, c = WorkerClient(h.address, WORKER_TOKEN, retries=0), ControlClient(h.address, ADMIN_TOKEN, retries=0)
    wid = w.register(name="seed", host="seed", accelerators=[Accelerator("X", 1 << 30)]).worker_id
    c.start_run(600, allow_concurrent=True)
    w.submit_model(wid, graph.to_json(), graph.hash(), 0, 1, Hyperparameters(32, 3))
    channel = grpc.insecure_channel(h.address)
    h.fuzz_channel, h.graph_json = channel, graph.to_json()
    # worker 1's credential rides every fuzzed worker call, so messages naming it reach the Master's rules
    h.worker_metadata = (("authorization", f"Bearer {WORKER_TOKEN}"), (CREDENTIAL_METADATA, w.credential(wid)))
    yield h
    channel.close()
    w.close()
    c.close()
    h.stop(grace_s=0)


def _alive(h: Any) -> None:
    stub = health_pb2_grpc.HealthStub(h.fuzz_channel)
    assert stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=30).status == \
        health_pb2.HealthCheckResponse.SERVING


def _call(h: Any, service: str, method: str, payload: bytes, token: str) -> grpc.StatusCode:
    call = h.fuzz_channel.unary_unary(f"/aiperf.v1.{service}/{method}", request_serializer=lambda b: b,
                                      response_deserializer=lambda b: b)
    metadata = h.worker_metadata if token == WORKER_TOKEN else (("authorization", f"Bearer {token}"),)
    try:
        call(payload, metadata=metadata, timeout=60)
    except grpc.RpcError as exc:
        assert exc.code() in ALLOWED, f"{method}: {exc.code()} {exc.details()}"
        return exc.code()
    return grpc.StatusCode.OK


def _unary_methods() -> list[tuple[str, Any]]:
    return [(s, m) for s in ("WorkerService", "ControlService")
            for m in pb.DESCRIPTOR.services_by_name[s].methods if not m.client_streaming]


@pytest.mark.parametrize("service, method", _unary_methods(), ids=[m.name for _, m in _unary_methods()])
def test_every_unary_rpc_answers_generated_messages_with_a_documented_status(master, service, method):
    token = WORKER_TOKEN if service == "WorkerService" else ADMIN_TOKEN

    @FUZZ
    @given(msg=messages(method.input_type, master.graph_json))
    def run(msg: Any) -> None:
        payload = msg.SerializeToString()
        assume(len(payload) <= MAX_REQUEST_BYTES)  # larger: gRPC's RESOURCE_EXHAUSTED (tested below)
        _call(master, service, method.name, payload, token)
        _alive(master)

    run()


@pytest.mark.parametrize("service, method", _unary_methods(), ids=[m.name for _, m in _unary_methods()])
def test_every_unary_rpc_refuses_random_bytes_and_wrong_tokens(master, service, method):
    token = WORKER_TOKEN if service == "WorkerService" else ADMIN_TOKEN

    @settings(FUZZ, max_examples=8)
    @given(payload=st.binary(max_size=300), wrong=st.booleans())
    def run(payload: bytes, wrong: bool) -> None:
        code = _call(master, service, method.name, payload, "wrong-token" if wrong else token)
        if wrong:
            assert code == grpc.StatusCode.UNAUTHENTICATED
        _alive(master)

    run()


def test_connect_answers_every_message_and_lives_on(master):
    stream = master.fuzz_channel.stream_stream(
        "/aiperf.v1.WorkerService/Connect", request_serializer=lambda b: b,
        response_deserializer=pb.MasterMessage.FromString)
    one = messages(pb.WorkerMessage.DESCRIPTOR, master.graph_json).map(lambda m: m.SerializeToString())
    good = pb.WorkerMessage(heartbeat=pb.HeartbeatRequest(worker_id=1)).SerializeToString()

    @settings(FUZZ, max_examples=15)
    @given(payloads=st.lists(one | st.binary(max_size=100), min_size=1, max_size=6))
    def run(payloads: list[bytes]) -> None:
        assume(sum(map(len, payloads)) <= MAX_REQUEST_BYTES)
        sent = payloads + [good]  # the last one, a valid heartbeat, is answered on the same stream
        replies = list(stream(iter(sent), metadata=master.worker_metadata, timeout=60))
        assert len(replies) == len(sent)
        for reply in replies:
            kind = reply.WhichOneof("body")
            assert kind in ("heartbeat", "progress", "error")
            if kind == "error":
                assert reply.error.code in ALLOWED_NUMBERS - {0}, reply.error
        assert replies[-1].WhichOneof("body") == "heartbeat"
        _alive(master)

    run()


def test_a_request_over_the_size_limit_is_resource_exhausted(master):
    call = master.fuzz_channel.unary_unary("/aiperf.v1.WorkerService/Register", request_serializer=lambda b: b,
                                           response_deserializer=lambda b: b)
    payload = pb.RegisterRequest(name="x" * (MAX_REQUEST_BYTES + 1)).SerializeToString()
    with pytest.raises(grpc.RpcError) as e:
        call(payload, metadata=(("authorization", f"Bearer {WORKER_TOKEN}"),), timeout=60)
    assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    _alive(master)
