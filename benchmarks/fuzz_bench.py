"""Fuzz benchmark: thousands of hostile requests against a real master on loopback.

The master runs in its own process (SQLite in a temporary directory, or
--db). One good worker reports on its Connect stream all along, as a worker
agent does; a bad worker misbehaves beside it (reports of 2^63-1 images,
of more images than physics allows, on the good worker's model, resource
samples of t = -1e308); and the fuzzer sends a seeded mix of random bytes,
mutated valid messages, messages of extreme values (nan, inf, ±1e308,
2^64-1, NUL, ESC, 1 MB strings, JSON nested 100,000 deep) and Connect streams
of such messages to every RPC. It prints the count per status code, the
master's deaths (health check or process gone; the master is then
restarted), the rows of the database outside the bounds of
aiperf/api/bounds.py (physics included: a model's operations fit its
worker's ceiling rate since its submission), and the good worker's failed
calls. The last three must be 0; so must UNKNOWN.

    python -m benchmarks.fuzz_bench [--requests 10000] [--seed 1] [--quick] [--db URL] [--master-log FILE]
                                    [--frontends N]

What an admin may legitimately do to the good worker (stop its run) and what
only per-worker identity can prevent (another client naming the good
worker's id or name) is kept out of the mix: the good worker's ids are not
among the small integers the fuzzer produces, and StopRun never names its run.
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
import math
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from aiperf import limits
from aiperf.api import aiperf_pb2 as pb
from aiperf.api import bounds
from aiperf.api.calls import CREDENTIAL_METADATA
from aiperf.hyperparameters import Hyperparameters

WORKER_TOKEN, ADMIN_TOKEN = "fuzz-worker-token", "fuzz-admin-token"
QUICK_REQUESTS = 600
MB = 1 << 20
INTS = {
    "uint64": [0, 1, 2, 3, 2**31 - 1, 2**32, 2**53 + 1, 2**63 - 1, 2**63, 2**64 - 1],
    "uint32": [0, 1, 2, 3, 448, 2**31 - 1, 2**31, 2**32 - 1],
    "int64": [0, 1, -1, 3, 2**31, 2**40 + 1, 2**62, 2**63 - 1, -2**63],
    "int32": [0, 1, -1, 2, 64, 2**31 - 1, -2**31],
}
FLOATS = [math.nan, math.inf, -math.inf, 1e308, -1e308, 0.0, -0.0, 5e-324, 0.5, 1.0, 1.0000001, 3600.0, 1e17]
STRINGS = ["", "\x00", "a\x00b", "\x1b[2J\x1b[31mred", "x" * MB, "é" * 300, "{}", "[" * 100_000 + "]" * 100_000,
           '{"format": "aiperf.graph"}', "float16", "\n\t", "\u202e\u200b", "n" * 254]
OK = "OK"


# ---------------------------------------------------------------- the master process


def _serve(db_url: str, port: int, data_dir: str, frontends: int = 0) -> None:
    """The master (run as a child process of this script); SIGTERM stops it (and its front ends)."""
    import signal

    logging.basicConfig(level=logging.ERROR)
    from master.server import MasterConfig, serve

    parent = os.getppid()
    handle = serve(MasterConfig(db_url, port=port, host="127.0.0.1", data_dir=Path(data_dir),
                                heartbeat_interval_s=3600.0, worker_token=WORKER_TOKEN, admin_token=ADMIN_TOKEN,
                                env={}, frontends=frontends))
    terminated = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: terminated.set())
    while os.getppid() == parent and not terminated.wait(0.5):  # the benchmark ended, even if it was killed
        pass
    handle.stop(grace_s=0)


class MasterProcess:
    """The master in a child process; `alive()` checks health, `restart()` after a death."""

    def __init__(self, db_url: str, data_dir: str, log_path: str | None = None, frontends: int = 0) -> None:
        self.db_url, self.data_dir, self.frontends = db_url, data_dir, frontends
        self.log = open(log_path, "ab") if log_path else subprocess.DEVNULL  # noqa: SIM115 - closed in stop
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = int(s.getsockname()[1])
        self.address = f"127.0.0.1:{self.port}"
        self.deaths = 0
        self.proc: subprocess.Popen | None = None
        self.start()

    def start(self) -> None:
        code = ("import sys; from benchmarks import fuzz_bench; "
                "fuzz_bench._serve(sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]))")
        root = str(Path(__file__).resolve().parent.parent)  # where `benchmarks` is a package
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)}
        self.proc = subprocess.Popen([sys.executable, "-c", code, self.db_url, str(self.port), self.data_dir,
                                      str(self.frontends)], stderr=self.log, env=env)
        with grpc.insecure_channel(self.address) as channel:
            grpc.channel_ready_future(channel).result(timeout=120)

    def alive(self) -> bool:
        if self.proc is None or self.proc.poll() is not None:
            return False
        try:
            with grpc.insecure_channel(self.address) as channel:
                reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=30)
            return reply.status == health_pb2.HealthCheckResponse.SERVING
        except grpc.RpcError:
            return False

    def check(self) -> None:
        """Count a death and restart when the master does not answer."""
        if not self.alive():
            self.deaths += 1
            logging.error("master died (%d); restarting", self.deaths)
            self.stop()
            self.start()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def close(self) -> None:
        self.stop()
        if self.log is not subprocess.DEVNULL:
            self.log.close()


# ---------------------------------------------------------------- messages


def _int_type(f: Any) -> str:
    return {f.TYPE_INT32: "int32", f.TYPE_INT64: "int64", f.TYPE_UINT32: "uint32", f.TYPE_UINT64: "uint64",
            f.TYPE_ENUM: "int32"}[f.type]


def extreme(rng: random.Random, f: Any) -> Any:
    """An extreme value of the field's type."""
    if f.type == f.TYPE_BOOL:
        return rng.random() < 0.5
    if f.type == f.TYPE_DOUBLE:
        return rng.choice(FLOATS)
    if f.type == f.TYPE_STRING:
        return rng.choice(STRINGS)
    return rng.choice(INTS[_int_type(f)])


