"""The export ledger (``rlm_export_offset``): per output and partition, where the next
``rlm spark export --incremental`` run starts, and the topic id that offset is one of.

Offsets only grow within one topic: recording a lower one (a commit rolled forward twice)
changes nothing. A topic deleted and created again under the same name is another topic (a new
id, offsets from 0 again, see :mod:`metadata.topic_ids`), so an offset belongs to the topic id
the partition's remote state belonged to when the run planned it:

* an offset recorded under another id than the partition's current one does not count (the next
  run starts at the new topic's log start, as for a partition never exported), and recording one
  of the current id replaces it, lower or not;
* an offset of another id than the partition's current one (a run planned before the topic was
  created again, committed or rolled forward after) is not recorded.

An offset without an id (recorded before ids were, or a manifest or snapshot written then) is
taken as the partition's current topic's; so are all offsets of a partition with no id known.

Offsets fall in one case: the remote tier's copies from some offset on were replaced by the
broker's diverged log (:mod:`metadata.truncation`); the next run exports the log's records there.
So that a run planned before such a replacement, committed (or rolled forward, or caught up from
a table's snapshot) after, does not raise them again, a run records the partition's ``lineage``
when it plans, and its offset is held at the lowest offset replaced at a later lineage. An offset
recorded without a lineage (a manifest or snapshot written before lineages were) is taken as one
of lineage 0, planned before every replacement.
"""

from __future__ import annotations

from collections.abc import Mapping
from uuid import UUID

from sqlalchemy import ColumnElement, Connection, and_, delete, func, or_, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from metadata.models import CopyTruncationRow, ExportOffsetRow, PartitionRow
from rlm.metastore.model import TopicPartition

Offset = ExportOffsetRow


def of_output(conn: Connection, output: str) -> dict[TopicPartition, int]:
    """The next offset of each partition ``output`` has exported, of the partition's current topic."""
    part = PartitionRow
    rows = conn.execute(
        select(Offset.topic, Offset.partition, Offset.next_offset)
        .select_from(Offset)
        .outerjoin(part, and_(part.topic == Offset.topic, part.partition == Offset.partition))
        .where(
            Offset.output == output,
            or_(Offset.topic_id.is_(None), part.topic_id.is_(None), Offset.topic_id == part.topic_id),
        )
    )
    return {TopicPartition(row.topic, int(row.partition)): int(row.next_offset) for row in rows}


def record(
    conn: Connection,
    output: str,
    offsets: Mapping[TopicPartition, int],
    now_ms: int,
    topic_ids: Mapping[TopicPartition, UUID | None] | None = None,
    lineages: Mapping[TopicPartition, int | None] | None = None,
) -> dict[TopicPartition, int]:
    """Raise each partition's next offset to the one given (insert it when new), under the topic
    id given for it (``topic_ids``), else the partition's current one, held below the copies
    replaced since the lineage given for it (``lineages``); see the module's rules. Returns the
    partitions held so, with the offset each was held at."""
    dialect_insert = pg_insert if conn.dialect.name == "postgresql" else sqlite_insert
    held: dict[TopicPartition, int] = {}
    for tp in sorted(offsets):
        next_offset = offsets[tp]
        # Locked, so the topic cannot be adopted anew, nor copies replaced, between this check
        # and the write.
        part = conn.execute(
            select(PartitionRow.id, PartitionRow.topic_id, PartitionRow.lineage)
            .where(PartitionRow.topic == tp.topic, PartitionRow.partition == tp.partition)
            .with_for_update()
        ).first()
        current: UUID | None = None if part is None else part.topic_id
        given = None if topic_ids is None else topic_ids.get(tp)
        if given is not None and current is not None and given != current:
            continue  # an offset of a deleted topic
        planned = (None if lineages is None else lineages.get(tp)) or 0
        if part is not None and int(part.lineage) > planned:
            replaced = _replaced_since(conn, part.id, planned)
            if replaced is not None and replaced < next_offset:
                next_offset = held[tp] = replaced
        topic_id = given if given is not None else current
        values: dict[str, object] = {"next_offset": next_offset, "updated_ms": now_ms}
        replaces: ColumnElement[bool] = Offset.next_offset < next_offset
        if topic_id is not None:
            values["topic_id"] = topic_id
            replaces = or_(replaces, and_(Offset.topic_id.is_not(None), Offset.topic_id != topic_id))
        statement = dialect_insert(Offset).values(
            output=output, topic=tp.topic, partition=tp.partition, **values
        )
        conn.execute(
            statement.on_conflict_do_update(
                index_elements=["output", "topic", "partition"], set_=values, where=replaces
            )
        )
    return held


def _replaced_since(conn: Connection, partition_id: int, lineage: int) -> int | None:
    """The lowest offset from which the partition's copies were replaced after ``lineage``."""
    lowest: int | None = conn.execute(
        select(func.min(CopyTruncationRow.from_offset)).where(
            CopyTruncationRow.partition_id == partition_id, CopyTruncationRow.lineage > lineage
        )
    ).scalar()
    return lowest


def rewind(conn: Connection, tp: TopicPartition, offset: int) -> None:
    """Lower every output's offset of ``tp`` above ``offset`` to it: the remote tier's records
    from ``offset`` on were replaced (see :mod:`metadata.truncation`)."""
    conn.execute(
        update(Offset)
        .where(Offset.topic == tp.topic, Offset.partition == tp.partition, Offset.next_offset > offset)
        .values(next_offset=offset)
    )


def forget_other_topics(conn: Connection, tp: TopicPartition, topic_id: UUID) -> None:
    """Delete every output's offset of ``tp`` that is not one of ``topic_id`` (those without an id
    too): the partition's remote state was reset for that topic (see :func:`metadata.topic_ids.adopt`)."""
    conn.execute(
        delete(Offset).where(
            Offset.topic == tp.topic,
            Offset.partition == tp.partition,
            or_(Offset.topic_id.is_(None), Offset.topic_id != topic_id),
        )
    )
