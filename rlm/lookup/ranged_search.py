"""Offset-for-timestamp inside one remote segment, with as few and as small GETs as possible.

The time and offset indexes come from the remote index cache (one ranged GET each when cold, none
when warm). The ``.log`` object is then read with ranged GETs from the indexed position, in
chunks that start small and double, reading batch headers only until a batch's max timestamp
reaches the target; only that batch is decoded. A whole segment is never downloaded.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from typing import Protocol

from rlm.errors import CorruptDataError, CorruptRecordError
from rlm.log.batches import find_record, parse_header
from rlm.log.index import OffsetIndex, TimeIndex
from rlm.log.model import (
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MIN_SIZE_FIELD,
    BatchHeader,
    TimestampAndOffset,
)
from rlm.log.scan import skip_below
from rlm.lookup.stats import FetchStats
from rlm.metastore.model import RemoteSegment
from rlm.storage.protocol import RemoteStorage

FIRST_CHUNK_BYTES = 64 * 1024
MAX_CHUNK_BYTES = 8 * 1024 * 1024

_NO_BOUND = -(2**63)
_PREFIX = struct.Struct(">qi")
"""baseOffset and batchLength: the prefix of every batch."""

Checkpoint = Callable[[], None]
"""Called between remote reads; raises to abandon the search (a cancelled or expired task)."""


def never_cancelled() -> None:
    """The default checkpoint: never abandons."""


class SegmentIndexes(Protocol):
    """Where the parsed indexes of a remote segment come from (the remote index cache)."""

    def offset_index(self, segment: RemoteSegment, stats: FetchStats | None = None) -> OffsetIndex: ...

    def time_index(self, segment: RemoteSegment, stats: FetchStats | None = None) -> TimeIndex: ...


class RemoteLogReader:
    """Reads batches of a remote ``.log`` object from a position in growing chunks."""

    def __init__(
        self,
        storage: RemoteStorage,
        segment: RemoteSegment,
        stats: FetchStats | None = None,
        checkpoint: Checkpoint = never_cancelled,
    ) -> None:
        self.storage = storage
        self.segment = segment
        self.stats = stats
        self.checkpoint = checkpoint

    def _read(self, position: int, length: int) -> bytes:
        self.checkpoint()
        length = max(0, min(length, self.segment.size_bytes - position))
        if length == 0:
            return b""
        data = self.storage.read_range(self.segment.layout.log_key, position, length)
        if self.stats is not None:
            self.stats.add(len(data))
        if len(data) != length:
            # The object is shorter than its row: read again, the same bytes would come back, and
            # a batch cut by them is no reason to stop, as if the segment ended there.
            raise CorruptDataError(
                f"{len(data)} of {length} bytes read: the object is shorter than the "
                f"{self.segment.size_bytes} bytes its metadata records",
                path=self.segment.layout.log_key,
                position=position,
            )
        return data

    def batches(self, position: int) -> Iterator[tuple[BatchHeader, bytes]]:
        """Yield ``(header, batch bytes)`` for each whole batch from ``position`` (header positions
        are positions in the object)."""
        for header, chunk, at in self.headers(position):
            yield header._replace(position=at + header.position), chunk[header.position : header.end_position]

    def headers(
        self, position: int, timestamp: int = _NO_BOUND, start_offset: int = _NO_BOUND
    ) -> Iterator[tuple[BatchHeader, bytes, int]]:
        """Yield ``(header, chunk, chunk position)`` for each whole batch from ``position`` whose
        max timestamp is ≥ ``timestamp`` and whose last offset is ≥ ``start_offset`` (every batch
        by default): the batch is ``chunk[header.position : header.end_position]``, the chunk
        starting at ``chunk position`` in the object (nothing is copied).

        A v2 batch left out is judged by its size, magic, last offset delta and max timestamp
        alone; every batch yielded has had its whole header checked.

        Raises:
            CorruptDataError: a batch header is not valid (located in the object).
        """
        chunk = FIRST_CHUNK_BYTES
        end = self.segment.size_bytes
        key = self.segment.layout.log_key
        while position < end:
            data = self._read(position, chunk)
            consumed = 0
            while True:
                header, consumed = _next_batch(data, consumed, key, position, timestamp, start_offset)
                if header is None:
                    break
                yield header, data, position
                consumed += header.size
            if consumed == 0:
                # The next batch is bigger than the chunk: read exactly it.
                prefix = data[:12] if len(data) >= 12 else self._read(position, 12)
                if len(prefix) < 12:
                    return
                size = 12 + int.from_bytes(prefix[8:12], "big", signed=True)
                if size < 12 + 14 or position + size > end:
                    raise CorruptRecordError(
                        f"batch size {size} does not fit the segment object of {end} bytes",
                        path=key,
                        position=position,
                    )
                chunk = max(chunk, size)
                continue
            position += consumed
            chunk = min(chunk * 2, MAX_CHUNK_BYTES)


def _next_batch(
    data: bytes, pos: int, key: str, at: int, timestamp: int, start_offset: int
) -> tuple[BatchHeader | None, int]:
    """The header of the first whole batch at or after ``pos`` in ``data`` whose max timestamp is
    ≥ ``timestamp`` and whose last offset is ≥ ``start_offset``, and its position in ``data``;
    ``(None, p)`` when there is none, ``p`` being where the batches whole in ``data`` end.

    Scans as :func:`rlm.log.byte_source.iter_headers` does, stopping at a batch cut by the end of
    ``data``; ``data`` starts at ``at`` in the object named ``key``.
    """
    limit = len(data)
    while limit - pos > MAGIC_OFFSET + 1:
        pos = skip_below(data, pos, limit, timestamp, start_offset)
        if limit - pos <= MAGIC_OFFSET + 1:
            break
        _, size = _PREFIX.unpack_from(data, pos)
        if size < MIN_SIZE_FIELD:
            raise CorruptRecordError(
                f"batch size field {size} is smaller than the minimum {MIN_SIZE_FIELD}",
                path=key,
                position=at + pos,
            )
        total = LOG_OVERHEAD + size
        if pos + total > limit:
            break
        try:
            header = parse_header(data, pos)
        except CorruptDataError as exc:
            raise exc.at(key, at + pos) from exc
        except struct.error as exc:
            raise CorruptRecordError(
                f"batch header is truncated: {exc}", path=key, position=at + pos
            ) from exc
        if header.max_timestamp >= timestamp and header.last_offset >= start_offset:
            return header, pos
        pos += total
    return None, pos


def find_in_remote_segment(
    segment: RemoteSegment,
    timestamp: int,
    start_offset: int,
    *,
    storage: RemoteStorage,
    indexes: SegmentIndexes,
    stats: FetchStats | None = None,
    checkpoint: Checkpoint = never_cancelled,
    last_offset: int | None = None,
) -> TimestampAndOffset | None:
    """Smallest offset ≥ ``start_offset`` in ``segment`` whose record timestamp is ≥ ``timestamp``,
    up to ``last_offset`` (the segment's end by default): the records past it are not looked at
    (a diverged copy kept past its cut: :mod:`rlm.lookup.answer_end`).

    Raises:
        CorruptDataError: the remote bytes are not valid; the message names the object key.
        StorageError / NotFoundError: the remote store failed or lost the object.
    """
    last = segment.end_offset if last_offset is None else last_offset
    hint = indexes.time_index(segment, stats).lookup(timestamp)
    checkpoint()
    position = indexes.offset_index(segment, stats).lookup(max(hint.offset, start_offset)).position
    reader = RemoteLogReader(storage, segment, stats, checkpoint)
    for header, chunk, at in reader.headers(position, timestamp, start_offset):
        if header.base_offset > last:
            return None
        try:
            found = find_record(chunk, header, timestamp, start_offset)
        except CorruptDataError as exc:
            raise exc.at(segment.layout.log_key, at + header.position) from exc
        if found is not None:
            if found[1] > last:
                return None
            epoch = header.leader_epoch if header.leader_epoch >= 0 else -1
            return TimestampAndOffset(found[0], found[1], epoch)
    return None
