"""The worker's credential, kept in its state directory across restarts.

Register returns a per-worker credential; a restarted worker presents it to
get its name and worker id back (without it, the name stays taken until the
master marks the old worker lost). One file per (master address, worker name):
`<state dir>/credential-<hash>.json`, mode 0600 in a 0700 directory, replaced
atomically (worker/state_file.py). One file each, not one shared file, because
a shared home directory (SLURM) holds the state of every node.
"""

from __future__ import annotations

import logging
from pathlib import Path

from worker.state_file import StateFile

log = logging.getLogger(__name__)

MAX_FILE_BYTES = 4096  # a credential file is ~200 bytes; anything larger is not ours


class CredentialFile:
    """The kept credential of one worker name at one master."""

    def __init__(self, state_dir: Path, master: str, name: str) -> None:
        self._file = StateFile(state_dir, "credential", master, name, MAX_FILE_BYTES)
        self.path = self._file.path

    def load(self) -> str:
        """The kept credential; "" when there is none or the file is not usable (logged)."""
        data = self._file.read()
        credential = data.get("credential") if data is not None else None
        return credential if isinstance(credential, str) else ""

    def save(self, worker_id: int, credential: str) -> None:
        """Keep `credential` (mode 0600, written to a temporary file, then renamed over the old one)."""
        self._file.write({"worker_id": worker_id, "credential": credential})
        log.info("event=credential_saved path=%s worker_id=%d", self.path, worker_id)
