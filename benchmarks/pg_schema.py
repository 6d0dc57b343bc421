"""A fresh PostgreSQL schema to run against, dropped afterwards (the benchmarks' PostgreSQL
runs and the tests' `postgres_schema_url` fixture): the URL it yields sets the connection's
search_path to that schema, so the master's migrations create their tables in it."""

from __future__ import annotations

import contextlib
import uuid
from typing import Iterator


@contextlib.contextmanager
def temporary_schema(base_url: str, prefix: str = "bench") -> Iterator[str]:
    """`base_url` (trust or password auth, any database) with a new schema as its search_path."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    schema = f"{prefix}_{uuid.uuid4().hex[:16]}"
    admin = create_engine(base_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE SCHEMA "{schema}"'))
        url = make_url(base_url).update_query_dict({"options": f"-csearch_path={schema}"})
        try:
            yield url.render_as_string(hide_password=False)
        finally:
            with admin.connect() as conn:
                conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
    finally:
        admin.dispose()
