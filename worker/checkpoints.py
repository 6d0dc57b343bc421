"""The checkpoint store: each DONE model's weights, addressed by URL (docs/spec.md, "Checkpoints").

A store is opened from a URL:

- a plain path or a ``file://`` URL: a directory (the default: ``checkpoints``
  under the worker's state directory; a shared volume in clusters, the same
  path on every worker: a ReadWriteMany claim in k8s/, a path in the SLURM
  script);
- any other scheme (``s3://``, ``gs://``, ``memory://``, ...): object storage
  through fsspec, the optional extra ``aiperf[object-store]``.

A checkpoint is the file Keras 3 writes with ``model.save_weights(path)``
(``.weights.h5``) for the model `aiperf.keras_builder.build_model` builds from
the model's recorded graph at its kernel size. Its URI is absolute (a
``file://`` URL or the object's URL), so a reader needs nothing but the URI and
the SHA-256 the master recorded: `read_checkpoint` copies the file and checks
the digest. Layout: ``<store>/run-<run_id>/model-<model_id>.weights.h5``.

A local write goes to a temporary name in the same directory and is renamed
into place, so a reader never sees half a file under a checkpoint's name.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import unquote, urlparse

log = logging.getLogger(__name__)

SUFFIX = ".weights.h5"  # Keras 3 save_weights insists on it
_LAYOUT = re.compile(r"run-[1-9][0-9]{0,18}/model-([1-9][0-9]{0,18})" + re.escape(SUFFIX))  # what put names
_CHUNK = 1 << 20


class CheckpointError(Exception):
    """A checkpoint that cannot be written or read: missing, corrupt (SHA-256 mismatch), a bad
    URL, or fsspec absent for an object-store URL; the message names it."""


@dataclass(frozen=True)
class Checkpoint:
    uri: str
    sha256: str
    size_bytes: int
    weights_sha256: str = ""  # aiperf.weight_digest of the weights (set by worker.inheritance's save)


def _is_local(url: str) -> bool:
    try:
        scheme = urlparse(url).scheme
    except ValueError:  # e.g. an unbalanced "[" host: no URL this store wrote
        return False
    # a one-letter scheme is a Windows drive letter, not a URL
    return scheme in ("", "file") or len(scheme) == 1


def _local_path(url: str) -> Path:
    """The path of a plain path or a file:// URL."""
    parsed = urlparse(url)
    if parsed.scheme == "file":
        if parsed.netloc not in ("", "localhost"):
            raise CheckpointError(f"file URL {url!r} names host {parsed.netloc!r}; only local files can be read")
        return Path(unquote(parsed.path))
    return Path(url)


def _relative_name(run_id: int, model_id: int) -> str:
    if run_id < 1 or model_id < 1:
        raise CheckpointError(f"run and model ids must be >= 1, got run {run_id} model {model_id}")
    return f"run-{run_id}/model-{model_id}{SUFFIX}"


def _layout_model(relative: str) -> int:
    """The model id of a name in a store's layout (`run-<run>/model-<model>.weights.h5`); 0: not one."""
    match = _LAYOUT.fullmatch(relative)
    return int(match.group(1)) if match else 0


def _copy_hashing(src: BinaryIO, dst: BinaryIO) -> tuple[str, int]:
    digest, size = hashlib.sha256(), 0
    while chunk := src.read(_CHUNK):
        digest.update(chunk)
        dst.write(chunk)
        size += len(chunk)
    return digest.hexdigest(), size


def sha256_of(path: Path) -> str:
    """The SHA-256 (hex) of a file."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


class CheckpointStore:
    """Where a worker keeps its models' weights: `put` one, `delete` one by URI (a checkpoint
    already gone counts as deleted: a delete may be retried)."""

    url: str

    def put(self, run_id: int, model_id: int, weights_file: Path) -> Checkpoint:
        raise NotImplementedError

    def delete(self, uri: str) -> None:
        raise NotImplementedError

    def holds(self, uri: str, model_id: int) -> bool:
        """Whether `uri` is the name `put` gives model `model_id`'s checkpoint in this store (any
        run): a kept list read back from disk may name only such files (worker/undeleted.py)."""
        prefix = self.url + "/"
        return uri.startswith(prefix) and _layout_model(uri[len(prefix):]) == model_id


class LocalStore(CheckpointStore):
    """A directory (created on first use); URIs are file:// URLs of absolute paths."""

    def __init__(self, root: Path) -> None:
        self.root = root.expanduser().resolve()
        self.url = self.root.as_uri()

    def put(self, run_id: int, model_id: int, weights_file: Path) -> Checkpoint:
        target = self.root / _relative_name(run_id, model_id)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=SUFFIX, dir=target.parent)
            try:
                with open(weights_file, "rb") as src, os.fdopen(fd, "wb") as dst:
                    sha, size = _copy_hashing(src, dst)
                    dst.flush()
                    os.fsync(dst.fileno())  # on a shared volume another node may read it next
                os.replace(tmp, target)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        except OSError as exc:
            raise CheckpointError(f"cannot write checkpoint {target}: {exc}") from exc
        return Checkpoint(target.as_uri(), sha, size)

    def delete(self, uri: str) -> None:
        if not _is_local(uri):
            raise CheckpointError(f"{uri!r} is not in the local store {self.url}")
        try:
            path = _local_path(uri).resolve()
        except (OSError, RuntimeError) as exc:  # a symlink loop: not a checkpoint this store can delete
            raise CheckpointError(f"cannot delete checkpoint {uri}: {exc}") from exc
        if self.root not in path.parents:  # the master names what to delete: never outside the store
            raise CheckpointError(f"{uri!r} is not in the store {self.url}")
        try:
            path.unlink(missing_ok=True)  # already gone: deleted (a retried delete)
        except OSError as exc:
            raise CheckpointError(f"cannot delete checkpoint {path}: {exc}") from exc

    def holds(self, uri: str, model_id: int) -> bool:
        if not _is_local(uri):
            return False
        try:
            path = _local_path(uri)
            if not path.is_absolute():  # resolve() would read it against the working directory
                return False
            resolved = path.resolve()  # as delete() does: no symlink, `.` or `..` may lead elsewhere
            return resolved.as_uri() == uri and _layout_model(resolved.relative_to(self.root).as_posix()) == model_id
        except (CheckpointError, OSError, RuntimeError, ValueError):  # another host, a loop, not under root
            return False


