"""`Store` on SQLAlchemy 2: SQLite (WAL) by default, PostgreSQL through a URL.

The schema is managed by the Alembic migrations in master/store/sql/migrations; `SqlStore(url)` upgrades an older
database and refuses a newer one. The master is the database's only writer. Writes are serialised by an in-process
lock (for SQLite instead of its busy-wait, which would add sleeps of many milliseconds under load); this lets
`add_progress` keep the state of the models being trained in memory between batches. Any other write clears that
cache, and a new store (a restarted master) starts from the database.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from typing import Any, Iterator, Sequence

from sqlalchemy import Engine, func, select, update
from sqlalchemy.orm import Session, sessionmaker

from aiperf.retention import StoredModel
from aiperf.scoring import Point
from aiperf.states import (
    ACTIVE_RUN_STATES,
    FINISHED_MODEL_STATES,
    OPEN_MODEL_STATES,
    OVER_RUN_STATES,
    ModelState,
    RunState,
)
from master.store.errors import FailedPrecondition, NotFound, PermissionDenied
from master.store.progress_rules import apply_reports
from master.store.protocol import Store
from master.store.records import (
    ModelEnd,
    ModelRecord,
    NewModel,
    NewRun,
    Outage,
    ProgressInput,
    ProgressResult,
    ResourceSampleInput,
    ResourceSampleRecord,
    RunRecord,
)
from master.store.sql.audits import AuditSql
from master.store.sql.engine import make_engine, migrate
from master.store.sql.outages import STORE_WRITES, OutageLog, guard
from master.store.sql.progress import ProgressSql, combine_sums, exact_sums
from master.store.sql.tables import MasterLifeRow, ModelRow, ProgressRow, ResourceSampleRow, RunRow
from master.store.sql.workers import WorkerSql

log = logging.getLogger(__name__)

PROGRESS_CACHE_SIZE = 16384  # models whose state add_progress keeps in memory
FINISH_SEQ = 0  # the seq of the row FinishModel adds for an accuracy no report carried


def _run(r: RunRow, outages: Sequence[Outage] = ()) -> RunRecord:
    """The run, with the master's outages that overlapped its life (created to finished, or now)."""
    end = r.finished_at if r.finished_at is not None else float("inf")
    return RunRecord(
        id=r.id, state=RunState(r.state), profile=r.profile, seed=r.seed, duration_s=r.duration_s,
        precision=r.precision, config=dict(r.config), software=dict(r.software), rules_version=r.rules_version or "",
        created_at=r.created_at,
        started_at=r.started_at, deadline=r.deadline, stopped_at=r.stopped_at, finished_at=r.finished_at,
        stop_reason=r.stop_reason,
        outages=tuple(o for o in outages if o.end > r.created_at and o.start < end),
    )


def _window_end(r: RunRow, now: float) -> float:
    """When a running run stops if stopped at `now`: never after its deadline (the master's clock
    defines the window, even when the master was down at the deadline)."""
    return now if r.deadline is None else min(now, r.deadline)


def _gap(last_alive: float, started: float) -> Outage | None:
    """The outage between one life's last stamp and the next one's start; None when the clock
    did not move forward (a clock set back: no downtime can be measured)."""
    return Outage(last_alive, started) if started > last_alive else None


def _model(m: ModelRow) -> ModelRecord:
    return ModelRecord(
        id=m.id, run_id=m.run_id, parent_id=m.parent_id, worker_id=m.worker_id, round=m.round,
        graph_json=m.graph_json, graph_hash=m.graph_hash, batch_size=m.batch_size, kernel_size=m.kernel_size,
        state=ModelState(m.state), reason=m.reason, created_at=m.created_at, started_at=m.started_at,
        finished_at=m.finished_at, best_accuracy=m.best_accuracy, predicted_accuracy=m.predicted_accuracy,
        flops_per_train_image=m.flops_per_train_image, flops_per_eval_image=m.flops_per_eval_image,
        images_trained=m.images_trained, images_validated=m.images_validated, epochs=m.epochs,
        inherited_from=m.inherited_from or 0, checkpoint_uri=m.checkpoint_uri or "",
        checkpoint_sha256=m.checkpoint_sha256 or "", checkpoint_deleted=bool(m.checkpoint_deleted),
        checkpoint_delete_error=m.checkpoint_delete_error or "",
    )


