"""The checkpoints retention let go that this worker could not delete, kept in its state
directory until the master has them (docs/spec.md, "Checkpoints").

The master records a checkpoint as deleted when it lets it go; a worker that then fails to
delete the file names it, with the error, in its next FinishModel (`undeleted_checkpoints`)
and the master records it as stored again. Until then the (model id, error) list is all that
says where the file is, so it is kept in a file as well as in memory: a worker that stops
(crash, SIGTERM, node drain) and starts again with the same name and master sends it with
its first FinishModel. One file per (master address, worker name):
`<state dir>/undeleted-<hash>.json` beside `credential-<hash>.json` (worker/state_file.py:
mode 0600 in a 0700 directory, replaced atomically, read with a size cap; removed when the
list is empty).

Bounded: at most `MAX_ENTRIES` entries (10 FinishModels' worth, `MAX_UNDELETED_PER_FINISH`
each), each error clipped to the master's bound (`MAX_REASON_CHARS`, printable), so the
file is at most `MAX_FILE_BYTES`. Each entry is checked when read: a model id in 1..MAX_ID
and a text error; anything else is dropped with a warning (one bad id would make the master
refuse the whole list, which the agent then drops).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Sequence

from aiperf.api.bounds import MAX_ID, MAX_REASON_CHARS, MAX_UNDELETED_PER_FINISH, clip_text
from worker.state_file import StateFile

log = logging.getLogger(__name__)

MAX_ENTRIES = 10 * MAX_UNDELETED_PER_FINISH  # 10,000 (model id, error) pairs
# an entry is `[id,"error"],`: an id of at most 10 digits and an error of at most MAX_REASON_CHARS
# printable characters, each at most 4 bytes in UTF-8 (the JSON escapes of \n, \t, " and \ take 2)
_ENTRY_MAX_BYTES = 16 + 4 * MAX_REASON_CHARS
MAX_FILE_BYTES = (64 << 10) + MAX_ENTRIES * _ENTRY_MAX_BYTES  # about 20 MB; 64 KiB for the master and name


def clean_error(error: str) -> str:
    """`error` as the master takes it: printable (newlines and tabs allowed), at most MAX_REASON_CHARS."""
    return clip_text(error, MAX_REASON_CHARS)


def valid_entry(entry: Any) -> tuple[int, str] | None:
    """A kept entry as (model id, error), or None when it is not one: `[id, "error"]` with
    id an int in 1..MAX_ID (not a bool) and a text error (clipped to the master's bound)."""
    if not isinstance(entry, list) or len(entry) != 2:
        return None
    model_id, error = entry
    if type(model_id) is not int or not 1 <= model_id <= MAX_ID or not isinstance(error, str):
        return None
    return model_id, clean_error(error)


class UndeletedFile:
    """The kept undeleted list of one worker name at one master."""

    def __init__(self, state_dir: Path, master: str, name: str) -> None:
        self._file = StateFile(state_dir, "undeleted", master, name, MAX_FILE_BYTES)
        self.path = self._file.path

    def load(self) -> list[tuple[int, str]]:
        """The kept list, oldest first; [] when there is none or the file is not usable (logged).
        Entries that are not (model id, error) pairs are dropped, and those past MAX_ENTRIES
        (logged)."""
        data = self._file.read()
        if data is None:
            return []
        raw = data.get("undeleted")
        if not isinstance(raw, list):
            log.warning("event=undeleted_file_ignored path=%s: no undeleted list", self.path)
            return []
        entries = [e for e in map(valid_entry, raw) if e is not None]
        if len(entries) != len(raw):
            log.warning("event=undeleted_entries_dropped path=%s dropped=%d: not (model id, error) pairs",
                        self.path, len(raw) - len(entries))
        if len(entries) > MAX_ENTRIES:
            log.warning("event=undeleted_entries_dropped path=%s dropped=%d: more than %d", self.path,
                        len(entries) - MAX_ENTRIES, MAX_ENTRIES)
            del entries[MAX_ENTRIES:]
        if entries:
            log.info("event=undeleted_loaded path=%s count=%d: sent with the next FinishModel", self.path,
                     len(entries))
        return entries

    def save(self, undeleted: Sequence[tuple[int, str]]) -> None:
        """Keep `undeleted` (its first MAX_ENTRIES, errors clipped) in place of the kept list;
        an empty list removes the file. OSError: not kept (the old file stays)."""
        if not undeleted:
            self._file.remove()
            return
        self._file.write({"undeleted": [[int(m), clean_error(e)] for m, e in undeleted[:MAX_ENTRIES]]})
