"""Replacing remote copies that the broker's log diverged from (after an unclean leader election).

:func:`truncate` retires, in one transaction, every live copy of a partition starting at or above
an offset, and sets what the partition records back to what the copies left say, so that the
copier tiers the broker's log again from there (see :mod:`rlm.tiering.lineage`). Retired copies
move to ``DELETE_SEGMENT_STARTED``, as retention's do: reads stop finding them at once, and the
usual deletion removes their objects. The highest copied offset, per epoch too, falls to what the
copies left reach (never below the offsets retention deleted); the skipped ranges from the offset
on are forgotten (they named offsets of the truncated log), one reaching over it is cut short;
the export ledger's offsets above it fall to it, so the next incremental export writes the
broker's records there. The partition's ``lineage`` grows by one and the offset is kept
(``rlm_copy_truncation``): an export planned before, committed after, is held below it.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Row, delete, insert, update

from metadata import exports, recount
from metadata.models import CopyTruncationRow, PartitionRow, SegmentRow, SkippedRangeRow
from metadata.partitions import topic_partition
from rlm.metastore.model import SegmentState

LIVE = (SegmentState.COPY_SEGMENT_STARTED.value, SegmentState.COPY_SEGMENT_FINISHED.value)


def truncate(conn: Connection, part: Row[Any], from_offset: int, now_ms: int) -> int:
    """Retire the live copies of partition row ``part`` (locked by the caller) that start at or
    above ``from_offset``; returns how many."""
    retired = conn.execute(
        update(SegmentRow)
        .where(
            SegmentRow.partition_id == part.id,
            SegmentRow.state.in_(LIVE),
            SegmentRow.start_offset >= from_offset,
        )
        .values(state=SegmentState.DELETE_SEGMENT_STARTED.value, event_time_ms=now_ms)
    ).rowcount
    if retired == 0:
        return 0
    recount.partition(conn, part.id)
    # Offsets retention deleted were copied: the copier resumes above them, not below.
    deleted_below = min(from_offset, int(part.remote_log_start_offset)) - 1
    conn.execute(
        update(PartitionRow)
        .where(PartitionRow.id == part.id, PartitionRow.highest_copied_offset < deleted_below)
        .values(highest_copied_offset=deleted_below)
    )
    ranges = SkippedRangeRow.partition_id == part.id
    conn.execute(delete(SkippedRangeRow).where(ranges, SkippedRangeRow.start_offset >= from_offset))
    conn.execute(
        update(SkippedRangeRow)
        .where(ranges, SkippedRangeRow.end_offset >= from_offset)
        .values(end_offset=from_offset - 1)
    )
    exports.rewind(conn, topic_partition(part), from_offset)
    lineage = int(part.lineage) + 1
    conn.execute(update(PartitionRow).where(PartitionRow.id == part.id).values(lineage=lineage))
    conn.execute(
        insert(CopyTruncationRow).values(
            partition_id=part.id, lineage=lineage, from_offset=from_offset, truncated_ms=now_ms
        )
    )
    return int(retired)
