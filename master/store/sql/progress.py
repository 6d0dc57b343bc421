"""The SQL of the master's hot path: progress writes and heartbeat flushes, and exact
sums of 64-bit columns (master/store/progress_rules.py has the overflow rule of a report).

Built once per engine (constructing SQLAlchemy statements costs more than
running them here) and run on the DBAPI cursor: SQLAlchemy's per-statement
work costs several times the SQL itself on a batch of a few reports. Only
plain columns (ints, floats, strings, booleans) are bound, which need no
SQLAlchemy type processing. Used by master/store/sql/sql_store.py only.
"""

from __future__ import annotations

import contextlib
import sqlite3
from typing import Any, Iterator, Sequence

from sqlalchemy import Engine, bindparam, func, insert, select, update

from aiperf.states import WorkerState
from master.store.sql.tables import ModelRow, ProgressRow, RunRow, WorkerRow

SUM_SPLIT = 2**32  # exact sums of 64-bit columns: high and low 32 bits summed apart (see exact_sums)
MULTIROW_CHUNK = 500  # rows per multi-row statement (SQLite allows 32,766 parameters)

PROGRESS_COLUMNS = ("run_id", "model_id", "worker_id", "seq", "t", "epoch", "images_trained",
                    "images_validated", "accuracy", "worker_flops", "master_flops", "flops_mismatch",
                    "weights_sha256")
# parameter name -> column of the model UPDATE after a batch (the first is the key)
MODEL_UPDATE = (("mid", ModelRow.id), ("new_state", ModelRow.state),
                ("new_started_at", ModelRow.started_at), ("new_trained", ModelRow.images_trained),
                ("new_validated", ModelRow.images_validated), ("new_epochs", ModelRow.epochs),
                ("new_best", ModelRow.best_accuracy))
BEAT_UPDATE = (("wid", WorkerRow.id), ("beat", WorkerRow.last_heartbeat))  # and state = 'alive'

DriverStatement = tuple[str, tuple[str, ...] | None]  # SQL text, parameter order when positional


