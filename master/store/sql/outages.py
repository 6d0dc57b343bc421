"""Database failures that are outages, not bugs: the server gone or restarting, the
connection lost, SQLite's file locked past its busy timeout, the disk full.

`outage_error` turns such a SQLAlchemy error into the store's `Unavailable` (the
servicers answer UNAVAILABLE: try again) or `StorageFull` (RESOURCE_EXHAUSTED, the
database full); any other error stays what it is (a bug, INTERNAL). `guard` wraps
every public method of the store so that no caller sees the driver's exception, and
`OutageLog` logs one line when an outage starts (its cause) and one when the
database answers again, instead of a traceback per call.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from typing import Any, Callable, TypeVar

from sqlalchemy.exc import DBAPIError, DisconnectionError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from master.store.errors import StorageFull, StoreError, Unavailable
from master.store.sql.urls import scrub

log = logging.getLogger(__name__)

C = TypeVar("C")

# SQLite's messages (sqlite3 gives no code on older Pythons): full, and busy or unreadable
_SQLITE_FULL = ("database or disk is full",)
# ("unable to open database file" is not one: a wrong path, which does not pass)
_SQLITE_UNAVAILABLE = ("database is locked", "database table is locked", "disk i/o error")


def _cause(exc: BaseException, url: str) -> str:
    """The first line of the driver's message, password masked."""
    orig = getattr(exc, "orig", None) or exc
    lines = str(orig).strip().splitlines() or [type(orig).__name__]
    return scrub(lines[0].strip(), url)[:300]


def outage_error(exc: BaseException, url: str = "") -> StoreError | None:
    """Unavailable or StorageFull for an error that is the database's outage; else None."""
    cause = _cause(exc, url)
    if isinstance(exc, (PoolTimeout, DisconnectionError)):
        return Unavailable(f"database unavailable: {cause}")
    if not isinstance(exc, DBAPIError):
        return None
    orig = exc.orig
    if type(orig).__module__.startswith("sqlite3"):
        text = cause.lower()
        if any(m in text for m in _SQLITE_FULL):
            return StorageFull(f"database full: {cause}")
        if any(m in text for m in _SQLITE_UNAVAILABLE):
            return Unavailable(f"database unavailable: {cause}")
        return None
    sqlstate = getattr(orig, "sqlstate", None) or ""
    if sqlstate.startswith("53"):  # insufficient resources: disk full (53100), out of memory, connections
        return StorageFull(f"database full: {cause}")
    # 08: connection exceptions; 57P01-03: the server shutting down or starting; none: no answer
    if sqlstate.startswith("08") or sqlstate in ("57P01", "57P02", "57P03") or (
            not sqlstate and (exc.connection_invalidated or isinstance(exc, (OperationalError, InterfaceError)))):
        return Unavailable(f"database unavailable: {cause}")
    return None


SETTLE_S = 2.0  # an outage is over once calls succeed this long without a failure between


class OutageLog:
    """One line when the database stops answering (with its cause), one when it answers again.
    On a full disk some writes still succeed (SQLite reuses free pages): an outage ends only
    after SETTLE_S of calls that succeed, so that it is logged once, not once per flap."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._since: float | None = None
        self._succeeding_since: float | None = None
        self._full = False  # the outage is a full disk: only a write that succeeds ends it
        self.failed_calls = 0

    @property
    def down(self) -> bool:
        return self._since is not None

    def failed(self, error: StoreError) -> None:
        with self._lock:
            self.failed_calls += 1
            self._succeeding_since = None
            if self._since is not None:
                return
            self._since = time.monotonic()
            self._full = isinstance(error, StorageFull)
        log.error("event=database_unavailable kind=%s cause=%s", type(error).__name__, error)

    def answered(self, wrote: bool) -> None:
        """A call succeeded (`wrote`: one that writes); on a full disk, reads still succeed."""
        if self._since is None or (self._full and not wrote):  # the hot path: one attribute read
            return
        now = time.monotonic()
        with self._lock:
            if self._succeeding_since is None:
                self._succeeding_since = now
            if now - self._succeeding_since < SETTLE_S:
                return
            since, self._since, self._succeeding_since = self._since, None, None
            failed, self.failed_calls = self.failed_calls, 0
        if since is not None:
            log.warning("event=database_back after_s=%.1f failed_calls=%d", time.monotonic() - since, failed)


def guarded(fn: Callable[..., Any], writes: bool) -> Callable[..., Any]:
    """A store method whose outage errors are the store's (see outage_error)."""
    @functools.wraps(fn)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            out = fn(self, *args, **kwargs)
        except (Unavailable, StorageFull):
            raise  # already counted where it was raised
        except StoreError:
            self.outage_log.answered(writes)  # the database answered; a rule refused
            raise
        except Exception as exc:
            error = outage_error(exc, self.url)
            if error is None:
                raise
            self.outage_log.failed(error)
            raise error from exc
        self.outage_log.answered(writes)
        return out

    return call


# SqlStore's methods that write: only their success ends a full-disk outage (reads still succeed)
STORE_WRITES = frozenset({
    "create_run", "start_run", "stop_run", "finish_run", "record_master_start", "record_master_alive",
    "register_worker", "set_credential_hash", "record_heartbeats", "mark_workers_lost", "join_run", "record_dataset",
    "add_implausible_reports", "add_model", "finish_model", "mark_checkpoints_deleted", "restore_checkpoints",
    "add_progress", "add_resource_samples", "add_audit",
})


def guard(writes: frozenset[str]) -> Callable[[type[C]], type[C]]:
    """A class decorator: every public method of the class and its bases' (but `close`)
    guarded; `writes` names those that write (they alone end a full-disk outage)."""
    def decorate(cls: type[C]) -> type[C]:
        for klass in reversed(cls.__mro__):
            if klass is object or not klass.__module__.startswith("master.store.sql"):
                continue
            for name, value in vars(klass).items():
                if not name.startswith("_") and name != "close" and callable(value) and not isinstance(value, type):
                    setattr(cls, name, guarded(value, name in writes))
        return cls

    return decorate


__all__ = ["OutageLog", "STORE_WRITES", "guard", "outage_error"]
