"""Per-worker identity: the credential Register issues and every later worker call proves.

The shared worker token (master/rpc/tokens.py) admits a process to the cluster;
the per-worker credential binds each call to one worker. Register returns a
random secret; the store keeps only its hash. Every later call names a worker
id and carries a credential (servicers read it from the `aiperf-worker-credential`
metadata and pass it on as a plain string); `WorkerCredentials.verify` is the one
place that decides whether the two belong together.

The rule for names (`claim`): a name held by a live worker goes only to a
caller presenting that worker's credential (a restart); otherwise the name is
free once its worker is marked lost, and a new credential is issued.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
from typing import Callable

from aiperf.limits import MAX_CREDENTIAL_CHARS  # ours have 43: a longer one cannot match
from master.store.errors import AlreadyExists, PermissionDenied
from master.store.records import WorkerRecord

CREDENTIAL_BYTES = 32  # 256 random bits (at least 128 are required)
_UNKNOWN = object()  # a worker whose hash is not cached yet


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

    def __init__(self, load: Callable[[int], str | None]) -> None:
        self._load = load  # worker id -> stored hash (None: none yet); NotFound when unknown
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
            stored = self._hashes.get(worker_id, _UNKNOWN)
            proven = self._proven.get(worker_id)
        if stored is _UNKNOWN:
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
        if self._hash_of(worker_id) is None:
            raise PermissionDenied(f"worker {worker_id} registered before worker credentials existed: register again")
        raise PermissionDenied(f"worker {worker_id}: the credential is not this worker's (a call naming another "
                               "worker's id, or a name taken over after this worker was marked lost)")

    def claim(self, existing: WorkerRecord | None, credential: str, alive: bool, lost_after_s: float) -> str:
        """The credential a Register of `existing`'s name gets: the presented one
        when it is that worker's own (a restart), else a new one when the name is
        new, its worker is lost, or it never had a credential. AlreadyExists when
        a live worker holds the name and the caller cannot prove to be it."""
        if existing is None:
            return new_credential()
        if self.matches(existing.id, credential):
            return credential
        if alive and self._hash_of(existing.id) is not None:
            raise AlreadyExists(
                f"worker name {existing.name[:64]!r} is in use by a live worker (id {existing.id}); it can be "
                f"re-registered by presenting its credential, or after it is marked lost (silent for "
                f"{lost_after_s:g} s)")
        return new_credential()
