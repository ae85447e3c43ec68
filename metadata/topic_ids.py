"""The topic id a partition's remote state belongs to, and retiring another topic's state.

Kafka keys remote state by ``TopicIdPartition``: a topic deleted and created again under the same
name is another topic (a new id in ``partition.metadata``, offsets from 0 again), and the deleted
topic's remote segments are deleted. ``rlm_partition`` is keyed by name, so it records the id
(``topic_id``); :func:`adopt` runs under the partition lock, in the caller's transaction, and
either confirms the id, adopts it, or retires the other topic's state in one step: readers see the
old topic's segments or none of them, never a mix with the new topic's offsets. A reset forgets
the export ledger's offsets of the partition's other topics too (see :mod:`metadata.exports`).
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from sqlalchemy import ColumnElement, Connection, Row, delete, insert, or_, select, update

from metadata import exports, recount
from metadata.models import PartitionRow, RetiredTopicIdRow, SegmentRow, SkippedRangeRow
from metadata.partitions import topic_partition
from metadata.rows import segment_from_row
from rlm.errors import OlderTopicIdError, RetiredTopicIdError
from rlm.metastore.model import UNKNOWN_BROKER, RemoteSegment, SegmentState, TopicIdChange, TopicPartition

FINISHED = SegmentState.COPY_SEGMENT_FINISHED.value
LIVE = (SegmentState.COPY_SEGMENT_STARTED.value, FINISHED)


#: How much older than the first copy of another topic's segments a ``partition.metadata`` may be
#: and still be taken as newer: the clocks of the broker that wrote it and of the sidecar that
#: copied them may disagree by that much.
CLOCK_SKEW_MS = 60_000


def adopt(
    conn: Connection,
    part: Row[Any],
    topic_id: UUID,
    now_ms: int,
    written_ms: int | None = None,
    log_start_offset: int = -1,
) -> TopicIdChange:
    """Make ``topic_id`` the id of partition row ``part`` (locked by the caller); see
    :meth:`rlm.metastore.protocol.MetadataStore.adopt_topic_id`."""
    previous: UUID | None = part.topic_id
    if previous == topic_id:
        return TopicIdChange(previous, 0, reset=False)
    other = _refuse(conn, part, topic_id, written_ms)
    named = select(SegmentRow.topic_id).distinct()
    named = named.where(SegmentRow.partition_id == part.id, SegmentRow.state.in_(LIVE), other)
    ids = {i for i in conn.execute(named).scalars() if i is not None}
    retired = conn.execute(
        update(SegmentRow)
        .where(SegmentRow.partition_id == part.id, SegmentRow.state.in_(LIVE), other)
        .values(state=SegmentState.DELETE_SEGMENT_STARTED.value, event_time_ms=now_ms)
    ).rowcount
    if previous is not None and (retired > 0 or _tiered_before(conn, part.id, previous, written_ms)):
        ids.add(previous)
    # Only ids whose segments went, or went before (retention deleted them all) yet were tiered
    # before the broker wrote ``topic_id``: one with nothing tiered may be the live topic's yet,
    # its replica's sidecar not having tiered anything when a stale replica's adopted another.
    _remember_retired(conn, part.id, ids, topic_id, now_ms)
    reset = previous is not None or retired > 0
    if reset:
        _reset(conn, part.id, log_start_offset)
        exports.forget_other_topics(conn, TopicPartition(part.topic, int(part.partition)), topic_id)
    conn.execute(update(PartitionRow).where(PartitionRow.id == part.id).values(topic_id=topic_id))
    return TopicIdChange(previous, retired, reset=reset)


def retirees(
    conn: Connection, part: Row[Any], topic_id: UUID, written_ms: int | None = None
) -> list[RemoteSegment] | None:
    """What :func:`adopt` of ``topic_id`` would retire from partition row ``part``, changing
    nothing: None when ``topic_id`` is the one recorded (adopting it changes nothing), else the
    live segments it would move to ``DELETE_SEGMENT_STARTED`` (maybe none), by start offset.

    Raises:
        RetiredTopicIdError, OlderTopicIdError: As :func:`adopt` would.
    """
    if part.topic_id == topic_id:
        return None
    other = _refuse(conn, part, topic_id, written_ms)
    rows = conn.execute(
        select(SegmentRow.__table__)
        .where(SegmentRow.partition_id == part.id, SegmentRow.state.in_(LIVE), other)
        .order_by(SegmentRow.start_offset, SegmentRow.segment_id)
    ).all()
    tp = topic_partition(part)
    return [segment_from_row(row, tp) for row in rows]


def _refuse(conn: Connection, part: Row[Any], topic_id: UUID, written_ms: int | None) -> ColumnElement[bool]:
    """Raise when adopting ``topic_id`` must be refused (:func:`_refuse_retired`,
    :func:`_refuse_older`); else the condition the segments it retires meet."""
    _refuse_retired(conn, part, topic_id)
    other = SegmentRow.topic_id != topic_id
    if part.topic_id is not None:
        # Segments without an id were copied before the row learned the old id: the old topic's.
        other = or_(SegmentRow.topic_id.is_(None), other)
    if written_ms is not None:
        _refuse_older(conn, part, topic_id, other, written_ms)
    return other


def _refuse_retired(conn: Connection, part: Row[Any], topic_id: UUID) -> None:
    """Raise :class:`RetiredTopicIdError` when ``topic_id`` was retired from partition row ``part``."""
    row = conn.execute(
        select(RetiredTopicIdRow.retired_at_ms, RetiredTopicIdRow.successor).where(
            RetiredTopicIdRow.partition_id == part.id, RetiredTopicIdRow.topic_id == topic_id
        )
    ).first()
    if row is None:
        return
    raise RetiredTopicIdError(
        f"{part.topic}-{part.partition}: topic id {topic_id} was retired at {int(row.retired_at_ms)} ms "
        f"for {row.successor}",
        topic_id=topic_id,
        successor=row.successor,
        retired_at_ms=int(row.retired_at_ms),
    )


def _refuse_older(
    conn: Connection, part: Row[Any], topic_id: UUID, other: ColumnElement[bool], written_ms: int
) -> None:
    """Raise :class:`OlderTopicIdError` when a segment ``topic_id`` would retire was first copied
    after ``written_ms`` (give or take :data:`CLOCK_SKEW_MS`). Rows rebuilt from objects without a
    description know no copy time (``UNKNOWN_BROKER``): they do not count."""
    first = conn.execute(
        select(SegmentRow.event_time_ms, SegmentRow.topic_id)
        .where(
            SegmentRow.partition_id == part.id,
            SegmentRow.state.in_(LIVE),
            SegmentRow.broker_id != UNKNOWN_BROKER,
            other,
        )
        .order_by(SegmentRow.event_time_ms)
        .limit(1)
    ).first()
    if first is None or written_ms + CLOCK_SKEW_MS >= int(first.event_time_ms):
        return
    raise OlderTopicIdError(
        f"{part.topic}-{part.partition}: topic id {topic_id} was written at {written_ms} ms, before "
        f"the segments of topic id {first.topic_id} were first copied at {int(first.event_time_ms)} ms",
        topic_id=topic_id,
        other=first.topic_id,
        first_copied_ms=int(first.event_time_ms),
    )


def _tiered_before(conn: Connection, partition_id: int, topic_id: UUID, written_ms: int | None) -> bool:
    """Whether a segment of ``topic_id`` was copied (or deleted since) more than
    :data:`CLOCK_SKEW_MS` before ``written_ms``, when the broker wrote the id to adopt instead:
    then ``topic_id`` is the older topic's. Rows rebuilt without a copy time do not count."""
    if written_ms is None:
        return False
    found = conn.execute(
        select(SegmentRow.segment_id)
        .where(
            SegmentRow.partition_id == partition_id,
            SegmentRow.topic_id == topic_id,
            SegmentRow.broker_id != UNKNOWN_BROKER,
            SegmentRow.event_time_ms + CLOCK_SKEW_MS < written_ms,
        )
        .limit(1)
    ).first()
    return found is not None


