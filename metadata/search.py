"""Searches of the offset tree (see :mod:`metadata.tree`): one statement each, O(log n).

``first_from`` finds the first finished segment, in offset order, at or after a cursor
``(start_offset, segment_id)`` whose measure (max timestamp or end offset) is ≥ a threshold;
``last_until`` finds the last one at or before a cursor. The statement asks:

1. does the cursor's own 256-offset leaf range hold an answer?
2. if not, at each level, which is the nearest sibling of the cursor's ancestor (to the right,
   or left) whose maximum is ≥ the threshold? (one index probe per level);
3. from the lowest level that has one, a recursive CTE walks down to the first (last) child
   ≥ the threshold at every level, ending on one leaf range;
4. the answer is the first (last) qualifying segment of that range.

Every probe reads one range of at most 256 index entries, so the cost does not grow with the
number of segments. The statements are built once per measure and direction and reused.
"""

from __future__ import annotations

import functools
from typing import Any
from uuid import UUID

from sqlalchemy import (
    BigInteger,
    Connection,
    Integer,
    Row,
    Select,
    String,
    Uuid,
    and_,
    bindparam,
    exists,
    literal_column,
    or_,
    select,
    union_all,
)

from metadata.models import OffsetTreeRow, PartitionRow, SegmentRow
from metadata.tree import (
    BITS,
    FINISHED,
    LEVELS,
    Measure,
    const,
    inconsistent,
    node_column,
    segment_column,
)
from rlm.metastore.model import TopicPartition

Node = OffsetTreeRow
Segment = SegmentRow
_LOW = (1 << BITS) - 1
# Constants written into the SQL rather than bound, so that prepared (generic) plans see them.
_FANOUT = const(1 << BITS)
_LAST_CHILD = const(_LOW)
MIN_ID = UUID(int=0)
MAX_ID = UUID(int=(1 << 128) - 1)
Cursor = tuple[int, UUID]
"""A position in offset order: ``(start_offset, segment_id)``."""


def at_offset(offset: int) -> Cursor:
    """The cursor before every segment starting at ``offset`` (for :func:`first_from`)."""
    return (offset, MIN_ID)


def through_offset(offset: int) -> Cursor:
    """The cursor after every segment starting at ``offset`` (for :func:`last_until`)."""
    return (offset, MAX_ID)


def after(row: Row[Any]) -> Cursor:
    """The cursor just after segment ``row``."""
    if row.segment_id.int == MAX_ID.int:
        return (int(row.start_offset) + 1, MIN_ID)
    return (int(row.start_offset), UUID(int=row.segment_id.int + 1))


def before(row: Row[Any]) -> Cursor | None:
    """The cursor just before segment ``row``; ``None`` when nothing can come before it."""
    if row.segment_id.int != 0:
        return (int(row.start_offset), UUID(int=row.segment_id.int - 1))
    if row.start_offset == 0:
        return None
    return (int(row.start_offset) - 1, MAX_ID)


def _cursor_condition(last: bool) -> Any:
    """``(start_offset, segment_id)`` at or after (before) the cursor.

    Written as a bound on ``start_offset`` plus a filter, not as a row comparison: the index scan
    then starts at the tighter of this bound and the leaf range's.
    """
    start = bindparam("cursor_start", type_=BigInteger)
    segment_id = bindparam("cursor_id", type_=Uuid())
    if last:
        return and_(
            Segment.start_offset <= start,
            or_(Segment.start_offset < start, Segment.segment_id <= segment_id),
        )
    return and_(
        Segment.start_offset >= start,
        or_(Segment.start_offset > start, Segment.segment_id >= segment_id),
    )


def _partition_id() -> Any:
    """The id of the partition named by the ``topic`` and ``partition`` parameters."""
    return (
        select(PartitionRow.id)
        .where(
            PartitionRow.topic == bindparam("topic", type_=String()),
            PartitionRow.partition == bindparam("partition", type_=Integer),
        )
        .scalar_subquery()
    )


def _in_leaf_range(low: str, high: str) -> list[Any]:
    return [
        Segment.partition_id == _partition_id(),
        Segment.state == FINISHED,
        Segment.start_offset >= bindparam(low, type_=BigInteger),
        Segment.start_offset <= bindparam(high, type_=BigInteger),
    ]


