"""Remote storage in a local directory (``file:///path``): the embedded default, and tests.

Each key is a file under the root, ``/`` parts becoming directories. A put writes a hidden
temporary file beside the target, fsyncs it, renames it over the target and fsyncs the
directory, so readers see the old object or the new one, never a mix, even after a crash.
Temporary files are named ``.<name>.<32 hex digits>`` + :data:`TMP_SUFFIX`; listings skip them
and keys may not end with the suffix. A put that fails removes its temporary file; one whose
process is killed leaves it (its sidecar's, when it was killed writing that), for
``abort_incomplete_puts`` to remove.
Directories are kept after their last object is deleted: there is one per partition, and
removing them would race with a concurrent put into the same partition. Unlike S3, a key cannot
name an object and also be the directory of other keys (``a`` and ``a/b``); rlm's key layout
never needs both, and such a put fails with a :class:`~rlm.errors.StorageError`.
An object's metadata, when put with some, is a sidecar file ``<name>`` + :data:`META_SUFFIX` (JSON)
beside it, written before the object and deleted with it; listings skip sidecars, and keys may
not end with the suffix. A sidecar that is not a JSON object (damaged on disk) is a
:class:`~rlm.errors.CorruptDataError` naming the object's key: the object itself may be whole.
No key may lead out of the root through a symlink inside it: reads (the hot path of remote
lookups) and size queries have the kernel refuse that in the open itself
(:mod:`rlm.storage.beneath`); puts and deletes check the resolved path first.
A key part longer than :data:`PIECE_BYTES` (a partition's directory of a topic with a name of
over 220 characters, as Kafka allows 249; a file system's names end at 255 bytes) is stored as
directories of pieces, each but the last ending with :data:`CONTINUED`; listings join them again,
and key parts may not end with that mark. Every directory a put creates is made durable (its
parent fsynced) with the object, and so is the sidecar.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import BinaryIO

from rlm.errors import (
    CorruptDataError,
    InvalidObjectKeyError,
    NotFoundError,
    StorageError,
    StorageUnavailableError,
)
from rlm.log.files import fsync_dir
from rlm.metastore.model import PendingUpload
from rlm.storage.beneath import Beneath, OutsideError
from rlm.storage.layout import validate_key
from rlm.storage.payload import Payload, check_expected_crc32c, crc32c_update
from rlm.storage.protocol import STREAM_PIECE_BYTES, PutResult, PutSource, check_stream_arguments
from rlm.storage.ratelimit import RateLimiter

TMP_SUFFIX = ".rlm-tmp"
#: The suffix of an object's metadata sidecar.
META_SUFFIX = ".rlm-meta"
#: Bytes copied at a time when putting a file.
COPY_CHUNK_BYTES = 1024 * 1024
_HEX_DIGITS = "0123456789abcdef"
#: Bytes of a key part stored as one name at most; longer parts are cut into pieces this long
#: (room is left for the temporary file's affixes and the sidecar's suffix within NAME_MAX, 255).
PIECE_BYTES = 200
#: Ends a stored directory name whose key part goes on in the directory below it.
CONTINUED = "+~"
#: ``errno`` values after which the same call may succeed later (space freed, load gone).
_TRANSIENT_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EAGAIN, errno.EINTR})


class FilesystemStorage:
    """A :class:`~rlm.storage.protocol.RemoteStorage` in a directory. Thread-safe."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        """Use ``root`` (created when missing) as the store's root directory."""
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self._beneath = Beneath(os.path.realpath(self.root))

    def __repr__(self) -> str:
        return f"FilesystemStorage({str(self.root)!r})"

    # -- keys -----------------------------------------------------------------------------

    def _check_key(self, key: str) -> str:
        """Check ``key``; returns where it is stored, relative to the root (:func:`_stored`)."""
        validate_key(key)
        for suffix in (TMP_SUFFIX, META_SUFFIX):
            if key.endswith(suffix):
                raise InvalidObjectKeyError(f"invalid object key {key!r}: ends with {suffix}", key=key)
        if CONTINUED in key and any(part.endswith(CONTINUED) for part in key.split("/")):
            raise InvalidObjectKeyError(
                f"invalid object key {key!r}: a part ends with {CONTINUED}, "
                "which marks a long part cut in pieces",
                key=key,
            )
        return _stored(key)

    def _outside(self, key: str) -> InvalidObjectKeyError:
        return InvalidObjectKeyError(f"invalid object key {key!r}: resolves outside {self.root}", key=key)

    def _path(self, key: str) -> Path:
        stored = self._check_key(key)
        # The parts are checked already; this catches a symlink inside the root pointing out of it.
        try:
            self._beneath.checked_path(stored)
        except OutsideError as exc:
            raise self._outside(key) from exc
        return self.root / stored

    # -- RemoteStorage --------------------------------------------------------------------

    def put_object(
        self,
        key: str,
        source: PutSource,
        *,
        size: int | None = None,
        crc32c: int | None = None,
        rate_limiter: RateLimiter | None = None,
        on_upload: Callable[[PendingUpload], None] | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> PutResult:
        # A killed put leaves a temporary file that abort_incomplete_puts finds by its name, so
        # there is no upload to name: on_upload is never called.
        target = self._path(key)
        with Payload(source, size) as payload:
            tmp = _tmp_path(target)
            try:
                self._make_directories(target.parent)
                with open(tmp, "wb") as out:
                    checksum = _copy(payload, out, rate_limiter)
                    out.flush()
                    os.fsync(out.fileno())
                check_expected_crc32c(key, checksum, crc32c)
                self._put_sidecar(target, metadata)
                os.replace(tmp, target)
                fsync_dir(target.parent)
            except OSError as exc:
                raise _os_error(exc, key, "store") from exc
            finally:
                with contextlib.suppress(OSError):  # never in place of the error that got here
                    tmp.unlink(missing_ok=True)
            return PutResult(key, payload.size, checksum)

    def _make_directories(self, directory: Path) -> None:
        """Create ``directory`` and the missing ones above it, each one's entry made durable
        (its parent fsynced): an object put below survives a crash with the path to it."""
        missing: list[Path] = []
        while directory != self.root and not directory.is_dir():
            missing.append(directory)
            directory = directory.parent
        for created in reversed(missing):
            created.mkdir(exist_ok=True)
            fsync_dir(created.parent)

    @staticmethod
    def _put_sidecar(target: Path, metadata: Mapping[str, str] | None) -> None:
        """Write (or, without metadata, remove) the sidecar of the object about to be ``target``."""
        sidecar = target.with_name(target.name + META_SUFFIX)
        if not metadata:
            sidecar.unlink(missing_ok=True)
            return
        tmp = _tmp_path(sidecar)
        try:
            with open(tmp, "wb") as out:
                out.write(json.dumps(dict(metadata), sort_keys=True).encode("utf-8"))
                out.flush()
                os.fsync(out.fileno())  # renamed in place, it must not come back empty after a crash
            os.replace(tmp, sidecar)
        finally:
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)

    def object_metadata(self, key: str) -> dict[str, str] | None:
        if self.object_size(key) is None:
            return None
        path = self._path(key)
        try:
            text = path.with_name(path.name + META_SUFFIX).read_text(encoding="utf-8")
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise _os_error(exc, key, "read the metadata of") from exc
        try:
            found = json.loads(text)
        except ValueError as exc:
            raise CorruptDataError(f"the metadata sidecar is not JSON: {exc}", path=key) from exc
        if not isinstance(found, dict):
            raise CorruptDataError("the metadata sidecar is not a JSON object", path=key)
        return {str(k): str(v) for k, v in found.items()}

    def read_range(self, key: str, start: int, length: int) -> bytes:
        if start < 0 or length < 0:
            raise ValueError(f"bad range: start {start}, length {length}")
        # The hot path of every remote lookup: one system call checks and opens (beneath.py).
        fd = self._open(key, os.O_RDONLY, "read")
        if fd is None:
            raise NotFoundError(f"no object {key!r} in {self.root}")
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):  # a directory: a prefix, not an object
                raise NotFoundError(f"no object {key!r} in {self.root}")
            chunks: list[bytes] = []
            position, remaining = start, length
            while remaining > 0:
                chunk = os.pread(fd, remaining, position)
                if not chunk:
                    break
                chunks.append(chunk)
                position += len(chunk)
                remaining -= len(chunk)
            return b"".join(chunks)
        finally:
            os.close(fd)

    def stream_range(
        self, key: str, start: int, length: int, *, piece_bytes: int = STREAM_PIECE_BYTES
    ) -> Iterator[bytes]:
        check_stream_arguments(start, length, piece_bytes)
        self._check_key(key)
        return self._stream(key, start, start + length, piece_bytes)

    def _stream(self, key: str, position: int, end: int, piece_bytes: int) -> Iterator[bytes]:
        fd = self._open(key, os.O_RDONLY, "read")
        if fd is None:
            raise NotFoundError(f"no object {key!r} in {self.root}")
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):  # a directory: a prefix, not an object
                raise NotFoundError(f"no object {key!r} in {self.root}")
            while position < end:
                try:
                    piece = os.pread(fd, min(piece_bytes, end - position), position)
                except OSError as exc:
                    raise _os_error(exc, key, "read") from exc
                if not piece:
                    return
                position += len(piece)
                yield piece
        finally:
            os.close(fd)

    def object_size(self, key: str) -> int | None:
        fd = self._open(key, os.O_PATH, "find the size of")
        if fd is None:
            return None
        try:
            found = os.fstat(fd)
        finally:
            os.close(fd)
        return found.st_size if stat.S_ISREG(found.st_mode) else None

    def _open(self, key: str, flags: int, action: str) -> int | None:
        """An fd of ``key``'s file (or directory), opened beneath the root; None when there is none."""
        stored = self._check_key(key)
        try:
            return self._beneath.open(stored, flags)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OutsideError as exc:
            raise self._outside(key) from exc
        except OSError as exc:
            raise _os_error(exc, key, action) from exc

    def delete_objects(self, keys: Iterable[str]) -> None:
        paths = {key: self._path(key) for key in keys}  # check every key before deleting any
        for key, path in paths.items():
            for target in (path, path.with_name(path.name + META_SUFFIX)):
                try:
                    target.unlink()
                except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
                    pass  # no object there (a directory is a prefix, not an object)
                except OSError as exc:
                    raise _os_error(exc, key, "delete") from exc
        for parent in {path.parent for path in paths.values()}:
            if parent.is_dir():
                fsync_dir(parent)

    def abort_incomplete_puts(self, keys: Iterable[str], uploads: Iterable[PendingUpload] = ()) -> None:
        # Temporary files are found by name, so only the keys matter; the keys of ``uploads``
        # (there are none: puts here name no upload) are handled like the others.
        keys = [*keys, *(upload.key for upload in uploads)]
        paths = {key: self._path(key) for key in keys}  # check every key before removing anything
        by_directory: dict[Path, dict[str, str]] = {}
        for key, path in paths.items():  # a put writes its object's sidecar first, by a put of its own
            names = by_directory.setdefault(path.parent, {})
            names[path.name] = names[path.name + META_SUFFIX] = key
        for directory, names in by_directory.items():
            try:
                with os.scandir(directory) as entries:
                    leftovers = [
                        (names[target], Path(entry.path))
                        for entry in entries
                        if (target := _put_target(entry.name)) is not None and target in names
                    ]
            except (FileNotFoundError, NotADirectoryError):
                continue  # nothing was ever put there
            except OSError as exc:
                raise _os_error(exc, next(iter(names.values())), "list the unfinished puts of") from exc
            for key, leftover in leftovers:
                try:
                    leftover.unlink(missing_ok=True)
                except OSError as exc:
                    raise _os_error(exc, key, f"remove {leftover.name}, an unfinished put of") from exc
            if leftovers:
                try:
                    fsync_dir(directory)
                except OSError as exc:
                    raise _os_error(exc, leftovers[0][0], "remove the unfinished puts of") from exc

    def list_keys(self, prefix: str = "") -> Iterator[str]:
        validate_key(prefix, allow_prefix=True)
        # Walk only the deepest directory the prefix names; the rest of the prefix filters names.
        directory = prefix.rpartition("/")[0]
        top = self.root / _stored(directory) if directory else self.root

        def unreadable(exc: OSError) -> None:
            # A directory the walk cannot read would leave its keys out, silently: that is an
            # error, but for one that is not there (the prefix names none, or it went meanwhile).
            if not isinstance(exc, (FileNotFoundError, NotADirectoryError)):
                where = Path(exc.filename).relative_to(self.root).as_posix() if exc.filename else prefix
                raise _os_error(exc, _key_of(where), "list the keys under") from exc

        keys: list[str] = []
        for dirpath, _, filenames in os.walk(top, onerror=unreadable):
            relative = Path(dirpath).relative_to(self.root).as_posix()
            for filename in filenames:
                if filename.endswith((TMP_SUFFIX, META_SUFFIX)):
                    continue
                key = _key_of(filename if relative == "." else f"{relative}/{filename}")
                if key.startswith(prefix):
                    keys.append(key)
        yield from sorted(keys, key=lambda k: k.encode("utf-8", "surrogatepass"))

    def close(self) -> None:
        """Let go of the root directory held open for reads (the next read takes it again); idempotent."""
        self._beneath.close()

    def __enter__(self) -> FilesystemStorage:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _stored(key: str) -> str:
    """Where ``key`` is stored, relative to the root: each part longer than :data:`PIECE_BYTES`
    cut into pieces of at most that many bytes (whole characters), each but the last ending with
    :data:`CONTINUED`; ``key`` itself when no part is that long (:func:`_key_of` undoes it)."""
    if len(key) <= PIECE_BYTES and key.isascii():  # no part can be longer: the common key
        return key
    parts = key.split("/")
    if all(len(part.encode("utf-8", "surrogatepass")) <= PIECE_BYTES for part in parts):
        return key
    stored: list[str] = []
    for part in parts:
        pieces: list[str] = []
        piece = ""
        for char in part:
            if len((piece + char).encode("utf-8", "surrogatepass")) > PIECE_BYTES:
                pieces.append(piece + CONTINUED)
                piece = ""
            piece += char
        stored += [*pieces, piece]
    return "/".join(stored)