def _remember_retired(
    conn: Connection, partition_id: int, ids: set[UUID], successor: UUID, now_ms: int
) -> None:
    """Record ``ids`` as retired from partition ``partition_id`` for ``successor`` (those not yet)."""
    if not ids:
        return
    known = conn.execute(
        select(RetiredTopicIdRow.topic_id).where(
            RetiredTopicIdRow.partition_id == partition_id, RetiredTopicIdRow.topic_id.in_(ids)
        )
    ).scalars()
    rows = [
        {"partition_id": partition_id, "topic_id": i, "retired_at_ms": now_ms, "successor": successor}
        for i in sorted(ids - set(known))
    ]
    if rows:
        conn.execute(insert(RetiredTopicIdRow), rows)


def segment_added(conn: Connection, part: Row[Any], topic_id: UUID | None) -> None:
    """Keep partition row ``part``'s id (locked by the caller) true after a segment of ``topic_id``
    was inserted into it.

    The first id the partition hears of is its own (a copier adopts the broker's first). A segment
    of another id (rebuild-metadata finding a deleted topic's objects beside its successor's, or a
    copy that read ``partition.metadata`` before the topic was created again) leaves the id
    unknown: which topic the partition holds is for the broker's file to say, and
    :func:`adopt` then retires the other topic's segments. Keeping the first id instead would let
    the other topic's offsets count as copied ones (the adopted id again changes nothing), so the
    copier would skip the partition's own offsets below them.
    """
    if topic_id is None or part.topic_id == topic_id:
        return
    if part.topic_id is None:
        other = conn.execute(
            select(SegmentRow.segment_id)
            .where(
                SegmentRow.partition_id == part.id,
                SegmentRow.state.in_(LIVE),
                SegmentRow.topic_id.is_not(None),
                SegmentRow.topic_id != topic_id,
            )
            .limit(1)
        ).first()
        if other is None:  # the first id it hears of
            conn.execute(update(PartitionRow).where(PartitionRow.id == part.id).values(topic_id=topic_id))
        return  # else unknown already, and it stays so
    conn.execute(update(PartitionRow).where(PartitionRow.id == part.id).values(topic_id=None))


def _reset(conn: Connection, partition_id: int, log_start_offset: int) -> None:
    """Set what the partition records back to what its remaining finished segments say, and the
    remote log start offset to ``log_start_offset`` (the adopted topic's own, or -1)."""
    recount.partition(conn, partition_id)
    conn.execute(
        update(PartitionRow)
        .where(PartitionRow.id == partition_id)
        .values(remote_log_start_offset=log_start_offset, deletion_state=None, deletion_event_time_ms=None)
    )
    conn.execute(delete(SkippedRangeRow).where(SkippedRangeRow.partition_id == partition_id))
