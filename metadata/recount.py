"""What a partition records, counted again from its finished segments after some left at once.

Segments leave ``COPY_SEGMENT_FINISHED`` one at a time in the usual course (retention, cleanup),
and each move keeps the partition's figures true. Two changes move many at once and set back
figures that otherwise never fall: a topic id change (:mod:`metadata.topic_ids`) and replacing
copies the broker's log diverged from (:mod:`metadata.truncation`). Both then count the figures
again from the segments left.
"""

from __future__ import annotations

from sqlalchemy import Connection, delete, func, insert, select, update

from metadata import tree
from metadata.models import EpochOffsetRow, PartitionRow, SegmentEpochRow, SegmentRow
from rlm.metastore.model import SegmentState

FINISHED = SegmentState.COPY_SEGMENT_FINISHED.value


def partition(conn: Connection, partition_id: int) -> None:
    """Set the offset tree, the remote log size, the highest copied offset and the highest offset
    per leader epoch of partition ``partition_id`` (locked by the caller) to what its finished
    segments say."""
    tree.rebuild(conn, partition_id)
    finished = (SegmentRow.partition_id == partition_id, SegmentRow.state == FINISHED)
    size, highest = conn.execute(
        select(func.coalesce(func.sum(SegmentRow.size_bytes), 0), func.max(SegmentRow.end_offset)).where(
            *finished
        )
    ).one()
    highest = -1 if highest is None else int(highest)
    conn.execute(
        update(PartitionRow)
        .where(PartitionRow.id == partition_id)
        .values(remote_log_size_bytes=int(size), highest_copied_offset=highest)
    )
    conn.execute(delete(EpochOffsetRow).where(EpochOffsetRow.partition_id == partition_id))
    epoch_last = (
        select(
            SegmentEpochRow.partition_id,
            SegmentEpochRow.leader_epoch,
            func.max(SegmentEpochRow.last_offset),
        )
        .join(SegmentRow, SegmentRow.segment_id == SegmentEpochRow.segment_id)
        .where(*finished)
        .group_by(SegmentEpochRow.partition_id, SegmentEpochRow.leader_epoch)
    )
    conn.execute(
        insert(EpochOffsetRow).from_select(["partition_id", "leader_epoch", "highest_offset"], epoch_last)
    )
