"""The store on SQLAlchemy 2 (SQLite or PostgreSQL): tables, engine and schema migrations,
the hot path's statements, audits, and database URLs as they may be shown."""
