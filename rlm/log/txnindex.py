"""Transaction index (``.txnindex``): the aborted transactions whose ABORT marker is in a segment.

A headerless sequence of 34-byte big-endian entries (``AbortedTxn``), appended in strictly
increasing ``lastOffset`` order::

    version           int16   0
    producerId        int64
    firstOffset       int64   first offset of the transaction (may be in an earlier segment)
    lastOffset        int64   offset of the ABORT control record
    lastStableOffset  int64   the LSO right after the abort

Like Kafka, reading takes whole entries while at least 34 bytes remain; a trailing partial entry
is ignored when reading and reported by :meth:`TransactionIndex.sanity_check`. Kafka refuses an
entry whose version is above 0 when it iterates the file (it compares only the first byte); rlm
refuses any version but 0 when it reads the file, since the meaning of other versions is unknown.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from typing import NamedTuple, Self

from rlm.errors import CorruptIndexError
from rlm.log.files import INT64_MAX, StrPath, atomic_write, parse_base_offset

VERSION = 0
_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size  # 34


class AbortedTxn(NamedTuple):
    """One aborted transaction (version 0 entry)."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class TxnIndexSearchResult(NamedTuple):
    """What a READ_COMMITTED fetch learns from one segment's transaction index."""

    aborted: list[AbortedTxn]
    """Transactions overlapping ``[fetch_offset, upper_bound)``, in index order."""
    done: bool
    """True when no later segment can hold a transaction overlapping the range."""


def encode_aborted_txn(txn: AbortedTxn) -> bytes:
    """The 34 bytes of one entry.

    Raises:
        ValueError: a field does not fit an int64.
    """
    try:
        return _ENTRY.pack(VERSION, *txn)
    except struct.error as exc:
        raise ValueError(f"cannot encode {txn}: {exc}") from exc


def decode_entry(entry: bytes) -> tuple[int, AbortedTxn]:
    """The version of one entry's 34 bytes, and the entry as version 0 reads it."""
    version, *fields = _ENTRY.unpack(entry)
    return version, AbortedTxn(*fields)


