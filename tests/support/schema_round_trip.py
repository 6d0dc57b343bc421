"""Migrating a test database down to an older revision and back to head (a release's round trip)."""

from __future__ import annotations


def down_and_up(db_url: str, revision: str) -> None:
    """Downgrade the database at `db_url` to `revision`, then upgrade it to head."""
    from alembic import command

    from master.store.sql.engine import _alembic_config, make_engine

    engine = make_engine(db_url)
    try:
        with engine.begin() as conn:
            cfg = _alembic_config()
            cfg.attributes["connection"] = conn
            command.downgrade(cfg, revision)
            command.upgrade(cfg, "head")
    finally:
        engine.dispose()
