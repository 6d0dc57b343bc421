"""What a restarted master does once it serves again: the workers of before reconnect.

A worker's grace is counted from when it could reconnect (the master serving), not
from the master's start: every alive worker has LOST_AFTER_BEATS intervals from then,
one with an open model RESTART_GRACE_S (its client reconnects within a few seconds,
aiperf/api/client.py bounds the back-off, then beats at its next turn). After an
outage longer than the master's resume_outage_s, the models of before end instead:
abandoned with the outage named, their workers lost (told at their next heartbeat,
they start new rounds).
"""

from __future__ import annotations

import logging

from master.core.heartbeats import Heartbeats
from master.store.protocol import Store
from master.store.records import Outage

log = logging.getLogger(__name__)

LOST_AFTER_BEATS = 3  # heartbeat intervals of silence after which a worker is lost
RESTART_GRACE_S = 30.0  # a worker with an open model, after a restart (at least LOST_AFTER_BEATS intervals)
RESUME_OUTAGE_S = 600.0  # a master down longer than this does not wait for the models of before


def resume(store: Store, heartbeats: Heartbeats, outage: Outage | None, now: float, heartbeat_interval_s: float,
           resume_outage_s: float) -> list[int]:
    """Grant the workers of before their grace from `now`, or end their models after a long
    outage; returns the ids of the models abandoned."""
    owners = [w for w in store.open_models_by_worker() if heartbeats.is_alive(w)]
    heartbeats.grant_grace(heartbeats.alive_ids(), now, 0.0)  # lost LOST_AFTER_BEATS beats after serving
    if outage is not None and outage.duration_s > resume_outage_s and owners:
        reason = f"master down {outage.duration_s:.0f} s, longer than the {resume_outage_s:g} s models wait"
        abandoned = store.mark_workers_lost(owners, now, reason)
        heartbeats.lose(owners)
        log.warning("event=models_abandoned model_ids=%s reason=outage downtime_s=%.1f", abandoned,
                    outage.duration_s)
        return abandoned
    grace_s = max(RESTART_GRACE_S, LOST_AFTER_BEATS * heartbeat_interval_s)
    heartbeats.grant_grace(owners, now, grace_s)
    if owners:
        log.info("event=restart_grace workers=%d grace_s=%g", len(owners), grace_s)
    return []
