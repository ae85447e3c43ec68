"""File names and durable writes shared by every file kind of a partition directory.

Segment files, their indexes and producer snapshots are named after an offset written in decimal
and zero-padded to 20 digits (``LogFileUtils.filenamePrefixFromOffset``), e.g.
``00000000000000000040.index``. Checkpoints, indexes and snapshots are replaced atomically the way
Kafka's ``CheckpointFile`` does it: write ``<name>.tmp``, fsync it, rename it over ``<name>`` and
fsync the directory so the rename itself survives a crash.
"""

from __future__ import annotations

import contextlib
import os
import re

StrPath = str | os.PathLike[str]
"""A file system path as the functions of this package accept it."""

INT64_MAX = 2**63 - 1
OFFSET_WIDTH = 20
TMP_SUFFIX = ".tmp"

_PREFIX = re.compile(r"[0-9]+")


def segment_file_name(base_offset: int, suffix: str) -> str:
    """Return the name of a file of the segment (or snapshot) at ``base_offset``.

    Args:
        base_offset: the segment base offset (or snapshot offset), 0 to 2**63-1.
        suffix: the file kind with its dot, e.g. ``".log"``, ``".index"``, ``".snapshot"``.

    Raises:
        ValueError: the offset is negative or does not fit an int64.
    """
    if not 0 <= base_offset <= INT64_MAX:
        raise ValueError(f"offset {base_offset} cannot name a segment file")
    return f"{base_offset:0{OFFSET_WIDTH}d}{suffix}"


def parse_base_offset(filename: StrPath) -> int:
    """Return the offset a segment, index or snapshot file is named after.

    Like Kafka's ``offsetFromFileName`` the offset is the part of the base name before the first
    ``.``, so ``00000000000000000040.index.deleted`` gives 40.

    Raises:
        ValueError: the name does not start with decimal digits followed by a dot, or the number
            does not fit an int64.
    """
    name = os.path.basename(os.fspath(filename))
    prefix, dot, _ = name.partition(".")
    if not dot or _PREFIX.fullmatch(prefix) is None:
        raise ValueError(f"{name!r} is not named after an offset")
    offset = int(prefix)
    if offset > INT64_MAX:
        raise ValueError(f"{name!r} names an offset beyond int64")
    return offset


def atomic_write(path: StrPath, data: bytes) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves either the old or the new file.

    Writes ``<path>.tmp``, fsyncs it, renames it over ``path`` and fsyncs the parent directory.
    The temporary file is removed when writing it fails.
    """
    target = os.fspath(path)
    tmp = target + TMP_SUFFIX
    try:
        with open(tmp, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    fsync_dir(os.path.dirname(os.path.abspath(target)))


def fsync_dir(directory: StrPath) -> None:
    """Flush a directory's entries (a rename or a new file) to stable storage."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
