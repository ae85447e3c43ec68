"""The offset tree: O(log n) "first/last finished segment past an offset whose max ≥ X" lookups.

Segment max timestamps are not monotonic in offset order, and segments may overlap, so neither
"first segment with max timestamp ≥ T after offset O" nor "segment holding offset O" can be
answered from a B-tree on one column without scanning. A running maximum would answer the first
from offset 0 only, and goes stale when an early segment is deleted.

This module keeps, per partition, a 256-ary tree over the start offsets of the
COPY_SEGMENT_FINISHED segments. Node ``(level, bucket)`` covers start offsets
``[bucket << 8·level, (bucket + 1) << 8·level)`` and stores the largest max timestamp and the
largest end offset of the finished segments whose start offset lies in that range; a node exists
exactly when the range holds one. Levels 1..7 cover every non-negative 63-bit offset; level 0 is
the segment table itself (index ``(partition_id, state, start_offset, segment_id)``).

The searches live in :mod:`metadata.search`. Maintaining the tree (here) costs one path of at
most 7 nodes per segment entering or leaving COPY_SEGMENT_FINISHED, in the same transaction as the
state change, under the partition lock; :func:`rebuild` recomputes it after a bulk load.
"""

from __future__ import annotations

import enum
from typing import Any

from sqlalchemy import (
    Connection,
    delete,
    func,
    insert,
    literal,
    literal_column,
    select,
    union_all,
    update,
)
from sqlalchemy.orm import QueryableAttribute
from sqlalchemy.sql.elements import ColumnClause
from sqlalchemy.sql.selectable import ScalarSelect

from metadata.models import OffsetTreeRow, PartitionRow, SegmentRow
from rlm.errors import MetadataError
from rlm.metastore.model import SegmentState

BITS = 8
FANOUT = 1 << BITS
LEVELS = 7
_LOW = FANOUT - 1
FINISHED = SegmentState.COPY_SEGMENT_FINISHED.value

Node = OffsetTreeRow
Segment = SegmentRow


class Measure(enum.Enum):
    """What a search compares with its threshold."""

    MAX_TIMESTAMP = "max_timestamp"
    END_OFFSET = "end_offset"


def segment_column(measure: Measure) -> QueryableAttribute[int]:
    """The segment column a measure reads."""
    return Segment.max_timestamp_ms if measure is Measure.MAX_TIMESTAMP else Segment.end_offset


def node_column(measure: Measure) -> QueryableAttribute[int]:
    """The node column holding a measure's maximum."""
    return Node.max_timestamp_ms if measure is Measure.MAX_TIMESTAMP else Node.max_end_offset


def _first_offset(bucket: int, level: int) -> int:
    return bucket << (BITS * level)


def _last_offset(bucket: int, level: int) -> int:
    return ((bucket + 1) << (BITS * level)) - 1


def const(value: int) -> ColumnClause[Any]:
    """An integer written into the SQL text instead of bound.

    rlm runs PostgreSQL statements with generic (prepared) plans; a constant that the planner
    can see (a tree level, a LIMIT) keeps those plans on the right index.
    """
    return literal_column(str(int(value)))


def partition_id_of(topic: str, partition: int) -> ScalarSelect[int]:
    """The row id of a partition, as a scalar subquery."""
    return (
        select(PartitionRow.id)
        .where(PartitionRow.topic == topic, PartitionRow.partition == partition)
        .scalar_subquery()
    )


def max_timestamp(conn: Connection, topic: str, partition: int) -> int | None:
    """Largest max timestamp of the partition's finished segments (the top level's maximum)."""
    value = conn.execute(
        select(func.max(Node.max_timestamp_ms)).where(
            Node.partition_id == partition_id_of(topic, partition), Node.level == const(LEVELS)
        )
    ).scalar()
    return None if value is None else int(value)


def _path(start_offset: int) -> list[tuple[int, int]]:
    return [(level, start_offset >> (BITS * level)) for level in range(1, LEVELS + 1)]


def _read_path(
    conn: Connection, partition_id: int, start_offset: int
) -> dict[tuple[int, int], tuple[int, int]]:
    lookups = [
        select(Node.level, Node.bucket, Node.max_timestamp_ms, Node.max_end_offset).where(
            Node.partition_id == partition_id, Node.level == const(level), Node.bucket == bucket
        )
        for level, bucket in _path(start_offset)
    ]
    rows = conn.execute(union_all(*lookups))
    return {(int(r[0]), int(r[1])): (int(r[2]), int(r[3])) for r in rows}


