"""Where each partition's export starts and stops: offsets, found on the driver.

``--from T1``/``--to T2`` select records as a consumer seeking by time would: from the first
offset whose record timestamp is ≥ T1 up to, not including, the first offset whose timestamp is
≥ T2 (Kafka's offsets-for-times positions). Both offsets are found with rlm's own remote search
(:func:`rlm.lookup.ranged_search.find_in_remote_segment`, the lookups' ListOffsets path): the
first segment whose max timestamp reaches the time, its time and offset indexes, then the batch
headers from the indexed position; a few ranged reads, never a scan of the tier. Where timestamps
only grow along offsets this is exactly the records with T1 ≤ timestamp < T2.

Each copy is searched only over the offsets the export reads from it (its summary's read range),
as the lookups search a copy only up to where it answers (:mod:`rlm.lookup.answer_end`): a
diverged copy kept past its cut holds the old leader's records beyond it, which are not the log's,
and whose timestamps would otherwise start or stop the range at an offset the log's records there
(read from the copy that follows) do not reach.

``read_committed`` stops each partition at the tier's last stable offset
(:func:`rlm.remote_tier.stable.tiered_stable_offset`): the first offset of a transaction whose
COMMIT or ABORT marker is not tiered yet, whose records the transaction index cannot yet flag.
Without it an export would write records that are aborted later, and never take them back.

``--incremental`` starts each partition at the offset the previous run of the same output stopped
at (the ledger, :mod:`metadata.exports`): the range's stop when the run had one (``--to``, the
last stable offset), else past the last tiered offset. Records held back at the last stable offset
are thus read by the first incremental run after their marker is tiered.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from rlm.errors import NotFoundError
from rlm.log.index import OffsetIndex, TimeIndex
from rlm.lookup.ranged_search import find_in_remote_segment
from rlm.lookup.stats import FetchStats
from rlm.metastore.model import IndexType, RemoteSegment, TopicPartition
from rlm.remote_tier.read_plan import PartitionPlan, SegmentSummary
from rlm.storage.protocol import RemoteStorage
from rlm.storage.range_source import read_index

#: An offset above every offset (an open end).
NO_END = 2**63 - 1


class DirectIndexes:
    """A segment's offset and time indexes, read with one ranged read each (no cache: a run
    looks at a few segments per partition once)."""

    def __init__(self, storage: RemoteStorage) -> None:
        self.storage = storage

    def _read(self, segment: RemoteSegment, kind: IndexType, stats: FetchStats | None) -> bytes:
        data = read_index(self.storage, segment.layout, kind)
        if data is None:
            raise NotFoundError(f"remote segment {segment.segment_id} has no {kind.value} index")
        if stats is not None:
            stats.add(len(data))
        return data

    def offset_index(self, segment: RemoteSegment, stats: FetchStats | None = None) -> OffsetIndex:
        data = self._read(segment, IndexType.OFFSET, stats)
        return OffsetIndex.from_bytes(segment.start_offset, data, path=segment.layout.index_key)

    def time_index(self, segment: RemoteSegment, stats: FetchStats | None = None) -> TimeIndex:
        data = self._read(segment, IndexType.TIMESTAMP, stats)
        return TimeIndex.from_bytes(segment.start_offset, data, path=segment.layout.index_key)


def offset_for_timestamp(
    storage: RemoteStorage, segments: Sequence[SegmentSummary], timestamp_ms: int, start: int
) -> int | None:
    """The smallest offset ≥ ``start`` read from ``segments`` (a partition's summaries, in offset
    order) whose record timestamp is ≥ ``timestamp_ms``; ``None`` when there is none. The lookup
    service's remote search, without a local tier: each copy searched over its read range only.

    Raises:
        CorruptDataError: An index or batch read is not valid; the message names the object.
        NotFoundError / StorageError: The store lost an object or failed.
    """
    indexes = DirectIndexes(storage)
    for summary in segments:
        segment = summary.segment
        begin = max(start, summary.read_from)
        if begin > summary.read_to or segment.max_timestamp_ms < timestamp_ms:
            continue
        found = find_in_remote_segment(
            segment, timestamp_ms, begin, storage=storage, indexes=indexes, last_offset=summary.read_to
        )
        if found is not None:
            return found.offset
    return None


@dataclass(frozen=True)
class Range:
    """The offsets ``[start, stop)`` of one partition a run exports."""

    start: int
    stop: int

    @property
    def empty(self) -> bool:
        return self.start >= self.stop


def partition_range(
    storage: RemoteStorage,
    plan: PartitionPlan,
    *,
    from_ms: int | None = None,
    to_ms: int | None = None,
    resume_at: int | None = None,
    stable_end: int | None = None,
) -> Range:
    """The offsets of the partition a run exports: from the log start (or ``resume_at``, the
    ledger's offset, when higher), up to ``stable_end`` (``read_committed``: the tier's last stable
    offset; ``None`` for no such bound), narrowed by ``from_ms``/``to_ms`` (module docstring)."""
    start = max(plan.log_start_offset, 0, resume_at if resume_at is not None else 0)
    stop = NO_END if stable_end is None else stable_end
    if (from_ms is None and to_ms is None) or not plan.segments:
        return Range(start, stop)
    if from_ms is not None:
        found = offset_for_timestamp(storage, plan.segments, from_ms, start)
        start = NO_END if found is None else found
    if to_ms is not None:
        found = offset_for_timestamp(storage, plan.segments, to_ms, start)
        stop = min(stop, NO_END if found is None else found)
    return Range(start, stop)


def narrow(plan: PartitionPlan, offsets: Range) -> PartitionPlan:
    """``plan`` reading only ``offsets``; segments left with nothing to read are dropped."""
    summaries = []
    for summary in plan.segments:
        first = max(summary.read_from, offsets.start)
        last = min(summary.read_to, offsets.stop - 1)
        if first <= last:
            summaries.append(dataclasses.replace(summary, read_from=first, read_to=last))
    return dataclasses.replace(plan, segments=tuple(summaries))


def next_offsets(
    plans: Mapping[TopicPartition, PartitionPlan], ranges: Mapping[TopicPartition, Range]
) -> dict[TopicPartition, int]:
    """Where the next incremental run of each partition starts: past the last offset this run
    covered (the partition's last finished offset, or the range's stop when lower: a
    ``read_committed`` run's last stable offset holds the ledger at an open transaction's first
    offset), never before the range's start."""
    found = {}
    for tp, plan in plans.items():
        offsets = ranges[tp]
        tiered = max((s.read_to for s in plan.segments), default=-1)
        if tiered < 0:
            continue
        found[tp] = min(tiered + 1, offsets.stop) if offsets.stop != NO_END else tiered + 1
        found[tp] = max(found[tp], offsets.start if offsets.start != NO_END else tiered + 1)
    return found
