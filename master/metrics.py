"""Prometheus metrics of the master, in a registry of its own (so several
in-process masters, as in tests, do not collide)."""

from __future__ import annotations

import logging
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

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
        self._server: WSGIServer | None = None
        for state in MODEL_STATE_NAMES:
            self.models.labels(state=state).set(0)

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