@functools.cache
def _statement(measure: Measure, last: bool) -> Select[Any]:
    """The search, built once per measure and direction."""
    pid = _partition_id()
    threshold = bindparam("threshold", type_=BigInteger)
    node_max = node_column(measure)
    qualifies = [*_in_leaf_range("own_low", "own_high"), segment_column(measure) >= threshold]

    # rank 0: the cursor's own leaf range; rank L: the nearest sibling at level L.
    own: Select[Any] = select(  # type: ignore[assignment]
        literal_column("0").label("rank"),
        literal_column("1").label("level"),
        bindparam("own_bucket", type_=BigInteger).label("bucket"),
    ).where(exists().where(*qualifies, _cursor_condition(last)))
    parts: list[Select[Any]] = [own]
    for level in range(1, LEVELS + 1):
        ancestor = bindparam(f"ancestor_{level}", type_=BigInteger)
        edge = bindparam(f"edge_{level}", type_=BigInteger)
        beyond = (
            [Node.bucket < ancestor, Node.bucket >= edge]
            if last
            else [Node.bucket > ancestor, Node.bucket <= edge]
        )
        nearest = (
            select(literal_column(str(level)).label("rank"), Node.level, Node.bucket)
            .where(Node.partition_id == pid, Node.level == const(level), *beyond, node_max >= threshold)
            .order_by(Node.bucket.desc() if last else Node.bucket)
            .limit(const(1))
            .subquery()
        )
        parts.append(select(nearest.c.rank, nearest.c.level, nearest.c.bucket))
    hits = union_all(*parts).cte("hits")
    start = select(hits.c.level, hits.c.bucket).order_by(hits.c.rank).limit(const(1)).cte("start")
    path = select(start.c.level, start.c.bucket).cte("path", recursive=True)
    child = (
        select(Node.bucket)
        .where(
            Node.partition_id == pid,
            Node.level == path.c.level - 1,
            Node.bucket >= path.c.bucket * _FANOUT,
            Node.bucket <= path.c.bucket * _FANOUT + _LAST_CHILD,
            node_max >= threshold,
        )
        .order_by(Node.bucket.desc() if last else Node.bucket)
        .limit(const(1))
        .scalar_subquery()
    )
    path = path.union_all(select(path.c.level - 1, child).where(path.c.level > 1))
    located = select(path.c.bucket).where(path.c.level == 1).cte("located")

    # The answer is the first (last) qualifying segment of the located leaf range. It is looked
    # up as an ordered LIMIT 1 subquery, which every plan runs as one index range scan, and then
    # fetched by its id. The outer join keeps the located bucket when the range holds no answer,
    # which only a tree out of step with its segments can cause.
    order = (
        (Segment.start_offset.desc(), Segment.segment_id.desc())
        if last
        else (Segment.start_offset, Segment.segment_id)
    )
    found = (
        select(Segment.segment_id)
        .where(
            Segment.partition_id == pid,
            Segment.state == FINISHED,
            Segment.start_offset >= located.c.bucket * _FANOUT,
            Segment.start_offset <= located.c.bucket * _FANOUT + _LAST_CHILD,
            _cursor_condition(last),
            segment_column(measure) >= threshold,
        )
        .order_by(*order)
        .limit(const(1))
        .scalar_subquery()
    )
    answer = select(located.c.bucket, found.label("found_id")).subquery("answer")
    segments = SegmentRow.__table__
    return select(answer.c.bucket.label("located_bucket"), *segments.c).select_from(
        answer.outerjoin(segments, Segment.segment_id == answer.c.found_id)
    )


def _search(
    conn: Connection,
    tp: TopicPartition,
    cursor: Cursor,
    measure: Measure,
    threshold: int,
    *,
    last: bool,
) -> Row[Any] | None:
    own_bucket = cursor[0] >> BITS
    params: dict[str, Any] = {
        "topic": tp.topic,
        "partition": tp.partition,
        "threshold": threshold,
        "cursor_start": cursor[0],
        "cursor_id": cursor[1],
        "own_bucket": own_bucket,
        "own_low": own_bucket << BITS,
        "own_high": (own_bucket << BITS) | _LOW,
    }
    for level in range(1, LEVELS + 1):
        bucket = cursor[0] >> (BITS * level)
        params[f"ancestor_{level}"] = bucket
        # Siblings share the parent bucket >> 8 (at the top level, 0 for every bucket).
        params[f"edge_{level}"] = bucket & ~_LOW if last else bucket | _LOW
    row = conn.execute(_statement(measure, last), params).first()
    if row is None:
        return None
    if row.located_bucket is None or row.segment_id is None:
        raise inconsistent(tp)
    return row


def first_from(
    conn: Connection, tp: TopicPartition, cursor: Cursor, measure: Measure, threshold: int
) -> Row[Any] | None:
    """The first finished segment of ``tp`` at or after ``cursor`` whose measure is ≥
    ``threshold``; ``None`` when there is none (or the partition is unknown)."""
    return _search(conn, tp, cursor, measure, threshold, last=False)


def last_until(
    conn: Connection, tp: TopicPartition, cursor: Cursor, measure: Measure, threshold: int
) -> Row[Any] | None:
    """The last finished segment of ``tp`` at or before ``cursor`` whose measure is ≥
    ``threshold``; ``None`` when there is none (or the partition is unknown)."""
    return _search(conn, tp, cursor, measure, threshold, last=True)
