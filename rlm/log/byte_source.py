"""Byte sources and the batch scanner that walks them reading headers only.

A :class:`ByteSource` is anything that can read a byte range: a local file (``pread``), bytes in
memory, or (later) a ranged GET of a remote object. :func:`iter_headers` reads the source through
a bounded window, so memory stays flat whatever the file size, and yields one
:class:`~rlm.log.model.BatchHeader` per batch without decoding records.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Protocol

from rlm.errors import CorruptDataError, CorruptRecordError
from rlm.log.batches import parse_header
from rlm.log.model import LOG_OVERHEAD, MAGIC_OFFSET, MIN_SIZE_FIELD, V2_HEADER_SIZE, BatchHeader
from rlm.log.scan import skip_below as skip_v2_below

_PREFIX = struct.Struct(">qi")
#: Bytes read at a time while scanning headers. Bounds the scanner's memory.
DEFAULT_WINDOW_BYTES = 256 * 1024


class ByteSource(Protocol):
    """Random access to a run of bytes."""

    @property
    def name(self) -> str:
        """What to call the source in error messages (a path or an object key)."""
        ...

    @property
    def size(self) -> int:
        """Number of bytes readable (for a growing file: as of opening or the last refresh)."""
        ...

    def read(self, position: int, length: int) -> bytes:
        """Read up to ``length`` bytes at ``position``; fewer only at the end of the source."""
        ...


class BytesSource:
    """A byte source over bytes in memory."""

    def __init__(self, data: bytes, name: str = "<memory>") -> None:
        self._data = data
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    @property
    def size(self) -> int:
        return len(self._data)

    def read(self, position: int, length: int) -> bytes:
        return self._data[position : position + length]


class FileSource:
    """A byte source over a local file, read with ``pread`` (no shared file offset, thread-safe)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._path = str(path)
        self._fd = os.open(self._path, os.O_RDONLY)
        self._size = os.fstat(self._fd).st_size

    @property
    def name(self) -> str:
        return self._path

    @property
    def size(self) -> int:
        return self._size

    def duplicate(self) -> int:
        """A new descriptor of the file (``os.dup``), for a reader that closes it itself."""
        return os.dup(self._fd)

    def refresh(self) -> int:
        """Re-read the file size (a broker may have appended since opening); returns it."""
        self._size = os.fstat(self._fd).st_size
        return self._size

    def read(self, position: int, length: int) -> bytes:
        length = max(0, min(length, self._size - position))
        data = os.pread(self._fd, length, position)
        while len(data) < length:  # pread may return short reads on some filesystems
            more = os.pread(self._fd, length - len(data), position + len(data))
            if not more:
                break
            data += more
        return data

    def close(self) -> None:
        """Close the file; idempotent."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> FileSource:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def open_source(path: str | Path) -> FileSource:
    """Open a local file as a byte source."""
    return FileSource(path)


def iter_headers(
    source: ByteSource,
    start: int = 0,
    end: int | None = None,
    *,
    window_bytes: int = DEFAULT_WINDOW_BYTES,
    first_window_bytes: int | None = None,
    skip_below: tuple[int, int] | None = None,
    whole: bool = False,
) -> Iterator[BatchHeader]:
    """Yield the header of every whole batch in ``[start, end)`` of ``source``.

    As :func:`iter_header_windows`, without the windows.
    """
    for header, _, _ in iter_header_windows(
        source,
        start,
        end,
        window_bytes=window_bytes,
        first_window_bytes=first_window_bytes,
        skip_below=skip_below,
        whole=whole,
    ):
        yield header


def iter_header_windows(
    source: ByteSource,
    start: int = 0,
    end: int | None = None,
    *,
    window_bytes: int = DEFAULT_WINDOW_BYTES,
    first_window_bytes: int | None = None,
    skip_below: tuple[int, int] | None = None,
    whole: bool = False,
) -> Iterator[tuple[BatchHeader, bytes, int]]:
    """Yield ``(header, window, window position)`` for every whole batch in ``[start, end)`` of
    ``source``: the bytes read last, starting at ``window position`` in the source, hold the
    batch's header and, when it fits, the whole batch (no need to read it again).

    The source is read ``window_bytes`` at a time; with ``first_window_bytes`` the first read is
    that small and each next one doubles up to ``window_bytes`` (a search that expects to stop
    within a few batches of ``start`` then reads little).

    With ``skip_below = (timestamp, offset)`` the v2 batches whose max timestamp is below
    ``timestamp`` or whose last offset is below ``offset`` are stepped over without parsing their
    headers (what a timestamp search skips).

    Iteration ends cleanly at a torn tail (a last batch not yet completely written, or 17 bytes
    or fewer left), as Kafka's ``FileLogInputStream`` does, unless ``whole`` says the source is
    written whole (a rolled segment): such a tail is then damage (a size field, which no CRC
    covers, saying more bytes than there are), raised rather than every record from it to the end
    silently left out. A size field that cannot be a batch,
    an unknown magic or a malformed header raises :class:`CorruptRecordError` naming the source
    and the byte position.
    """
    limit = source.size if end is None else min(end, source.size)
    buf = b""
    buf_start = start
    pos = start
    window = window_bytes if first_window_bytes is None else min(first_window_bytes, window_bytes)
    # FileLogInputStream stops when position + HEADER_SIZE_UP_TO_MAGIC (17) >= end.
    while limit - pos > MAGIC_OFFSET + 1 or (whole and limit > pos):
        if limit - pos <= MAGIC_OFFSET + 1:
            raise CorruptRecordError(
                f"the last batch is cut short: {limit - pos} bytes are left at the end, short of its header",
                path=source.name,
                position=pos,
            )
        rel = pos - buf_start
        need = min(V2_HEADER_SIZE, limit - pos)
        if rel < 0 or rel + need > len(buf):
            buf = source.read(pos, max(window, V2_HEADER_SIZE))
            window = min(window * 2, window_bytes)
            buf_start, rel = pos, 0
            if len(buf) < need:
                return  # the source shrank under us
        if skip_below is not None:
            skipped = skip_v2_below(buf, rel, limit - buf_start, *skip_below)
            if skipped != rel:
                pos += skipped - rel
                continue
        _, size = _PREFIX.unpack_from(buf, rel)
        if size < MIN_SIZE_FIELD:
            raise CorruptRecordError(
                f"batch size field {size} is smaller than the minimum {MIN_SIZE_FIELD}",
                path=source.name,
                position=pos,
            )
        total = LOG_OVERHEAD + size
        if pos + total > limit:
            if whole:
                raise CorruptRecordError(
                    f"the last batch is cut short: {limit - pos} bytes are left at the end, short of its "
                    f"size field's {total} bytes",
                    path=source.name,
                    position=pos,
                )
            return  # torn tail: the broker is still writing this batch
        try:
            if buf[rel + MAGIC_OFFSET] >= 2:
                header = parse_header(buf, rel, pos)
            else:
                # A legacy entry is parsed whole (it holds its own inner set when compressed).
                entry = buf if rel + total <= len(buf) else source.read(pos, total)
                header = parse_header(entry, rel if entry is buf else 0, pos)
        except CorruptDataError as exc:
            raise exc.at(source.name, pos) from exc
        except struct.error as exc:
            raise CorruptRecordError(
                f"batch header is truncated: {exc}", path=source.name, position=pos
            ) from exc
        yield header, buf, buf_start
        pos += total


def read_batch_bytes(source: ByteSource, header: BatchHeader) -> bytes:
    """Read the whole batch described by ``header``."""
    data = source.read(header.position, header.size)
    if len(data) != header.size:
        raise CorruptRecordError(
            f"batch of {header.size} bytes is cut short at {len(data)} bytes",
            path=source.name,
            position=header.position,
        )
    return data
