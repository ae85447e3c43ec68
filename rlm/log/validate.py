"""The checks every batch of a segment must pass: one set, shared by ``rlm log verify``, the
rebuilding of indexes (Kafka's recovery) and the copier.

Kafka's ``LogSegment.recover`` reads a segment batch by batch and stops at the first batch that
fails a check: the size field (a batch that cannot be one, or runs past the end of the file), the
CRC, and the offset range (``ensureOffsetInRange``: no offset below the segment's base offset or
more than ``2^31 - 1`` above it, as the indexes store offsets relative to it in 32 bits). The
checker adds what the log's order implies: offsets strictly increase from batch to batch, the
file ends with the last whole batch (a rolled segment has no torn tail), and the last offset lies
below the next segment's base offset. With ``deep`` it also decodes every record (what ``rlm log
verify`` does unless ``--shallow``); that costs about forty times the rest (every batch is
decompressed and every record parsed), and a batch whose CRC matches holds exactly the bytes the
broker wrote after parsing every record itself, so the copier checks without it.

A problem names the file, the byte position and what is wrong.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

import crc32c

from rlm.errors import CorruptDataError, CorruptRecordError
from rlm.log.batches import crc_valid, decode_batch
from rlm.log.byte_source import ByteSource, iter_headers, read_batch_bytes
from rlm.log.model import INT32_MAX, BatchHeader


class Problem(NamedTuple):
    """One thing found wrong."""

    path: str
    position: int | None
    message: str

    def __str__(self) -> str:
        where = self.path if self.position is None else f"{self.path}: position {self.position}"
        return f"{where}: {self.message}"

    def error(self) -> CorruptRecordError:
        """This problem as the error a reader raises."""
        return CorruptRecordError(self.message, path=self.path, position=self.position)


class BatchChecker:
    """Checks the batches of one segment's ``.log`` as they are read, in file order.

    Feed it every batch with :meth:`check` (or let :meth:`batches` read them), then call
    :meth:`finish` with the file's size. ``problems`` holds everything found so far.
    """

    def __init__(
        self,
        path: str,
        base_offset: int,
        *,
        deep: bool = False,
        next_base_offset: int | None = None,
        checksum: bool = False,
    ) -> None:
        """``next_base_offset``: the base offset of the segment after this one, when there is one:
        every offset must lie below it. ``checksum``: keep the CRC-32C of the bytes checked in
        :attr:`crc32c` (an upload can then insist on exactly those bytes)."""
        self.path = path
        self.base_offset = base_offset
        self.deep = deep
        self.next_base_offset = next_base_offset
        self.checksum = checksum
        self.crc32c = 0
        """CRC-32C of the batches checked so far, in file order (with ``checksum``)."""
        self.last_offset = base_offset - 1
        """The highest offset of the batches checked so far (``base_offset - 1`` before any)."""
        self.valid_bytes = 0
        """Where the last batch read ends: the bytes of whole batches from the start of the file."""
        self.batches = 0
        self.problems: list[Problem] = []
        self.framing_error = False
        """The batches could not be told apart past ``valid_bytes`` (a size field that cannot be
        one, an unknown magic): nothing after it was read."""

    def check(self, header: BatchHeader, data: bytes) -> list[Problem]:
        """Check one whole batch (``data`` holds exactly its bytes); returns its problems."""
        found: list[Problem] = []
        if self.checksum:
            self.crc32c = crc32c.crc32c(data, self.crc32c)
        local = header._replace(position=0)
        if not crc_valid(data, local):
            found.append(self._problem(header, f"CRC mismatch (stored 0x{header.crc:08x})"))
        elif self.deep:
            try:
                decode_batch(data, local, verify_crc=False)
            except CorruptDataError as exc:
                found.append(self._problem(header, exc.reason))
        # A legacy compressed wrapper only names its last offset until it is decompressed.
        first = header.base_offset if header.base_offset >= 0 else header.last_offset
        if first < self.base_offset:
            found.append(
                self._problem(
                    header,
                    f"batch starts at offset {first}, below the segment's base offset {self.base_offset}",
                )
            )
        elif first <= self.last_offset:
            found.append(
                self._problem(
                    header, f"offsets go backwards: batch starts at {first} after offset {self.last_offset}"
                )
            )
        if header.last_offset - self.base_offset > INT32_MAX:
            found.append(
                self._problem(
                    header,
                    f"batch last offset {header.last_offset} is more than 2^31-1 above the segment's "
                    f"base offset {self.base_offset}",
                )
            )
        limit = self.next_base_offset
        if limit is not None and header.last_offset >= limit and self.last_offset < limit:
            found.append(
                self._problem(
                    header,
                    f"batch ends at offset {header.last_offset}, not below the next segment's base "
                    f"offset {limit}",
                )
            )
        self.last_offset = max(self.last_offset, header.last_offset)
        self.valid_bytes = header.end_position
        self.batches += 1
        self.problems.extend(found)
        return found

    def _problem(self, header: BatchHeader, message: str) -> Problem:
        return Problem(self.path, header.position, message)

    def batches_of(self, source: ByteSource) -> Iterator[tuple[BatchHeader, bytes, list[Problem]]]:
        """Read and check every whole batch of ``source``: ``(header, bytes, its problems)``.

        A framing error (the batches cannot be told apart any more) is recorded as a problem and
        ends the iteration.
        """
        try:
            for header in iter_headers(source):
                data = read_batch_bytes(source, header)
                yield header, data, self.check(header, data)
        except CorruptDataError as exc:
            self.framing_error = True
            position = exc.position if exc.position is not None else self.valid_bytes
            self.problems.append(Problem(self.path, position, exc.reason))

    def finish(self, size: int, *, active: bool = False) -> list[Problem]:
        """Check the end of the file (``size`` bytes).

        Args:
            size: the ``.log``'s size in bytes.
            active: the segment is the one the broker appends to: a torn tail is a batch still
                being written.
        """
        found: list[Problem] = []
        if not self.framing_error and self.valid_bytes < size:
            extra = size - self.valid_bytes
            message = (
                f"a torn tail of {extra} bytes (a batch still being written)"
                if active
                else f"{extra} trailing bytes after the last whole batch"
            )
            found.append(Problem(self.path, self.valid_bytes, message))
        self.problems.extend(found)
        return found
