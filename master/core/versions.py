"""The versions of the master's software, recorded with every run (master/core/master.py)."""

from __future__ import annotations

import platform
from importlib import metadata

import aiperf

# distributions whose version a run records, by the name it records them under
_DISTRIBUTIONS = {"grpcio": "grpcio", "protobuf": "protobuf", "sqlalchemy": "SQLAlchemy", "alembic": "alembic"}


def software_versions() -> dict[str, str]:
    """Versions of the master's software, recorded with every run."""
    versions = {"aiperf": aiperf.__version__, "python": platform.python_version()}
    versions.update({name: metadata.version(dist) for name, dist in _DISTRIBUTIONS.items()})
    versions["platform"] = platform.platform()
    return versions
