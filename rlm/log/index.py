"""Offset index (``.index``) and time index (``.timeindex``) of a segment.

Both files are headerless arrays of fixed-size big-endian entries (AbstractIndex)::

    .index      entry = 8 bytes   relativeOffset int32 | position int32
    .timeindex  entry = 12 bytes  timestamp int64      | relativeOffset int32

``relativeOffset`` is ``offset - baseOffset``; ``position`` is the byte position in the ``.log`` of
the batch the entry points at. The entry count is not stored: a file holds exactly
``entries * entrySize`` bytes once Kafka trims it, but the index of an active segment is
preallocated to ``segment.index.bytes`` with a zero-filled tail.

Reading takes ``floor(length / entrySize)`` slots like Kafka and then drops the preallocated tail
the way ``DumpLogSegments`` does: entries end at the first slot ``i > 0`` whose relative offset is 0
(``.index``) or which is all zeros (``.timeindex``); only slot 0 can hold such a value in a valid
file. A file of zeros only is an empty index (a freshly rolled segment's), although a trimmed
``.timeindex`` could in theory hold the single entry ``(0, baseOffset)``: Kafka never indexes
position 0, and a timestamp of 0 is not worth a phantom entry in every new segment. Anything
after the entries must be zero bytes. A length that is not a multiple of the entry
size is accepted when the extra bytes are zeros (padding carries no data); otherwise
:meth:`sanity_check` reports it, as it reports non-zero bytes after a zero slot.

Entries live in two ``array`` columns in native byte order, so loading converts whole columns at
C speed without a Python object per entry, and lookups are a C ``bisect`` over a column.
"""

from __future__ import annotations

import os
import sys
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from itertools import islice
from operator import le, lt
from typing import ClassVar, NamedTuple, Self

from rlm.errors import CorruptIndexError, OffsetOverflowError
from rlm.log.files import INT64_MAX, StrPath, atomic_write, parse_base_offset
from rlm.log.model import INT32_MAX, NO_TIMESTAMP

#: ``segment.index.bytes`` default: the size an active segment's index is preallocated to.
DEFAULT_MAX_INDEX_SIZE = 10 * 1024 * 1024

if array("i").itemsize != 4 or array("q").itemsize != 8:  # pragma: no cover - exotic platforms
    raise ImportError("rlm.log.index needs 4-byte 'i' and 8-byte 'q' arrays")

_SWAP = sys.byteorder == "little"
Data = bytes | bytearray | memoryview


class OffsetPosition(NamedTuple):
    """An offset-index entry: the batch starting at ``position`` ends at ``offset``."""

    offset: int
    position: int


class TimestampOffset(NamedTuple):
    """A time-index entry: no record after ``offset`` has a timestamp above ``timestamp``."""

    timestamp: int
    offset: int


def _from_be(typecode: str, data: Data) -> array[int]:
    column = array(typecode)
    column.frombytes(data)
    if _SWAP:
        column.byteswap()
    return column


def _to_be(column: array[int]) -> bytes:
    if _SWAP:
        column = array(column.typecode, column)
        column.byteswap()
    return column.tobytes()


def _first_negative(column: array[int]) -> int | None:
    """Index of the first negative value, else None."""
    if not column or min(column) >= 0:
        return None
    return next(i for i, value in enumerate(column) if value < 0)


def _first_disorder(column: array[int], *, strict: bool) -> int | None:
    """Index of the first value not above (``strict``) or below its predecessor, else None."""
    ordered = lt if strict else le
    if all(map(ordered, column, islice(column, 1, None))):
        return None
    return next(i for i in range(1, len(column)) if not ordered(column[i - 1], column[i]))


