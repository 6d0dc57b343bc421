"""The master's front ends (`serve(MasterConfig(..., frontends=N))`, master/frontends/process.py,
master/frontends/supervisor.py, master/frontends/wire.py): what is specific to them, not the RPCs
themselves (the whole API suite runs through front ends with
AIPERF_TEST_FRONTENDS=2).

- the relay's wire format (pure, property-based): frames round-trip, the
  stream reader cuts any chunking back into the frames sent, malformed frames
  raise FrameError;
- the master's end of the relay against a hostile client on its Unix socket:
  a malformed frame closes that connection only, and nothing of it is served;
- the processes: a killed front end is restarted on the same port, a stopped
  master leaves no front end, no listener and no relay directory behind, a
  port already taken fails the start with the address named and no process
  left;
- a worker's Connect stream through a front end: one reply per message, in
  order, refusals included, the stream open throughout;
- a front end run alone against a relay this test serves: requests and
  replies pass through as bytes, statuses as numbers, and when the relay
  closes its callers get UNAVAILABLE and the process exits with 1.

Every wait polls against a deadline; nothing sleeps to make an assertion true.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import select
import shutil
import signal
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import grpc
import psutil
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from aiperf.api import aiperf_pb2 as pb
from aiperf.api.calls import CREDENTIAL_METADATA
from aiperf.api.client import MAX_MESSAGE_BYTES, ApiError
from aiperf.limits import MAX_REQUEST_BYTES
from master.frontends.supervisor import _child_env  # the environment the master starts its front ends with
from master.frontends.wire import (
    MAX_CALL_FRAME,
    MAX_CREDENTIAL_BYTES,
    MAX_REPLY_FRAME,
    METHOD_INDEX,
    METHODS,
    METHODS_DIGEST,
    PING,
    FrameError,
    FrameReader,
    call_frame,
    parse_call,
    parse_reply,
    reply_frame,
)
from tests.support.master_clients import clients, register, wait_for
from tests.support.ports import free_port

ROOT = Path(__file__).resolve().parent.parent
WORKER_TOKEN, ADMIN_TOKEN = "test-worker-token", "test-admin-token"  # conftest's master_server defaults
WORKER_AUTH = (("authorization", f"Bearer {WORKER_TOKEN}"),)
ADMIN_AUTH = (("authorization", f"Bearer {ADMIN_TOKEN}"),)
CONTROL, WORKER = "aiperf.v1.ControlService", "aiperf.v1.WorkerService"
LIST_RUNS = METHOD_INDEX[(CONTROL, "ListRuns")]
REGISTER = METHOD_INDEX[(WORKER, "Register")]
CONNECT = METHOD_INDEX[(WORKER, "Connect")]
U32 = struct.Struct(">I")

# ---------------------------------------------------------------- wire format (pure)

ids = st.integers(0, 2**64 - 1)
methods = st.integers(0, len(METHODS) - 1)
credentials = st.binary(max_size=MAX_CREDENTIAL_BYTES)
payloads = st.binary(max_size=4096)


def _body(frame: bytes) -> bytes:
    """A written frame's body, after checking that its length prefix counts exactly that."""
    (length,) = U32.unpack_from(frame)
    assert length == len(frame) - U32.size
    return frame[U32.size:]


def test_methods_cover_both_services_in_a_fixed_order():
    served = {(s.full_name, m.name) for name in ("WorkerService", "ControlService")
              for s in [pb.DESCRIPTOR.services_by_name[name]] for m in s.methods}
    assert {(service, name) for service, name, _ in METHODS} == served and len(METHODS) == len(served)
    assert all(METHODS[i][:2] == key for key, i in METHOD_INDEX.items())
    assert [name for _, name, streaming in METHODS if streaming] == ["Connect"]


@settings(max_examples=200, deadline=None)
@given(ids, methods, credentials, payloads)
@example(2**64 - 1, len(METHODS) - 1, b"\xff" * MAX_CREDENTIAL_BYTES, b"")
@example(0, 0, b"", b"")
def test_call_frame_round_trips(call_id, method, credential, request):
    assert parse_call(_body(call_frame(call_id, method, credential, request))) == (
        call_id, method, credential, request)


@settings(max_examples=200, deadline=None)
@given(ids, st.integers(0, 2**32 - 1), payloads)
@example(2**64 - 1, 2**32 - 1, b"")
def test_reply_frame_round_trips(call_id, status, payload):
    assert parse_reply(_body(reply_frame(call_id, status, payload))) == (call_id, status, payload)