def _node_key(partition_id: int, level: int, bucket: int) -> list[Any]:
    return [Node.partition_id == partition_id, Node.level == level, Node.bucket == bucket]


def add_segment(
    conn: Connection, partition_id: int, start_offset: int, max_timestamp_ms: int, end_offset: int
) -> None:
    """Account for a segment that just became COPY_SEGMENT_FINISHED."""
    nodes = _read_path(conn, partition_id, start_offset)
    for level, bucket in _path(start_offset):
        current = nodes.get((level, bucket))
        if current is None:
            conn.execute(
                insert(Node).values(
                    partition_id=partition_id,
                    level=level,
                    bucket=bucket,
                    max_timestamp_ms=max_timestamp_ms,
                    max_end_offset=end_offset,
                )
            )
            continue
        if max_timestamp_ms <= current[0] and end_offset <= current[1]:
            return  # this node already covers the segment, and so does every ancestor
        conn.execute(
            update(Node)
            .where(*_node_key(partition_id, level, bucket))
            .values(
                max_timestamp_ms=max(max_timestamp_ms, current[0]),
                max_end_offset=max(end_offset, current[1]),
            )
        )


def _children_maxima(conn: Connection, partition_id: int, level: int, bucket: int) -> tuple[int, int] | None:
    if level == 1:
        query = select(func.max(Segment.max_timestamp_ms), func.max(Segment.end_offset)).where(
            Segment.partition_id == partition_id,
            Segment.state == FINISHED,
            Segment.start_offset >= _first_offset(bucket, 1),
            Segment.start_offset <= _last_offset(bucket, 1),
        )
    else:
        query = select(func.max(Node.max_timestamp_ms), func.max(Node.max_end_offset)).where(
            Node.partition_id == partition_id,
            Node.level == level - 1,
            Node.bucket >= bucket << BITS,
            Node.bucket <= (bucket << BITS) | _LOW,
        )
    row = conn.execute(query).one()
    return None if row[0] is None else (int(row[0]), int(row[1]))


def remove_segment(
    conn: Connection, partition_id: int, start_offset: int, max_timestamp_ms: int, end_offset: int
) -> None:
    """Account for a segment that just left COPY_SEGMENT_FINISHED (its row already updated)."""
    nodes = _read_path(conn, partition_id, start_offset)
    for level, bucket in _path(start_offset):
        current = nodes.get((level, bucket))
        if current is None:
            raise inconsistent(partition_id)
        if max_timestamp_ms < current[0] and end_offset < current[1]:
            return  # the segment set neither maximum here, so nothing changes up the path
        maxima = _children_maxima(conn, partition_id, level, bucket)
        if maxima == current:
            return
        key = _node_key(partition_id, level, bucket)
        if maxima is None:
            conn.execute(delete(Node).where(*key))
        else:
            conn.execute(
                update(Node).where(*key).values(max_timestamp_ms=maxima[0], max_end_offset=maxima[1])
            )


def rebuild(conn: Connection, partition_id: int) -> None:
    """Recompute the partition's whole tree from its segment rows (after a bulk load)."""
    conn.execute(delete(Node).where(Node.partition_id == partition_id))
    shift: ColumnClause[Any] = literal_column(str(BITS))
    bucket = Segment.start_offset.op(">>")(shift)
    columns = ["partition_id", "level", "bucket", "max_timestamp_ms", "max_end_offset"]
    conn.execute(
        insert(Node).from_select(
            columns,
            select(
                literal(partition_id),
                literal(1),
                bucket,
                func.max(Segment.max_timestamp_ms),
                func.max(Segment.end_offset),
            )
            .where(Segment.partition_id == partition_id, Segment.state == FINISHED)
            .group_by(bucket),
        )
    )
    for level in range(2, LEVELS + 1):
        parent = Node.bucket.op(">>")(shift)
        conn.execute(
            insert(Node).from_select(
                columns,
                select(
                    literal(partition_id),
                    literal(level),
                    parent,
                    func.max(Node.max_timestamp_ms),
                    func.max(Node.max_end_offset),
                )
                .where(Node.partition_id == partition_id, Node.level == level - 1)
                .group_by(parent),
            )
        )


def inconsistent(partition: object) -> MetadataError:
    """The error for a tree that disagrees with its segment rows."""
    return MetadataError(
        f"offset tree of partition {partition} disagrees with its segments: "
        "rebuild it with SqlMetadataStore.rebuild_summaries"
    )