@guard(STORE_WRITES)  # an outage of the database is Unavailable or StorageFull, logged once (master/store/sql/outages.py)
class SqlStore(AuditSql, WorkerSql, Store):  # audits.py and workers.py of master/store/sql/
    def __init__(self, url: str, engine: Engine | None = None) -> None:
        self.url = url
        self.outage_log = OutageLog()
        self.engine = engine or make_engine(url)
        self.dialect = self.engine.dialect.name
        self.previous_revision = migrate(self.engine)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        # One writer: the master owns the database. Writes are serialised in-process (SQLite
        # allows one writer anyway), which lets add_progress keep the state of the models being
        # trained in memory instead of reading it back for every batch of reports.
        self._write_lock = threading.RLock()
        # Heartbeat flushes touch only the workers' last beat and state. SQLite has one writer, so
        # they take the write lock; PostgreSQL locks rows, so they run beside the progress writer
        # (no deadlock: they lock worker rows in id order, and mark_workers_lost, the one other
        # transaction that locks several, takes this lock too).
        self._heartbeat_lock = self._write_lock if self.dialect == "sqlite" else threading.Lock()
        self._progress_models: dict[int, dict[str, Any]] = {}
        self._sql = ProgressSql(self.engine)
        # The master's outages, read once: only the master writes them (record_master_start).
        self._life_id: int | None = None
        self._outages: list[Outage] = self._read_outages()

    def close(self) -> None:
        self.engine.dispose()

    # ------------------------------------------------------------ sessions
    @contextlib.contextmanager
    def _write(self, changes_models: bool = True) -> Iterator[Session]:
        """A write transaction; changes_models=False for one that changes no model and no
        run (the progress writer's cache of them stays valid)."""
        with self._write_lock:
            try:
                with self._sessions.begin() as session:
                    yield session
            finally:
                if changes_models:
                    self._progress_models.clear()

    @contextlib.contextmanager
    def _read(self) -> Iterator[Session]:
        with self._sessions() as session:
            yield session

    @staticmethod
    def _get_run(session: Session, run_id: int, lock: bool = False) -> RunRow:
        stmt = select(RunRow).where(RunRow.id == run_id)
        if lock:
            stmt = stmt.with_for_update()
        row = session.scalars(stmt).first()
        if row is None:
            raise NotFound(f"run {run_id} not found")
        return row

    @staticmethod
    def _abandon(session: Session, where: Any, now: float, reason: str) -> list[int]:
        ids = list(session.scalars(select(ModelRow.id).where(where, ModelRow.state.in_(OPEN_MODEL_STATES))))
        if ids:
            session.execute(
                update(ModelRow)
                .where(ModelRow.id.in_(ids))
                .values(state=ModelState.ABANDONED, reason=reason, finished_at=now)
            )
        return ids

    # ------------------------------------------------------------ runs
    def create_run(self, spec: NewRun, now: float, allow_concurrent: bool = False) -> RunRecord:
        with self._write() as s:
            if not allow_concurrent:
                active = s.scalars(select(RunRow.id).where(RunRow.state.in_(ACTIVE_RUN_STATES)).with_for_update()).first()
                if active is not None:
                    raise FailedPrecondition(f"run {active} is still active; stop it first")
            row = RunRow(
                state=RunState.PENDING, profile=spec.profile, seed=spec.seed, duration_s=spec.duration_s,
                precision=spec.precision, config=dict(spec.config), software=dict(spec.software),
                rules_version=spec.rules_version or None, created_at=now, stop_reason="",
            )
            s.add(row)
            s.flush()
            return _run(row, self._outages)

    def get_run(self, run_id: int) -> RunRecord:
        with self._read() as s:
            return _run(self._get_run(s, run_id), self._outages)

    def current_run(self) -> RunRecord | None:
        with self._read() as s:
            row = s.scalars(select(RunRow).where(RunRow.state.in_(ACTIVE_RUN_STATES)).order_by(RunRow.id.desc())).first()
            return _run(row, self._outages) if row else None

    def latest_run(self) -> RunRecord | None:
        with self._read() as s:
            row = s.scalars(select(RunRow).order_by(RunRow.id.desc())).first()
            return _run(row, self._outages) if row else None

    def active_runs(self) -> list[RunRecord]:
        with self._read() as s:
            rows = s.scalars(select(RunRow).where(RunRow.state.in_(ACTIVE_RUN_STATES)).order_by(RunRow.id))
            return [_run(r, self._outages) for r in rows]

    def list_runs(self, limit: int, offset: int = 0) -> tuple[list[RunRecord], int]:
        with self._read() as s:
            total = s.scalar(select(func.count()).select_from(RunRow)) or 0
            rows = s.scalars(select(RunRow).order_by(RunRow.id.desc()).limit(limit).offset(offset))
            return [_run(r, self._outages) for r in rows], int(total)

    def start_run(self, run_id: int, now: float) -> RunRecord:
        with self._write() as s:
            row = self._get_run(s, run_id, lock=True)
            if row.state != RunState.PENDING:
                raise FailedPrecondition(f"run {run_id} is {row.state}, not pending")
            row.state = RunState.RUNNING
            row.started_at = now
            row.deadline = now + row.duration_s
            return _run(row, self._outages)

    def stop_run(self, run_id: int, now: float, reason: str) -> RunRecord:
        with self._write() as s:
            row = self._get_run(s, run_id, lock=True)
            if row.state in OVER_RUN_STATES:
                raise FailedPrecondition(f"run {run_id} is already {row.state}")
            if row.state == RunState.RUNNING:
                row.state = RunState.STOPPING
                row.stopped_at = _window_end(row, now)
                row.stop_reason = reason
            elif row.state == RunState.PENDING:
                row.state = RunState.FINISHED
                row.stopped_at = row.finished_at = now
                row.stop_reason = reason
            return _run(row, self._outages)

    def finish_run(self, run_id: int, now: float, state: str, reason: str) -> tuple[RunRecord, list[int]]:
        if state not in OVER_RUN_STATES:
            raise ValueError(f"finish_run state must be finished or aborted, not {state}")
        with self._write() as s:
            row = self._get_run(s, run_id, lock=True)
            if row.state in OVER_RUN_STATES:
                raise FailedPrecondition(f"run {run_id} is already {row.state}")
            abandoned = self._abandon(s, ModelRow.run_id == run_id, now, f"run {state}")
            if row.stopped_at is None:
                row.stopped_at = _window_end(row, now)
            row.state = state
            row.finished_at = now
            if reason and not row.stop_reason:
                row.stop_reason = reason
            elif reason and row.stop_reason != reason:
                row.stop_reason = f"{row.stop_reason}; {reason}"[:200]
            return _run(row, self._outages), abandoned

    # ------------------------------------------------------------ the master's lives
    def _read_outages(self) -> list[Outage]:
        with self._read() as s:
            lives = s.execute(select(MasterLifeRow.started_at, MasterLifeRow.alive_at).order_by(MasterLifeRow.id)).all()
        return [o for prev, nxt in zip(lives, lives[1:]) if (o := _gap(prev.alive_at, nxt.started_at))]

    def record_master_start(self, now: float) -> Outage | None:
        with self._write() as s:
            prev = s.scalars(select(MasterLifeRow).order_by(MasterLifeRow.id.desc()).limit(1)).first()
            life = MasterLifeRow(started_at=now, alive_at=now)
            s.add(life)
            s.flush()
            self._life_id = life.id
            outage = _gap(prev.alive_at, now) if prev is not None else None
        if outage is not None:
            self._outages.append(outage)
        elif prev is not None:
            log.warning("event=master_clock_behind last_alive=%.3f now=%.3f", prev.alive_at, now)
        return outage

    def record_master_alive(self, now: float) -> None:
        if self._life_id is None:
            return
        # not through _write(): a stamp changes no model or run, so the progress cache stays
        with self._write_lock, self.engine.begin() as conn:
            conn.execute(update(MasterLifeRow).where(MasterLifeRow.id == self._life_id).values(alive_at=now))

    def outages(self) -> list[Outage]:
        return list(self._outages)

    # ------------------------------------------------------------ models
    def add_model(self, new: NewModel, now: float, max_models: int = 0) -> ModelRecord:
        with self._write() as s:
            run = self._get_run(s, new.run_id)
            if run.state != RunState.RUNNING:
                raise FailedPrecondition(f"run {run.id} is {run.state}; models are accepted while running")
            if run.deadline is not None and now > run.deadline:
                raise FailedPrecondition(f"run {run.id} reached its deadline; models are accepted before it")
            if new.parent_id is not None:
                parent = s.get(ModelRow, new.parent_id)
                if parent is None or parent.run_id != new.run_id:
                    raise NotFound(f"parent model {new.parent_id} not found in run {new.run_id}")
            if max_models:
                n = s.scalar(select(func.count()).select_from(ModelRow).where(ModelRow.run_id == new.run_id))
                if n is not None and n >= max_models:
                    raise FailedPrecondition(f"run {new.run_id} reached its limit of {max_models} models")
            row = ModelRow(
                run_id=new.run_id, parent_id=new.parent_id, worker_id=new.worker_id, round=new.round,
                graph_json=new.graph_json, graph_hash=new.graph_hash, batch_size=new.batch_size,
                kernel_size=new.kernel_size, state=new.state, reason="", created_at=now,
                started_at=now if new.state == ModelState.TRAINING else None,
                flops_per_train_image=new.flops_per_train_image, flops_per_eval_image=new.flops_per_eval_image,
                images_trained=0, images_validated=0, epochs=0, inherited_from=new.inherited_from or None,
            )
            s.add(row)
            s.flush()
            return _model(row)

    def get_model(self, model_id: int) -> ModelRecord:
        with self._read() as s:
            row = s.get(ModelRow, model_id)
            if row is None:
                raise NotFound(f"model {model_id} not found")
            return _model(row)

    def models_since(self, run_id: int, since_id: int, limit: int = 0) -> list[ModelRecord]:
        with self._read() as s:
            stmt = select(ModelRow).where(ModelRow.run_id == run_id, ModelRow.id > since_id).order_by(ModelRow.id)
            if limit:
                stmt = stmt.limit(limit)
            return [_model(m) for m in s.scalars(stmt)]

    def ranked_done_ids(self, run_id: int, limit: int = 0) -> list[int]:
        # aiperf.scoring.model_rank_key in SQL, so that the database sorts and a limit reads only the top
        best = func.coalesce(ModelRow.best_accuracy, -1.0)
        query = (select(ModelRow.id).where(ModelRow.run_id == run_id, ModelRow.state == ModelState.DONE)
                 .order_by(func.coalesce(ModelRow.predicted_accuracy, best).desc(), best.desc(), ModelRow.id))
        with self._read() as s:
            return list(s.scalars(query.limit(limit) if limit > 0 else query))

    def list_models(
        self, run_id: int, state: str | None = None, limit: int = 1000, offset: int = 0
    ) -> tuple[list[ModelRecord], int]:
        with self._read() as s:
            cond = [ModelRow.run_id == run_id]
            if state:
                cond.append(ModelRow.state == state)
            total = s.scalar(select(func.count()).select_from(ModelRow).where(*cond)) or 0
            rows = s.scalars(select(ModelRow).where(*cond).order_by(ModelRow.id).limit(limit).offset(offset))
            return [_model(m) for m in rows], int(total)

    def count_models(self, run_id: int) -> dict[str, int]:
        with self._read() as s:
            rows = s.execute(
                select(ModelRow.state, func.count()).where(ModelRow.run_id == run_id).group_by(ModelRow.state)
            ).all()
            return {state: int(n) for state, n in rows}

    def finish_model(self, end: ModelEnd, now: float) -> ModelRecord:
        model_id, worker_id, state, checkpoint_uri = end.model_id, end.worker_id, end.state, end.checkpoint_uri
        best_accuracy = end.best_accuracy
        if state not in FINISHED_MODEL_STATES:
            raise ValueError(f"finish state must be one of {', '.join(FINISHED_MODEL_STATES)}, not {state}")
        with self._write() as s:
            row = s.scalars(select(ModelRow).where(ModelRow.id == model_id).with_for_update()).first()
            if row is None:
                raise NotFound(f"model {model_id} not found")
            if row.worker_id != worker_id:
                raise PermissionDenied(f"model {model_id} belongs to worker {row.worker_id}, not {worker_id}")
            if checkpoint_uri and row.checkpoint_uri not in (None, checkpoint_uri):
                raise FailedPrecondition(f"model {model_id} already has checkpoint {row.checkpoint_uri}")
            if row.state == state and checkpoint_uri in ("", row.checkpoint_uri):
                return _model(row)  # a retried finish
            if checkpoint_uri and row.state not in OPEN_MODEL_STATES:  # weights come with the finish, once
                raise FailedPrecondition(f"model {model_id} is {row.state}: a checkpoint is accepted only with "
                                         "the finish of an open model")
            if row.state not in OPEN_MODEL_STATES:
                raise FailedPrecondition(f"model {model_id} is {row.state}")
            if checkpoint_uri:
                row.checkpoint_uri, row.checkpoint_sha256 = checkpoint_uri, end.checkpoint_sha256
            if best_accuracy is not None and (row.best_accuracy is None or best_accuracy > row.best_accuracy):
                # an accuracy the time line has not seen yet: it enters it now, as the row of seq
                # FINISH_SEQ (reports are 1..MAX_SEQ, so it is free even after a report at MAX_SEQ)
                s.add(ProgressRow(
                    run_id=row.run_id, model_id=model_id, worker_id=worker_id, seq=FINISH_SEQ, t=now,
                    epoch=row.epochs, images_trained=0, images_validated=0, accuracy=best_accuracy,
                    worker_flops=0, master_flops=0, flops_mismatch=False,
                ))
                row.best_accuracy = best_accuracy
            row.state = state
            row.reason = end.reason[:500]
            row.finished_at = now
            row.predicted_accuracy = end.predicted_accuracy
            return _model(row)

    def stored_checkpoints(self, run_id: int) -> list[tuple[StoredModel, int, str]]:
        with self._read() as s:
            live = (ModelRow.checkpoint_uri.is_not(None) & ~ModelRow.checkpoint_deleted
                    & ModelRow.checkpoint_delete_error.is_(None))  # one its worker could not delete stays
            rows = s.execute(
                select(ModelRow.id, ModelRow.parent_id, ModelRow.state, ModelRow.worker_id, ModelRow.checkpoint_uri,
                       ModelRow.checkpoint_deleted)
                .where(ModelRow.run_id == run_id, live | ModelRow.state.in_(OPEN_MODEL_STATES)).order_by(ModelRow.id)
            ).all()
        return [(StoredModel(r.id, r.parent_id, r.state, r.checkpoint_uri is not None and not r.checkpoint_deleted),
                 r.worker_id, r.checkpoint_uri or "") for r in rows]

    def mark_checkpoints_deleted(self, model_ids: Sequence[int]) -> None:
        if not model_ids:
            return
        with self._write() as s:
            s.execute(update(ModelRow).where(ModelRow.id.in_(list(model_ids))).values(checkpoint_deleted=True))

    def restore_checkpoints(self, worker_id: int, undeleted: Sequence[tuple[int, str]]) -> list[int]:
        errors = dict(undeleted)
        wanted = sorted(errors)
        if not wanted:
            return []
        with self._write() as s:
            rows = s.execute(select(ModelRow.id, ModelRow.worker_id, ModelRow.checkpoint_deleted)
                             .where(ModelRow.id.in_(wanted))).all()
            missing = set(wanted) - {r.id for r in rows}
            if missing:
                raise NotFound(f"model {min(missing)} not found")
            for r in rows:
                if r.worker_id != worker_id:
                    raise PermissionDenied(f"model {r.id} belongs to worker {r.worker_id}, not {worker_id}")
            by_error: dict[str, list[int]] = {}
            for mid in wanted:
                by_error.setdefault(errors[mid][:500] or "unknown", []).append(mid)
            for error, mids in by_error.items():  # one statement per distinct error (usually one)
                s.execute(update(ModelRow).where(ModelRow.id.in_(mids), ModelRow.checkpoint_deleted)
                          .values(checkpoint_deleted=False, checkpoint_delete_error=error))
            return sorted(r.id for r in rows if r.checkpoint_deleted)

    def hyperparameter_history(self, run_id: int) -> list[ModelRecord]:
        with self._read() as s:
            rows = s.scalars(
                select(ModelRow).where(ModelRow.run_id == run_id, ModelRow.state == ModelState.DONE).order_by(ModelRow.id)
            )
            return [_model(m) for m in rows]

    # ------------------------------------------------------------ progress
    def add_progress(self, items: Sequence[ProgressInput]) -> list[ProgressResult]:
        # Core statements, not the ORM: this is the hot path (every worker, every few seconds).
        # The models' state comes from the cache when no other write happened since the last
        # batch; a report is looked up only when its seq is not above the model's highest one
        # (a retry), so a batch of new reports costs one INSERT, one UPDATE and the commit.
        if not items:
            return []
        results: list[ProgressResult] = []
        with self._write_lock:
            cache = self._progress_models
            try:
                with self.engine.begin() as conn:
                    models = self._progress_state(conn, sorted({i.model_id for i in items}))
                    retried = {(i.model_id, i.seq) for i in items
                               if i.model_id in models and i.seq <= models[i.model_id]["max_seq"]}
                    seen: dict[tuple[int, int], tuple[int, bool]] = {}
                    if retried:
                        seen = {
                            (mid, seq): (mf, mm)
                            for mid, seq, mf, mm in conn.execute(self._sql.seen, {
                                "mids": sorted({k[0] for k in retried}), "seqs": sorted({k[1] for k in retried})})
                            if (mid, seq) in retried
                        }
                    rows = apply_reports(items, models, seen, results)
                    if rows:
                        self._sql.write_progress(
                            conn, rows,
                            [
                                {"mid": mid, "new_state": m["state"], "new_started_at": m["started_at"],
                                 "new_trained": m["images_trained"], "new_validated": m["images_validated"],
                                 "new_epochs": m["epochs"], "new_best": m["best_accuracy"]}
                                for mid, m in models.items() if m["changed"]
                            ],
                        )
            except BaseException:
                cache.clear()
                raise
            # committed: the working copies are now the truth
            if len(cache) > PROGRESS_CACHE_SIZE:
                cache.clear()
            for mid, m in models.items():
                m["changed"] = False
                cache[mid] = m
        return results

    def _progress_state(self, conn: Any, model_ids: list[int]) -> dict[int, dict[str, Any]]:
        """Working copies of the models' state, from the cache or the database."""
        cache = self._progress_models
        models = {mid: dict(cache[mid]) for mid in model_ids if mid in cache}
        missing = [mid for mid in model_ids if mid not in models]
        if missing:
            for row in conn.execute(self._sql.models, {"ids": missing}):
                models[row[0]] = {
                    "run_id": row[1], "worker_id": row[2], "state": row[3], "started_at": row[4],
                    "images_trained": row[5], "images_validated": row[6], "epochs": row[7],
                    "best_accuracy": row[8], "run_state": row[9], "changed": False, "max_seq": 0,
                }
            for mid, top in conn.execute(self._sql.max_seq, {"mids": missing}):
                if mid in models:
                    models[mid]["max_seq"] = int(top or 0)
        return models

    def progress_seq(self, model_id: int, seq: int) -> tuple[int, bool]:
        with self._read() as s:
            top = s.scalar(select(func.max(ProgressRow.seq)).where(ProgressRow.model_id == model_id))
            return int(top or 0), seq <= int(top or 0) and s.scalar(select(ProgressRow.id).where(
                ProgressRow.model_id == model_id, ProgressRow.seq == seq)) is not None

    def timeline(self, run_id: int) -> list[Point]:
        with self._read() as s:
            rows = s.execute(
                select(ProgressRow.t, ProgressRow.master_flops, ProgressRow.worker_flops, ProgressRow.accuracy)
                .where(ProgressRow.run_id == run_id)
                .order_by(ProgressRow.t, ProgressRow.id)
            ).all()
            return [Point(t=r[0], ops=int(r[1]), worker_ops=int(r[2]), accuracy=r[3]) for r in rows]

    def run_images(self, run_id: int) -> tuple[int, int]:
        with self._read() as s:
            row = s.execute(
                select(*exact_sums(ModelRow.images_trained, ModelRow.images_validated)).where(
                    ModelRow.run_id == run_id
                )
            ).one()
        trained, validated = combine_sums(row)
        return trained, validated

    def flops_mismatch_count(self, run_id: int) -> int:
        with self._read() as s:
            n = s.scalar(
                select(func.count()).select_from(ProgressRow).where(
                    ProgressRow.run_id == run_id, ProgressRow.flops_mismatch.is_(True)
                )
            )
            return int(n or 0)

    # ------------------------------------------------------------ resources
    def add_resource_samples(self, run_id: int | None, items: Sequence[ResourceSampleInput]) -> int:
        if not items:
            return 0
        with self._write() as s:
            s.add_all(
                ResourceSampleRow(
                    worker_id=i.worker_id, run_id=run_id, t=i.t, accelerator_index=i.accelerator_index,
                    accelerator_util=i.accelerator_util, accelerator_memory_used=i.accelerator_memory_used,
                    cpu_util=i.cpu_util, memory_used=i.memory_used,
                )
                for i in items
            )
        return len(items)

    def resource_samples(self, worker_id: int | None = None, run_id: int | None = None) -> list[ResourceSampleRecord]:
        with self._read() as s:
            stmt = select(ResourceSampleRow).order_by(ResourceSampleRow.t, ResourceSampleRow.id)
            if worker_id is not None:
                stmt = stmt.where(ResourceSampleRow.worker_id == worker_id)
            if run_id is not None:
                stmt = stmt.where(ResourceSampleRow.run_id == run_id)
            return [
                ResourceSampleRecord(
                    worker_id=r.worker_id, t=r.t, accelerator_index=r.accelerator_index,
                    accelerator_util=r.accelerator_util, accelerator_memory_used=r.accelerator_memory_used,
                    cpu_util=r.cpu_util, memory_used=r.memory_used, run_id=r.run_id,
                )
                for r in s.scalars(stmt)
            ]
