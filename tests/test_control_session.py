"""The control session: what the CLI reads from the master, as plain data, paged to the end."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aiperf.api import aiperf_pb2 as pb
from aiperf.api.control_session import AuditClaim, ControlSession
from aiperf.run_spec import RunLimits, RunSpec
from aiperf.states import ModelState


class PagedClient:
    """A control client's ListModels over `n` DONE models (accuracy from `accuracies`), capped at
    `cap` a page as a master caps its pages; `total` is what the master says it holds."""

    def __init__(self, accuracies: list[float], cap: int, total: int | None = None) -> None:
        self.models = [pb.Model(model_id=i + 1, run_id=1, state=pb.MODEL_DONE, best_accuracy=a, has_accuracy=True,
                                hyperparameters=pb.Hyperparameters(batch_size=64, kernel_size=3))
                       for i, a in enumerate(accuracies)]
        self.cap, self.total = cap, len(accuracies) if total is None else total
        self.calls: list[tuple[int, int]] = []
        self.kwargs: dict = {}

    def list_models(self, run_id=0, state=None, limit=0, offset=0, include_graph=False):
        self.calls.append((offset, limit))
        page = self.models[offset:offset + min(limit or self.cap, self.cap)]
        return pb.ListModelsResponse(run_id=1, total=self.total, models=page)

    def list_workers(self, state=None, run_id=0, limit=0, offset=0):
        workers = [pb.WorkerInfo(worker_id=m.model_id, name=f"w{m.model_id}") for m in self.models]
        return pb.ListWorkersResponse(total=self.total, workers=workers[offset:offset + min(limit or self.cap, self.cap)])

    def scoreboard(self, run_id=0):
        return pb.Scoreboard(run=pb.RunInfo(config=pb.RunConfig(run_id=1, profile=pb.PROFILE_SMOKE),
                                            state=pb.RUN_FINISHED))

    def timeline(self, run_id=0, max_points=0, buckets=0):
        return pb.Timeline(run=self.scoreboard().run)

    def list_audits(self, run_id=0):
        return pb.ListAuditsResponse(run_id=1, node_audit_model_ids=[2])

    def start_run(self, duration_s, **kwargs):
        self.kwargs = {"duration_s": duration_s, **kwargs}
        return self.scoreboard().run

    def record_audit(self, model_id, **kwargs):
        self.kwargs = kwargs
        return pb.Audit(model_id=model_id, run_id=1, verdict=kwargs["verdict"])


@given(n=st.integers(0, 40), page=st.integers(1, 12), cap=st.integers(1, 12))
def test_all_models_reads_every_page_once_in_id_order(n: int, page: int, cap: int) -> None:
    client = PagedClient([0.5] * n, cap)
    session = ControlSession(client)  # type: ignore[arg-type]
    session.page_size = page
    rows = session.all_models(1)
    assert [r["model_id"] for r in rows] == list(range(1, n + 1))
    records = session.all_model_records(1, state=ModelState.DONE)
    assert [m.model_id for m in records] == list(range(1, n + 1))
    assert all(m.state is ModelState.DONE for m in records)
    offsets = [o for o, _ in client.calls]
    assert len(offsets) == 2 * len(set(offsets))  # no page asked twice for one listing
    assert [w["worker_id"] for w in session.all_workers(1)] == list(range(1, n + 1))


def test_a_master_that_overstates_its_total_ends_the_listing_at_an_empty_page() -> None:
    client = PagedClient([0.5] * 3, cap=2, total=10)
    assert [r["model_id"] for r in ControlSession(client).all_models(1)] == [1, 2, 3]  # type: ignore[arg-type]


def test_the_report_ranks_every_done_model_not_only_the_first_page(monkeypatch: pytest.MonkeyPatch) -> None:
    import aiperf_cli.report as report

    accuracies = [0.1] * 25 + [0.9]  # the best model is the last, on the last page
    seen: dict = {}
    monkeypatch.setattr(report, "render_report", lambda board, timeline, models, audits: seen.update(
        models=models, audits=audits) or "<html>")
    session = ControlSession(PagedClient(accuracies, cap=10))  # type: ignore[arg-type]
    board, text = report.fetch_report(session, 1)
    assert board["run_id"] == 1 and text == "<html>"
    assert seen["models"][0]["model_id"] == 26 and len(seen["models"]) == report.REPORT_MODELS


def test_requests_and_claims_reach_the_client_field_by_field() -> None:
    client = PagedClient([], cap=1)
    session = ControlSession(client)  # type: ignore[arg-type]
    run = session.start_run(RunSpec(90.0, profile="smoke", seed=7, xla=False, inherit=False,
                                    limits=RunLimits(max_models=5, max_epochs_per_round=2)))
    assert run["run_id"] == 1 and run["state"] == "finished"
    assert client.kwargs["duration_s"] == 90.0 and client.kwargs["seed"] == 7
    assert client.kwargs["xla"] is False and client.kwargs["inherit"] is False
    assert client.kwargs["max_models"] == 5 and client.kwargs["max_epochs_per_round"] == 2
    assert client.kwargs["max_rounds_per_worker"] == 0 and "limits" not in client.kwargs
    audit = session.record_audit(3, AuditClaim(verdict="passed", architecture_ok=True, audited_accuracy=0.7))
    assert audit["model_id"] == 3 and audit["verdict"] == "passed"
    assert client.kwargs["audited_accuracy"] == 0.7 and client.kwargs["node"] is None
    listed = session.audits(1)
    assert listed.run_id == 1 and listed.node_audit_model_ids == {2} and listed.audits == []
