"""The worker's credential, kept in its state directory across restarts.

Register returns a per-worker credential; a restarted worker presents it to
get its name and worker id back (without it, the name stays taken until the
master marks the old worker lost). One file per (master address, worker name):
`<state dir>/credential-<hash>.json`, mode 0600 in a 0700 directory, replaced
atomically. One file each, not one shared file, because a shared home
directory (SLURM) holds the state of every node.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import stat
from pathlib import Path

log = logging.getLogger(__name__)

MAX_FILE_BYTES = 4096  # a credential file is ~200 bytes; anything larger is not ours


class CredentialFile:
    """The kept credential of one worker name at one master."""

    def __init__(self, state_dir: Path, master: str, name: str) -> None:
        self.master = master
        self.name = name
        key = hashlib.sha256(f"{master}\0{name}".encode("utf-8", "surrogatepass")).hexdigest()[:32]
        self.path = Path(state_dir).expanduser() / f"credential-{key}.json"

    def load(self) -> str:
        """The kept credential; "" when there is none or the file is not usable (logged)."""
        try:
            with open(self.path, "rb") as f:
                if stat.S_IMODE(os.fstat(f.fileno()).st_mode) & 0o077:
                    log.warning("event=credential_file_open_to_others path=%s: it should be mode 0600", self.path)
                raw = f.read(MAX_FILE_BYTES + 1)
            if len(raw) > MAX_FILE_BYTES:
                raise ValueError(f"larger than {MAX_FILE_BYTES} bytes")
            data = json.loads(raw)
        except FileNotFoundError:
            return ""
        except (OSError, ValueError) as exc:
            log.warning("event=credential_file_unreadable path=%s error=%s", self.path, exc)
            return ""
        if not isinstance(data, dict) or (data.get("master"), data.get("name")) != (self.master, self.name):
            log.warning("event=credential_file_ignored path=%s: not this worker's", self.path)
            return ""
        credential = data.get("credential")
        return credential if isinstance(credential, str) else ""

    def save(self, worker_id: int, credential: str) -> None:
        """Keep `credential` (mode 0600, written to a temporary file, then renamed over the old one)."""
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.fchmod(fd, 0o600)  # also when an old temporary file had other bits
            with os.fdopen(fd, "w") as f:
                json.dump({"master": self.master, "name": self.name, "worker_id": worker_id,
                           "credential": credential}, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        log.info("event=credential_saved path=%s worker_id=%d", self.path, worker_id)
