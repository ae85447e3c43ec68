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

:func:`trim` does the same from an offset inside a copy that also holds offsets below it which
the broker's log no longer has: in the same transaction, that copy is retired and a copy of its
offsets below the cut, uploaded beforehand, finishes in its place. :func:`overlay` finishes a copy
of the broker's log starting inside such a copy kept below it and reaching past it, whose records
answer from its start on (:mod:`rlm.tiering.join`): the export ledger falls to its start and the
lineage grows, as when copies are retired from there.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from sqlalchemy import Connection, Row, delete, insert, or_, select, update

from metadata import exports, recount, summaries, uploads
from metadata.models import CopyTruncationRow, PartitionRow, SegmentRow, SkippedRangeRow
from metadata.partitions import topic_partition
from metadata.rows import segment_from_row
from rlm.errors import StateConflictError
from rlm.metastore.model import SegmentState

LIVE = (SegmentState.COPY_SEGMENT_STARTED.value, SegmentState.COPY_SEGMENT_FINISHED.value)


def trim(
    conn: Connection, part: Row[Any], kept: UUID, replacement: UUID, from_offset: int, now_ms: int
) -> int:
    """Replace finished copy ``kept`` of partition row ``part`` (locked by the caller) by
    ``replacement``, a started copy of its first offsets, and retire every live copy starting at
    or above ``from_offset``, as :func:`truncate` from there; returns how many copies were
    retired, ``kept`` included. ``from_offset`` lies inside the replacement or just past it.

    Raises:
        StateConflictError: ``kept`` is not a finished copy of the partition, or ``replacement``
            not a started copy of it starting where ``kept`` starts and ending below its end, or
            ``from_offset`` is not in the replacement or just past it; nothing changed.
    """
    rows = {
        row.segment_id: row
        for row in conn.execute(
            select(
                SegmentRow.segment_id, SegmentRow.state, SegmentRow.start_offset, SegmentRow.end_offset
            ).where(SegmentRow.partition_id == part.id, SegmentRow.segment_id.in_([kept, replacement]))
        )
    }
    old, new = rows.get(kept), rows.get(replacement)
    tp = topic_partition(part)
    if old is None or old.state != SegmentState.COPY_SEGMENT_FINISHED.value:
        raise StateConflictError(f"segment {kept} of {tp} is not a finished copy: it cannot be trimmed")
    if (
        new is None
        or new.state != SegmentState.COPY_SEGMENT_STARTED.value
        or new.start_offset != old.start_offset
        or new.end_offset >= old.end_offset
    ):
        raise StateConflictError(
            f"segment {replacement} of {tp} is not a started copy of the first offsets of {kept}"
        )
    if not new.start_offset < from_offset <= new.end_offset + 1:
        raise StateConflictError(
            f"copies of {tp} cannot be retired from offset {from_offset}: its replacement holds "
            f"{new.start_offset}..{new.end_offset}"
        )
    conn.execute(
        update(SegmentRow)
        .where(SegmentRow.segment_id == replacement)
        .values(state=SegmentState.COPY_SEGMENT_FINISHED.value)
    )
    uploads.forget(conn, replacement)
    return truncate(conn, part, from_offset, now_ms, also=kept)


def truncate(
    conn: Connection, part: Row[Any], from_offset: int, now_ms: int, *, also: UUID | None = None
) -> int:
    """Retire the live copies of partition row ``part`` (locked by the caller) that start at or
    above ``from_offset``, and copy ``also``; returns how many."""
    starting = SegmentRow.start_offset >= from_offset
    retired = conn.execute(
        update(SegmentRow)
        .where(
            SegmentRow.partition_id == part.id,
            SegmentRow.state.in_(LIVE),
            starting if also is None else or_(starting, SegmentRow.segment_id == also),
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
    _replaced_from(conn, part, from_offset, now_ms)
    return int(retired)


def overlay(conn: Connection, part: Row[Any], segment_id: UUID, now_ms: int) -> None:
    """Finish ``segment_id``, a started copy of partition row ``part`` (locked by the caller)
    whose records replace, from its start on, those of a finished copy starting below it, and
    account for the replacement there as :func:`truncate` does.

    Raises:
        StateConflictError: ``segment_id`` is not a started copy of the partition starting inside
            a finished copy of it; nothing changed.
    """
    row = conn.execute(
        select(SegmentRow.__table__).where(
            SegmentRow.partition_id == part.id, SegmentRow.segment_id == segment_id
        )
    ).first()
    tp = topic_partition(part)
    if row is None or row.state != SegmentState.COPY_SEGMENT_STARTED.value:
        raise StateConflictError(f"segment {segment_id} of {tp} is not a started copy: it cannot finish")
    start = int(row.start_offset)
    below = conn.execute(
        select(SegmentRow.segment_id).where(
            SegmentRow.partition_id == part.id,
            SegmentRow.state == SegmentState.COPY_SEGMENT_FINISHED.value,
            SegmentRow.start_offset < start,
            SegmentRow.end_offset >= start,
        )
    ).first()
    if below is None:
        raise StateConflictError(
            f"segment {segment_id} of {tp} starts at offset {start}, inside no finished copy: it "
            "replaces nothing"
        )
    conn.execute(
        update(SegmentRow)
        .where(SegmentRow.segment_id == segment_id)
        .values(state=SegmentState.COPY_SEGMENT_FINISHED.value, event_time_ms=now_ms)
    )
    uploads.forget(conn, segment_id)
    # Nothing leaves COPY_SEGMENT_FINISHED: accounted for as any copy finishing, not counted
    # again from the finished rows, which would drop the highest offsets of the leader epochs
    # whose copies retention deleted.
    summaries.segment_finished(conn, part, segment_from_row(row, tp))
    _replaced_from(conn, part, start, now_ms)


def _replaced_from(conn: Connection, part: Row[Any], from_offset: int, now_ms: int) -> None:
    """The remote tier's records of partition row ``part`` from ``from_offset`` on were replaced:
    the export ledger falls to it, the lineage grows and the offset is kept."""
    exports.rewind(conn, topic_partition(part), from_offset)
    lineage = int(part.lineage) + 1
    conn.execute(update(PartitionRow).where(PartitionRow.id == part.id).values(lineage=lineage))
    conn.execute(
        insert(CopyTruncationRow).values(
            partition_id=part.id, lineage=lineage, from_offset=from_offset, truncated_ms=now_ms
        )
    )
