"""`aiperf worker` and `aiperf demo`: bad input is one line on stderr and exit code 2."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest


def aiperf(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith("AIPERF_")}
    return subprocess.run([sys.executable, "-m", "aiperf_cli", *args], env={**base, **(env or {})},
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("args,env,message", [
    (["worker"], {}, "no master address"),
    (["worker", "--master", "127.0.0.1:1"], {}, "no worker token"),
    (["worker", "--master", "127.0.0.1:1", "--token", "t", "--dataset-format", "mnist"], {},
     "'mnist' is not one of 'imagenet-tfrecord', 'imagenet-folder', 'cifar10', 'digits'"),
    (["worker", "--master", "127.0.0.1:1", "--token", "t", "--dataset", "/data"], {},
     "--dataset needs --dataset-format"),
    (["worker", "--token-file", "/no/such/token"], {"AIPERF_MASTER": "127.0.0.1:1"},
     "cannot read worker token file /no/such/token"),
    (["worker", "--master", "127.0.0.1:1", "--token", "t", "--tls-ca", "/no/ca.pem"], {},
     "cannot read CA certificate /no/ca.pem"),
    (["demo", "--minutes", "0"], {}, "Invalid value for '--minutes': 0 is not in the range 0<x<=43200"),
    (["worker", "--master", "127.0.0.1:1", "--token", "t", "--backend", "pytorch"], {},
     "'pytorch' is not one of 'tensorflow', 'jax'"),
    (["worker", "--master", "127.0.0.1:1", "--token", "t"], {"AIPERF_BACKEND": "mxnet"},
     "'mxnet' is not one of 'tensorflow', 'jax'"),
])
def test_bad_arguments(args, env, message):
    out = aiperf(*args, env=env)
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0]


def test_missing_dataset_is_named_before_anything_runs(tmp_path):
    missing = tmp_path / "imagenet"
    out = aiperf("worker", "--master", "127.0.0.1:1", "--token", "t", "--dataset", str(missing),
                 "--dataset-format", "imagenet-tfrecord")
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and str(missing) in lines[0]


def test_demo_on_a_taken_port_fails_clearly(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        out = aiperf("demo", "--port", str(port), "--dir", str(tmp_path))
    assert out.returncode == 2
    assert f"cannot listen on 127.0.0.1:{port}" in out.stderr.strip().splitlines()[-1]


def test_a_backend_that_is_not_installed_is_one_line(tmp_path):
    """A node without JAX asked for --backend jax (the import path blocks it here)."""
    (tmp_path / "sitecustomize.py").write_text(
        "import importlib.abc, sys\n"
        "class B(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('jax', 'jaxlib'):\n"
        "            raise ModuleNotFoundError(name)\n"
        "sys.meta_path.insert(0, B())\n")
    out = aiperf("worker", "--master", "127.0.0.1:1", "--token", "t", "--backend", "jax",
                 env={"PYTHONPATH": str(tmp_path)})
    assert out.returncode == 2, out.stderr
    (line,) = out.stderr.strip().splitlines()
    assert "the jax backend needs the jax package, which is not installed" in line and "aiperf[jax]" in line
