"""Databases to break on purpose (tests/test_db_outage.py, benchmarks/fault_bench.py):

- `ThrowawayPostgres`: a PostgreSQL cluster of its own (initdb and pg_ctl of
  /usr/lib/postgresql/15/bin or AIPERF_PG_BIN, a free loopback port, a directory
  made for it), stopped and started at will: never the shared server. As root,
  the cluster runs as the `postgres` user (initdb refuses root).
- `small_filesystem`: a tmpfs of a few MiB mounted for SQLite, filled to the last
  byte by `fill` and emptied by `drain` (mounting needs CAP_SYS_ADMIN: where it
  is refused, `can_mount` says so and the tests skip).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Iterator

from tests.support.ports import free_port

PG_BIN = Path(os.environ.get("AIPERF_PG_BIN", "/usr/lib/postgresql/15/bin"))


def _as_postgres(args: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *args] if os.geteuid() == 0 else args


class ThrowawayPostgres:
    """A PostgreSQL cluster in a directory of its own, on a free port."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="aiperf-pg-"))
        os.chmod(self.root, 0o755)
        self.data = self.root / "data"
        self.port = free_port()
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres", "postgres")
        self._run([str(PG_BIN / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync",
                   "-E", "UTF8"])

    @staticmethod
    def available() -> bool:
        return (PG_BIN / "initdb").exists() and (os.geteuid() != 0 or shutil.which("runuser") is not None)

    def _run(self, args: list[str]) -> None:
        subprocess.run(_as_postgres(args), check=True, capture_output=True, timeout=120, cwd=self.root)

    def start(self) -> None:
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run([str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-o", options, "-l", str(self.root / "log"),
                   "-w", "start"])

    def stop(self, mode: str = "fast") -> None:
        self._run([str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop"])

    def close(self) -> None:
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)


def can_mount() -> bool:
    """Whether this process may mount a tmpfs (tried once on a scratch directory)."""
    with tempfile.TemporaryDirectory() as d:
        if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", d], capture_output=True).returncode:
            return False
        subprocess.run(["umount", d], capture_output=True)
        return True


@contextlib.contextmanager
def small_filesystem(size_mib: int = 8) -> Iterator[Path]:
    """A tmpfs of size_mib MiB, unmounted afterwards."""
    d = Path(tempfile.mkdtemp(prefix="aiperf-full-"))
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mib}m", "tmpfs", str(d)], check=True,
                   capture_output=True)
    try:
        yield d
    finally:
        subprocess.run(["umount", "-l", str(d)], capture_output=True)
        shutil.rmtree(d, ignore_errors=True)


def fill(directory: Path) -> Path:
    """Write a file until the file system is full; returns it (drain removes it)."""
    path = directory / "filler"
    with open(path, "wb", buffering=0) as f:
        size = 1 << 16
        while size:  # 64 kB at a time, then smaller, down to a byte
            try:
                f.write(b"\0" * size)
            except OSError:
                size //= 2
    return path


def drain(filler: Path) -> None:
    filler.unlink(missing_ok=True)