class ProgressSql:
    """Statements of the progress writes for one engine."""

    def __init__(self, engine: Engine) -> None:
        self._dialect = engine.dialect
        sqlite = engine.dialect.name == "sqlite"
        q = (
            select(ModelRow.id, ModelRow.run_id, ModelRow.worker_id, ModelRow.state, ModelRow.started_at,
                   ModelRow.images_trained, ModelRow.images_validated, ModelRow.epochs, ModelRow.best_accuracy,
                   RunRow.state)
            .join(RunRow, RunRow.id == ModelRow.run_id)
            .where(ModelRow.id.in_(bindparam("ids", expanding=True)))
        )
        self.models = q if sqlite else q.with_for_update(of=ModelRow)  # the reported models and their runs
        # two IN lists, not a row-value IN: SQLite searches the unique index only for this form
        self.seen = select(  # reports already recorded, by (model_id, seq)
            ProgressRow.model_id, ProgressRow.seq, ProgressRow.master_flops, ProgressRow.flops_mismatch
        ).where(
            ProgressRow.model_id.in_(bindparam("mids", expanding=True)),
            ProgressRow.seq.in_(bindparam("seqs", expanding=True)),
        )
        self.max_seq = (  # the highest seq recorded per model
            select(ProgressRow.model_id, func.max(ProgressRow.seq))
            .where(ProgressRow.model_id.in_(bindparam("mids", expanding=True)))
            .group_by(ProgressRow.model_id)
        )
        self._insert_progress = self._driver_statement(
            insert(ProgressRow).values({c: bindparam(c) for c in PROGRESS_COLUMNS}))
        self._update_model = self._driver_statement(update(ModelRow).where(ModelRow.id == bindparam("mid")).values(
            {col.key: bindparam(name) for name, col in MODEL_UPDATE[1:]}))
        self._update_beat = self._driver_statement(update(WorkerRow).where(WorkerRow.id == bindparam("wid")).values(
            last_heartbeat=bindparam("beat"), state=WorkerState.ALIVE))
        # Multi-row forms of the two progress statements (one INSERT ... VALUES (..), (..) and one
        # UPDATE ... FROM (VALUES ..)): a batch then costs two statement executions, not two
        # per report. That matters most for SQLite, whose driver releases and re-takes the
        # GIL on every row of an executemany, each time waiting for the busy gRPC thread.
        placeholder = {"qmark": "?", "format": "%s", "pyformat": "%s"}.get(engine.dialect.paramstyle)
        self._multirow = placeholder is not None and (not sqlite or sqlite3.sqlite_version_info >= (3, 33))
        self._build_multirow(placeholder or "", sqlite)

    def _build_multirow(self, placeholder: str, sqlite: bool) -> None:
        """The SQL around the VALUES rows, and one row, built once."""
        self._insert_head = f"INSERT INTO {ProgressRow.__tablename__} ({', '.join(PROGRESS_COLUMNS)}) VALUES "
        self._insert_row = "(" + ", ".join([placeholder] * len(PROGRESS_COLUMNS)) + ")"
        self._update = self._update_from_values(ModelRow.__tablename__, MODEL_UPDATE, placeholder, sqlite)
        self._update_keys = tuple(name for name, _ in MODEL_UPDATE)
        self._beats = self._update_from_values(WorkerRow.__tablename__, BEAT_UPDATE, placeholder, sqlite,
                                               extra=f"state = '{WorkerState.ALIVE}'")

    def _update_from_values(self, table: str, columns: tuple[tuple[str, Any], ...], placeholder: str,
                            sqlite: bool, extra: str = "") -> tuple[str, str, str]:
        """`UPDATE table SET ... FROM (VALUES <rows>) AS v WHERE table.id = v.column1`, as
        (head, one row, tail): columns[0] is the key, the others are set from the row."""
        if sqlite:
            row = "(" + ", ".join([placeholder] * len(columns)) + ")"
        else:  # PostgreSQL types a VALUES list from its values; a column of NULLs would be text
            row = "(" + ", ".join(f"CAST({placeholder} AS {col.type.compile(dialect=self._dialect)})"
                                  for _, col in columns) + ")"
        sets = [f"{col.key} = v.column{i + 1}" for i, (_, col) in enumerate(columns) if i > 0]
        head = f"UPDATE {table} SET {', '.join(sets + ([extra] if extra else []))} FROM (VALUES "
        return head, row, f") AS v WHERE {table}.id = v.column1"

    @staticmethod
    def _execute_multirow(cursor: Any, sql: tuple[str, str, str], rows: Sequence[Sequence[Any]]) -> None:
        """Run a multi-row statement (head, one row, tail) over rows, MULTIROW_CHUNK rows at a time."""
        head, one, tail = sql
        for k in range(0, len(rows), MULTIROW_CHUNK):
            chunk = rows[k:k + MULTIROW_CHUNK]
            cursor.execute(head + ", ".join([one] * len(chunk)) + tail, [v for r in chunk for v in r])

    def _driver_statement(self, stmt: Any) -> DriverStatement:
        """SQL text in the driver's own parameter style, and the parameter order when positional."""
        compiled = stmt.compile(dialect=self._dialect)
        order = tuple(compiled.positiontup) if compiled.positional and compiled.positiontup else None
        # PostgreSQL's compiler adds RETURNING <primary key> to a single-row INSERT; nothing reads it
        return str(compiled).split(" RETURNING ")[0], order

    def write_progress(self, conn: Any, rows: list[dict[str, Any]], updates: list[dict[str, Any]]) -> None:
        """INSERT the reports (PROGRESS_COLUMNS) and UPDATE their models (MODEL_UPDATE keys)."""
        if not self._multirow:
            _executemany(conn, [(*self._insert_progress, rows), (*self._update_model, updates)])
            return
        with _cursor(conn) as cursor:
            self._execute_multirow(cursor, (self._insert_head, self._insert_row, ""),
                                   [[r[c] for c in PROGRESS_COLUMNS] for r in rows])
            self._execute_multirow(cursor, self._update, [[u[c] for c in self._update_keys] for u in updates])

    def write_heartbeats(self, conn: Any, beats: list[tuple[int, float]]) -> None:
        """Last-heartbeat times (worker id, time); each worker becomes alive."""
        if not self._multirow:  # the literal state is bound as a parameter named after its column
            _executemany(conn, [(*self._update_beat, [{"wid": wid, "beat": t, "state": WorkerState.ALIVE}
                                                      for wid, t in beats])])
            return
        with _cursor(conn) as cursor:  # one statement: an executemany's per-row work holds the GIL
            self._execute_multirow(cursor, self._beats, beats)


def exact_sums(*columns: Any) -> list[Any]:
    """SQL sums of non-negative 64-bit columns that cannot overflow: SQLite's SUM raises on
    overflow, and a run's images may exceed 2^63 in all. Each column is summed as its high
    and low 32 bits apart (each sum fits 64 bits up to 2^31 rows); `combine_sums` adds them up."""
    return [e for c in columns for e in (func.sum(c // SUM_SPLIT), func.sum(c % SUM_SPLIT))]


def combine_sums(row: Sequence[Any]) -> list[int]:
    """The exact totals of `exact_sums`, one per column, as Python ints."""
    return [int(row[k] or 0) * SUM_SPLIT + int(row[k + 1] or 0) for k in range(0, len(row), 2)]


@contextlib.contextmanager
def _cursor(conn: Any) -> Iterator[Any]:
    """The DBAPI cursor of `conn`; with psycopg, in one pipeline: one round trip for all statements."""
    raw = conn.connection.dbapi_connection
    pipeline = raw.pipeline() if hasattr(raw, "pipeline") else contextlib.nullcontext()
    cursor = raw.cursor()
    try:
        with pipeline:
            yield cursor
    finally:
        cursor.close()


def _executemany(conn: Any, statements: list[tuple[str, tuple[str, ...] | None, list[dict[str, Any]]]]) -> None:
    """Run driver statements (SQL, parameter order, rows) on the DBAPI cursor of `conn`."""
    with _cursor(conn) as cursor:
        for sql, order, params in statements:
            if params:
                cursor.executemany(sql, [tuple(r[k] for k in order) for r in params] if order else params)