class _SegmentIndex:
    """What ``.index`` and ``.timeindex`` share: relative offsets, capacity, loading, writing."""

    ENTRY_SIZE: ClassVar[int]
    KIND: ClassVar[str]

    def __init__(
        self,
        base_offset: int,
        max_index_size: int = DEFAULT_MAX_INDEX_SIZE,
        *,
        path: StrPath | None = None,
    ) -> None:
        if not 0 <= base_offset <= INT64_MAX:
            raise ValueError(f"base offset {base_offset} is out of range")
        if max_index_size < 0:
            raise ValueError(f"max index size {max_index_size} is negative")
        self.base_offset = base_offset
        self.max_index_size = max_index_size
        self.path: str | None = None if path is None else os.fspath(path)
        self._rel: array[int] = array("i")
        # A problem in the bytes after the entries of the data last loaded: (reason, position).
        self._tail_problem: tuple[str, int] | None = None

    @classmethod
    def from_bytes(
        cls,
        base_offset: int,
        data: Data,
        *,
        path: StrPath | None = None,
        max_index_size: int = DEFAULT_MAX_INDEX_SIZE,
    ) -> Self:
        """Read an index from the bytes of its file (trimmed or preallocated)."""
        index = cls(base_offset, max_index_size, path=path)
        raw = data if isinstance(data, bytes) else bytes(data)
        if raw.count(0) == len(raw):
            return index  # a preallocated index nothing was written to yet
        slots = len(raw) // cls.ENTRY_SIZE
        kept = index._decode(raw[: slots * cls.ENTRY_SIZE], slots)
        index._tail_problem = cls._check_tail(raw, kept, slots)
        return index

    @classmethod
    def load(
        cls,
        path: StrPath,
        base_offset: int | None = None,
        *,
        max_index_size: int = DEFAULT_MAX_INDEX_SIZE,
    ) -> Self:
        """Read the index file at ``path``; the base offset defaults to the one in its name."""
        if base_offset is None:
            base_offset = parse_base_offset(path)
        with open(path, "rb") as f:
            data = f.read()
        return cls.from_bytes(base_offset, data, path=path, max_index_size=max_index_size)

    @classmethod
    def _check_tail(cls, raw: bytes, kept: int, slots: int) -> tuple[str, int] | None:
        start = kept * cls.ENTRY_SIZE
        if raw.count(0, start) == len(raw) - start:
            return None
        whole = slots * cls.ENTRY_SIZE
        if raw.count(0, whole) != len(raw) - whole:
            return (
                f"length {len(raw)} is not a multiple of the entry size {cls.ENTRY_SIZE}",
                whole,
            )
        first = start + len(raw[start:]) - len(raw[start:].lstrip(b"\0"))
        return (f"entries end at the zero slot {kept} but non-zero bytes follow", first)

    def _decode(self, raw: bytes, slots: int) -> int:
        raise NotImplementedError

    def _truncate_entries(self, count: int) -> None:
        raise NotImplementedError

    def _check_entries(self) -> tuple[str, int] | None:
        raise NotImplementedError

    def to_bytes(self) -> bytes:
        """The file content Kafka expects of an inactive segment: exactly entries x size bytes."""
        raise NotImplementedError

    @property
    def max_entries(self) -> int:
        """Number of slots ``max_index_size`` holds."""
        return self.max_index_size // self.ENTRY_SIZE

    def __len__(self) -> int:
        return len(self._rel)

    def _relative(self, offset: int) -> int:
        relative = offset - self.base_offset
        if not 0 <= relative <= INT32_MAX:
            raise OffsetOverflowError(
                f"offset {offset} cannot be stored relative to base offset {self.base_offset}"
            )
        return relative

    def _check_entry_index(self, i: int) -> None:
        if not 0 <= i < len(self._rel):
            raise IndexError(f"slot {i} is outside the {len(self._rel)} entries of the {self.KIND}")

    def truncate_to(self, offset: int) -> None:
        """Remove every entry whose offset is ``offset`` or larger (Kafka ``truncateTo``)."""
        self._truncate_entries(bisect_left(self._rel, offset - self.base_offset))

    def reset(self) -> None:
        """Remove every entry."""
        self._truncate_entries(0)

    def write(self, path: StrPath | None = None, *, like: StrPath | None = None) -> None:
        """Atomically write the trimmed index to ``path`` (default: the path it came from), with the
        owner and mode of the file it replaces, or of ``like`` (see :func:`~rlm.log.files.atomic_write`)."""
        target = path if path is not None else self.path
        if target is None:
            raise ValueError(f"the {self.KIND} has no path to write to")
        atomic_write(target, self.to_bytes(), like=like)
        self.path = os.fspath(target)
        self._tail_problem = None

    def sanity_check(self, path: StrPath | None = None) -> None:
        """Check the entries and the bytes they were read from.

        Raises:
            CorruptIndexError: naming the file (``path``, else the index's own) and the problem.
        """
        problem = self._tail_problem or self._check_entries()
        if problem is not None:
            where = path if path is not None else self.path
            reason, position = problem
            raise CorruptIndexError(
                f"corrupt {self.KIND} (base offset {self.base_offset}): {reason}",
                path=None if where is None else os.fspath(where),
                position=position,
            )

    def __repr__(self) -> str:
        return f"{type(self).__name__}(base_offset={self.base_offset}, entries={len(self)})"


