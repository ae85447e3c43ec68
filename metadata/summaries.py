"""What a segment entering or leaving COPY_SEGMENT_FINISHED changes besides its own row.

The offset tree, the partition's remote log size and highest copied offset, and the highest
copied offset per leader epoch are all derived from the segment rows. They are updated in the
same transaction as the state change, under the partition lock; :func:`rebuild` recomputes them
from the rows (after a bulk load, or to repair).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Row, func, insert, select, update

from metadata import tree
from metadata.models import EpochOffsetRow, PartitionRow, SegmentEpochRow, SegmentRow
from rlm.metastore.model import RemoteSegment, SegmentState

FINISHED = SegmentState.COPY_SEGMENT_FINISHED.value


def segment_finished(conn: Connection, part: Row[Any], segment: RemoteSegment) -> None:
    """Account for ``segment`` of partition row ``part`` becoming COPY_SEGMENT_FINISHED."""
    tree.add_segment(conn, part.id, segment.start_offset, segment.max_timestamp_ms, segment.end_offset)
    conn.execute(
        update(PartitionRow)
        .where(PartitionRow.id == part.id)
        .values(
            remote_log_size_bytes=PartitionRow.remote_log_size_bytes + segment.size_bytes,
            highest_copied_offset=max(int(part.highest_copied_offset), segment.end_offset),
        )
    )
    last_offsets = {}
    for entry in segment.leader_epochs:
        epoch_range = segment.epoch_range(entry.epoch)
        if epoch_range is not None:
            last_offsets[entry.epoch] = epoch_range[1]
    _raise_epoch_offsets(conn, part.id, last_offsets)


def segment_unfinished(conn: Connection, part: Row[Any], segment: RemoteSegment) -> None:
    """Account for ``segment`` leaving COPY_SEGMENT_FINISHED (highest offsets never fall)."""
    tree.remove_segment(conn, part.id, segment.start_offset, segment.max_timestamp_ms, segment.end_offset)
    conn.execute(
        update(PartitionRow)
        .where(PartitionRow.id == part.id)
        .values(remote_log_size_bytes=PartitionRow.remote_log_size_bytes - segment.size_bytes)
    )


def rebuild(conn: Connection, part: Row[Any]) -> None:
    """Recompute everything derived from the segment rows of partition row ``part`` (locked)."""
    tree.rebuild(conn, part.id)
    size, highest = conn.execute(
        select(func.coalesce(func.sum(SegmentRow.size_bytes), 0), func.max(SegmentRow.end_offset)).where(
            SegmentRow.partition_id == part.id, SegmentRow.state == FINISHED
        )
    ).one()
    conn.execute(
        update(PartitionRow)
        .where(PartitionRow.id == part.id)
        .values(
            remote_log_size_bytes=int(size),
            highest_copied_offset=max(
                int(part.highest_copied_offset), -1 if highest is None else int(highest)
            ),
        )
    )
    epoch_last = conn.execute(
        select(SegmentEpochRow.leader_epoch, func.max(SegmentEpochRow.last_offset))
        .join(SegmentRow, SegmentRow.segment_id == SegmentEpochRow.segment_id)
        .where(SegmentEpochRow.partition_id == part.id, SegmentRow.state == FINISHED)
        .group_by(SegmentEpochRow.leader_epoch)
    )
    _raise_epoch_offsets(conn, part.id, {int(e): int(last) for e, last in epoch_last})


def _raise_epoch_offsets(conn: Connection, partition_id: int, last_offsets: dict[int, int]) -> None:
    """Raise each epoch's highest copied offset to at least ``last_offsets[epoch]``."""
    for epoch, last in last_offsets.items():
        key = (EpochOffsetRow.partition_id == partition_id, EpochOffsetRow.leader_epoch == epoch)
        highest = conn.execute(select(EpochOffsetRow.highest_offset).where(*key)).scalar()
        if highest is None:
            conn.execute(
                insert(EpochOffsetRow).values(
                    partition_id=partition_id, leader_epoch=epoch, highest_offset=last
                )
            )
        elif last > highest:
            conn.execute(update(EpochOffsetRow).where(*key).values(highest_offset=last))
