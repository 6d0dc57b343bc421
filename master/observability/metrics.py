"""Prometheus metrics of the master, in a registry of its own (so several
in-process masters, as in tests, do not collide).

Counters and the current run's FLOPS are updated as things happen (reports,
ticks). Each run's score, accuracy, elapsed time and validity are computed when
Prometheus scrapes (`RunCollector`), from the same scoring as the scoreboard:
a score is a maximum over the run's whole time line, which no per-report update
could keep without redoing that work on every report.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable, Iterator
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, PlatformCollector, ProcessCollector, start_http_server
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from aiperf.states import ModelState

log = logging.getLogger(__name__)


RUN_LABELS = ["run_id", "profile"]


@dataclass(frozen=True)
class RunGauges:
    """One run's figures at scrape time (master/core/scrape.py computes them)."""

    run_id: int
    profile: str
    elapsed_s: float
    score: float
    regulated_score: float
    valid_flops: float
    best_accuracy: float | None
    valid: bool
    provisional: bool
    efficiency: float | None = None              # score / the datasheet peaks; None: not every one known
    efficiency_vs_measured: float | None = None  # score / the accepted measured peaks; None: unknown


class RunCollector(Collector):
    """aiperf_run_score, _regulated_score, _valid_flops, _best_accuracy, _elapsed_seconds,
    _valid, _provisional, _efficiency, _efficiency_vs_measured per run (labels run_id,
    profile), computed by `source` at each scrape; an efficiency that is not known has
    no sample (never a made-up 0). A failing source (the database is down: aiperf_database_errors counts it)
    yields the families without samples: the scrape itself must still answer."""

    def __init__(self) -> None:
        self.source: Callable[[], list[RunGauges]] = list

    def describe(self) -> list[Metric]:
        return []  # registering must not call collect (it would read the database)

    def collect(self) -> Iterator[Metric]:
        def family(name: str, doc: str) -> GaugeMetricFamily:
            return GaugeMetricFamily(name, doc, labels=RUN_LABELS)

        fams = {
            "score": family("aiperf_run_score", "Score of the run: max FLOPS(t) after the minimum running time "
                                                "(FLOPS(now) while provisional)"),
            "regulated_score": family("aiperf_run_regulated_score", "Regulated score: -ln(error) x score"),
            "valid_flops": family("aiperf_run_valid_flops", "Valid FLOPS: score x (accuracy / target)^5"),
            "best_accuracy": family("aiperf_run_best_accuracy", "Best validation accuracy observed in the run"),
            "elapsed_s": family("aiperf_run_elapsed_seconds", "Seconds since the run started (its clock; frozen "
                                                              "at its stop)"),
            "valid": family("aiperf_run_valid", "1 while the run meets every validity rule, else 0"),
            "provisional": family("aiperf_run_provisional", "1 until the run has run its minimum time"),
            "efficiency": family("aiperf_run_efficiency", "Score / the sum of the accelerators' datasheet peaks "
                                                          "at the run's precision (HPL's Rmax/Rpeak); no sample "
                                                          "unless every accelerator has a datasheet entry"),
            "efficiency_vs_measured": family("aiperf_run_efficiency_vs_measured",
                                             "Score / the sum of the accelerators' accepted measured GEMM peaks"),
        }
        try:
            runs = self.source()
        except Exception:  # noqa: BLE001 - a scrape answers even when the database does not
            log.exception("event=run_metrics_failed")
            runs = []
        for r in runs:
            labels = [str(r.run_id), r.profile]
            for key in ("score", "regulated_score", "valid_flops", "elapsed_s"):
                fams[key].add_metric(labels, getattr(r, key))
            for key in ("best_accuracy", "efficiency", "efficiency_vs_measured"):
                if getattr(r, key) is not None:
                    fams[key].add_metric(labels, getattr(r, key))
            fams["valid"].add_metric(labels, 1.0 if r.valid else 0.0)
            fams["provisional"].add_metric(labels, 1.0 if r.provisional else 0.0)
        yield from fams.values()


class MasterMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.workers_alive = Gauge("aiperf_workers_alive", "Workers that heartbeated recently", registry=self.registry)
        self.workers_lost = Counter("aiperf_workers_lost", "Workers marked lost", registry=self.registry)
        self.credential_conflicts = Counter(
            "aiperf_credential_conflicts", "Worker credentials presented by a second process while their worker "
            "was active (voided for both)", registry=self.registry)
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
        self.database_errors = Counter(
            "aiperf_database_errors", "Errors the database driver raised (connection lost, timeout, ...)",
            registry=self.registry,
        )
        # The unary calls answered, as go-grpc-prometheus names them (the Connect stream's
        # messages are the reports and heartbeats counted above).
        self.grpc_handled = Counter(
            "aiperf_grpc_server_handled", "Unary gRPC calls answered, by service, method and status code",
            ["grpc_service", "grpc_method", "grpc_code"], registry=self.registry,
        )
        # Per run, labelled so a dashboard can tell runs and profiles apart; only the
        # current run's series exist (a new run clears the previous one's).
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
        self.runs = RunCollector()
        self.registry.register(self.runs)
        self._server: WSGIServer | None = None
        for state in ModelState:
            self.models.labels(state=state).set(0)

    def observe_run(self, run_id: int, profile: str, elapsed_s: float, ops: int) -> None:
        """The current run's clock and operations; FLOPS = ops / elapsed (0 before any time passed)."""
        labels = (str(run_id), profile)
        if labels != self._run_labels:
            for gauge in (self.run_flops, self.run_ops):
                gauge.clear()
            self._run_labels = labels
        self.run_ops.labels(*labels).set(ops)
        self.run_flops.labels(*labels).set(ops / elapsed_s if elapsed_s > 0 else 0.0)

    def watch_runs(self, source: Callable[[], list[RunGauges]]) -> None:
        """Compute the per-run gauges with `source` at each scrape."""
        self.runs.source = source

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
