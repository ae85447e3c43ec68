"""The export ledger (``rlm_export_offset``): per output and partition, where the next
``rlm spark export --incremental`` run starts. Offsets only grow: recording a lower one (a
commit rolled forward twice) changes nothing."""

from __future__ import annotations

from collections.abc import Mapping

from sqlalchemy import Connection, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from metadata.models import ExportOffsetRow
from rlm.metastore.model import TopicPartition

Offset = ExportOffsetRow


def of_output(conn: Connection, output: str) -> dict[TopicPartition, int]:
    """The next offset of each partition ``output`` has exported."""
    rows = conn.execute(
        select(Offset.topic, Offset.partition, Offset.next_offset).where(Offset.output == output)
    )
    return {TopicPartition(row.topic, int(row.partition)): int(row.next_offset) for row in rows}


def record(conn: Connection, output: str, offsets: Mapping[TopicPartition, int], now_ms: int) -> None:
    """Raise each partition's next offset to the one given (insert it when new)."""
    dialect_insert = pg_insert if conn.dialect.name == "postgresql" else sqlite_insert
    for tp, next_offset in offsets.items():
        statement = dialect_insert(Offset).values(
            output=output, topic=tp.topic, partition=tp.partition, next_offset=next_offset, updated_ms=now_ms
        )
        conn.execute(
            statement.on_conflict_do_update(
                index_elements=["output", "topic", "partition"],
                set_={"next_offset": next_offset, "updated_ms": now_ms},
                where=Offset.next_offset < next_offset,
            )
        )
