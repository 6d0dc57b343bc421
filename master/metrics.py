"""Prometheus metrics of the master, in a registry of its own (so several
in-process masters, as in tests, do not collide)."""

from __future__ import annotations

import logging
from wsgiref.simple_server import WSGIServer

from prometheus_client import (
    CollectorRegistry, Counter, Gauge, PlatformCollector, ProcessCollector, start_http_server,
)

from aiperf.api.enums import MODEL_STATE_NAMES

log = logging.getLogger(__name__)


class MasterMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.workers_alive = Gauge("aiperf_workers_alive", "Workers that heartbeated recently", registry=self.registry)
        self.workers_lost = Counter("aiperf_workers_lost", "Workers marked lost", registry=self.registry)
        self.models = Gauge("aiperf_models", "Models of the current run by state", ["state"], registry=self.registry)
        self.reports = Counter("aiperf_progress_reports", "Progress reports recorded", registry=self.registry)
        self.duplicate_reports = Counter(
            "aiperf_progress_reports_duplicate", "Retried progress reports not counted again", registry=self.registry
        )
        self.flops_mismatch = Counter(
            "aiperf_flops_mismatch_reports", "Reports whose worker FLOPs differ from the master's by > 1%",
            registry=self.registry,
        )
        self.implausible_reports = Counter(
            "aiperf_implausible_reports", "Reports refused for claiming more than the worker's accepted peak",
            registry=self.registry,
        )
        self.current_flops = Gauge("aiperf_current_flops", "FLOPS(now) of the current run", registry=self.registry)
        self.run_state = Gauge("aiperf_run_running", "1 while the current run is running", registry=self.registry)
        # Per run, labelled so a dashboard can tell runs and profiles apart; only the
        # current run's series exist (a new run clears the previous one's).
        self.run_elapsed = Gauge(
            "aiperf_run_elapsed_seconds", "Seconds since the current run started (its clock)",
            ["run_id", "profile"], registry=self.registry,
        )
        self.run_flops = Gauge(
            "aiperf_run_flops", "FLOPS(now) of the current run", ["run_id", "profile"], registry=self.registry,
        )
        self.run_ops = Gauge(
            "aiperf_run_operations", "Operations counted so far in the current run (F(t))",
            ["run_id", "profile"], registry=self.registry,
        )
        self._run_labels: tuple[str, str] | None = None
        # CPU, memory, open files of the master process (process_*, python_info).
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        self._server: WSGIServer | None = None
        for state in MODEL_STATE_NAMES:
            self.models.labels(state=state).set(0)

    def observe_run(self, run_id: int, profile: str, elapsed_s: float, ops: int) -> None:
        """The current run's clock and operations; FLOPS = ops / elapsed (0 before any time passed)."""
        labels = (str(run_id), profile)
        if labels != self._run_labels:
            for gauge in (self.run_elapsed, self.run_flops, self.run_ops):
                gauge.clear()
            self._run_labels = labels
        self.run_elapsed.labels(*labels).set(max(0.0, elapsed_s))
        self.run_ops.labels(*labels).set(ops)
        self.run_flops.labels(*labels).set(ops / elapsed_s if elapsed_s > 0 else 0.0)

    def serve(self, port: int, addr: str = "0.0.0.0") -> int:
        """Start the HTTP endpoint (port 0: any free port); returns the port."""
        server, _thread = start_http_server(port, addr=addr, registry=self.registry)
        self._server = server
        bound = int(server.server_address[1])
        log.info("event=metrics_listening port=%d", bound)
        return bound

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
