"""The database behind the store: its engine (SQLite with WAL, or a server through a
URL) and its schema, managed by the Alembic migrations in master/store/sql/migrations."""

from __future__ import annotations

import logging
from typing import Any, Callable

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.pool import StaticPool

from master.store.errors import SchemaError
from master.store.sql.urls import mask_url

log = logging.getLogger(__name__)

MIGRATIONS = "master.store.sql:migrations"


def _alembic_config() -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", MIGRATIONS)
    return cfg


def head_revision() -> str:
    """The newest schema revision this version knows."""
    head = ScriptDirectory.from_config(_alembic_config()).get_current_head()
    assert head is not None
    return head


def migrate(engine: Engine) -> str:
    """Upgrade the schema to head; SchemaError when the database is newer.

    Returns the revision the database was at before (or "empty").
    """
    cfg = _alembic_config()
    script = ScriptDirectory.from_config(cfg)
    known = {rev.revision for rev in script.walk_revisions()}
    with engine.begin() as conn:
        current = MigrationContext.configure(conn).get_current_revision()
        if current is not None and current not in known:
            raise SchemaError(
                f"database schema revision {current} is newer than this master knows "
                f"(head {script.get_current_head()}); upgrade aiperf"
            )
        if current != script.get_current_head():
            log.info("event=migrate from=%s to=%s", current or "empty", script.get_current_head())
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "head")
    return current or "empty"


def make_engine(url: str) -> Engine:
    """Engine for `url`; SQLite gets WAL, foreign keys and a busy timeout."""
    try:
        u = make_url(url)
    except ArgumentError:  # some SQLAlchemy releases quote the whole URL, password included
        raise ArgumentError(f"cannot parse the database URL {mask_url(url)}") from None
    if u.get_backend_name() == "sqlite":
        memory = u.database in (None, "", ":memory:")
        kwargs: dict[str, Any] = {"connect_args": {"check_same_thread": False, "timeout": 30}}
        if memory:
            kwargs["poolclass"] = StaticPool  # one shared in-memory database
        engine = create_engine(u, **kwargs)

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn: Any, _record: Any) -> None:
            cur = dbapi_conn.cursor()
            if not memory:
                cur.execute("PRAGMA journal_mode=WAL")
                cur.execute("PRAGMA synchronous=NORMAL")  # durable at checkpoints; safe with WAL
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.close()

        return engine
    return create_engine(u, pool_size=16, max_overflow=32, pool_pre_ping=True)


def count_errors(engine: Engine, count: Callable[[], object]) -> None:
    """Call `count` on every error the database driver raises on `engine` (SQLAlchemy's
    handle_error event: RPCs, the tick and the progress writer alike)."""

    def on_error(_context: Any) -> None:
        count()  # None returned: the error is raised as it was

    event.listen(engine, "handle_error", on_error)
