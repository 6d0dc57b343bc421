"""`aiperf master serve --db URL`: the URL checked before anything starts, and the
database's failures as one line with the password masked (master.store.sql.urls).

The checks read the URL as SQLAlchemy does: a URL it cannot parse or whose
kind it does not know is bad input; so is an asyncio driver (the master's
store is synchronous) and a driver that is not installed, whose message names
the package to install.
"""

from __future__ import annotations

from typing import NoReturn

from aiperf_cli.options import ExitCode, fail

# The pip package that provides each DBAPI module SQLAlchemy's dialects import.
DRIVER_PACKAGES = {
    "MySQLdb": "mysqlclient", "pymysql": "PyMySQL", "mysql": "mysql-connector-python", "mariadb": "mariadb",
    "psycopg": "psycopg[binary]", "psycopg2": "psycopg2-binary", "pg8000": "pg8000", "asyncpg": "asyncpg",
    "aiomysql": "aiomysql", "asyncmy": "asyncmy", "aiosqlite": "aiosqlite", "oracledb": "oracledb",
    "cx_Oracle": "cx_Oracle", "pyodbc": "pyodbc", "pymssql": "pymssql",
}
TESTED = "aiperf is tested with sqlite:/// and postgresql+psycopg://"


def check_db_url(url: str) -> None:
    """Refuse, with one line (exit 2), a URL the master could not open whatever the database's state."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    from master.store.sql.urls import mask_url

    shown = mask_url(url)
    try:
        u = make_url(url)
    except (ArgumentError, ValueError):  # not echoed: where a password starts is unknown
        fail("--db is not a database URL (e.g. postgresql+psycopg://user:password@host:5432/aiperf)")
    try:
        dialect = u.get_dialect()
    except NoSuchModuleError:
        fail(f"--db {shown}: unknown database kind {u.drivername!r} ({TESTED})")
    if getattr(dialect, "is_async", False):
        sync = "postgresql+psycopg" if u.get_backend_name() == "postgresql" else u.get_backend_name()
        fail(f"--db {shown}: {u.drivername} is an asyncio driver and the master's store is synchronous; "
             f"use {sync}:// instead")
    try:
        dialect.import_dbapi()
    except ImportError as exc:
        module = (getattr(exc, "name", None) or "").split(".")[0]
        package = DRIVER_PACKAGES.get(module, module or "the driver")
        fail(f"--db {shown}: the database driver for {u.drivername}:// is not installed "
             f"(no module {module!r}): pip install '{package}' ({TESTED})")


def database_failure(exc: Exception, url: str) -> NoReturn:
    """One line for a database error raised while the master starts, password masked.

    Exit 3 when the database server did not answer (down, not yet up: try
    again), its disk is full or an SQLite file is locked or on a full disk; 4 when
    it answered and refused (authentication, no such database or role, which
    libpq reports as FATAL; any error with an SQLSTATE); 2 for an SQLite file
    that cannot be opened (a wrong --db path)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import InterfaceError, OperationalError

    from master.store.sql.outages import outage_error
    from master.store.sql.urls import mask_url, scrub

    outage = outage_error(exc, url)
    if outage is not None and (make_url(url).get_backend_name() == "sqlite" or str(outage).startswith("database full")):
        # SQLite locked or on a full disk, PostgreSQL's disk full: it passes, unlike a wrong path
        fail(f"database {mask_url(url)}: {outage}; try again later", ExitCode.UNAVAILABLE)
    orig = getattr(exc, "orig", None)
    lines = str(orig or exc).splitlines() or [type(exc).__name__]
    first = scrub(lines[0].strip(), url)
    where = f"database {mask_url(url)}"
    if make_url(url).get_backend_name() == "sqlite":  # parsed before by check_db_url
        fail(f"{where}: {first}")
    answered = getattr(orig, "sqlstate", None) is not None or "FATAL:" in first
    if isinstance(exc, (OperationalError, InterfaceError)) and not answered:
        fail(f"{where} unreachable, try again later: {first}", ExitCode.UNAVAILABLE)
    fail(f"{where} refused: {first}", ExitCode.REFUSED)