class OffsetIndex(_SegmentIndex):
    """The ``.index`` of a segment: strictly increasing ``(offset, position)`` entries."""

    ENTRY_SIZE = 8
    KIND = "offset index"

    def __init__(
        self,
        base_offset: int,
        max_index_size: int = DEFAULT_MAX_INDEX_SIZE,
        *,
        path: StrPath | None = None,
    ) -> None:
        super().__init__(base_offset, max_index_size, path=path)
        self._pos: array[int] = array("i")

    def _decode(self, raw: bytes, slots: int) -> int:
        words = _from_be("i", raw)
        self._rel, self._pos = words[0::2], words[1::2]
        try:
            end = self._rel.index(0, 1)
        except ValueError:
            return slots
        self._truncate_entries(end)
        return end

    def to_bytes(self) -> bytes:
        words = array("i", bytes(self.ENTRY_SIZE * len(self._rel)))
        words[0::2] = self._rel
        words[1::2] = self._pos
        return _to_be(words)

    def _truncate_entries(self, count: int) -> None:
        del self._rel[count:]
        del self._pos[count:]

    def is_full(self) -> bool:
        """True when every slot is used (``entries >= max_entries``)."""
        return len(self._rel) >= self.max_entries

    def lookup(self, target: int) -> OffsetPosition:
        """The entry with the largest offset <= ``target``, else ``(base_offset, 0)``."""
        i = bisect_right(self._rel, target - self.base_offset) - 1
        if i < 0:
            return OffsetPosition(self.base_offset, 0)
        return OffsetPosition(self.base_offset + self._rel[i], self._pos[i])

    def entry(self, i: int) -> OffsetPosition:
        """The entry in slot ``i`` (0-based).

        Raises:
            IndexError: ``i`` is not a slot holding an entry.
        """
        self._check_entry_index(i)
        return OffsetPosition(self.base_offset + self._rel[i], self._pos[i])

    def entries(self) -> Iterator[OffsetPosition]:
        """Every entry, in slot order."""
        base = self.base_offset
        for rel, pos in zip(self._rel, self._pos, strict=True):
            yield OffsetPosition(base + rel, pos)

    def positions_apart(self, start: int, end: int, step: int) -> list[int]:
        """Positions of entries between ``start`` and ``end`` (both excluded), the first at least
        ``step`` past ``start`` and each at least ``step`` past the one before: batch starts
        about ``step`` apart, as the broker indexed them (found by bisection, not read one by one)."""
        found: list[int] = []
        at = start
        while True:
            i = bisect_left(self._pos, at + max(1, step))
            if i >= len(self._pos) or self._pos[i] >= end or self._pos[i] <= at:  # the last: out of order
                return found
            at = self._pos[i]
            found.append(at)

    @property
    def last_entry(self) -> OffsetPosition:
        """The last entry, or ``(base_offset, 0)`` when empty (Kafka ``lastEntry``)."""
        if not self._rel:
            return OffsetPosition(self.base_offset, 0)
        return OffsetPosition(self.base_offset + self._rel[-1], self._pos[-1])

    @property
    def last_offset(self) -> int:
        """Offset of the last entry, or the base offset when empty."""
        return self.last_entry.offset

    def append(self, offset: int, position: int) -> None:
        """Add an entry after the last one.

        Raises:
            ValueError: the index is full, ``offset`` is not above the last entry's, or
                ``position`` is not an int32 >= 0.
            OffsetOverflowError: ``offset - base_offset`` is not in ``[0, 2**31 - 1]``.
        """
        rel = self._rel  # the checks inline: a rebuild appends once per batch
        if len(rel) >= self.max_index_size // self.ENTRY_SIZE:
            raise ValueError(f"attempt to append to a full offset index ({len(self)} entries)")
        relative = offset - self.base_offset
        if rel and relative <= rel[-1]:
            raise ValueError(
                f"attempt to append offset {offset} to slot {len(self)} of an offset index whose "
                f"last offset is {self.last_offset}"
            )
        if not 0 <= relative <= INT32_MAX:
            self._relative(offset)  # raises
        if not 0 <= position <= INT32_MAX:
            raise ValueError(f"position {position} is not a valid int32 file position")
        rel.append(relative)
        self._pos.append(position)

    def _check_entries(self) -> tuple[str, int] | None:
        size = self.ENTRY_SIZE
        if self._rel and self._rel[-1] < 0:
            last = self.base_offset + self._rel[-1]
            return (f"last offset {last} is less than the base offset", size * (len(self) - 1))
        negative = _first_negative(self._rel)
        if negative is not None:
            rel = self._rel[negative]
            return (f"relative offset {rel} in slot {negative} is negative", size * negative)
        disorder = _first_disorder(self._rel, strict=True)
        if disorder is not None:
            return (f"offset in slot {disorder} is not above the previous entry's", size * disorder)
        negative = _first_negative(self._pos)
        if negative is not None:
            pos = self._pos[negative]
            return (f"position {pos} in slot {negative} is negative", size * negative + 4)
        disorder = _first_disorder(self._pos, strict=True)
        if disorder is not None:
            return (
                f"position in slot {disorder} is not above the previous entry's",
                size * disorder + 4,
            )
        return None


