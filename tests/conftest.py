"""Shared pytest fixtures.

- `db_url`: a fresh, empty database URL, parametrised over SQLite (a file in
  tmp_path) and PostgreSQL (a fresh schema in AIPERF_TEST_POSTGRES_URL, dropped
  afterwards; skipped when the variable is unset).
- `master_server`: factory starting a real master on a loopback port
  (`master.server.serve`), stopped at teardown. A module marked
  `also_frontends` runs each such test twice: the master serving gRPC itself,
  and through two front-end processes (`--frontends 2`); AIPERF_TEST_FRONTENDS=N
  serves every other test's master through N front ends (a local check of the
  whole API through them; `make test` does not set it).
- `small_graph`: the smoke profile's ResNet-50 (32x32x3, 10 classes, width 1/8), the seed of its runs.
- every test leaves the root logger as it found it (`_root_logging`).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

POSTGRES_ENV = "AIPERF_TEST_POSTGRES_URL"
FRONTENDS_ENV = "AIPERF_TEST_FRONTENDS"


# Files that take minutes, longest first (a full run's --durations, summed per file): with --dist
# loadfile each runs in one process while the other works through the short files, rather than one
# of them running alone at the end. `make test` passes --no-loadscope-reorder: by default xdist
# orders the files by their number of tests, which put test_gpu_e2e.py's one test last.
LONG_FILES = ("test_e2e.py", "test_gpu_bench.py", "test_lookahead.py", "test_gpu_e2e.py", "test_inheritance.py",
              "test_restart_outage.py", "test_jax_backend.py", "test_audit.py", "test_trainer.py",
              "test_e2e_restart.py", "test_keras_builder.py", "test_db_outage.py")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(LONG_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: each file keeps its order


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "master_server" in metafunc.fixturenames and metafunc.definition.get_closest_marker("also_frontends"):
        metafunc.parametrize("frontends", [0, 2], ids=["master", "frontends"], indirect=True)


@pytest.fixture
def frontends(request: pytest.FixtureRequest) -> int:
    """How many front-end processes `master_server` starts (0: the master serves gRPC itself)."""
    return getattr(request, "param", int(os.environ.get(FRONTENDS_ENV) or 0))


@pytest.fixture(autouse=True)
def _root_logging() -> Iterator[None]:
    """Restore the root logger's handlers and level after each test: a CLI command run in
    process (`aiperf worker`, `aiperf master serve`) configures logging on the test's captured
    stderr, which is closed once the test ends; a later test's log line would hit it."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for h in root.handlers:
        if h not in handlers:
            root.removeHandler(h)
            h.close()
    root.handlers[:] = handlers
    root.setLevel(level)


def postgres_url() -> str | None:
    return os.environ.get(POSTGRES_ENV) or None


@pytest.fixture
def postgres_schema_url() -> Iterator[str]:
    """A PostgreSQL URL whose search_path is a fresh schema (dropped afterwards)."""
    base = postgres_url()
    if base is None:
        pytest.skip(f"{POSTGRES_ENV} not set")
    from benchmarks.pg_schema import temporary_schema

    with temporary_schema(base, prefix="t") as url:
        yield url


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty database: SQLite file, or a fresh PostgreSQL schema."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'test.db'}"
    return request.getfixturevalue("postgres_schema_url")


@pytest.fixture
def small_graph() -> Any:
    from aiperf.profiles import SMOKE

    return SMOKE.base_graph()  # the smoke profile's seed: a submission without a parent descends from it


@pytest.fixture
def master_server(tmp_path: Path, frontends: int) -> Iterator[Callable[..., Any]]:
    """Factory: master_server(db_url=None, **serve_kwargs) -> MasterHandle on 127.0.0.1:0.

    Defaults: SQLite in tmp_path, fixed test tokens, heartbeat 5 s.
    """
    from master.server import MasterConfig, serve

    handles: list[Any] = []

    def start(db_url: str | None = None, **kwargs: Any) -> Any:
        kwargs.setdefault("port", 0)
        kwargs.setdefault("host", "127.0.0.1")
        kwargs.setdefault("data_dir", tmp_path / f"master{len(handles)}")
        kwargs.setdefault("heartbeat_interval_s", 5.0)
        kwargs.setdefault("worker_token", "test-worker-token")
        kwargs.setdefault("admin_token", "test-admin-token")
        kwargs.setdefault("env", {})
        kwargs.setdefault("frontends", frontends)
        handle = serve(MasterConfig(db_url or f"sqlite:///{tmp_path / f'master{len(handles)}.db'}", **kwargs))
        handles.append(handle)
        return handle

    yield start
    for h in handles:
        h.stop(grace_s=0)


@pytest.fixture
def cli(master_server: Callable[..., Any], monkeypatch: pytest.MonkeyPatch) -> Any:
    """A master that the control commands (`aiperf_cli.main.main`) talk to through AIPERF_MASTER and
    AIPERF_ADMIN_TOKEN; its handle."""
    h = master_server()
    monkeypatch.setenv("AIPERF_MASTER", h.address)
    monkeypatch.setenv("AIPERF_ADMIN_TOKEN", h.admin_token)
    return h
