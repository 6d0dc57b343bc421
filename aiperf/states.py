"""The states of runs, models and workers: one enum each, used by the store, the master,
the CLI and the API's mapping (aiperf/api/enums.py maps them to the protobuf values).

Each member is a `str` equal to, and formatted as, its lower-case value: the form the
database columns, JSON exports and the CLI's `--state` options hold, so none of them
changes. Nothing outside this module spells a state as a string (tests/test_architecture.py).
"""

from __future__ import annotations

import enum
import sys

if sys.version_info >= (3, 11):
    from enum import StrEnum
else:  # pragma: no cover - Python 3.10
    class StrEnum(str, enum.Enum):
        """A str Enum printed and formatted as its value (what enum.StrEnum does from 3.11)."""

        def __str__(self) -> str:
            return str(self.value)

        def __format__(self, spec: str) -> str:
            return str(self.value).__format__(spec)


class RunState(StrEnum):
    """pending -> running -> stopping -> finished; or aborted (any time) / finished (from pending)."""

    PENDING = "pending"
    RUNNING = "running"
    STOPPING = "stopping"
    FINISHED = "finished"
    ABORTED = "aborted"


class ModelState(StrEnum):
    """queued -> training -> done, failed or cut; abandoned when its worker or run goes away.
    Cut: the run's deadline or a stop request ended its training before a first validation
    (not a failure: its reports count, it has no accuracy to rank it by)."""

    QUEUED = "queued"
    TRAINING = "training"
    DONE = "done"
    FAILED = "failed"
    ABANDONED = "abandoned"
    CUT = "cut"


class WorkerState(StrEnum):
    """Alive while it beats; lost after LOST_AFTER_BEATS heartbeat intervals without one (master/core/restart.py)."""

    ALIVE = "alive"
    LOST = "lost"


class CheckState(StrEnum):
    """The state of one validity rule of a run (aiperf.scoring.VALIDITY_RULES): pending while the
    run may still meet it; a run is valid when every rule is passed or not applicable."""

    PASSED = "passed"
    FAILED = "failed"
    PENDING = "pending"
    NOT_APPLICABLE = "not applicable"


class RoundOutcome(StrEnum):
    """How a worker's round of training ended (worker/trainer.py), before the worker tells the master:
    done (its model finishes DONE, or CUT without a validated epoch), failed (FAILED), stopped (a stop
    request or the run's end: DONE with what it validated, else CUT)."""

    DONE = "done"
    FAILED = "failed"
    STOPPED = "stopped"


# The groups of states the master's rules speak of (ordered, so that SQL built from them is stable).
ACTIVE_RUN_STATES: tuple[RunState, ...] = (RunState.PENDING, RunState.RUNNING, RunState.STOPPING)  # takes work
OVER_RUN_STATES: tuple[RunState, ...] = (RunState.FINISHED, RunState.ABORTED)  # refuses reports
OPEN_MODEL_STATES: tuple[ModelState, ...] = (ModelState.QUEUED, ModelState.TRAINING)  # takes reports
FINISHED_MODEL_STATES: tuple[ModelState, ...] = (ModelState.DONE, ModelState.FAILED, ModelState.CUT)  # a worker's ends
