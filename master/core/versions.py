"""The versions of the master's software, recorded with every run (master/core/master.py)."""

from __future__ import annotations

import platform

import grpc

import aiperf


def software_versions() -> dict[str, str]:
    """Versions of the master's software, recorded with every run."""
    import alembic
    import google.protobuf
    import sqlalchemy

    return {
        "aiperf": aiperf.__version__,
        "python": platform.python_version(),
        "grpcio": grpc.__version__,
        "protobuf": google.protobuf.__version__,
        "sqlalchemy": sqlalchemy.__version__,
        "alembic": alembic.__version__,
        "platform": platform.platform(),
    }