def _set_field(rng: random.Random, msg: Any, f: Any) -> None:
    """Set one field of msg to an extreme value (a repeated or map field gets a few, or very many)."""
    if f.message_type is not None and f.message_type.GetOptions().map_entry:
        key, value = f.message_type.fields_by_name["key"], f.message_type.fields_by_name["value"]
        getattr(msg, f.name)[extreme(rng, key)] = extreme(rng, value)
    elif f.message_type is not None:
        if f.is_repeated:
            item = getattr(pb, f.message_type.name)()
            mutate(rng, item, rng.randint(0, 3))
            # many copies of a small item only: 20,000 copies of a 1 MB string would take 20 GB here
            n = min(rng.choice([1, 2, 65, 1025, 20_000]), max(1, (4 * MB) // max(1, item.ByteSize())))
            getattr(msg, f.name).extend([item] * n)
        else:
            mutate(rng, getattr(msg, f.name), rng.randint(1, 3))
    elif f.is_repeated:
        getattr(msg, f.name).append(extreme(rng, f))
    else:
        setattr(msg, f.name, extreme(rng, f))


def mutate(rng: random.Random, msg: Any, fields: int) -> Any:
    """msg with `fields` of its fields (chosen at random) set to extreme values."""
    all_fields = list(msg.DESCRIPTOR.fields)
    for f in rng.sample(all_fields, min(fields, len(all_fields))):
        _set_field(rng, msg, f)
    return msg


def flip_bytes(rng: random.Random, data: bytes) -> bytes:
    """A valid payload damaged: bytes flipped, cut short or extended with junk."""
    b = bytearray(data or b"\x00")
    for _ in range(rng.randint(1, 4)):
        b[rng.randrange(len(b))] = rng.randrange(256)
    if rng.random() < 0.3:
        b = b[:rng.randrange(len(b) + 1)]
    if rng.random() < 0.3:
        b += rng.randbytes(rng.randint(1, 16))
    return bytes(b)


def templates(ids: dict[str, int], graph_json: str, graph_hash: str) -> dict[str, Callable[[], Any]]:
    """A valid request per unary method, made by the bad worker (or the admin)."""
    bad, bad_model, run = ids["bad"], ids["bad_model"], ids["run"]
    hp = pb.Hyperparameters(batch_size=32, kernel_size=3)
    return {
        "Register": lambda: pb.RegisterRequest(name="fuzzed", host="fuzzed", accelerators=[
            pb.Accelerator(model="X", memory_bytes=1 << 30, peak_flops=1e14)], cpus=8, memory_bytes=1 << 34),
        "GetHistory": lambda: pb.GetHistoryRequest(worker_id=bad, run_id=run, limit=5),
        "SubmitModel": lambda: pb.SubmitModelRequest(worker_id=bad, run_id=run, graph_json=graph_json,
                                                     graph_hash=graph_hash, round=2, hyperparameters=hp),
        "GetHyperparameterHistory": lambda: pb.GetHyperparameterHistoryRequest(worker_id=bad, run_id=run),
        "FinishModel": lambda: pb.FinishModelRequest(worker_id=bad, model_id=bad_model, state=pb.MODEL_FAILED,
                                                     reason="fuzz"),
        "SendResourceSamples": lambda: pb.SendResourceSamplesRequest(worker_id=bad, samples=[
            pb.ResourceSample(age_s=1.0, accelerator_index=-1, cpu_util=0.5, memory_used=1 << 30)]),
        "StartRun": lambda: pb.StartRunRequest(duration_s=600, allow_concurrent=True),
        "StopRun": lambda: pb.StopRunRequest(run_id=ids["other_run"], reason="fuzz"),
        "GetRunStatus": lambda: pb.GetRunStatusRequest(run_id=run),
        "GetScoreboard": lambda: pb.GetScoreboardRequest(run_id=run),
        "ListModels": lambda: pb.ListModelsRequest(run_id=run, limit=10),
        "GetTimeline": lambda: pb.GetTimelineRequest(run_id=run, max_points=10),
        "ListRuns": lambda: pb.ListRunsRequest(limit=10),
        "ListWorkers": lambda: pb.ListWorkersRequest(run_id=run, limit=10),
        "RecordAudit": lambda: pb.RecordAuditRequest(model_id=bad_model, has_audited_accuracy=True,
                                                     audited_accuracy=0.5, architecture_ok=True, verdict="failed",
                                                     auditor_host="fuzzed", validation_images=100),
        "ListAudits": lambda: pb.ListAuditsRequest(run_id=run),
    }


def worker_message(rng: random.Random, ids: dict[str, int], seq: int) -> pb.WorkerMessage:
    """A Connect message of the bad worker: valid, or mutated."""
    if rng.random() < 0.4:
        msg = pb.WorkerMessage(heartbeat=pb.HeartbeatRequest(worker_id=ids["bad"], model_id=ids["bad_model"]))
    else:
        msg = pb.WorkerMessage(progress=pb.ProgressReport(worker_id=ids["bad"], model_id=ids["bad_model"], seq=seq,
                                                          images_trained=10, epoch=1))
    if rng.random() < 0.7:
        body = getattr(msg, msg.WhichOneof("body"))
        mutate(rng, body, rng.randint(1, 3))
    return msg


def _payload_of(rng: random.Random, msg: Any) -> bytes:
    """msg serialized; a message over the request limit is cut back to a few fields."""
    data = msg.SerializeToString()
    if len(data) > limits.MAX_REQUEST_BYTES:  # gRPC would answer RESOURCE_EXHAUSTED before the master sees it
        data = mutate(rng, type(msg)(), 1).SerializeToString()[:limits.MAX_REQUEST_BYTES]
    return data


# ---------------------------------------------------------------- the fuzzer


class Fuzzer:
    """Sends the mix and counts the status codes (OK or the code's name) of every request."""

    def __init__(self, address: str, ids: dict[str, int], graph_json: str, graph_hash: str, seed: int) -> None:
        self.rng = random.Random(seed)
        self.ids = ids
        self.channel = grpc.insecure_channel(address, options=[
            ("grpc.max_send_message_length", 64 * MB), ("grpc.max_receive_message_length", 64 * MB)])
        self.templates = templates(ids, graph_json, graph_hash)
        self.codes: collections.Counter[str] = collections.Counter()
        self.lock = threading.Lock()
        self.seq = 1000
        self.methods = {m.name: s for s in ("WorkerService", "ControlService")
                        for m in pb.DESCRIPTOR.services_by_name[s].methods if not m.client_streaming}

    def count(self, code: str, n: int = 1) -> None:
        with self.lock:
            self.codes[code] += n

    def total(self) -> int:
        with self.lock:
            return sum(self.codes.values())

    def unary(self, method: str, payload: bytes) -> None:
        service = self.methods[method]
        token = WORKER_TOKEN if service == "WorkerService" else ADMIN_TOKEN
        call = self.channel.unary_unary(f"/aiperf.v1.{service}/{method}", request_serializer=lambda b: b,
                                        response_deserializer=lambda b: b)
        metadata = (("authorization", f"Bearer {token}"),)
        if service == "WorkerService":
            metadata += ((CREDENTIAL_METADATA, self.ids["bad_credential"]),)
        try:
            call(payload, metadata=metadata, timeout=60)
            self.count(OK)
        except grpc.RpcError as exc:
            self.count(exc.code().name)

    def request(self, method: str) -> bytes:
        """A payload for the method: random bytes, a damaged or mutated valid message, or all extremes."""
        rng = self.rng
        kind = rng.choices(("bytes", "flipped", "mutated", "extreme"), weights=(2, 2, 5, 1))[0]
        if kind == "bytes":
            return rng.randbytes(rng.randint(0, 200))
        msg = self.templates[method]()
        if kind == "flipped":
            return flip_bytes(rng, msg.SerializeToString())
        if kind == "mutated":
            mutate(rng, msg, rng.randint(1, 3))
        else:
            mutate(rng, msg, len(msg.DESCRIPTOR.fields))
        if method == "StopRun" and msg.run_id in (0, self.ids["run"]):
            msg.run_id = self.ids["other_run"]  # an admin may stop the good worker's run; not in this mix
        return _payload_of(rng, msg)

    def stream(self) -> int:
        """A Connect stream of 5-30 messages (mutated, or random bytes); returns how many were sent."""
        rng = self.rng
        payloads = []
        for _ in range(rng.randint(5, 30)):
            self.seq += 1
            if rng.random() < 0.15:
                payloads.append(rng.randbytes(rng.randint(0, 60)))
            else:
                payloads.append(_payload_of(rng, worker_message(rng, self.ids, self.seq)))
        call = self.channel.stream_stream("/aiperf.v1.WorkerService/Connect", request_serializer=lambda b: b,
                                          response_deserializer=pb.MasterMessage.FromString)
        answered = 0
        try:
            metadata = (("authorization", f"Bearer {WORKER_TOKEN}"), (CREDENTIAL_METADATA, self.ids["bad_credential"]))
            for reply in call(iter(payloads), metadata=metadata, timeout=60):
                answered += 1
                kind = reply.WhichOneof("body")
                self.count(_CODE_NAMES.get(reply.error.code, f"code {reply.error.code}") if kind == "error" else OK)
        except grpc.RpcError as exc:
            self.count(f"stream {exc.code().name}", len(payloads) - answered)
            return len(payloads)
        if answered != len(payloads):
            self.count("unanswered", len(payloads) - answered)
        return len(payloads)

    def run(self, requests: int, master: MasterProcess) -> None:
        names = sorted(self.methods)
        sent, next_check = 0, 500
        while sent < requests:
            if self.rng.random() < 0.05:
                sent += self.stream()
            else:
                method = self.rng.choice(names)
                self.unary(method, self.request(method))
                sent += 1
            if sent >= next_check:
                master.check()
                next_check += 500
                if next_check % 2000 == 0:
                    logging.warning("fuzz_bench: %d requests sent", sent)
        master.check()


_CODE_NAMES = {c.value[0]: c.name for c in grpc.StatusCode}


# ---------------------------------------------------------------- the two workers


def good_worker(address: str, ids: dict[str, int], ops: int, stop: threading.Event, out: dict[str, Any]) -> None:
    """Reports 100 images and heartbeats on its stream until stopped; counts its failed calls."""
    from aiperf.api.client import ApiError, WorkerClient

    client = WorkerClient(address, WORKER_TOKEN, retries=0)
    client.set_credential(ids["good"], ids["good_credential"])
    failures, accepted, seq = [], 0, 0
    with client.connect() as s:
        while not stop.is_set():
            seq += 1
            try:
                ack = s.report_progress(ids["good"], ids["good_model"], seq, 100, 0, 1, ops)
                accepted += 0 if ack.duplicate else 1
                s.heartbeat(ids["good"], ids["good_model"])
            except ApiError as exc:
                failures.append(str(exc))
            time.sleep(0.01)
    client.close()
    out.update(failures=failures, accepted=accepted)


def bad_worker(address: str, ids: dict[str, int], fuzzer: Fuzzer, stop: threading.Event) -> None:
    """Misbehaves at about 50 calls/s beside the good worker; its calls count in the mix."""
    from aiperf.api.client import ApiError, ResourceSample, WorkerClient

    client = WorkerClient(address, WORKER_TOKEN, retries=0)
    bad, mine, theirs = ids["bad"], ids["bad_model"], ids["good_model"]
    calls: list[Callable[[Any, int], Any]] = [
        lambda s, q: s.report_progress(bad, mine, q, 2**63 - 1, 0, 1, 0),       # beyond the bound
        lambda s, q: s.report_progress(bad, mine, q, 10**9, 10**9, 1, 0),       # beyond physics
        lambda s, q: s.report_progress(bad, theirs, q, 100, 0, 1, 0),            # someone else's model
        lambda s, q: s.report_progress(bad, mine, q, 10, 0, 1, 2**63 - 1),      # worker_flops
        lambda s, q: s.report_progress(bad, mine, q, 10, 0, 1, 0, val_accuracy=math.nan),
        lambda s, q: s.heartbeat(2**64 - 1),
        lambda s, q: client.send_resource_samples(bad, [ResourceSample(age_s=1e308)] * 50),
    ]
    with client.connect() as s:
        seq = 10**6
        while not stop.is_set():
            seq += 1
            try:
                calls[seq % len(calls)](s, seq)
                fuzzer.count(OK)
            except ApiError as exc:
                fuzzer.count(exc.code.name)
            time.sleep(0.02)
    client.close()


# ---------------------------------------------------------------- the audit


def _text_ok(v: Any, max_chars: int, multiline: bool = False) -> bool:
    try:
        bounds.Text(max_chars, multiline).check(v)
        return True
    except bounds.BoundsError:
        return False


def _within(v: Any, lo: float, hi: float) -> bool:
    return v is not None and lo <= v <= hi


def rows_out_of_bounds(db_url: str) -> list[str]:
    """Every stored row that breaks a limit of aiperf/limits.py (physics included)."""

    from sqlalchemy import create_engine, text

    bad: list[str] = []
    engine = create_engine(db_url)
    with engine.connect() as conn:
        for wid, name, host, accs, cpus, mem, sw in conn.execute(text(
                "SELECT id, name, host, accelerators, cpus, memory_bytes, software FROM workers")):
            accs, sw = (json.loads(v) if isinstance(v, str) else v for v in (accs, sw))
            ok = (_text_ok(name, limits.MAX_NAME_CHARS) and _text_ok(host, limits.MAX_NAME_CHARS)
                  and len(accs) <= limits.MAX_ACCELERATORS_PER_WORKER and _within(cpus, 0, limits.MAX_CPUS)
                  and _within(mem, 0, limits.MAX_HOST_MEMORY_BYTES) and len(sw) <= limits.MAX_SOFTWARE_ENTRIES
                  and all(_within(a.get("peak_flops", 0.0), 0, limits.MAX_OPS_PER_S_PER_ACCELERATOR)
                          and _within(a.get("memory_bytes", 0), 0, limits.MAX_ACCELERATOR_MEMORY_BYTES)
                          and _text_ok(a.get("model", ""), limits.MAX_MODEL_NAME_CHARS) for a in accs))
            if not ok:
                bad.append(f"worker {wid}")
        for rid, seed, duration, reason in conn.execute(text("SELECT id, seed, duration_s, stop_reason FROM runs")):
            if not (_within(seed, 0, limits.MAX_SEED) and _within(duration, 0, limits.MAX_RUN_DURATION_S)
                    and _text_ok(reason, limits.MAX_STOP_REASON_CHARS)):
                bad.append(f"run {rid}")
        bad += _model_rows(conn, text)
        for sid, t, idx, au, amem, cu, mem in conn.execute(text(
                "SELECT id, t, accelerator_index, accelerator_util, accelerator_memory_used, cpu_util, memory_used "
                "FROM resource_samples")):
            if not (math.isfinite(t) and _within(idx, -1, limits.MAX_ACCELERATORS_PER_WORKER - 1) and _within(au, 0, 1)
                    and _within(cu, 0, 1) and _within(amem, 0, limits.MAX_ACCELERATOR_MEMORY_BYTES)
                    and _within(mem, 0, limits.MAX_HOST_MEMORY_BYTES) and t > time.time() - 2 * limits.MAX_SAMPLE_AGE_S):
                bad.append(f"resource sample {sid}")
    engine.dispose()
    return bad


def _model_rows(conn: Any, text: Callable[[str], Any]) -> list[str]:
    """Models and their reports out of bounds: fields, and operations beyond the worker's ceiling rate."""
    bad = []
    accelerators = {wid: len(json.loads(a) if isinstance(a, str) else a)
                    for wid, a in conn.execute(text("SELECT id, accelerators FROM workers"))}
    for row in conn.execute(text(
            "SELECT id, worker_id, round, batch_size, length(graph_json), flops_per_train_image, "
            "flops_per_eval_image, reason, best_accuracy, created_at FROM models")):
        mid, wid, rnd, batch, size, ftrain, feval, reason, best, _ = row
        if not (_within(rnd, 1, limits.MAX_ROUND) and _within(batch, 1, limits.MAX_BATCH_SIZE)
                and _within(size, 1, limits.MAX_GRAPH_JSON_CHARS) and _within(ftrain, 0, limits.MAX_FLOPS_PER_IMAGE)
                and _within(feval, 0, limits.MAX_FLOPS_PER_IMAGE) and _text_ok(reason, 500, multiline=True)
                and (best is None or _within(best, 0, 1))):
            bad.append(f"model {mid}")
    for row in conn.execute(text(
            "SELECT p.id, p.seq, p.epoch, p.images_trained, p.images_validated, p.worker_flops, p.master_flops, "
            "p.accuracy, p.t FROM progress p")):
        pid, seq, epoch, it, iv, wf, mf, acc, t = row
        if not (_within(seq, 1, limits.MAX_SEQ) and _within(epoch, 0, limits.MAX_EPOCH)
                and _within(it, 0, limits.MAX_IMAGES_PER_REPORT) and _within(iv, 0, limits.MAX_IMAGES_PER_REPORT)
                and _within(wf, 0, limits.MAX_OPS_PER_REPORT) and _within(mf, 0, limits.MAX_OPS_PER_REPORT)
                and (acc is None or _within(acc, 0, 1)) and math.isfinite(t)):
            bad.append(f"report {pid}")
    # physics: a model's reported operations fit its worker's ceiling rate from its submission to
    # its last report (+ the slack); the sum is taken in Python, where it cannot overflow
    per_model: dict[int, list[Any]] = collections.defaultdict(list)
    for mid, mf, t in conn.execute(text("SELECT model_id, master_flops, t FROM progress")):
        per_model[mid].append((mf, t))
    for mid, wid, created in conn.execute(text("SELECT id, worker_id, created_at FROM models")):
        reports = per_model.get(mid)
        if reports:
            need_s = sum(int(mf) for mf, _ in reports) / bounds.report_ops_ceiling(accelerators.get(wid, 0))
            if need_s > max(t for _, t in reports) - created + limits.CLOCK_SLACK_S + 1e-6:
                bad.append(f"model {mid}: {need_s:.3g} s of work at the ceiling rate")
    return bad


# ---------------------------------------------------------------- main


def setup(address: str) -> tuple[dict[str, int], str, str, int]:
    """Workers, runs and models for the mix; the good worker's ids are far from the small integers."""
    from aiperf.api.client import Accelerator, ControlClient, WorkerClient
    from aiperf.flops import count_flops
    from aiperf.resnet import resnet50

    graph = resnet50(input_size=32, channels=3, classes=10, width=0.125)  # the smoke seed: submitted without a parent
    w, c = WorkerClient(address, WORKER_TOKEN, retries=0), ControlClient(address, ADMIN_TOKEN, retries=0)
    acc = [Accelerator("NVIDIA H100 80GB HBM3", 80 << 30, peak_flops=4e14)]
    bad = w.register(name="bad-worker", host="bad", accelerators=acc).worker_id
    for i in range(40):
        w.register(name=f"filler-{i}", host="filler")
    good = w.register(name="good-worker", host="good", accelerators=acc).worker_id
    run = c.start_run(3600, profile="smoke").config.run_id
    hp = Hyperparameters(32, 3)
    for _ in range(30):
        bad_model = w.submit_model(bad, graph.to_json(), graph.hash(), 0, 1, hp).model_id
    good_model = w.submit_model(good, graph.to_json(), graph.hash(), 0, 1, hp).model_id
    other_run = c.start_run(600, profile="smoke", allow_concurrent=True, min_workers=10**4).config.run_id
    w.close()
    c.close()
    ids = dict(bad=bad, good=good, run=run, bad_model=bad_model, good_model=good_model, other_run=other_run)
    # each worker holds its own credential: the misbehaving one's rides the fuzzed worker calls
    ids.update(bad_credential=w.credential(bad), good_credential=w.credential(good))
    return ids, graph.to_json(), graph.hash(), count_flops(graph).ops(100, 0)


def _good_model_images(db_url: str, model_id: int) -> int:
    from sqlalchemy import create_engine, text

    engine = create_engine(db_url)
    with engine.connect() as conn:
        value = conn.execute(text("SELECT images_trained FROM models WHERE id = :m"), {"m": model_id}).scalar_one()
    engine.dispose()
    return int(value)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=10_000, help="fuzzed requests (at least)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the mix")
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_REQUESTS} requests (the test suite's run)")
    parser.add_argument("--db", default=None, help="database URL (default: SQLite in a temporary directory)")
    parser.add_argument("--master-log", default=None, help="append the master's errors (tracebacks) to this file")
    parser.add_argument("--frontends", type=int, default=0,
                        help="serve the master through this many front-end processes (`--frontends N`)")
    args = parser.parse_args(argv)
    requests = QUICK_REQUESTS if args.quick else args.requests
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    with tempfile.TemporaryDirectory(prefix="aiperf-fuzz-") as tmp:
        db_url = args.db or f"sqlite:///{Path(tmp) / 'fuzz.db'}"
        master = MasterProcess(db_url, tmp, args.master_log, args.frontends)
        try:
            return _run(master, db_url, requests, args.seed)
        finally:
            master.close()


def _run(master: MasterProcess, db_url: str, requests: int, seed: int) -> int:
    start = time.monotonic()
    ids, graph_json, graph_hash, good_ops = setup(master.address)
    fuzzer = Fuzzer(master.address, ids, graph_json, graph_hash, seed)
    stop, good = threading.Event(), {}
    threads = [threading.Thread(target=good_worker, args=(master.address, ids, good_ops, stop, good)),
               threading.Thread(target=bad_worker, args=(master.address, ids, fuzzer, stop))]
    for t in threads:
        t.start()
    try:
        fuzzer.run(requests, master)
    finally:
        stop.set()
        for t in threads:
            t.join()
    failures = list(good.get("failures", []))
    if _good_model_images(db_url, ids["good_model"]) != 100 * good.get("accepted", 0):
        failures.append("the good model's images differ from its accepted reports")
    out_of_bounds = rows_out_of_bounds(db_url)
    total = fuzzer.total()
    print(f"fuzz_bench: {total} requests in {time.monotonic() - start:.0f} s, seed {seed}")
    for code, n in sorted(fuzzer.codes.items(), key=lambda kv: -kv[1]):
        print(f"  {code:<24} {n}")
    print(f"  good worker: {good.get('accepted', 0)} reports accepted, {len(failures)} failed calls")
    for line in (failures[:5] + out_of_bounds[:10]):
        print(f"  ! {line}")
    unknown = sum(n for code, n in fuzzer.codes.items() if "UNKNOWN" in code or code == "unanswered")
    print(f"RESULT fuzz_requests={total} unknown={unknown} master_deaths={master.deaths} "
          f"rows_out_of_bounds={len(out_of_bounds)} good_worker_failures={len(failures)}")
    return 0 if unknown == master.deaths == len(out_of_bounds) == len(failures) == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
