"""A database outage is "unavailable", not "a bug": a throwaway PostgreSQL cluster (started by
the test, never the shared server) stopped and started again under a live master, and SQLite
on a file system filled to the last byte. Calls get UNAVAILABLE (RESOURCE_EXHAUSTED "database
full" for the disk), never INTERNAL; the cause is logged once per outage, without tracebacks;
`aiperf status` and `aiperf start` exit 3; the worker's outbox keeps its reports and sends
them once the database is back; `master serve` on a full disk exits 3 naming the cause;
nothing acknowledged is lost."""

from __future__ import annotations

import logging
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import grpc
import pytest

from aiperf.api.client import Accelerator, ApiError, ControlClient, WorkerClient
from aiperf.flops import count_flops
from benchmarks.throwaway_db import ThrowawayPostgres, can_mount, drain, fill, small_filesystem
from master.store.sql.outages import SETTLE_S
from tests.support.cli_runs import aiperf, error_line
from tests.support.master_clients import HP
from tests.support.ports import free_port
from worker import outbox as retries
from worker.outbox import Outbox


@pytest.fixture
def fast_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    import tenacity

    monkeypatch.setattr(retries, "RETRY_WAIT", tenacity.wait_fixed(0.2))


def _code(fn: Any, *args: Any, **kwargs: Any) -> grpc.StatusCode:
    try:
        fn(*args, **kwargs)
    except ApiError as exc:
        return exc.code
    return grpc.StatusCode.OK


def _setup(h: Any, graph: Any) -> tuple[WorkerClient, ControlClient, int, int, Any]:
    w = WorkerClient(h.address, h.worker_token, retries=0)
    c = ControlClient(h.address, h.admin_token, retries=0)
    wid = w.register(name="w", host="h", accelerators=[Accelerator("X", 1 << 30, 1e15)]).worker_id
    c.start_run(3600)
    mid = w.submit_model(wid, graph.to_json(), graph.hash(), 0, 1, HP).model_id
    return w, c, wid, mid, count_flops(graph)


def _master_records(caplog: Any) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name.startswith("master")]


@pytest.mark.skipif(not ThrowawayPostgres.available(), reason="no initdb/pg_ctl (AIPERF_PG_BIN)")
def test_postgres_stopped_and_started_again_is_unavailable_then_nothing_lost(
        master_server: Any, small_graph: Any, caplog: Any, fast_retries: None) -> None:
    pg = ThrowawayPostgres()
    try:
        pg.start()
        h = master_server(pg.url)
        w, c, wid, mid, fc = _setup(h, small_graph)
        acked = [w.report_progress(wid, mid, seq, 10, 0, 1, fc.ops(10, 0)) for seq in (1, 2)]
        caplog.clear()
        caplog.set_level(logging.INFO)
        pg.stop("fast")
        codes = {
            "report": _code(w.report_progress, wid, mid, 3, 10, 0, 1, fc.ops(10, 0)),
            "register": _code(w.register, name="w2", host="h2"),
            "submit": _code(w.submit_model, wid, small_graph.to_json(), small_graph.hash(), 0, 2, HP),
            "status": _code(c.run_status),
            "models": _code(c.list_models),
        }
        assert set(codes.values()) == {grpc.StatusCode.UNAVAILABLE}, codes
        status = aiperf("status", "--master", h.address, "--admin-token", h.admin_token)
        assert status.returncode == 3 and "database unavailable" in error_line(status)
        box = Outbox("outage")
        box.put("report 4", lambda: acked.append(w.report_progress(wid, mid, 4, 10, 0, 1, fc.ops(10, 0))))
        assert not box.flush(2.0)  # held, retried
        pg.start()
        assert box.flush(30.0) and not box.dropped
        box.close()
        acked.append(w.report_progress(wid, mid, 3, 10, 0, 1, fc.ops(10, 0)))
        time.sleep(SETTLE_S + 0.1)  # calls that succeed for this long end the outage
        [m] = c.list_models().models
        assert m.images_trained == 10 * len(acked) == 40
        records = _master_records(caplog)
        assert [r.getMessage().split()[0] for r in records if "database_unavailable" in r.getMessage()] == [
            "event=database_unavailable"]
        assert any("event=database_back" in r.getMessage() for r in records)
        assert not [r for r in records if r.exc_info], "no traceback for an outage"
        assert not [r for r in records if "INTERNAL" in r.getMessage() or "internal_error" in r.getMessage()]
    finally:
        pg.close()


