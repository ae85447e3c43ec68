"""File names and durable writes shared by every file kind of a partition directory.

Segment files, their indexes and producer snapshots are named after an offset written in decimal
and zero-padded to 20 digits (``LogFileUtils.filenamePrefixFromOffset``), e.g.
``00000000000000000040.index``. Checkpoints, indexes and snapshots are replaced atomically the way
Kafka's ``CheckpointFile`` does it: write ``<name>.tmp``, fsync it, rename it over ``<name>`` and
fsync the directory so the rename itself survives a crash.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import stat
import threading

from rlm.errors import InvalidFileNameError

StrPath = str | os.PathLike[str]
"""A file system path as the functions of this package accept it."""

INT64_MAX = 2**63 - 1
OFFSET_WIDTH = 20
TMP_SUFFIX = ".tmp"

_PREFIX = re.compile(r"[0-9]+")
#: Stray files warned about already (a directory is listed again at every change).
_WARNED_MAX = 1024
_warned: set[str] = set()
_warned_lock = threading.Lock()
log = logging.getLogger(__name__)


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
        InvalidFileNameError: (a ValueError) the name does not start with ASCII decimal digits
            followed by a dot, or the number does not fit an int64.
    """
    given = os.fspath(filename)
    prefix, dot, _ = os.path.basename(given).partition(".")
    if not dot or _PREFIX.fullmatch(prefix) is None:
        raise InvalidFileNameError(given, "its name does not start with an offset")
    offset = int(prefix)
    if offset > INT64_MAX:
        raise InvalidFileNameError(given, "its offset does not fit an int64")
    return offset


def offset_file_offsets(directory: StrPath, suffix: str) -> list[int]:
    """Offsets of the files named ``<offset><suffix>`` in a partition directory, ascending.

    Only names Kafka writes count: the offset in exactly 20 ASCII digits, then ``suffix``, on a
    regular file. Any other entry ending in ``suffix`` (``abc.log``, ``-1.log``, a name of 26
    digits or of non-ASCII digits, a directory named ``*.log``) is not one of the broker's files:
    it is skipped, with a warning naming it (once per process). Names with more after the suffix
    (``.log.deleted``, ``.log.swap``) are the broker's own transient files and are not listed.
    """
    return sorted(offset_files(directory, (suffix,))[suffix])


def offset_files(directory: StrPath, suffixes: tuple[str, ...]) -> dict[str, dict[int, int]]:
    """The files of :func:`offset_file_offsets` of each of ``suffixes`` (none the end of
    another), offset → inode number (as the directory entry gives it, with no ``stat``), from one
    read of the directory: what it holds at about one moment, not at one per suffix."""
    found: dict[str, dict[int, int]] = {suffix: {} for suffix in suffixes}
    with os.scandir(directory) as listing:
        for entry in listing:
            suffix = next((s for s in suffixes if entry.name.endswith(s)), None)
            if suffix is None:
                continue
            try:
                offset = parse_base_offset(entry.name)
            except InvalidFileNameError as exc:
                warn_stray(entry.path, exc.why)
                continue
            if entry.name != segment_file_name(offset, suffix):
                warn_stray(entry.path, f"its offset is not written in {OFFSET_WIDTH} digits")
                continue
            try:
                regular = entry.is_file()
            except OSError:
                regular = False
            if not regular:
                warn_stray(entry.path, "it is not a regular file")
                continue
            found[suffix][offset] = entry.inode()
    return found


def warn_stray(path: StrPath, why: str) -> None:
    """Log (once per process and path) that ``path`` is skipped as not one of the broker's files."""
    text = os.fspath(path)
    with _warned_lock:
        if text in _warned:
            return
        if len(_warned) >= _WARNED_MAX:
            _warned.clear()
        _warned.add(text)
    log.warning("skipping %s: not a file of the broker's: %s", _printable(text), why)


def _printable(text: str) -> str:
    """``text`` safe for a log line: quoted and escaped when it holds unprintable characters
    (control characters, or the bytes of a name that is not UTF-8)."""
    return text if text.isprintable() else repr(text)


def atomic_write(path: StrPath, data: bytes, *, like: StrPath | None = None) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves either the old or the new file.

    Writes ``<path>.tmp``, fsyncs it, renames it over ``path`` and fsyncs the parent directory.
    The new file gets the owner, group and permission bits of the file it replaces, or of ``like``
    when there is none (an index beside its ``.log``): a broker running as its own user opens its
    indexes read-write, and fails on a file another user owns. The temporary file is removed when
    writing it fails.

    Raises:
        PermissionError: The owner or group cannot be given (the process runs neither as root nor
            as that owner, or is not in that group); ``path`` is left as it was.
    """
    target = os.fspath(path)
    tmp = target + TMP_SUFFIX
    model = _stat(target)
    if model is None and like is not None:
        model = _stat(os.fspath(like))
    try:
        with open(tmp, "wb") as out:
            if model is not None:
                _take_owner_and_mode(out.fileno(), model, target)
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    fsync_dir(os.path.dirname(os.path.abspath(target)))


def _stat(path: str) -> os.stat_result | None:
    try:
        return os.stat(path)
    except FileNotFoundError:
        return None


def _take_owner_and_mode(fd: int, model: os.stat_result, target: str) -> None:
    """Give the open file ``fd`` the owner, group and permission bits of ``model``."""
    own = os.fstat(fd)
    uid = model.st_uid if own.st_uid != model.st_uid else -1
    gid = model.st_gid if own.st_gid != model.st_gid else -1
    if uid != -1 or gid != -1:  # only root may give a file away; an owner may pick its groups
        try:
            os.fchown(fd, uid, gid)
        except PermissionError as exc:
            raise PermissionError(
                exc.errno,
                f"cannot give the new file the owner {model.st_uid}:{model.st_gid} of the one it "
                f"replaces (run as that user or as root)",
                target,
            ) from exc
    os.fchmod(fd, stat.S_IMODE(model.st_mode))  # after the chown, which may clear set-id bits


def fsync_dir(directory: StrPath) -> None:
    """Flush a directory's entries (a rename or a new file) to stable storage."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