@st.composite
def chunked_stream(draw: Any) -> tuple[list[bytes], list[bytes]]:
    """Frames (call and reply frames, empty ones included) and their concatenation cut at random points."""
    call = st.builds(call_frame, ids, methods, st.binary(max_size=64), st.binary(max_size=300))
    reply = st.builds(reply_frame, ids, st.integers(0, 2**32 - 1), st.binary(max_size=300))
    empty = st.just(U32.pack(0))
    frames = draw(st.lists(st.one_of(call, reply, empty), max_size=12))
    stream = b"".join(frames)
    cuts = sorted(set(draw(st.lists(st.integers(0, len(stream)), max_size=40))))
    chunks = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)])]
    return [f[U32.size:] for f in frames], chunks


@settings(max_examples=300, deadline=None)
@given(chunked_stream())
def test_frame_reader_gives_back_the_frames_however_the_stream_is_cut(case):
    bodies, chunks = case
    reader = FrameReader(max(map(len, bodies), default=0))  # the largest frame is exactly at the maximum
    got = [frame for chunk in chunks for frame in reader.feed(chunk)]
    assert got == bodies
    assert list(reader.feed(b"")) == []  # nothing left over


@settings(max_examples=100, deadline=None)
@given(st.integers(0, MAX_CALL_FRAME), st.integers(1, 2**32 - 1), st.binary(max_size=8), st.integers(0, 3))
def test_frame_reader_refuses_a_length_above_its_maximum(maximum, excess, tail, cut):
    length = min(maximum + excess, 2**32 - 1)
    data = U32.pack(length) + tail
    reader = FrameReader(maximum)
    with pytest.raises(FrameError, match="at most"):
        list(reader.feed(data[:cut]))  # the length may arrive in pieces: refused once it is whole
        list(reader.feed(data[cut:]))


def test_relay_maxima_fit_what_grpc_accepts():
    """A frame carries any request the front end's gRPC server accepts with any credential, and any reply
    the master's own server could send; a length one over the maximum is refused, at it awaited."""
    assert MAX_CREDENTIAL_BYTES == 0xFFFF
    assert MAX_CALL_FRAME == len(_body(call_frame(0, 0, b"c" * MAX_CREDENTIAL_BYTES, b""))) + MAX_REQUEST_BYTES
    assert MAX_REPLY_FRAME == len(_body(reply_frame(0, 0, b""))) + MAX_MESSAGE_BYTES
    with pytest.raises(FrameError):
        list(FrameReader(MAX_CALL_FRAME).feed(U32.pack(MAX_CALL_FRAME + 1)))
    assert list(FrameReader(MAX_CALL_FRAME).feed(U32.pack(MAX_CALL_FRAME))) == []  # at the maximum: waits for it


@settings(max_examples=100, deadline=None)
@given(ids, st.integers(len(METHODS), PING - 1), st.binary(max_size=64), st.binary(max_size=64))
def test_parse_call_refuses_an_unknown_method(call_id, method, credential, request):
    """Every number above the methods' but PING (the front end's health check)."""
    body = struct.pack(">QHH", call_id, method, len(credential)) + credential + request
    with pytest.raises(FrameError, match=f"unknown method {method}"):
        parse_call(body)


@settings(max_examples=200, deadline=None)
@given(ids, methods, st.binary(min_size=1, max_size=300), st.data())
def test_parse_call_refuses_a_truncated_body(call_id, method, credential, data):
    body = _body(call_frame(call_id, method, credential, b""))
    cut = data.draw(st.integers(0, len(body) - 1))  # short of its header, or of its credential
    with pytest.raises(FrameError):
        parse_call(body[:cut])


@settings(max_examples=50, deadline=None)
@given(st.binary(max_size=11))
def test_parse_reply_refuses_a_truncated_body(body):
    with pytest.raises(FrameError):
        parse_reply(body)


def test_call_frame_refuses_a_credential_over_its_u16_length():
    assert parse_call(_body(call_frame(1, 0, b"c" * 0xFFFF, b"r")))[2] == b"c" * 0xFFFF
    with pytest.raises(FrameError, match="65536 bytes"):
        call_frame(1, 0, b"c" * 0x10000, b"r")


# ---------------------------------------------------------------- helpers


def read_frames(sock: socket.socket, reader: FrameReader, count: int, timeout_s: float = 10.0) -> list[bytes]:
    """`count` frame bodies from a socket (AssertionError when it closes or the deadline passes first)."""
    frames: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    while len(frames) < count:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            data = sock.recv(1 << 16)
        except socket.timeout:
            raise AssertionError(f"{len(frames)} of {count} frames within {timeout_s} s") from None
        assert data, f"the connection closed after {len(frames)} of {count} frames"
        frames.extend(reader.feed(data))
    return frames