class FsspecStore(CheckpointStore):
    """Object storage (or any fsspec file system) under a URL prefix."""

    def __init__(self, url: str) -> None:
        fsspec = _fsspec(url)
        self.url = url.rstrip("/")
        try:
            self.fs, self._root = fsspec.core.url_to_fs(self.url)
        except (ValueError, ImportError) as exc:  # an unknown protocol, or its driver missing
            raise CheckpointError(f"cannot open checkpoint store {url!r}: {exc}") from exc

    def put(self, run_id: int, model_id: int, weights_file: Path) -> Checkpoint:
        name = _relative_name(run_id, model_id)
        uri = f"{self.url}/{name}"
        try:
            with open(weights_file, "rb") as src, self.fs.open(f"{self._root}/{name}", "wb") as dst:
                sha, size = _copy_hashing(src, dst)
        except OSError as exc:
            raise CheckpointError(f"cannot write checkpoint {uri}: {exc}") from exc
        return Checkpoint(uri, sha, size)

    def delete(self, uri: str) -> None:
        if not uri.startswith(self.url + "/"):
            raise CheckpointError(f"{uri!r} is not in the store {self.url}")
        try:
            self.fs.rm(f"{self._root}/{uri[len(self.url) + 1:]}")
        except FileNotFoundError:  # already gone: deleted (a retried delete)
            pass
        except OSError as exc:
            raise CheckpointError(f"cannot delete checkpoint {uri}: {exc}") from exc


def _fsspec(url: str) -> Any:
    try:
        import fsspec
    except ImportError:
        raise CheckpointError(f"checkpoint URL {url!r} needs fsspec: pip install 'aiperf[object-store]'") from None
    return fsspec


def open_store(url: str) -> CheckpointStore:
    """The store at `url`: a plain path or file:// URL is a local directory, any other scheme fsspec."""
    if not url or not url.strip():
        raise CheckpointError("empty checkpoint store URL")
    if _is_local(url):
        return LocalStore(_local_path(url))
    return FsspecStore(url)


def read_checkpoint(uri: str, sha256: str, dest_dir: Path) -> Path:
    """Copy the checkpoint at `uri` into `dest_dir` and check its SHA-256; returns the copy's path.

    CheckpointError when it is missing, unreadable or its digest differs (the copy is removed).
    """
    if not uri:
        raise CheckpointError("no checkpoint URI")
    name = Path(urlparse(uri).path).name
    if not name.endswith(SUFFIX):
        raise CheckpointError(f"checkpoint URI {uri!r} does not name a {SUFFIX} file")
    dest_dir.mkdir(parents=True, exist_ok=True)
    dest = dest_dir / name
    try:
        if _is_local(uri):
            src_cm: Any = open(_local_path(uri), "rb")
        else:
            src_cm = _fsspec(uri).open(uri, "rb")
        with src_cm as src, open(dest, "wb") as dst:
            got, _ = _copy_hashing(src, dst)
    except FileNotFoundError:
        dest.unlink(missing_ok=True)
        raise CheckpointError(f"checkpoint {uri} is missing") from None
    except (OSError, ValueError) as exc:
        dest.unlink(missing_ok=True)
        raise CheckpointError(f"cannot read checkpoint {uri}: {exc}") from exc
    if got != sha256:
        dest.unlink(missing_ok=True)
        raise CheckpointError(f"checkpoint {uri} is corrupt: SHA-256 {got}, recorded {sha256 or '(none)'}")
    return dest


def save_model_weights(model: Any, directory: Path, model_id: int) -> Path:
    """`model.save_weights` into `directory` under the checkpoint's file name."""
    path = directory / f"model-{model_id}{SUFFIX}"
    model.save_weights(str(path))
    return path