class TimeIndex(_SegmentIndex):
    """The ``.timeindex`` of a segment: strictly increasing timestamps, non-decreasing offsets."""

    ENTRY_SIZE = 12
    KIND = "time index"

    def __init__(
        self,
        base_offset: int,
        max_index_size: int = DEFAULT_MAX_INDEX_SIZE,
        *,
        path: StrPath | None = None,
    ) -> None:
        super().__init__(base_offset, max_index_size, path=path)
        self._ts: array[int] = array("q")

    def _decode(self, raw: bytes, slots: int) -> int:
        # Split the 12-byte rows into an 8-byte and a 4-byte column with strided slice copies.
        ts_bytes = bytearray(8 * slots)
        rel_bytes = bytearray(4 * slots)
        for k in range(8):
            ts_bytes[k::8] = raw[k::12]
        for k in range(4):
            rel_bytes[k::4] = raw[8 + k :: 12]
        self._ts, self._rel = _from_be("q", ts_bytes), _from_be("i", rel_bytes)
        start = 1
        while True:
            try:
                i = self._rel.index(0, start)
            except ValueError:
                return slots
            if self._ts[i] == 0:
                self._truncate_entries(i)
                return i
            start = i + 1

    def to_bytes(self) -> bytes:
        ts_bytes, rel_bytes = _to_be(self._ts), _to_be(self._rel)
        out = bytearray(self.ENTRY_SIZE * len(self._ts))
        for k in range(8):
            out[k::12] = ts_bytes[k::8]
        for k in range(4):
            out[8 + k :: 12] = rel_bytes[k::4]
        return bytes(out)

    def _truncate_entries(self, count: int) -> None:
        del self._ts[count:]
        del self._rel[count:]

    def is_full(self) -> bool:
        """True when only the slot kept for the final roll/close entry is left.

        Kafka's ``entries >= maxEntries - 1``.
        """
        return len(self._ts) >= self.max_entries - 1

    def lookup(self, target_timestamp: int) -> TimestampOffset:
        """The entry with the largest timestamp <= ``target_timestamp``, else ``(-1, base)``."""
        i = bisect_right(self._ts, target_timestamp) - 1
        if i < 0:
            return TimestampOffset(NO_TIMESTAMP, self.base_offset)
        return TimestampOffset(self._ts[i], self.base_offset + self._rel[i])

    def entry(self, i: int) -> TimestampOffset:
        """The entry in slot ``i`` (0-based).

        Raises:
            IndexError: ``i`` is not a slot holding an entry.
        """
        self._check_entry_index(i)
        return TimestampOffset(self._ts[i], self.base_offset + self._rel[i])

    def entries(self) -> Iterator[TimestampOffset]:
        """Every entry, in slot order."""
        base = self.base_offset
        for ts, rel in zip(self._ts, self._rel, strict=True):
            yield TimestampOffset(ts, base + rel)

    @property
    def last_entry(self) -> TimestampOffset:
        """The last entry, or ``(-1, base_offset)`` when empty (Kafka ``lastEntry``)."""
        if not self._ts:
            return TimestampOffset(NO_TIMESTAMP, self.base_offset)
        return TimestampOffset(self._ts[-1], self.base_offset + self._rel[-1])

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> bool:
        """Add ``(timestamp, offset)`` if ``timestamp`` is above the last entry's (``maybeAppend``).

        ``skip_full_check`` lets the final entry of a rolled or closed segment use the slot that
        :meth:`is_full` keeps free. Returns whether an entry was added.

        Raises:
            ValueError: the index is full, or the entry would go back in offset or timestamp.
            OffsetOverflowError: ``offset - base_offset`` is not in ``[0, 2**31 - 1]``.
        """
        ts = self._ts  # the checks inline: a rebuild calls this once per batch
        if not skip_full_check and len(ts) >= self.max_index_size // self.ENTRY_SIZE - 1:
            raise ValueError(f"attempt to append to a full time index ({len(self)} entries)")
        if ts:
            last_timestamp, last_offset = ts[-1], self.base_offset + self._rel[-1]
            if offset < last_offset:
                raise ValueError(
                    f"attempt to append offset {offset} to slot {len(self)} of a time index whose "
                    f"last offset is {last_offset}"
                )
            if timestamp < last_timestamp:
                raise ValueError(
                    f"attempt to append timestamp {timestamp} to slot {len(self)} of a time index "
                    f"whose last timestamp is {last_timestamp}"
                )
            if timestamp == last_timestamp:
                return False
        elif timestamp <= NO_TIMESTAMP:
            return False
        if len(self._ts) >= self.max_entries:
            raise ValueError(f"no slot left in the time index ({len(self)} entries)")
        relative = self._relative(offset)
        if timestamp > INT64_MAX:
            raise ValueError(f"timestamp {timestamp} does not fit an int64")
        self._ts.append(timestamp)
        self._rel.append(relative)
        return True

    def _check_entries(self) -> tuple[str, int] | None:
        size = self.ENTRY_SIZE
        if not self._ts:
            return None
        last_slot = size * (len(self) - 1)
        if self._ts[-1] < self._ts[0]:
            return (
                f"last timestamp {self._ts[-1]} is less than the first timestamp {self._ts[0]}",
                last_slot,
            )
        if self._rel[-1] < 0:
            last = self.base_offset + self._rel[-1]
            return (f"last offset {last} is less than the base offset", last_slot + 8)
        if self._ts[0] < 0:
            return (f"timestamp {self._ts[0]} in slot 0 is negative", 0)
        negative = _first_negative(self._rel)
        if negative is not None:
            rel = self._rel[negative]
            return (f"relative offset {rel} in slot {negative} is negative", size * negative + 8)
        disorder = _first_disorder(self._ts, strict=True)
        if disorder is not None:
            return (f"timestamp in slot {disorder} is not above the previous entry's", size * disorder)
        disorder = _first_disorder(self._rel, strict=False)
        if disorder is not None:
            return (f"offset in slot {disorder} is below the previous entry's", size * disorder + 8)
        return None
