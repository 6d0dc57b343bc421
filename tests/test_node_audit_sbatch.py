"""slurm/aiperf-node-audit.sbatch with stand-ins for srun and aiperf: one `aiperf audit --node`
task per node, naming its own host, the admin token in the environment only."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
from pathlib import Path

import pytest

SBATCH = Path(__file__).resolve().parent.parent / "slurm" / "aiperf-node-audit.sbatch"
FAKE_SRUN = """#!/bin/bash
printf '%s\\n' "$@" > "$FAKE_LOG/srun.args"
while [[ "$1" == -* ]]; do shift; done
exec "$@"
"""
FAKE_AIPERF = """#!/bin/bash
printf '%s\\n' "$@" > "$FAKE_LOG/aiperf.args"
printf '%s\\n' "token=${AIPERF_ADMIN_TOKEN:-}" > "$FAKE_LOG/aiperf.env"
"""


def _run(env: dict[str, str], tmp: Path) -> tuple[subprocess.CompletedProcess, list[str], list[str], str]:
    bin_dir = tmp / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, body in (("srun", FAKE_SRUN), ("aiperf", FAKE_AIPERF)):
        (bin_dir / name).write_text(body)
        (bin_dir / name).chmod(0o755)
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_LOG": str(tmp), **env}
    proc = subprocess.run(["bash", str(SBATCH)], env=env, capture_output=True, text=True, timeout=30)
    read = lambda n: (tmp / n).read_text().splitlines() if (tmp / n).exists() else []  # noqa: E731
    return proc, read("aiperf.args"), read("srun.args"), "\n".join(read("aiperf.env"))


def test_one_node_audit_per_node_with_the_token_from_a_file(tmp_path: Path) -> None:
    assert os.stat(SBATCH).st_mode & stat.S_IXUSR
    assert "#SBATCH --ntasks-per-node=1" in SBATCH.read_text()
    token = tmp_path / "admin-token"
    token.write_text("s3cret-admin\n")
    proc, args, srun_args, seen = _run({"AIPERF_MASTER": "m:50051", "AIPERF_ADMIN_TOKEN_FILE": str(token),
                                        "SLURM_JOB_NUM_NODES": "3"}, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "--ntasks-per-node=1" in srun_args and "--nodes=3" in srun_args
    assert args == ["audit", "--master", "m:50051", "--node", socket.gethostname()]
    assert "token=s3cret-admin" in seen.splitlines()
    assert not [a for a in args + srun_args if "s3cret" in a]


@pytest.mark.parametrize("missing", ["AIPERF_MASTER", "AIPERF_ADMIN_TOKEN"])
def test_it_refuses_to_start_without_the_master_or_the_admin_token(missing: str, tmp_path: Path) -> None:
    env = {"AIPERF_MASTER": "m:50051", "AIPERF_ADMIN_TOKEN": "tok"}
    del env[missing]
    proc, args, srun_args, _ = _run(env, tmp_path)
    assert proc.returncode == 2 and missing in proc.stderr and args == [] and srun_args == []
