"""A file the worker keeps in its state directory across restarts (`aiperf worker --state-dir`).

One file per (master address, worker name) and kind: `<state dir>/<kind>-<hash>.json`, the
hash of the address and the name, so that a shared home directory (SLURM) holds every node's
files side by side. Each holds a JSON object naming its master and worker name. Written
private (mode 0600 in a 0700 directory) to a temporary file that is then renamed over the
old one, so a reader finds the old file or the new one, never a part of one; read with a
size cap. A file that cannot be used (unreadable, too large, not JSON, another worker's)
is logged and read as none, never raised: the worker goes on without it.

Kinds: `credential` (worker/credentials.py), `undeleted` (worker/undeleted.py).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import stat
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


class StateFile:
    """The `kind` file of one worker name at one master, at most `max_bytes` long."""

    def __init__(self, state_dir: Path, kind: str, master: str, name: str, max_bytes: int) -> None:
        self.kind = kind
        self.master = master
        self.name = name
        self.max_bytes = max_bytes
        key = hashlib.sha256(f"{master}\0{name}".encode("utf-8", "surrogatepass")).hexdigest()[:32]
        self.path = Path(state_dir).expanduser() / f"{kind}-{key}.json"

    def read(self) -> dict[str, Any] | None:
        """The file's object (with "master" and "name" this worker's); None when there is no file
        or it is not usable (logged as event=<kind>_file_unreadable or <kind>_file_ignored)."""
        try:
            with open(self.path, "rb") as f:
                if stat.S_IMODE(os.fstat(f.fileno()).st_mode) & 0o077:
                    log.warning("event=%s_file_open_to_others path=%s: it should be mode 0600", self.kind, self.path)
                raw = f.read(self.max_bytes + 1)
            if len(raw) > self.max_bytes:
                raise ValueError(f"larger than {self.max_bytes} bytes")
            data = json.loads(raw.decode("utf-8", "surrogatepass"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError, RecursionError) as exc:
            log.warning("event=%s_file_unreadable path=%s error=%s", self.kind, self.path, exc)
            return None
        if not isinstance(data, dict) or (data.get("master"), data.get("name")) != (self.master, self.name):
            log.warning("event=%s_file_ignored path=%s: not this worker's", self.kind, self.path)
            return None
        return data

    def write(self, fields: dict[str, Any]) -> None:
        """Replace the file with `fields` plus this worker's master and name (mode 0600, written to
        a temporary file, then renamed over the old one). OSError: not written (the old file stays)."""
        text = json.dumps({"master": self.master, "name": self.name, **fields}, ensure_ascii=False,
                          separators=(",", ":"))
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            with os.fdopen(fd, "wb") as f:
                os.fchmod(f.fileno(), 0o600)  # also when an old temporary file had other bits
                f.write(text.encode("utf-8", "surrogatepass"))
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise

    def remove(self) -> None:
        """No file any more (OSError: it stays)."""
        self.path.unlink(missing_ok=True)
