"""Alembic environment of the master's schema.

Run programmatically by master/store/sql/engine.py (`migrate`), which passes an open
connection in `config.attributes["connection"]`; there is no alembic.ini.
"""

from __future__ import annotations

from alembic import context

from master.store.sql.tables import Base

config = context.config
connection = config.attributes.get("connection")
if connection is None:
    raise RuntimeError("the master's migrations run through master.store.sql.engine.migrate(), with a connection")

context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    render_as_batch=connection.dialect.name == "sqlite",  # SQLite cannot ALTER most things
    compare_type=True,
)
with context.begin_transaction():
    context.run_migrations()
