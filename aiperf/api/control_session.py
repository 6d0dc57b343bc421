"""The control service's calls answered with plain data: the dicts of aiperf.api.views (what
`--json` prints and the tables and the report read) and the records of aiperf.api.records.
The CLI talks through it, so that no message of aiperf_pb2 crosses into aiperf_cli/.

`ControlClient` stays the wire-level client (its replies are the messages; tests and fuzzers
send hostile values through it); `ControlSession` wraps one, as WorkerSession wraps a worker's.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Callable, TypeVar

from aiperf import limits
from aiperf.api import views, wire
from aiperf.api.records import ModelRecord
from aiperf.run_spec import RunSpec

T = TypeVar("T")

if TYPE_CHECKING:  # grpc loads with the client, when a command first calls the master
    from aiperf.api.client import ControlClient, NodeInventory


@dataclass(frozen=True)
class AuditClaim:
    """An auditor's finding for one model (RecordAudit): the master checks it and answers the
    recorded audit. `node`: a node audit of a drawn model, with the node's inventory."""

    verdict: str
    architecture_ok: bool
    audited_accuracy: float | None = None
    validation_images: int = 0
    auditor_host: str = ""
    detail: str = ""
    audited_images_per_second: float = 0.0  # 0: not timed
    auditor_hardware: str = ""
    node: NodeInventory | None = None
    retrained_accuracy: float | None = None


@dataclass(frozen=True)
class Page:
    """One page of a listing: its rows as dicts, the total the master holds, and the run it is
    of and the master's clock where the listing says them (0 otherwise)."""

    total: int
    rows: list[dict[str, Any]]
    run_id: int = 0
    master_time: float = 0.0


@dataclass(frozen=True)
class ModelPage:
    """One page of a run's models as records (what an audit reads), and the total."""

    run_id: int
    total: int
    models: list[ModelRecord]


@dataclass(frozen=True)
class AuditList:
    """A run's audits, oldest first, and the models the master drew for node audits."""

    run_id: int
    audits: list[dict[str, Any]]
    node_audit_model_ids: frozenset[int] = field(default_factory=frozenset)


def read_all(page_at: Callable[[int], tuple[list[T], int]]) -> list[T]:
    """Every item of a listing, page after page: `page_at(offset)` answers a page and the total the
    master holds; the listing ends at that total, or at an empty page (a total that overstates)."""
    items: list[T] = []
    while True:
        page, total = page_at(len(items))
        items += page
        if not page or len(items) >= total:
            return items


class ControlSession:
    """The calls of the CLI, through one ControlClient (the admin token). A master's refusal
    raises aiperf.api.calls.ApiError, as the client's calls do."""

    page_size = limits.MAX_PAGE  # models asked for at once when reading them all: the master's page

    def __init__(self, client: ControlClient) -> None:
        self.client = client

    @classmethod
    def open(cls, address: str, token: str, **options: Any) -> ControlSession:
        """A session on a new ControlClient; `options` as the client's (TLS roots, retries, timeout)."""
        from aiperf.api.client import ControlClient

        return cls(ControlClient(address, token, **options))

    def close(self) -> None:
        self.client.close()

    def start_run(self, spec: RunSpec) -> dict[str, Any]:
        """Start a run; the run as views.run_info_to_dict has it."""
        kwargs = {f.name: getattr(spec, f.name) for f in fields(spec) if f.name != "limits"}
        limits = {f.name: getattr(spec.limits, f.name) for f in fields(spec.limits)}
        return views.run_info_to_dict(self.client.start_run(**kwargs, **limits))

    def stop_run(self, run_id: int = 0, abort: bool = False, reason: str = "") -> dict[str, Any]:
        return views.run_info_to_dict(self.client.stop_run(run_id, abort=abort, reason=reason))

    def run_status(self, run_id: int = 0) -> dict[str, Any]:
        return views.run_status_to_dict(self.client.run_status(run_id))

    def scoreboard(self, run_id: int = 0) -> dict[str, Any]:
        return views.scoreboard_to_dict(self.client.scoreboard(run_id))

    def timeline(self, run_id: int = 0, max_points: int = 0, buckets: int = 0) -> dict[str, Any]:
        return views.timeline_to_dict(self.client.timeline(run_id, max_points=max_points, buckets=buckets))

    def runs(self, limit: int = 0, offset: int = 0) -> Page:
        """Every run, newest first."""
        reply = self.client.list_runs(limit=limit, offset=offset)
        return Page(reply.total, [views.run_info_to_dict(r) for r in reply.runs])

    def workers(self, state: str | None = None, run_id: int = 0, limit: int = 0, offset: int = 0) -> Page:
        """Registered workers (run_id: those of that run; state "alive" or "lost"), with the master's clock."""
        reply = self.client.list_workers(state=state, run_id=run_id, limit=limit, offset=offset)
        return Page(reply.total, [views.worker_entry_to_dict(w) for w in reply.workers],
                    master_time=reply.master_time)

    def all_workers(self, run_id: int = 0) -> list[dict[str, Any]]:
        """Every registered worker (run_id: those of that run) as dicts, paged by the master's page."""
        def page_at(offset: int) -> tuple[list[dict[str, Any]], int]:
            page = self.workers(run_id=run_id, limit=self.page_size, offset=offset)
            return page.rows, page.total

        return read_all(page_at)

    def models(self, run_id: int = 0, state: str | None = None, limit: int = 0, offset: int = 0) -> Page:
        """A page of the run's models as dicts, ascending id, without their graphs."""
        reply = self.client.list_models(run_id, state=state, limit=limit, offset=offset)
        return Page(reply.total, [views.model_to_dict(m) for m in reply.models], run_id=reply.run_id)

    def all_models(self, run_id: int, state: str | None = None) -> list[dict[str, Any]]:
        """Every model of the run (in `state` when given) as dicts, ascending id, paged by the master's page."""
        def page_at(offset: int) -> tuple[list[dict[str, Any]], int]:
            page = self.models(run_id, state=state, limit=self.page_size, offset=offset)
            return page.rows, page.total

        return read_all(page_at)

    def all_model_records(self, run_id: int, state: str | None = None) -> list[ModelRecord]:
        """Every model of the run (in `state` when given) as records without graphs, ascending id."""
        def page_at(offset: int) -> tuple[list[ModelRecord], int]:
            page = self.model_records(run_id, state=state, limit=self.page_size, offset=offset)
            return page.models, page.total

        return read_all(page_at)

    def model_records(self, run_id: int = 0, state: str | None = None, limit: int = 0, offset: int = 0,
                      include_graph: bool = False) -> ModelPage:
        """A page of the run's models as records, ascending id (with their graphs when asked)."""
        reply = self.client.list_models(run_id, state=state, limit=limit, offset=offset, include_graph=include_graph)
        return ModelPage(reply.run_id, reply.total, [wire.model_record(m) for m in reply.models])

    def record_audit(self, model_id: int, claim: AuditClaim) -> dict[str, Any]:
        """Record an auditor's finding; the recorded audit, with the master's final verdict."""
        kwargs = {f.name: getattr(claim, f.name) for f in fields(claim)}
        return views.audit_to_dict(self.client.record_audit(model_id, **kwargs))

    def audits(self, run_id: int = 0) -> AuditList:
        reply = self.client.list_audits(run_id)
        return AuditList(reply.run_id, [views.audit_to_dict(a) for a in reply.audits],
                         frozenset(reply.node_audit_model_ids))