@pytest.mark.skipif(not can_mount(), reason="mounting a tmpfs is not permitted here")
def test_sqlite_on_a_full_file_system(master_server: Any, small_graph: Any, caplog: Any, fast_retries: None,
                                      tmp_path: Path) -> None:
    with small_filesystem(8) as fs:
        url = f"sqlite:///{fs / 'master.db'}"
        h = master_server(url)
        w, c, wid, mid, fc = _setup(h, small_graph)
        w.report_progress(wid, mid, 1, 10, 0, 1, fc.ops(10, 0))
        caplog.clear()
        caplog.set_level(logging.INFO)
        filler = fill(fs)
        seq, codes = 1, set()
        for _ in range(200):  # until SQLite's free pages and WAL are used up
            seq += 1
            code = _code(w.report_progress, wid, mid, seq, 10, 0, 1, fc.ops(10, 0))
            codes.add(code)
            if code != grpc.StatusCode.OK:
                break
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED, codes
        assert grpc.StatusCode.INTERNAL not in codes and grpc.StatusCode.UNKNOWN not in codes
        assert _code(w.register, name="w2", host="h2") in (grpc.StatusCode.RESOURCE_EXHAUSTED,
                                                            grpc.StatusCode.UNAVAILABLE)
        start = aiperf("stop", "--master", h.address, "--admin-token", h.admin_token)
        assert start.returncode == 3 and "database full" in error_line(start)
        box = Outbox("full")
        box.put("report", lambda: w.report_progress(wid, mid, seq, 10, 0, 1, fc.ops(10, 0)))
        assert not box.flush(2.0)
        drain(filler)
        assert box.flush(30.0) and not box.dropped
        box.close()
        [m] = c.list_models().models
        assert m.images_trained == 10 * seq
        records = _master_records(caplog)
        assert sum("event=database_unavailable" in r.getMessage() for r in records) == 1
        assert not [r for r in records if r.exc_info]
        h.stop(grace_s=0)
        filler = fill(fs)
        port = free_port()
        proc = subprocess.run([sys.executable, "-m", "aiperf_cli", "master", "serve", "--db", url, "--port",
                               str(port), "--host", "127.0.0.1", "--data-dir", str(tmp_path / "d")],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 3, proc.stderr
        line = proc.stderr.strip().splitlines()[-1]
        assert line.startswith("aiperf: error: database ") and "try again later" in line, proc.stderr
        drain(filler)


def _wrapped(orig: BaseException) -> Exception:
    from sqlalchemy.exc import DBAPIError

    return DBAPIError.instance("SELECT 1", {}, orig, type(orig))


@pytest.mark.parametrize("orig, kind", [
    (__import__("sqlite3").OperationalError("database or disk is full"), "StorageFull"),
    (__import__("sqlite3").OperationalError("database is locked"), "Unavailable"),
    (__import__("sqlite3").OperationalError("disk I/O error"), "Unavailable"),
    (__import__("sqlite3").OperationalError("no such table: runs"), None),  # a bug, not an outage
    (__import__("sqlite3").OperationalError("unable to open database file"), None),  # a wrong path
    (__import__("sqlite3").IntegrityError("UNIQUE constraint failed: workers.name"), None),
    (__import__("psycopg").errors.DiskFull("could not extend file"), "StorageFull"),
    (__import__("psycopg").errors.AdminShutdown("terminating connection"), "Unavailable"),
    (__import__("psycopg").errors.CannotConnectNow("the database system is starting up"), "Unavailable"),
    (__import__("psycopg").OperationalError("connection failed: Connection refused"), "Unavailable"),
    (__import__("psycopg").errors.UniqueViolation("duplicate key"), None),
    (__import__("psycopg").errors.NumericValueOutOfRange("bigint out of range"), None),
])
def test_what_is_an_outage_and_what_is_a_bug(orig: BaseException, kind: str | None) -> None:
    from master.store.sql.outages import outage_error

    error = outage_error(_wrapped(orig), "postgresql+psycopg://u:secret@h/db")
    assert (type(error).__name__ if error is not None else None) == kind
    assert error is None or "secret" not in str(error)