def closed_by_peer(sock: socket.socket, timeout_s: float = 10.0) -> bool:
    """True once a read returns b"" (the other end closed); False when data or the deadline comes first.
    (ECONNRESET counts as closed too: Linux gives it instead of b"" when the other end closed with
    bytes of ours still unread, which happens only if the kernel split our one write.)"""
    sock.settimeout(timeout_s)
    try:
        return sock.recv(1 << 16) == b""
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def frontend_children() -> list[psutil.Process]:
    """This test process's live children that are front ends (`python -m master.frontends.process`)."""
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            if "master.frontends.process" in child.cmdline() and child.status() != psutil.STATUS_ZOMBIE:
                found.append(child)
        except psutil.NoSuchProcess:
            pass
    return found


def raw_channel_call(address: str, method: str, request: bytes, metadata: tuple, timeout_s: float = 10.0) -> bytes:
    """One unary call with the request and reply as bytes."""
    with grpc.insecure_channel(address) as channel:
        return channel.unary_unary(method)(request, metadata=metadata, timeout=timeout_s)


def list_runs_ok(address: str) -> pb.ListRunsResponse:
    """ListRuns on a fresh channel (a fresh connection: the kernel picks the front end)."""
    return pb.ListRunsResponse.FromString(raw_channel_call(address, f"/{CONTROL}/ListRuns", b"", ADMIN_AUTH))


# ---------------------------------------------------------------- the master's end of the relay


def test_a_hostile_relay_client_is_disconnected_and_nothing_of_it_is_served(master_server):
    """The relay trusts whoever can connect to its socket: it checks no token (the front ends did)
    and answers raw frames. That is acceptable because the socket lies in a directory of mode 0700
    owned by the master's user: only that user (who could as well read the master's token files or
    its database) can connect. What it must not do is serve a malformed stream."""
    h = master_server(frontends=2)
    w, c = clients(h)
    wid = register(w)
    c.start_run(600, profile="smoke")
    runs, workers = c.list_runs(), c.list_workers()
    run_ids = [r.config.run_id for r in runs.runs]
    assert len(run_ids) == 1
    directory = h._relay.directory
    path = os.path.join(directory, "master.sock")
    st_dir = os.stat(directory)
    assert stat.S_ISDIR(st_dir.st_mode) and stat.S_IMODE(st_dir.st_mode) == 0o700 and st_dir.st_uid == os.getuid()
    assert stat.S_ISSOCK(os.stat(path).st_mode)

    registration = pb.RegisterRequest(name="intruder", host="intruder", cpus=1).SerializeToString()
    register_frame = call_frame(99, REGISTER, b"", registration)
    too_long = U32.pack(MAX_CALL_FRAME + 1) + b"garbage" * 10
    unknown = U32.pack(12) + struct.pack(">QHH", 1, len(METHODS), 0)
    for bad in (too_long, unknown):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.connect(path)
            sock.sendall(bad + register_frame)  # a valid call behind the bad frame: never served
            assert closed_by_peer(sock), "the master kept a connection that sent a malformed frame"
        # the master serves on: through the port, and on the relay's other connections
        assert w.heartbeat(wid).worker_state == pb.WORKER_ALIVE
        assert [r.config.run_id for r in list_runs_ok(h.address).runs] == run_ids
    assert c.list_runs().runs == runs.runs
    assert [x.worker_id for x in c.list_workers().workers] == [x.worker_id for x in workers.workers] == [wid]
    assert len(h.store.list_workers()) == 1

    # a valid frame on a raw connection is answered: a reply frame, status 0, the call's id
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(path)
        sock.sendall(call_frame(7, LIST_RUNS, b"", b""))
        (frame,) = read_frames(sock, FrameReader(MAX_REPLY_FRAME), 1)
        call_id, status, payload = parse_reply(frame)
        assert (call_id, status) == (7, 0)
        assert [r.config.run_id for r in pb.ListRunsResponse.FromString(payload).runs] == run_ids
        # the control for the checks above: the Register frame they sent does register when it is served
        sock.sendall(register_frame)
        (frame,) = read_frames(sock, FrameReader(MAX_REPLY_FRAME), 1)
        call_id, status, payload = parse_reply(frame)
        assert (call_id, status) == (99, 0) and pb.RegisterResponse.FromString(payload).worker_id != wid
    assert len(c.list_workers().workers) == 2
    w.close()
    c.close()


