"""One entry file of the remote index cache: its name, its checked format, and the directory lock.

An entry holds one index file of one remote segment, in ``<directory>/<segment_id>.<index type>``
(``…/1f0c….offset``, the type being :class:`~rlm.metastore.model.IndexType`'s value)::

    magic    4 bytes  b"RLMI"
    version  int8     1
    (3 zero bytes)
    length   uint64   bytes of index data that follow
    crc32c   uint32   CRC-32C (Castagnoli) of the data
    data     length bytes, the index file exactly as stored in the segment's index object

:func:`write_temporary` writes an entry under a ``.tmp`` name for the caller to rename into place.
It does not fsync: the checksum, not the write order, decides whether an entry can be trusted, so
a file a crash left short or garbled fails its check and is fetched again.
"""

from __future__ import annotations

import fcntl
import logging
import os
import struct
import uuid
from pathlib import Path
from uuid import UUID

import crc32c

from rlm.errors import ConfigError, CorruptDataError
from rlm.metastore.model import IndexType

_log = logging.getLogger(__name__)

_HEADER = struct.Struct(">4sB3xQI")
_MAGIC = b"RLMI"
_VERSION = 1
#: Bytes an entry takes on disk besides its data.
ENTRY_HEADER_BYTES = _HEADER.size
TMP_SUFFIX = ".tmp"
_LOCK_NAME = ".lock"
_VERIFY_CHUNK = 1 << 20
_KINDS = {kind.value: kind for kind in IndexType}

EntryKey = tuple[UUID, IndexType]
"""What an entry holds: one index file (by type) of one remote segment (by id)."""


def entry_name(key: EntryKey) -> str:
    """The file name of ``key``'s entry."""
    return f"{key[0]}.{key[1].value}"


def parse_entry_name(name: str) -> EntryKey | None:
    """The key an entry file is named after; ``None`` for any other name."""
    stem, _, suffix = name.partition(".")
    kind = _KINDS.get(suffix)
    if kind is None:
        return None
    try:
        segment_id = UUID(stem)
    except ValueError:
        return None
    return (segment_id, kind) if str(segment_id) == stem else None


def _read_header(path: Path, raw: bytes, file_size: int) -> tuple[int, int]:
    """Check an entry's header against its file's size; returns the data length and CRC."""
    if len(raw) < _HEADER.size:
        raise CorruptDataError(f"header truncated to {len(raw)} bytes", path=str(path))
    magic, version, length, checksum = _HEADER.unpack(raw)
    if magic != _MAGIC or version != _VERSION:
        raise CorruptDataError(f"not a cache entry (magic {magic!r}, version {version})", path=str(path))
    if file_size != _HEADER.size + length:
        raise CorruptDataError(
            f"holds {file_size - _HEADER.size} bytes of data, its header says {length}", path=str(path)
        )
    return length, checksum


def _check_crc(path: Path, computed: int, stored: int) -> None:
    if computed != stored:
        raise CorruptDataError(f"CRC-32C is 0x{computed:08x}, the header says 0x{stored:08x}", path=str(path))


def read_entry(path: Path) -> bytes:
    """The data of the entry file at ``path``, checked.

    Raises:
        CorruptDataError: The file is truncated, not an entry, or fails its checksum.
        OSError: The file cannot be read (``FileNotFoundError`` when it is gone).
    """
    with open(path, "rb") as f:
        length, checksum = _read_header(path, f.read(_HEADER.size), os.fstat(f.fileno()).st_size)
        data = f.read(length)
    if len(data) != length:
        raise CorruptDataError(f"data truncated to {len(data)} of {length} bytes", path=str(path))
    _check_crc(path, crc32c.crc32c(data), checksum)
    return data


def verify_entry(path: Path) -> None:
    """Check the entry file at ``path`` as :func:`read_entry` does, one chunk in memory at a time.

    Raises:
        CorruptDataError: The file is truncated, not an entry, or fails its checksum.
        OSError: The file cannot be read.
    """
    with open(path, "rb") as f:
        length, checksum = _read_header(path, f.read(_HEADER.size), os.fstat(f.fileno()).st_size)
        computed, remaining = 0, length
        while remaining > 0:
            chunk = f.read(min(remaining, _VERIFY_CHUNK))
            if not chunk:
                raise CorruptDataError(f"data truncated at {length - remaining} of {length}", path=str(path))
            computed = crc32c.crc32c(chunk, computed)
            remaining -= len(chunk)
    _check_crc(path, computed, checksum)


def write_temporary(directory: Path, key: EntryKey, data: bytes) -> Path:
    """Write ``key``'s entry under a fresh temporary name in ``directory``; returns that path.

    Raises:
        OSError: The file cannot be written (none is left behind).
    """
    tmp = directory / f"{entry_name(key)}.{uuid.uuid4().hex}{TMP_SUFFIX}"
    try:
        with open(tmp, "wb") as out:
            out.write(_HEADER.pack(_MAGIC, _VERSION, len(data), crc32c.crc32c(data)))
            out.write(data)
    except OSError:
        unlink_quietly(tmp)
        raise
    return tmp


def unlink_quietly(path: Path) -> None:
    """Delete ``path`` if it exists; a failure is logged (the next startup scan retries it)."""
    try:
        path.unlink(missing_ok=True)
    except OSError as exc:
        _log.warning("cannot delete %s: %s", path, exc)


def lock_directory(directory: Path) -> int:
    """Take the directory's ``.lock`` with ``flock``; returns the descriptor that holds it.

    Closing the descriptor (or the process ending) releases the lock.

    Raises:
        ConfigError: Another cache, in this process or another, holds the directory.
    """
    fd = os.open(directory / _LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        raise ConfigError(f"{directory} is in use by another remote index cache") from exc
    return fd
