"""Skipped ranges: offsets the remote tier will never hold, recorded under the partition lock.

A range is refused when it would hide data: offsets already copied (everything at or below the
partition's highest copied offset, and so below its remote log start offset), a copy under way,
or another skipped range. Recording the same range again is a no-op, so a retried call is safe,
even once the copier copied on above it.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Row, insert, select

from metadata.models import SegmentRow, SkippedRangeRow
from metadata.partitions import topic_partition
from rlm.errors import InvalidSkipRangeError, StateConflictError
from rlm.metastore.model import SegmentState, SkipKind, SkippedRange, TopicPartition

STARTED = SegmentState.COPY_SEGMENT_STARTED.value


def add(conn: Connection, part: Row[Any], skipped: SkippedRange) -> SkippedRange:
    """Record ``skipped`` for the partition of row ``part`` (locked by the caller)."""
    tp = topic_partition(part)
    start, end = skipped.start_offset, skipped.end_offset
    what = f"cannot skip offsets {start}..{end} of {tp}"
    if part.deletion_state is not None:
        raise StateConflictError(f"{what}: the partition is {part.deletion_state}")
    stored_ranges = ranges(conn, part.id, tp)
    for stored in stored_ranges:
        if (stored.start_offset, stored.end_offset, stored.kind) == (start, end, skipped.kind):
            # Recorded already: a retry, maybe of a call whose commit the caller did not hear of.
            # The copier may have copied on above it since, which must not make it look refused.
            return stored
    remote_start = int(part.remote_log_start_offset)
    if remote_start >= 0 and start < remote_start:
        raise InvalidSkipRangeError(f"{what}: the remote log starts at offset {remote_start}")
    highest = int(part.highest_copied_offset)
    if start <= highest:
        raise InvalidSkipRangeError(
            f"{what}: offsets up to {highest} were copied to the remote tier already "
            f"(skip from offset {highest + 1} on at the lowest)"
        )
    copying = conn.execute(
        select(SegmentRow.segment_id, SegmentRow.start_offset, SegmentRow.end_offset).where(
            SegmentRow.partition_id == part.id,
            SegmentRow.state == STARTED,
            SegmentRow.start_offset <= end,
            SegmentRow.end_offset >= start,
        )
    ).first()
    if copying is not None:
        raise InvalidSkipRangeError(
            f"{what}: a copy of offsets {copying.start_offset}..{copying.end_offset} is under way "
            f"(segment {copying.segment_id}); try again once it finished or failed"
        )
    for stored in stored_ranges:
        if not stored.overlaps(start, end):
            continue
        raise InvalidSkipRangeError(
            f"{what}: offsets {stored.start_offset}..{stored.end_offset} were skipped already "
            f"({stored.reason})"
        )
    conn.execute(
        insert(SkippedRangeRow).values(
            partition_id=part.id,
            start_offset=start,
            end_offset=end,
            kind=skipped.kind.value,
            reason=skipped.reason,
            recorded_at_ms=skipped.recorded_at_ms,
        )
    )
    return skipped


def ranges(conn: Connection, partition_id: int, tp: TopicPartition) -> list[SkippedRange]:
    """The skipped ranges of partition row ``partition_id`` in offset order."""
    rows = conn.execute(
        select(SkippedRangeRow.__table__)
        .where(SkippedRangeRow.partition_id == partition_id)
        .order_by(SkippedRangeRow.start_offset, SkippedRangeRow.id)
    )
    return [
        SkippedRange(
            tp,
            int(row.start_offset),
            int(row.end_offset),
            SkipKind(row.kind),
            str(row.reason),
            int(row.recorded_at_ms),
        )
        for row in rows
    ]
