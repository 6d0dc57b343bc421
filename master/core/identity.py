"""Per-worker identity: the credential Register issues and every later worker call proves.

The shared worker token (master/rpc/tokens.py) admits a process to the cluster;
the per-worker credential binds each call to one worker. Register returns a
random secret; the store keeps only its hash. Every later call names a worker
id and carries a credential (servicers read it from the `aiperf-worker-credential`
metadata and pass it on as a plain string); `WorkerCredentials.verify` is the one
place that decides whether the two belong together.

The rule for names (`claim`): a name held by a live worker goes only to a
caller presenting that worker's credential (a restart); otherwise the name is
free once its worker is marked lost. Every Register issues a new credential and
voids the one before (rotation), so a copy of a credential is worth nothing once
its owner restarted (a Register whose reply was lost gets its name back once its
worker is marked lost, as after a lost state directory). A copy presented while
its owner is active (a heartbeat within the last
heartbeat interval: a restarted worker has been silent longer) is a conflict:
the credential is voided for both processes (`CredentialConflict`), the master
reports it, and the name is free once its worker is marked lost.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
import threading
from typing import Callable

from aiperf.limits import MAX_CREDENTIAL_CHARS  # ours have 43: a longer one cannot match
from master.core.heartbeats import Heartbeats
from master.core.restart import LOST_AFTER_BEATS
from master.store.errors import AlreadyExists, PermissionDenied
from master.store.records import WorkerRecord

log = logging.getLogger(__name__)

CREDENTIAL_BYTES = 32  # 256 random bits (at least 128 are required)
VOID_HASH = "void"  # the stored hash of a credential voided after a conflict: no credential hashes to it


class CredentialConflict(PermissionDenied):
    """A worker's current credential presented to Register while the worker is active."""


def new_credential() -> str:
    """A fresh credential: 32 random bytes, URL-safe base64 (43 characters)."""
    return secrets.token_urlsafe(CREDENTIAL_BYTES)


def credential_hash(credential: str) -> str:
    """What the store keeps of a credential: its SHA-256, in hex.

    A fast unsalted hash is enough here, unlike for passwords: the secret is
    256 uniformly random bits, so neither a dictionary nor brute force can
    invert the hash, and a deliberately slow KDF (bcrypt, scrypt) would only cost
    CPU on every call. A stolen database therefore yields no usable credential.
    """
    return hashlib.sha256(credential.encode("utf-8", "surrogatepass")).hexdigest()


class WorkerCredentials:
    """The credential hash of every worker, cached (worker id -> hash) and
    loaded from the store on a miss, so a restarted master knows them all.
    Thread-safe."""

    def __init__(self, load: Callable[[int], str | None], store: Callable[[int, str], None] | None = None,
                 on_conflict: Callable[[], object] | None = None) -> None:
        self._load = load  # worker id -> stored hash (None: none yet); NotFound when unknown
        self._store = store  # (worker id, hash): a voided credential, kept across restarts
        self._on_conflict = on_conflict  # counts a conflict (a metric)
        self._lock = threading.Lock()
        self._hashes: dict[int, str | None] = {}
        # worker id -> (the credential object last proven, the hash it matched): a Connect
        # stream passes the same str object with every message, which then skips the
        # hash while that hash is still the worker's (identity, not equality: exact)
        self._proven: dict[int, tuple[str, str]] = {}

    def cached(self, worker_id: int) -> bool:
        """True when verify(worker_id, ...) will not touch the store."""
        with self._lock:
            return worker_id in self._hashes

    def set(self, worker_id: int, digest: str | None) -> None:
        """The worker's credential hash is `digest` now (the one before is void)."""
        with self._lock:
            self._hashes[worker_id] = digest
            self._proven.pop(worker_id, None)

    def _hash_of(self, worker_id: int) -> str | None:
        with self._lock:
            if worker_id in self._hashes:
                return self._hashes[worker_id]
        digest = self._load(worker_id)
        with self._lock:
            return self._hashes.setdefault(worker_id, digest)

    def matches(self, worker_id: int, credential: str) -> bool:
        """True when `credential` is the worker's own (never for a worker without one)."""
        with self._lock:  # one acquisition on the hot path: the hash and the last proof together
            cached = worker_id in self._hashes
            stored = self._hashes.get(worker_id)
            proven = self._proven.get(worker_id)
        if not cached:
            stored = self._hash_of(worker_id)
        if stored is None or not credential or len(credential) > MAX_CREDENTIAL_CHARS:
            return False
        if proven is not None and proven[0] is credential and proven[1] is stored:
            return True
        if not hmac.compare_digest(credential_hash(credential), stored):
            return False
        with self._lock:
            self._proven[worker_id] = (credential, stored)
        return True

    def verify(self, worker_id: int, credential: str) -> None:
        """PermissionDenied unless `credential` is worker `worker_id`'s own.
        The message names the worker id, never the credential."""
        if self.matches(worker_id, credential):
            return
        if not credential:
            raise PermissionDenied(f"worker {worker_id}: no worker credential: send the one Register returned as "
                                   "'aiperf-worker-credential' metadata")
        stored = self._hash_of(worker_id)
        if stored is None:
            raise PermissionDenied(f"worker {worker_id} registered before worker credentials existed: register again")
        if stored == VOID_HASH:
            raise PermissionDenied(f"worker {worker_id}: its credential was voided: two processes presented it "
                                   "(a copy in use); register again once the worker is marked lost")
        raise PermissionDenied(f"worker {worker_id}: the credential is not this worker's (a call naming another "
                               "worker's id, or a name taken over after this worker was marked lost)")

    def _void(self, worker: WorkerRecord) -> None:
        """Two processes hold the worker's credential: void it for both (stored, so a restart
        keeps it void) and report it; the name is free once the worker is marked lost."""
        if self._store is not None:
            self._store(worker.id, VOID_HASH)
        self.set(worker.id, VOID_HASH)
        if self._on_conflict is not None:
            self._on_conflict()
        log.warning("event=credential_conflict worker_id=%d name=%s host=%s: a copy of its credential was "
                    "presented while it is active; voided for both", worker.id, worker.name[:64], worker.host[:64])

    def claim(self, existing: WorkerRecord | None, credential: str, heartbeats: Heartbeats, now: float,
              interval_s: float) -> str:
        """The new credential a Register of `existing`'s name gets (every Register gets a new
        one). The name's worker must be lost, or the caller present its credential (a restart).
        AlreadyExists when a live
        worker holds the name and the caller cannot prove to be it; CredentialConflict when
        the current credential comes while its worker beat within the last interval (two
        processes hold it)."""
        if existing is None:
            return new_credential()
        alive = heartbeats.is_alive(existing.id)
        active = heartbeats.heard_within(existing.id, now, interval_s)  # a beat in the last interval
        lost_after_s = LOST_AFTER_BEATS * interval_s
        if self.matches(existing.id, credential):
            if active:
                self._void(existing)
                raise CredentialConflict(
                    f"worker name {existing.name[:64]!r}: its credential was presented while the worker (id "
                    f"{existing.id}) is active: two processes hold it. It is void now, for both; the name is "
                    f"free once the worker is marked lost (silent for {lost_after_s:g} s)")
            return new_credential()
        if alive and self._hash_of(existing.id) is not None:
            raise AlreadyExists(
                f"worker name {existing.name[:64]!r} is in use by a live worker (id {existing.id}); it can be "
                f"re-registered by presenting its credential, or after it is marked lost (silent for "
                f"{lost_after_s:g} s)")
        return new_credential()
