"""The compaction lease, recorded outputs and the swap (see :mod:`rlm.metastore.compaction`).

Every write locks the partition row first (:func:`metadata.partitions.lock`), as every other
write of the store does, so a swap and a retention pass or a copy of the same partition are
serialized, and the swap reads the states it changes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any
from uuid import UUID

from sqlalchemy import Connection, Row, delete, insert, select, update

from metadata import partitions, summaries
from metadata.models import CompactionLeaseRow, CompactionOutputRow, SegmentEpochRow, SegmentRow
from metadata.rows import epoch_values, segment_from_row, segment_values
from rlm.errors import DuplicateSegmentError, StaleLeaseError
from rlm.metastore.compaction import CompactionLease, CompactionOutput
from rlm.metastore.model import RemoteSegment, SegmentState, TopicPartition

Lease = CompactionLeaseRow
Output = CompactionOutputRow
FINISHED = SegmentState.COPY_SEGMENT_FINISHED


def _lease_row(conn: Connection, partition_id: int) -> Row[Any] | None:
    return conn.execute(select(Lease.__table__).where(Lease.partition_id == partition_id)).first()


def _lease(tp: TopicPartition, row: Row[Any]) -> CompactionLease:
    return CompactionLease(tp, row.owner, int(row.epoch), int(row.expires_at_ms))


def acquire(
    conn: Connection, tp: TopicPartition, owner: str, ttl_ms: int, now_ms: int
) -> CompactionLease | None:
    part = partitions.lock(conn, tp)
    row = _lease_row(conn, part.id)
    if row is None:
        conn.execute(
            insert(Lease).values(
                partition_id=part.id, owner=owner, epoch=1, expires_at_ms=now_ms + ttl_ms, released=False
            )
        )
        return CompactionLease(tp, owner, 1, now_ms + ttl_ms)
    if not row.released and row.owner != owner and now_ms < int(row.expires_at_ms):
        return None
    epoch = int(row.epoch) + 1
    conn.execute(
        update(Lease)
        .where(Lease.partition_id == part.id)
        .values(owner=owner, epoch=epoch, expires_at_ms=now_ms + ttl_ms, released=False)
    )
    return CompactionLease(tp, owner, epoch, now_ms + ttl_ms)


def check(conn: Connection, lease: CompactionLease) -> Row[Any]:
    """Lock the partition and check ``lease`` is its current compaction lease; the partition row."""
    part = partitions.lock(conn, lease.topic_partition)
    row = _lease_row(conn, part.id)
    if row is None or row.released or int(row.epoch) != lease.epoch or row.owner != lease.owner:
        now = "released" if row is not None and row.released else f"at epoch {row.epoch if row else 0}"
        raise StaleLeaseError(
            f"compaction of {lease.topic_partition} refused: lease epoch {lease.epoch} of job "
            f"{lease.owner} is stale, the lease is {now}"
        )
    return part


def renew(conn: Connection, lease: CompactionLease, ttl_ms: int, now_ms: int) -> CompactionLease:
    part = check(conn, lease)
    conn.execute(update(Lease).where(Lease.partition_id == part.id).values(expires_at_ms=now_ms + ttl_ms))
    return CompactionLease(lease.topic_partition, lease.owner, lease.epoch, now_ms + ttl_ms)


def release(conn: Connection, lease: CompactionLease) -> bool:
    try:
        part = check(conn, lease)
    except StaleLeaseError:
        return False
    conn.execute(update(Lease).where(Lease.partition_id == part.id).values(released=True))
    return True


def get(conn: Connection, tp: TopicPartition) -> CompactionLease | None:
    part_id = partitions.find_id(conn, tp)
    row = None if part_id is None else _lease_row(conn, part_id)
    return None if row is None or row.released else _lease(tp, row)


def add_outputs(conn: Connection, lease: CompactionLease, outputs: Sequence[CompactionOutput]) -> None:
    """Record ``outputs``; those recorded already (a retried call) are left as they are.

    Raises:
        StaleLeaseError: ``lease`` is no longer the partition's.
        DuplicateSegmentError: An output's id is recorded with other keys, or for another partition.
    """
    part = check(conn, lease)
    if not outputs:
        return
    ids = [o.segment_id for o in outputs]
    recorded = {
        row.segment_id: row
        for row in conn.execute(select(Output.__table__).where(Output.segment_id.in_(ids)))
    }
    new = []
    for o in outputs:
        row = recorded.get(o.segment_id)
        if row is None:
            new.append(o)
        elif (row.partition_id, row.log_key, row.index_key) != (part.id, o.log_key, o.index_key):
            raise DuplicateSegmentError(
                f"compaction output {o.segment_id} of {lease.topic_partition} is already recorded "
                f"with other objects ({row.log_key}, {row.index_key})"
            )
    if new:
        conn.execute(
            insert(Output),
            [
                {
                    "segment_id": o.segment_id,
                    "partition_id": part.id,
                    "log_key": o.log_key,
                    "index_key": o.index_key,
                    "lease_epoch": o.lease_epoch,
                    "recorded_at_ms": o.recorded_at_ms,
                }
                for o in new
            ],
        )


def outputs(conn: Connection, tp: TopicPartition) -> list[CompactionOutput]:
    part_id = partitions.find_id(conn, tp)
    if part_id is None:
        return []
    rows = conn.execute(
        select(Output.__table__).where(Output.partition_id == part_id).order_by(Output.recorded_at_ms)
    )
    return [
        CompactionOutput(r.segment_id, r.log_key, r.index_key, int(r.lease_epoch), int(r.recorded_at_ms))
        for r in rows
    ]


def forget_outputs(conn: Connection, tp: TopicPartition, segment_ids: Sequence[UUID]) -> None:
    part = partitions.lock(conn, tp)
    if segment_ids:
        conn.execute(
            delete(Output).where(Output.partition_id == part.id, Output.segment_id.in_(list(segment_ids)))
        )


def swap(
    conn: Connection,
    lease: CompactionLease,
    new: Sequence[RemoteSegment],
    replaced: Sequence[UUID],
    now_ms: int,
    delete_after_ms: int,
) -> bool:
    tp = lease.topic_partition
    try:
        part = check(conn, lease)
    except StaleLeaseError:
        # A retry of a swap that committed under this lease, which then moved on: the swap is
        # done, and the caller must keep the new objects rather than discard them.
        partition_id = partitions.find_id(conn, tp)
        if partition_id is not None and _swapped_already(conn, partition_id, tp, new):
            return True
        raise
    if part.deletion_state is not None:
        # The partition is being deleted (its topic was): nothing is swapped into it. A retry of a
        # swap that committed before is told it was done, as below.
        return _swapped_already(conn, part.id, tp, new)
    rows = conn.execute(
        select(SegmentRow.__table__).where(
            SegmentRow.partition_id == part.id, SegmentRow.segment_id.in_(list(replaced))
        )
    ).all()
    old = [segment_from_row(r, tp) for r in rows]
    if len(old) != len(set(replaced)) or any(s.state is not FINISHED for s in old):
        # A retry of this very swap, whose commit the caller did not hear of, finds the replaced
        # segments moved on by itself: it succeeded, and the caller must keep the new objects.
        return _swapped_already(conn, part.id, tp, new)
    # One at a time: the tree's removal of a segment recomputes its nodes from the rows still
    # FINISHED, which must then be every other replaced segment too.
    for segment in old:
        conn.execute(
            update(SegmentRow)
            .where(SegmentRow.segment_id == segment.segment_id)
            .values(
                state=SegmentState.DELETE_SEGMENT_STARTED.value,
                event_time_ms=now_ms,
                delete_after_ms=delete_after_ms,
            )
        )
        summaries.segment_unfinished(conn, part, segment)
    for segment in new:
        # An output whose records carry no timestamp keeps its event time (its inputs' newest
        # age): retention by time judges it by that (RemoteSegment.age_ms).
        finished = segment.with_state(
            FINISHED, now_ms if segment.max_timestamp_ms >= 0 else segment.event_time_ms
        )
        conn.execute(insert(SegmentRow).values(segment_values(finished, part.id)))
        conn.execute(insert(SegmentEpochRow), epoch_values(finished, part.id))
        part = partitions.lock_by_id(conn, part.id)  # its highest offsets, as the last one left them
        summaries.segment_finished(conn, part, finished)
    conn.execute(delete(Output).where(Output.segment_id.in_([s.segment_id for s in new])))
    return True


def _swapped_already(
    conn: Connection, partition_id: int, tp: TopicPartition, new: Sequence[RemoteSegment]
) -> bool:
    """Whether every segment of ``new`` is stored in the partition as given (state, event time and
    deletion time aside): the rows a swap of them inserted."""
    if not new:
        return False
    rows = conn.execute(
        select(SegmentRow.__table__).where(
            SegmentRow.partition_id == partition_id,
            SegmentRow.segment_id.in_([segment.segment_id for segment in new]),
        )
    ).all()
    stored = {row.segment_id: segment_from_row(row, tp) for row in rows}
    for segment in new:
        found = stored.get(segment.segment_id)
        if found is None or found.state is SegmentState.COPY_SEGMENT_STARTED:
            return False
        same = dataclasses.replace(
            found,
            state=segment.state,
            event_time_ms=segment.event_time_ms,
            delete_after_ms=segment.delete_after_ms,
        )
        if same != segment:
            return False
    return True
