"""A master and workers as real subprocesses on loopback (the end-to-end tests)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from aiperf.api import aiperf_pb2 as pb
from aiperf.api.client import ControlClient
from tests.support.ports import free_port

WORKER_TOKEN = "e2e-worker-token"
ADMIN_TOKEN = "e2e-admin-token"

# sitecustomize.py of a process that must run without TensorFlow (a GPU node that has none)
NO_TENSORFLOW = """
import importlib.abc, sys


class _NoTensorFlow(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "tensorflow" or name.startswith("tensorflow."):
            raise ModuleNotFoundError(f"No module named {name!r} (blocked: a node without TensorFlow)")
        return None


sys.meta_path.insert(0, _NoTensorFlow())
"""


class Cluster:
    """A master and workers as subprocesses, with their logs in tmp_path."""

    def __init__(self, tmp_path: Path, heartbeat_interval_s: float = 1.0) -> None:
        self.dir = tmp_path
        self.heartbeat = str(heartbeat_interval_s)
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.env = dict(os.environ, AIPERF_MASTER=self.address, AIPERF_TOKEN=WORKER_TOKEN,
                        AIPERF_ADMIN_TOKEN=ADMIN_TOKEN, PYTHONUNBUFFERED="1",
                        AIPERF_WORKER_STATE_DIR=str(tmp_path / "worker-state"),
                        TF_CPP_MIN_LOG_LEVEL="2")
        self.procs: list[subprocess.Popen] = []
        self.start_master()
        self.control = ControlClient(self.address, ADMIN_TOKEN)
        self.control.wait_ready(60)

    def start_master(self) -> None:
        self.master = self._spawn("master", "master", "serve", "--db", f"sqlite:///{self.dir / 'm.db'}",
                                  "--port", str(self.port), "--data-dir", str(self.dir),
                                  "--heartbeat-interval", self.heartbeat)

    def _spawn(self, log_name: str, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
        log = open(self.dir / f"{log_name}.log", "a")
        proc = subprocess.Popen([sys.executable, "-m", "aiperf_cli", *args], env=env or self.env,
                                stdout=log, stderr=subprocess.STDOUT)
        self.procs.append(proc)
        return proc

    def worker(self, name: str = "w1", *extra: str, env: dict[str, str] | None = None) -> subprocess.Popen:
        return self._spawn(f"worker-{name}", "worker", "--name", name, "--generator-processes", "1", *extra,
                           env=env)

    def cli(self, *args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "aiperf_cli", *args], env=env or self.env,
                              capture_output=True, text=True, timeout=timeout)

    def backend_env(self, backend: str) -> dict[str, str]:
        """The environment of a process on `backend`; JAX's with TensorFlow unimportable."""
        if backend == "tensorflow":
            return self.env
        blocker = self.dir / "no-tensorflow"
        blocker.mkdir(exist_ok=True)
        (blocker / "sitecustomize.py").write_text(NO_TENSORFLOW)
        path = os.pathsep.join(p for p in (str(blocker), self.env.get("PYTHONPATH", "")) if p)
        return dict(self.env, PYTHONPATH=path, JAX_PLATFORMS="cpu")

    def wait_state(self, run_id: int, states: set[int], timeout_s: float) -> pb.RunStatus:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            status = self.control.run_status(run_id)
            if status.run.state in states:
                return status
            time.sleep(1.0)
        raise AssertionError(f"run {run_id} not in {states} after {timeout_s} s; logs in {self.dir}")

    def wait_for_training_model(self, run_id: int, timeout_s: float = 240) -> pb.Model:
        """A model in training that has already reported trained images."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for m in self.models(run_id):
                if m.state == pb.MODEL_TRAINING and m.images_trained > 0:
                    return m
            time.sleep(0.5)
        raise AssertionError(f"no model reported progress in {timeout_s} s; see {self.dir}")

    def models(self, run_id: int) -> list[pb.Model]:
        return list(self.control.list_models(run_id, include_graph=True).models)

    def log(self, name: str) -> str:
        return (self.dir / f"{name}.log").read_text()

    def close(self, grace_s: float = 5.0) -> None:
        """SIGTERM everything, then SIGKILL what is left after `grace_s` (children included):
        by teardown the test has checked what it needs, so a worker draining its round is not
        waited for."""
        self.control.close()
        tree: list[psutil.Process] = []
        for p in reversed(self.procs):
            if p.poll() is None:
                try:
                    tree += psutil.Process(p.pid).children(recursive=True)
                except psutil.NoSuchProcess:
                    pass
                p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for p in self.procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=30)
        _, alive = psutil.wait_procs(tree, timeout=max(0.1, deadline - time.monotonic()))
        for child in alive:
            child.kill()
