"""The worker's health endpoint: `GET /healthz` on a small HTTP server
(`aiperf worker --health-port`), for the kubelet's livenessProbe and a site's
node checks (`curl -f localhost:PORT/healthz`).

Why HTTP and not a file touched by the heartbeat loop and an exec probe: an
httpGet probe starts no process in the container (an exec probe forks one per
period, in an image with a read-only root file system, and would depend on the
image's tools), and the same endpoint serves SLURM sites, which have no probes.

Healthy means the agent's heartbeat loop is turning: it ticked within
`stale_after_s` (whether or not the master answered: a master outage must not
restart every worker), or the worker has not started it yet (measuring its
accelerators, registering), or it is draining after SIGTERM. The answer is a JSON object (status, worker id,
seconds since the last tick, the model in training, whether it is draining
after SIGTERM); 200 when healthy, 503 when not.
"""

from __future__ import annotations

import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

log = logging.getLogger(__name__)

HEALTH_PATH = "/healthz"


def is_healthy(state: dict[str, Any], stale_after_s: float) -> bool:
    """Healthy: the heartbeat loop has not started yet, or ticked within `stale_after_s`
    (at least 3 heartbeat intervals: the master may set a long one), or the worker is
    draining after a stop request (its loop has ended; the grace period bounds the drain,
    and a probe must not kill it while it sends its last report)."""
    if state.get("stopping"):
        return True
    age = state.get("heartbeat_age_s")
    return age is None or age <= max(stale_after_s, 3 * state.get("heartbeat_interval_s", 0.0))


class HealthServer:
    """Serves `state()` (a dict from the agent) at /healthz on `port` (0: any free port)."""

    def __init__(self, state: Callable[[], dict[str, Any]], port: int, host: str = "",
                 stale_after_s: float = 60.0) -> None:
        self.state = state
        self.stale_after_s = stale_after_s
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the http.server protocol
                if self.path.split("?")[0] != HEALTH_PATH:
                    self.send_error(404, f"only {HEALTH_PATH}")
                    return
                body, healthy = server.answer()
                self.send_response(200 if healthy else 503)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_args: Any) -> None:  # a probe every 10 s is not worth a log line
                pass

        self._httpd = ThreadingHTTPServer((host, port), Handler)
        self._httpd.daemon_threads = True
        self.port = int(self._httpd.server_address[1])
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="health", daemon=True)

    def answer(self) -> tuple[bytes, bool]:
        """The JSON body and whether the worker is healthy."""
        state = dict(self.state())
        healthy = is_healthy(state, self.stale_after_s)
        state["status"] = "ok" if healthy else "stale"
        state["stale_after_s"] = self.stale_after_s
        return json.dumps(state).encode(), healthy

    def start(self) -> "HealthServer":
        self._thread.start()
        log.info("event=health_listening port=%d path=%s", self.port, HEALTH_PATH)
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
