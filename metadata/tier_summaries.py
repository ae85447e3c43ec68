"""Remote-tier summaries of many partitions in one query (a ListOffsets request's partitions).

For each partition row asked for: the row, the start offset of its first finished segment (an
index seek on ``(partition_id, state, start_offset, …)``) and the largest max timestamp of its
finished segments (the offset tree's top level, at most a few nodes): correlated subqueries of
one statement, so many partitions cost one round trip, not three each.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, Select, func, select, tuple_

from metadata import tree
from metadata.models import OffsetTreeRow, PartitionRow, SegmentRow
from metadata.rows import partition_from_row
from rlm.metastore.model import RemoteTierSummary, SegmentState, TopicPartition

#: Partitions per statement: two bound parameters each, well under SQLite's oldest limit (999).
CHUNK = 400
FINISHED = SegmentState.COPY_SEGMENT_FINISHED.value


def read(conn: Connection, tps: Sequence[TopicPartition]) -> dict[TopicPartition, RemoteTierSummary]:
    """The summaries of the partitions of ``tps`` that have a row; one statement per ``CHUNK``."""
    found: dict[TopicPartition, RemoteTierSummary] = {}
    for start in range(0, len(tps), CHUNK):
        chunk = tps[start : start + CHUNK]
        for row in conn.execute(_query(chunk)):
            record = partition_from_row(row)
            found[record.topic_partition] = RemoteTierSummary(
                record,
                None if row.first_offset is None else int(row.first_offset),
                None if row.max_timestamp is None else int(row.max_timestamp),
            )
    return found


def _query(tps: Sequence[TopicPartition]) -> Select[Any]:
    first_offset = (
        select(func.min(SegmentRow.start_offset))
        .where(SegmentRow.partition_id == PartitionRow.id, SegmentRow.state == FINISHED)
        .scalar_subquery()
    )
    max_timestamp = (
        select(func.max(OffsetTreeRow.max_timestamp_ms))
        .where(OffsetTreeRow.partition_id == PartitionRow.id, OffsetTreeRow.level == tree.const(tree.LEVELS))
        .scalar_subquery()
    )
    return select(
        PartitionRow.__table__,
        first_offset.label("first_offset"),
        max_timestamp.label("max_timestamp"),
    ).where(tuple_(PartitionRow.topic, PartitionRow.partition).in_([(tp.topic, tp.partition) for tp in tps]))