def _key_of(stored: str) -> str:
    """The key stored at ``stored`` (relative to the root): pieces of a cut part joined again."""
    if CONTINUED not in stored:
        return stored
    key = ""
    for part in stored.split("/"):
        key += part.removesuffix(CONTINUED) if part.endswith(CONTINUED) else part + "/"
    return key.removesuffix("/")


def _tmp_path(target: Path) -> Path:
    """A fresh temporary file for a put of ``target``: ``.<name>.<32 hex digits>.rlm-tmp`` beside it."""
    return target.with_name(f".{target.name}.{uuid.uuid4().hex}{TMP_SUFFIX}")


def _put_target(filename: str) -> str | None:
    """The name of the object a temporary file of :func:`_tmp_path` is for; ``None`` for other files."""
    if not filename.startswith(".") or not filename.endswith(TMP_SUFFIX):
        return None
    target, _, token = filename[1 : -len(TMP_SUFFIX)].rpartition(".")
    if not target or len(token) != 32 or token.strip(_HEX_DIGITS):
        return None
    return target


def _copy(payload: Payload, out: BinaryIO, limiter: RateLimiter | None) -> int:
    """Copy the payload to ``out``; returns its CRC-32C."""
    checksum = 0
    for chunk in payload.chunks(COPY_CHUNK_BYTES):
        if limiter is not None:
            limiter.acquire(len(chunk))
        out.write(chunk)
        checksum = crc32c_update(chunk, checksum)
    return checksum


def _os_error(exc: OSError, key: str, action: str) -> StorageError:
    message = f"cannot {action} {key!r}: {exc.strerror or exc}"
    if exc.errno in _TRANSIENT_ERRNOS:
        return StorageUnavailableError(message, key=key)
    return StorageError(message, key=key)
