"""Offset-for-timestamp inside one remote segment, with as few and as small GETs as possible.

The time and offset indexes come from the remote index cache (one ranged GET each when cold, none
when warm). The ``.log`` object is then read with ranged GETs from the indexed position, in
chunks that start small and double, reading batch headers only until a batch's max timestamp
reaches the target; only that batch is decoded. A whole segment is never downloaded.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Protocol

from rlm.errors import CorruptDataError, CorruptRecordError
from rlm.log.batches import find_record
from rlm.log.index import OffsetIndex, TimeIndex
from rlm.log.model import BatchHeader, TimestampAndOffset
from rlm.log.source import BytesSource, iter_headers
from rlm.lookup.stats import FetchStats
from rlm.metastore.model import RemoteSegment
from rlm.storage.protocol import RemoteStorage

FIRST_CHUNK_BYTES = 64 * 1024
MAX_CHUNK_BYTES = 8 * 1024 * 1024

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
        self.stats = stats if stats is not None else FetchStats()
        self.checkpoint = checkpoint

    def _read(self, position: int, length: int) -> bytes:
        self.checkpoint()
        length = max(0, min(length, self.segment.size_bytes - position))
        if length == 0:
            return b""
        data = self.storage.read_range(self.segment.layout.log_key, position, length)
        self.stats.add(len(data))
        return data

    def batches(self, position: int) -> Iterator[tuple[BatchHeader, bytes]]:
        """Yield ``(header, batch bytes)`` for each whole batch from ``position`` (header positions
        are positions in the object)."""
        chunk = FIRST_CHUNK_BYTES
        end = self.segment.size_bytes
        while position < end:
            data = self._read(position, chunk)
            consumed = 0
            try:
                for header in iter_headers(BytesSource(data, self.segment.layout.log_key)):
                    batch = data[header.position : header.end_position]
                    yield header._replace(position=position + header.position), batch
                    consumed = header.end_position
            except CorruptDataError as exc:
                raise exc.at(self.segment.layout.log_key, position + (exc.position or 0)) from exc
            if consumed == 0:
                # The next batch is bigger than the chunk: read exactly it.
                prefix = data[:12] if len(data) >= 12 else self._read(position, 12)
                if len(prefix) < 12:
                    return
                size = 12 + int.from_bytes(prefix[8:12], "big", signed=True)
                if size < 12 + 14 or position + size > end:
                    raise CorruptRecordError(
                        f"batch size {size} does not fit the segment object of {end} bytes",
                        path=self.segment.layout.log_key,
                        position=position,
                    )
                chunk = max(chunk, size)
                continue
            position += consumed
            chunk = min(chunk * 2, MAX_CHUNK_BYTES)


def find_in_remote_segment(
    segment: RemoteSegment,
    timestamp: int,
    start_offset: int,
    *,
    storage: RemoteStorage,
    indexes: SegmentIndexes,
    stats: FetchStats | None = None,
    checkpoint: Checkpoint = never_cancelled,
) -> TimestampAndOffset | None:
    """Smallest offset ≥ ``start_offset`` in ``segment`` whose record timestamp is ≥ ``timestamp``.

    Raises:
        CorruptDataError: the remote bytes are not valid; the message names the object key.
        StorageError / NotFoundError: the remote store failed or lost the object.
    """
    stats = stats if stats is not None else FetchStats()
    hint = indexes.time_index(segment, stats).lookup(timestamp)
    checkpoint()
    position = indexes.offset_index(segment, stats).lookup(max(hint.offset, start_offset)).position
    reader = RemoteLogReader(storage, segment, stats, checkpoint)
    for header, data in reader.batches(position):
        if header.max_timestamp < timestamp or header.last_offset < start_offset:
            continue
        try:
            found = find_record(data, header, timestamp, start_offset, at=0)
        except CorruptDataError as exc:
            raise exc.at(segment.layout.log_key, header.position) from exc
        if found is not None:
            epoch = header.leader_epoch if header.leader_epoch >= 0 else -1
            return TimestampAndOffset(found[0], found[1], epoch)
    return None