# ---------------------------------------------------------------- the processes


def test_a_killed_front_end_is_restarted_on_the_same_port(master_server):
    h = master_server(frontends=2)
    port, before = h.port, h._relay.frontends.pids
    assert len(before) == 2 and h._relay.frontends.port == port
    victim = before[0]
    os.kill(victim, signal.SIGKILL)
    wait_for(lambda: victim not in h._relay.frontends.pids and len(h._relay.frontends.pids) == 2,
             timeout=15, what="the killed front end replaced")
    after = h._relay.frontends.pids
    assert after[1] == before[1] and after[0] not in before
    assert {p.pid for p in frontend_children()} == set(after)
    assert h.port == port and h._relay.frontends.port == port
    assert any(c.laddr.port == port and c.status == psutil.CONN_LISTEN
               for c in psutil.Process(after[0]).net_connections("tcp"))
    w, c = clients(h)
    wid = register(w)
    for _ in range(8):  # fresh connections, each to the front end the kernel picks
        assert list_runs_ok(h.address).total == 0
    assert w.heartbeat(wid).worker_state == pb.WORKER_ALIVE and c.list_workers().total == 1
    w.close()
    c.close()


def test_a_stopped_master_leaves_no_front_end_listener_or_relay_directory(master_server):
    h = master_server(frontends=2)
    w, _ = clients(h)
    wid = register(w)
    assert w.heartbeat(wid).worker_state == pb.WORKER_ALIVE  # over a Connect stream, closed before the stop
    w.close()
    procs = [psutil.Process(pid) for pid in h._relay.frontends.pids]
    directory, port = h._relay.directory, h.port
    assert all(p.is_running() for p in procs) and os.path.isdir(directory)
    h.stop()
    assert not any(p.is_running() for p in procs)
    assert frontend_children() == []
    assert not os.path.exists(directory)
    # No listener is left: a plain socket (SO_REUSEADDR, which only skips connections in TIME_WAIT;
    # no SO_REUSEPORT, which would share the port with a listener) binds the port and listens.
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))
        sock.listen()


