"""A partition's segment rows in offset order, read a page at a time within one transaction.

A listing resumes each page after the last row of the previous one, ``(start_offset,
segment_id)``. Read in separate transactions, the pages would see the partition at different
times: a compaction swap between two of them may replace the last segment read and the next one
with an output that starts at the first one's offset but whose id sorts before it, so the output
falls before the resume point and the replaced segment's offsets go missing from the listing.
The caller therefore reads every page in the one transaction it passes in, whose snapshot
(PostgreSQL at REPEATABLE READ, a SQLite read transaction) they all see; pages keep the memory
a listing takes bounded, and a caller that stops early reads no more of a long partition.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from typing import Any
from uuid import UUID

from sqlalchemy import Connection, Row, Select, select, tuple_

from metadata import tree
from metadata.models import SegmentEpochRow, SegmentRow
from rlm.metastore.model import SegmentState, TopicPartition

Segment = SegmentRow


def rows(
    conn: Connection,
    tp: TopicPartition,
    states: Collection[SegmentState] | None,
    leader_epoch: int | None,
    page_size: int,
) -> Iterator[Row[Any]]:
    """The ``rlm_segment`` rows of ``tp`` in ``states`` (all when None) that ``leader_epoch``
    wrote records in (any when None), by start offset then id, ``page_size`` per statement.

    ``conn`` must stay in one snapshot until the iteration ends (see the module docstring).
    """
    after: tuple[int, UUID] | None = None
    while True:
        page = conn.execute(_page_query(tp, states, leader_epoch, after).limit(tree.const(page_size))).all()
        yield from page
        if len(page) < page_size:
            return
        after = (int(page[-1].start_offset), page[-1].segment_id)


def _page_query(
    tp: TopicPartition,
    states: Collection[SegmentState] | None,
    leader_epoch: int | None,
    after: tuple[int, UUID] | None,
) -> Select[Any]:
    partition_id = tree.partition_id_of(tp.topic, tp.partition)
    if leader_epoch is None:
        query = select(Segment.__table__).where(Segment.partition_id == partition_id)
        order = (Segment.start_offset, Segment.segment_id)
    else:
        query = (
            select(Segment.__table__)
            .join(SegmentEpochRow, SegmentEpochRow.segment_id == Segment.segment_id)
            .where(
                SegmentEpochRow.partition_id == partition_id,
                SegmentEpochRow.leader_epoch == leader_epoch,
            )
        )
        order = (SegmentEpochRow.segment_start_offset, SegmentEpochRow.segment_id)
    if states is not None:
        query = query.where(Segment.state.in_([state.value for state in states]))
    if after is not None:
        query = query.where(tuple_(*order) > tuple_(*after))
    return query.order_by(*order)
