"""The checkpoints retention let go that this worker has not (yet) deleted, kept in its state
directory (docs/spec.md, "Checkpoints").

The master records a checkpoint as deleted when it lets it go; a worker that then fails to
delete the file names it, with the error, in its next FinishModel (`undeleted_checkpoints`)
and the master records it as stored again. Until then the (model id, error) list is all that
says where the file is, so it is kept in a file as well as in memory: a worker that stops
(crash, SIGTERM, node drain) and starts again with the same name and master sends it with
its first FinishModel. The same file holds the deletes in flight: before deleting what a
FinishModel's reply lets go, the worker writes their (model id, uri) as `deleting`, and once
each is deleted or kept as undeleted it writes the file again without them; a worker that
stops in between deletes them again when it starts (worker/inheritance.py). So from that
first write on, a checkpoint the master let go is in one of the two lists until its file is gone.

One file per (master address, worker name): `<state dir>/undeleted-<hash>.json` beside
`credential-<hash>.json` (worker/state_file.py: mode 0600 in a 0700 directory, replaced
atomically, read with a size cap; removed when both lists are empty), holding
`{"undeleted": [[id, "error"], ...], "deleting": [[id, "uri"], ...]}` (a file without
`deleting` is one written before it existed: none in flight).

Bounded: at most `MAX_ENTRIES` undeleted (10 FinishModels' worth, `MAX_UNDELETED_PER_FINISH`
each), each error clipped to the master's bound (`MAX_REASON_CHARS`, printable), and at most
`MAX_DELETING` deletes in flight (the rest of a larger reply is kept as undeleted), each URI within the
master's bound (`MAX_CHECKPOINT_URI_CHARS`, printable), so the file is at most
`MAX_FILE_BYTES`. Each entry is checked when read: a model id in 1..MAX_ID and a text error,
or a URI within its bound (never clipped: it names a file); anything else is dropped with a
warning (one bad id would make the master refuse the whole list, which the agent then drops).
Whether a URI is in this worker's store is the store's to say (`CheckpointStore.holds`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from aiperf.api.bounds import clip_text
from aiperf.limits import MAX_CHECKPOINT_URI_CHARS, MAX_ID, MAX_REASON_CHARS, MAX_UNDELETED_PER_FINISH
from worker.state_file import StateFile

log = logging.getLogger(__name__)

MAX_ENTRIES = 10 * MAX_UNDELETED_PER_FINISH  # 10,000 (model id, error) pairs
MAX_DELETING = MAX_ENTRIES  # (model id, uri) pairs in flight; the rest of a larger reply is kept as undeleted
# an entry is `[id,"text"],`: an id of at most 10 digits and at most MAX_REASON_CHARS (an error) or
# MAX_CHECKPOINT_URI_CHARS (a URI) printable characters, each at most 4 bytes in UTF-8 (the JSON
# escapes of \n, \t, " and \ take 2)
_ENTRY_MAX_BYTES = 16 + 4 * MAX_REASON_CHARS
_DELETING_MAX_BYTES = 16 + 4 * MAX_CHECKPOINT_URI_CHARS
# about 61 MB; 64 KiB for the master, the name and the keys
MAX_FILE_BYTES = (64 << 10) + MAX_ENTRIES * _ENTRY_MAX_BYTES + MAX_DELETING * _DELETING_MAX_BYTES


@dataclass
class Kept:
    """What the file holds: (model id, error) not deleted, oldest first, and (model id, uri) being deleted."""

    undeleted: list[tuple[int, str]] = field(default_factory=list)
    deleting: list[tuple[int, str]] = field(default_factory=list)


def clean_error(error: str) -> str:
    """`error` as the master takes it: printable (newlines and tabs allowed), at most MAX_REASON_CHARS."""
    return clip_text(error, MAX_REASON_CHARS)


def _id_and_text(entry: Any) -> tuple[int, str] | None:
    """`[id, "text"]` with id an int in 1..MAX_ID (not a bool) as (id, text); None when not."""
    if not isinstance(entry, list) or len(entry) != 2:
        return None
    model_id, text = entry
    if type(model_id) is not int or not 1 <= model_id <= MAX_ID or not isinstance(text, str):
        return None
    return model_id, text


def valid_entry(entry: Any) -> tuple[int, str] | None:
    """A kept entry as (model id, error), or None when it is not one: `[id, "error"]` with
    id an int in 1..MAX_ID (not a bool) and a text error (clipped to the master's bound)."""
    pair = _id_and_text(entry)
    return (pair[0], clean_error(pair[1])) if pair is not None else None


def valid_deleting(entry: Any) -> tuple[int, str] | None:
    """A kept delete in flight as (model id, uri), or None when it is not one: `[id, "uri"]` with
    id an int in 1..MAX_ID (not a bool) and a printable uri of 1..MAX_CHECKPOINT_URI_CHARS."""
    pair = _id_and_text(entry)
    if pair is None or not 0 < len(pair[1]) <= MAX_CHECKPOINT_URI_CHARS or not pair[1].isprintable():
        return None
    return pair


class UndeletedFile:
    """The kept undeleted list and deletes in flight of one worker name at one master."""

    def __init__(self, state_dir: Path, master: str, name: str) -> None:
        self._file = StateFile(state_dir, "undeleted", master, name, MAX_FILE_BYTES)
        self.path = self._file.path

    def load(self) -> Kept:
        """The kept lists; empty when there is no file or it is not usable (logged). Entries that
        are not (model id, error) or (model id, uri) pairs are dropped, and those past the caps
        (logged)."""
        data = self._file.read()
        if data is None:
            return Kept()
        raw, in_flight = data.get("undeleted"), data.get("deleting", [])  # no "deleting": an older file
        if not isinstance(raw, list) or not isinstance(in_flight, list):
            log.warning("event=undeleted_file_ignored path=%s: no undeleted list, or deleting not a list", self.path)
            return Kept()
        kept = Kept(self._entries(raw, valid_entry, MAX_ENTRIES, "undeleted", "(model id, error)"),
                    self._entries(in_flight, valid_deleting, MAX_DELETING, "deleting", "(model id, uri)"))
        if kept.undeleted:
            log.info("event=undeleted_loaded path=%s count=%d: sent with the next FinishModel", self.path,
                     len(kept.undeleted))
        if kept.deleting:
            log.info("event=deleting_loaded path=%s count=%d: deletes a stopped worker had not finished",
                     self.path, len(kept.deleting))
        return kept

    def _entries(self, raw: list[Any], valid: Callable[[Any], tuple[int, str] | None], cap: int, what: str,
                 shape: str) -> list[tuple[int, str]]:
        entries = [e for e in map(valid, raw) if e is not None]
        if len(entries) != len(raw):
            log.warning("event=%s_entries_dropped path=%s dropped=%d: not %s pairs", what, self.path,
                        len(raw) - len(entries), shape)
        if len(entries) > cap:
            log.warning("event=%s_entries_dropped path=%s dropped=%d: more than %d", what, self.path,
                        len(entries) - cap, cap)
            del entries[cap:]
        return entries

    def save(self, undeleted: Sequence[tuple[int, str]], deleting: Sequence[tuple[int, str]] = ()) -> None:
        """Keep `undeleted` (its first MAX_ENTRIES, errors clipped) and `deleting` (its first
        MAX_DELETING) in place of the kept lists; both empty removes the file. OSError: not kept
        (the old file stays)."""
        if not undeleted and not deleting:
            self._file.remove()
            return
        self._file.write({"undeleted": [[int(m), clean_error(e)] for m, e in undeleted[:MAX_ENTRIES]],
                          "deleting": [[int(m), str(u)] for m, u in deleting[:MAX_DELETING]]})