@pytest.fixture
def relay_tmp(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A private, short temporary directory that tempfile (so relay_directory) uses for this test."""
    directory = Path(tempfile.mkdtemp(prefix="fet-"))
    monkeypatch.setattr(tempfile, "tempdir", str(directory))
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


def test_a_port_already_taken_fails_the_start_and_leaves_nothing(tmp_path, relay_tmp):
    from master.server import MasterConfig, serve

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", free_port()))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(OSError) as excinfo:
            serve(MasterConfig(f"sqlite:///{tmp_path / 'm.db'}", port=port, host="127.0.0.1", data_dir=tmp_path / "m",
                               worker_token=WORKER_TOKEN, admin_token=ADMIN_TOKEN, env={}, frontends=2))
        assert f"cannot listen on 127.0.0.1:{port}" in str(excinfo.value)
        # the socket that had the port still has it alone
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            taken.settimeout(5)
            taken.accept()[0].close()
    assert frontend_children() == []
    assert list(relay_tmp.iterdir()) == []  # the relay's directory is removed too


def test_a_master_stopped_while_it_restarts_a_front_end_leaves_none_running(master_server, monkeypatch):
    """The master's watcher restarts a dead front end in its own thread; a stop() that comes while
    the new process is starting must stop that one too, before the relay closes (a stray one
    would exit only because its relay closed: the check is made at that moment)."""
    import master.server as server_module

    alive_at_close: list[list[int]] = []
    close_relay = server_module.close_relay

    def checked_close(*args: Any) -> None:
        alive_at_close.append([p.pid for p in frontend_children()])
        close_relay(*args)

    monkeypatch.setattr(server_module, "close_relay", checked_close)
    h = master_server(frontends=2)
    dead, slow = h._relay.frontends.pids
    os.kill(slow, signal.SIGSTOP)  # a front end slow to stop: stop() waits for it (up to grace_s + 10 s)
    stopper = threading.Thread(target=h.stop, kwargs={"grace_s": 0})
    held: list[int] = []
    try:
        os.kill(dead, signal.SIGKILL)
        wait_for(lambda: {p.pid for p in frontend_children()} - {dead, slow}, timeout=10,
                 what="the replacement of the killed front end started")
        (replacement,) = [p for p in frontend_children() if p.pid not in (dead, slow)]
        replacement.suspend()  # held while starting, whatever this machine's speed, until stop() has begun
        held.append(replacement.pid)
        stopper.start()
        wait_for(h._relay.frontends._stopping.is_set, timeout=10, what="stop() took the front ends it stops")
        with contextlib.suppress(psutil.NoSuchProcess):  # the watcher may have given it up already
            replacement.resume()
        held.clear()

        def settled() -> bool:  # listening on the port (ready), or gone
            try:
                return any(c.laddr.port == h.port and c.status == psutil.CONN_LISTEN
                           for c in replacement.net_connections("tcp"))
            except psutil.NoSuchProcess:
                return True

        wait_for(settled, timeout=10, what="the replacement ready or gone")
    finally:
        for pid in held + [slow]:
            with contextlib.suppress(ProcessLookupError):  # stop() may have killed it already
                os.kill(pid, signal.SIGCONT)
        if stopper.ident is not None:
            stopper.join(timeout=30)
    assert not stopper.is_alive()
    left = frontend_children()
    try:
        assert alive_at_close == [[]], f"front ends still running when the relay closed: {alive_at_close}"
        assert left == [], f"front ends still running after stop(): {[p.pid for p in left]}"
    finally:
        for p in left:
            p.kill()
            p.wait(timeout=10)


def test_stop_gives_the_calls_in_flight_on_front_ends_its_grace_period(master_server):
    """stop(grace_s) lets calls in flight go on for up to grace_s (as the master's own gRPC server
    does): a Connect stream still answers 3 s into a 6 s grace period."""
    h = master_server(frontends=2)
    w, _ = clients(h)
    wid = register(w)
    heartbeat = pb.WorkerMessage(heartbeat=pb.HeartbeatRequest(worker_id=wid)).SerializeToString()
    metadata = WORKER_AUTH + ((CREDENTIAL_METADATA, w.credential(wid)),)
    q: queue.Queue[bytes | None] = queue.Queue()
    with grpc.insecure_channel(h.address) as channel:
        replies = channel.stream_stream(f"/{WORKER}/Connect")(iter(q.get, None), metadata=metadata, timeout=20)
        q.put(heartbeat)
        assert pb.MasterMessage.FromString(next(replies)).heartbeat.worker_state == pb.WORKER_ALIVE
        stopper = threading.Thread(target=h.stop, kwargs={"grace_s": 6.0})
        stopper.start()
        try:
            time.sleep(3.0)  # into the grace period (the assertion is the reply below)
            q.put(heartbeat)
            reply = pb.MasterMessage.FromString(next(replies))
            assert reply.heartbeat.worker_state == pb.WORKER_ALIVE
        finally:
            q.put(None)  # the worker ends its stream: the stop need not wait any longer
            stopper.join(timeout=30)
    assert not stopper.is_alive() and frontend_children() == []


# ---------------------------------------------------------------- Connect through a front end


def test_connect_through_a_front_end_answers_each_message_in_order(master_server):
    h = master_server(frontends=2)
    w, c = clients(h)
    wid = register(w)
    undecodable = b"\x0a\xff"  # field 1 (heartbeat), a length that runs past the end
    with pytest.raises(Exception):
        pb.WorkerMessage.FromString(undecodable)
    heartbeat = pb.WorkerMessage(heartbeat=pb.HeartbeatRequest(worker_id=wid)).SerializeToString()
    unregistered = pb.WorkerMessage(heartbeat=pb.HeartbeatRequest(worker_id=wid + 1000)).SerializeToString()
    metadata = WORKER_AUTH + ((CREDENTIAL_METADATA, w.credential(wid)),)

    q: queue.Queue[bytes | None] = queue.Queue()
    with grpc.insecure_channel(h.address) as channel:
        replies = channel.stream_stream(f"/{WORKER}/Connect")(iter(q.get, None), metadata=metadata, timeout=20)

        def answer(message: bytes) -> pb.MasterMessage:
            q.put(message)  # one message at a time: its reply comes before the next is sent
            return pb.MasterMessage.FromString(next(replies))

        first = answer(unregistered)
        assert first.WhichOneof("body") == "error" and first.error.code == grpc.StatusCode.NOT_FOUND.value[0]
        assert first.error.message
        second = answer(undecodable)
        assert second.WhichOneof("body") == "error"
        assert second.error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0] and "undecodable" in second.error.message
        third = answer(heartbeat)
        assert third.WhichOneof("body") == "heartbeat" and third.heartbeat.worker_state == pb.WORKER_ALIVE
        # the three at once: the replies still come one per message, in order
        for message in (unregistered, undecodable, heartbeat):
            q.put(message)
        kinds = [pb.MasterMessage.FromString(next(replies)) for _ in range(3)]
        assert [(m.WhichOneof("body"), m.error.code) for m in kinds] == [
            ("error", grpc.StatusCode.NOT_FOUND.value[0]), ("error", grpc.StatusCode.INVALID_ARGUMENT.value[0]),
            ("heartbeat", 0)]
        q.put(None)  # the worker ends the stream: it ends OK, having been open throughout
        assert list(replies) == [] and replies.code() == grpc.StatusCode.OK
    assert c.list_workers().total == 1
    w.close()
    c.close()


# ---------------------------------------------------------------- one front end against a relay served here


class FrontEndProcess:
    """`python -m master.frontends.process` started against a Unix socket this test listens on."""

    def __init__(self, directory: Path, **config: Any) -> None:
        self.path = str(directory / "relay.sock")
        self.config = config  # more (or other) configuration than the defaults below
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.proc: subprocess.Popen[bytes] | None = None
        self.conn: socket.socket | None = None
        self.reader = FrameReader(MAX_CALL_FRAME)
        self.address = ""

    def start(self) -> None:
        self.listener.bind(self.path)
        self.listener.listen(1)
        self.proc = subprocess.Popen([sys.executable, "-m", "master.frontends.process"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, env=_child_env(), cwd=str(ROOT))
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({  # the configuration master/frontends/process.py documents
            "relay": self.path, "host": "127.0.0.1", "port": 0, "worker_token": WORKER_TOKEN,
            "admin_token": ADMIN_TOKEN, "tls_cert": None, "tls_key": None, "grace_s": 0,
            "methods_digest": METHODS_DIGEST, **self.config,
        }).encode() + b"\n")  # one line; standard input stays open (its end: the master is gone)
        self.proc.stdin.flush()
        self.listener.settimeout(30)
        self.conn, _ = self.listener.accept()  # it reaches the relay before it listens
        ready, _, _ = select.select([self.proc.stdout], [], [], 30)
        line = self.proc.stdout.readline().decode().strip() if ready else ""
        assert line.startswith("ready "), f"front end answered {line!r}"
        self.address = f"127.0.0.1:{int(line.split()[1])}"

    def calls(self, count: int) -> list[tuple[int, int, bytes, bytes]]:
        """The next `count` calls the front end relayed: (call id, method, credential, request)."""
        assert self.conn is not None
        calls: list[tuple[int, int, bytes, bytes]] = []
        while len(calls) < count:  # the front end's health pings (every few seconds) are not calls
            calls += [call for call in map(parse_call, read_frames(self.conn, self.reader, 1)) if call[1] != PING]
        return calls

    def close(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            for pipe in (self.proc.stdout, self.proc.stdin):
                if pipe is not None:
                    pipe.close()
        if self.conn is not None:
            self.conn.close()
        self.listener.close()


@contextlib.contextmanager
def started_frontend(**config: Any) -> Iterator[FrontEndProcess]:
    directory = Path(tempfile.mkdtemp(prefix="fe-"))  # short: a Unix socket's path has at most 107 bytes
    fe = FrontEndProcess(directory, **config)
    try:
        fe.start()
        yield fe
    finally:
        fe.close()
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def lone_frontend() -> Iterator[FrontEndProcess]:
    with started_frontend() as fe:
        yield fe


def test_a_front_end_passes_requests_replies_and_statuses_through(lone_frontend):
    fe = lone_frontend
    with grpc.insecure_channel(fe.address) as channel:
        list_runs = channel.unary_unary(f"/{CONTROL}/ListRuns")
        submit = channel.unary_unary(f"/{WORKER}/SubmitModel")

        # the request as sent, the reply as the relay gives it: bytes neither side parses
        future = list_runs.future(b"\x08\x05", metadata=ADMIN_AUTH, timeout=10)
        ((call_id, method, credential, request),) = fe.calls(1)
        assert (method, credential, request) == (LIST_RUNS, b"", b"\x08\x05")
        fe.conn.sendall(reply_frame(call_id, 0, b"\xde\xad\xbe\xef"))
        assert future.result() == b"\xde\xad\xbe\xef"

        # the worker's credential travels with its call; the relay's status and message end it
        future = submit.future(b"", metadata=WORKER_AUTH + ((CREDENTIAL_METADATA, "secret-1"),), timeout=10)
        ((call_id, method, credential, _),) = fe.calls(1)
        assert (method, credential) == (METHOD_INDEX[(WORKER, "SubmitModel")], b"secret-1")
        fe.conn.sendall(reply_frame(call_id, grpc.StatusCode.PERMISSION_DENIED.value[0], "not yours é".encode()))
        with pytest.raises(grpc.RpcError) as excinfo:
            future.result()
        assert excinfo.value.code() == grpc.StatusCode.PERMISSION_DENIED and excinfo.value.details() == "not yours é"
        future = list_runs.future(b"", metadata=ADMIN_AUTH, timeout=10)
        ((call_id, _, _, _),) = fe.calls(1)
        fe.conn.sendall(reply_frame(call_id, 99, b"no such status"))  # not a gRPC status: INTERNAL
        with pytest.raises(grpc.RpcError) as excinfo:
            future.result()
        assert excinfo.value.code() == grpc.StatusCode.INTERNAL

        # replies are matched by call id, not by order
        a = list_runs.future(b"a", metadata=ADMIN_AUTH, timeout=10)
        b = list_runs.future(b"b", metadata=ADMIN_AUTH, timeout=10)
        calls = {request: call_id for call_id, _, _, request in fe.calls(2)}
        fe.conn.sendall(reply_frame(calls[b"b"], 0, b"B") + reply_frame(calls[b"a"], 0, b"A"))
        assert (a.result(), b.result()) == (b"A", b"B")

        # a wrong token is refused by the front end: the call never reaches the relay
        with pytest.raises(grpc.RpcError) as excinfo:
            list_runs(b"refused", metadata=WORKER_AUTH, timeout=10)
        assert excinfo.value.code() == grpc.StatusCode.UNAUTHENTICATED
        future = list_runs.future(b"next", metadata=ADMIN_AUTH, timeout=10)
        ((call_id, _, _, request),) = fe.calls(1)
        assert request == b"next"  # the first frame after the refused call is the next call's
        fe.conn.sendall(reply_frame(call_id, 0, b""))
        assert future.result() == b""
    assert fe.proc.poll() is None


def test_a_front_end_whose_relay_closes_answers_unavailable_and_exits(lone_frontend):
    fe = lone_frontend
    with grpc.insecure_channel(fe.address) as channel:
        unary = channel.unary_unary(f"/{CONTROL}/ListRuns").future(b"", metadata=ADMIN_AUTH, timeout=10)
        q: queue.Queue[bytes | None] = queue.Queue()
        stream = channel.stream_stream(f"/{WORKER}/Connect")(iter(q.get, None), metadata=WORKER_AUTH, timeout=10)
        q.put(b"")
        calls = fe.calls(2)  # both calls wait on the relay
        assert sorted(method for _, method, _, _ in calls) == sorted([LIST_RUNS, CONNECT])
        fe.conn.shutdown(socket.SHUT_RDWR)
        fe.conn.close()  # the master is gone
        with pytest.raises(grpc.RpcError) as excinfo:
            unary.result()
        assert excinfo.value.code() == grpc.StatusCode.UNAVAILABLE, excinfo.value
        with pytest.raises(grpc.RpcError) as excinfo:
            next(stream)
        assert excinfo.value.code() == grpc.StatusCode.UNAVAILABLE, excinfo.value
        q.put(None)
    assert fe.proc.wait(timeout=10) == 1


# ---------------------------------------------------------------- what the review asked of the front ends


def test_a_front_end_of_other_code_than_its_masters_refuses_to_start(tmp_path):
    """The method numbers on the wire are the master's: a front end whose API differs (code
    changed under a running master) would check one method's token and have the master run
    another, so it says why and exits with 2 before it reaches the relay."""
    proc = subprocess.run([sys.executable, "-m", "master.frontends.process"], cwd=str(ROOT), env=_child_env(), timeout=60,
                          capture_output=True, input=json.dumps({
                              "relay": str(tmp_path / "none.sock"), "host": "127.0.0.1", "port": 0,
                              "worker_token": WORKER_TOKEN, "admin_token": ADMIN_TOKEN, "tls_cert": None,
                              "tls_key": None, "methods_digest": "0" * 64}).encode() + b"\n")
    assert proc.returncode == 2
    assert proc.stdout.decode().startswith("error this front end's API differs from its master's")


def test_a_front_ends_health_follows_the_masters_answers_to_its_pings():
    """SERVING while the relay answers the front end's pings in time, NOT_SERVING when it does
    not (a hung master), SERVING again once it answers."""
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    with started_frontend(ping_s=0.3) as fe, grpc.insecure_channel(fe.address) as channel:
        health = health_pb2_grpc.HealthStub(channel)

        def status() -> int:
            return health.Check(health_pb2.HealthCheckRequest(service=WORKER), timeout=5).status

        assert status() == health_pb2.HealthCheckResponse.SERVING
        wait_for(lambda: status() == health_pb2.HealthCheckResponse.NOT_SERVING, timeout=10,
                 what="NOT_SERVING while the relay does not answer pings")

        def answer_pings() -> bool:
            for call_id, method, _, _ in map(parse_call, read_frames(fe.conn, fe.reader, 1)):
                assert method == PING
                fe.conn.sendall(reply_frame(call_id, 0, b""))
            return status() == health_pb2.HealthCheckResponse.SERVING

        wait_for(answer_pings, timeout=10, what="SERVING again once pings are answered")


def test_an_oversized_reply_is_refused_alone_and_the_front_end_lives(master_server, monkeypatch):
    """A reply above gRPC's reply limit is RESOURCE_EXHAUSTED for its caller (as the master's own
    server answers), not a frame the front end refuses with every call it relays."""
    import master.frontends.master_end as master_end

    h = master_server(frontends=2)
    w, c = clients(h)
    register(w)
    pids = h._relay.frontends.pids
    monkeypatch.setattr(master_end, "MAX_MESSAGE_BYTES", 16)  # any worker listing is larger
    with pytest.raises(ApiError) as excinfo:
        c.list_workers()
    assert excinfo.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "exceeds the limit of 16" in excinfo.value.details
    monkeypatch.undo()
    assert len(c.list_workers().workers) == 1
    assert h._relay.frontends.pids == pids and all(psutil.pid_exists(p) for p in pids)


def test_a_second_master_cannot_share_the_port_of_one_served_by_front_ends(master_server):
    """Front ends listen with SO_REUSEPORT, which lets in any other socket of this user that sets
    it; a second master (with front ends or without) is refused the port instead."""
    first = master_server(frontends=2)
    for frontends in (2, 0):
        with pytest.raises(OSError, match=f"cannot listen on 127.0.0.1:{first.port}"):
            master_server(port=first.port, frontends=frontends)
    w, _ = clients(first)
    assert register(w) > 0  # the first is whole


def test_front_ends_run_in_their_package_without_the_masters_secrets(master_server, tmp_path, monkeypatch):
    """`python -m` puts the working directory first on the import path: a front end started in a
    directory anyone may write to (here one holding a grpc.py) must not import from it. Nor does
    it hold the database URL or the tokens in its environment (it parses what the network sends)."""
    (tmp_path / "grpc.py").write_text("raise SystemExit('imported from the working directory')\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AIPERF_DB", "postgresql+psycopg://aiperf:db-secret@db/aiperf")
    monkeypatch.setenv("AIPERF_ADMIN_TOKEN", "admin-secret")
    h = master_server(frontends=1)
    (pid,) = h._relay.frontends.pids
    environ = Path(f"/proc/{pid}/environ").read_bytes()
    assert b"db-secret" not in environ and b"admin-secret" not in environ
    assert Path(psutil.Process(pid).cwd()) == ROOT
    w, _ = clients(h)
    assert register(w) > 0


def test_a_front_end_that_keeps_dying_is_restarted_later_each_time(master_server, caplog):
    """A front end that dies soon after its start is restarted after 1 s, then 2 s, ...: a crash
    loop does not spend the master's cores on starting processes."""
    h = master_server(frontends=1)
    for expected_delay in ("1", "2"):
        (pid,) = h._relay.frontends.pids
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: h._relay.frontends.pids != [pid], timeout=20, what="the front end restarted")
        assert f"restart_in_s={expected_delay}" in caplog.text
    w, _ = clients(h)
    assert register(w) > 0


def test_a_stop_does_not_wait_for_a_front_end_hanging_in_its_start(master_server):
    """The watcher waits up to a minute for a restarted front end's `ready`; a stop that comes
    meanwhile makes it give up at once (the master's stop must not take a minute)."""
    h = master_server(frontends=1)
    (dead,) = h._relay.frontends.pids
    os.kill(dead, signal.SIGKILL)
    wait_for(lambda: [p for p in frontend_children() if p.pid != dead], timeout=10,
             what="the replacement of the killed front end started")
    (replacement,) = [p for p in frontend_children() if p.pid != dead]
    replacement.suspend()  # hangs in its start (it has, on this machine, not said `ready` yet)
    started = time.monotonic()
    h.stop(grace_s=0)
    assert time.monotonic() - started < 10
    assert frontend_children() == []