class TransactionIndex:
    """The transaction index of the segment at ``base_offset``, held in memory."""

    def __init__(self, base_offset: int, *, path: StrPath | None = None) -> None:
        if not 0 <= base_offset <= INT64_MAX:
            raise ValueError(f"base offset {base_offset} is out of range")
        self.base_offset = base_offset
        self.path: str | None = None if path is None else os.fspath(path)
        self._txns: list[AbortedTxn] = []
        self._trailing_bytes = 0

    @classmethod
    def from_bytes(cls, base_offset: int, data: bytes, *, path: StrPath | None = None) -> Self:
        """Read the entries of a ``.txnindex`` file.

        Raises:
            CorruptIndexError: an entry has a version other than 0.
        """
        index = cls(base_offset, path=path)
        whole = len(data) - len(data) % ENTRY_SIZE
        for slot, (version, *fields) in enumerate(_ENTRY.iter_unpack(memoryview(data)[:whole])):
            if version != VERSION:
                raise CorruptIndexError(
                    f"aborted transaction entry {slot} has unsupported version {version}",
                    path=index.path,
                    position=slot * ENTRY_SIZE,
                )
            index._txns.append(AbortedTxn(*fields))
        index._trailing_bytes = len(data) - whole
        return index

    @classmethod
    def load(cls, path: StrPath, base_offset: int | None = None) -> Self:
        """Read the file at ``path``; a missing file is an empty index, as in Kafka.

        The base offset defaults to the one in the file name.
        """
        if base_offset is None:
            base_offset = parse_base_offset(path)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return cls(base_offset, path=path)
        return cls.from_bytes(base_offset, data, path=path)

    def to_bytes(self) -> bytes:
        """The file content: every entry, no trailing bytes."""
        return b"".join(encode_aborted_txn(txn) for txn in self._txns)

    def write(self, path: StrPath | None = None, *, like: StrPath | None = None) -> None:
        """Atomically write the index to ``path`` (default: the path it came from), with the owner
        and mode of the file it replaces, or of ``like`` (see :func:`~rlm.log.files.atomic_write`)."""
        target = path if path is not None else self.path
        if target is None:
            raise ValueError("the transaction index has no path to write to")
        atomic_write(target, self.to_bytes(), like=like)
        self.path = os.fspath(target)
        self._trailing_bytes = 0

    def __len__(self) -> int:
        return len(self._txns)

    def entries(self) -> Iterator[AbortedTxn]:
        """Every entry, in file order."""
        return iter(self._txns)

    @property
    def last_offset(self) -> int | None:
        """``lastOffset`` of the last entry, None when empty."""
        return self._txns[-1].last_offset if self._txns else None

    def append(self, txn: AbortedTxn) -> None:
        """Add an entry; its ``last_offset`` must be above every earlier entry's.

        Raises:
            ValueError: ``last_offset`` does not increase, or a field does not fit an int64.
        """
        last = self.last_offset
        if last is not None and txn.last_offset <= last:
            raise ValueError(
                f"the last offset of appended transactions must increase: {txn.last_offset} follows {last}"
            )
        encode_aborted_txn(txn)
        self._txns.append(AbortedTxn(*txn))

    def collect_aborted(self, fetch_offset: int, upper_bound: int) -> TxnIndexSearchResult:
        """Aborted transactions a fetch of ``[fetch_offset, upper_bound)`` must hear about.

        Collects entries with ``last_offset >= fetch_offset`` and ``first_offset < upper_bound``,
        stopping (``done``) at the first entry whose ``last_stable_offset >= upper_bound``:
        every transaction aborted later started after the range (Kafka ``collectAbortedTxns``).
        """
        aborted: list[AbortedTxn] = []
        for txn in self._txns:
            if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound:
                aborted.append(txn)
            if txn.last_stable_offset >= upper_bound:
                return TxnIndexSearchResult(aborted, True)
        return TxnIndexSearchResult(aborted, False)

    def truncate_to(self, offset: int) -> None:
        """Remove the first entry whose ``last_offset >= offset`` and every entry after it."""
        for i, txn in enumerate(self._txns):
            if txn.last_offset >= offset:
                del self._txns[i:]
                self._trailing_bytes = 0
                return

    def reset(self) -> None:
        """Remove every entry."""
        self._txns.clear()
        self._trailing_bytes = 0

    def sanity_check(self, path: StrPath | None = None) -> None:
        """Check what Kafka checks at load (every ``last_offset >= base_offset``) and more.

        Also reports a trailing partial entry, ``last_offset`` not increasing and
        ``first_offset > last_offset``.

        Raises:
            CorruptIndexError: naming the file (``path``, else the index's own) and the problem.
        """
        where = path if path is not None else self.path
        location = None if where is None else os.fspath(where)
        previous: int | None = None
        for slot, txn in enumerate(self._txns):
            problem = None
            if txn.last_offset < self.base_offset:
                problem = f"is less than the base offset {self.base_offset}"
            elif previous is not None and txn.last_offset <= previous:
                problem = f"does not increase (previous entry: {previous})"
            elif txn.first_offset > txn.last_offset:
                problem = f"is below the first offset {txn.first_offset}"
            if problem is not None:
                raise CorruptIndexError(
                    f"last offset {txn.last_offset} of aborted transaction {slot} {problem}",
                    path=location,
                    position=slot * ENTRY_SIZE,
                )
            previous = txn.last_offset
        if self._trailing_bytes:
            raise CorruptIndexError(
                f"{self._trailing_bytes} trailing bytes do not form a whole entry",
                path=location,
                position=len(self._txns) * ENTRY_SIZE,
            )

    def __repr__(self) -> str:
        return f"TransactionIndex(base_offset={self.base_offset}, entries={len(self)})"
