"""Claims on partitions' copy leases (``rlm_lease_claim``): one row per (partition, broker).

A claim is advisory: it never grants the lease, and nothing fenced depends on it. Its row is
replaced each time its broker claims again, withdrawn when that broker takes the lease, and
otherwise grows old: readers ask for the claims younger than a lease's time to live, and a claim
recorded may forget the partition's claims long past that (:func:`forget_before`), those of a
broker removed from the cluster among them.
"""

from __future__ import annotations

from sqlalchemy import Connection, delete, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from metadata.models import LeaseClaimRow, PartitionRow
from rlm.metastore.model import LeaseClaim, LogPosition, TopicPartition

Claim = LeaseClaimRow


def record(conn: Connection, partition_id: int, broker_id: int, position: LogPosition, now_ms: int) -> None:
    """Insert or replace broker ``broker_id``'s claim on the lease of partition ``partition_id``."""
    values = {
        "topic_id": position.topic_id,
        "leader_epoch": position.leader_epoch,
        "last_offset": position.offset,
        "claimed_at_ms": now_ms,
    }
    dialect_insert = pg_insert if conn.dialect.name == "postgresql" else sqlite_insert
    conn.execute(
        dialect_insert(Claim)
        .values(partition_id=partition_id, broker_id=broker_id, **values)
        .on_conflict_do_update(index_elements=["partition_id", "broker_id"], set_=values)
    )


def recent(conn: Connection, tp: TopicPartition, claimed_after_ms: int) -> list[LeaseClaim]:
    """The partition's claims recorded after ``claimed_after_ms``, by broker id."""
    rows = conn.execute(
        select(Claim.__table__)
        .join(PartitionRow, PartitionRow.id == Claim.partition_id)
        .where(
            PartitionRow.topic == tp.topic,
            PartitionRow.partition == tp.partition,
            Claim.claimed_at_ms > claimed_after_ms,
        )
        .order_by(Claim.broker_id)
    )
    return [
        LeaseClaim(
            tp,
            int(row.broker_id),
            LogPosition(row.topic_id, int(row.leader_epoch), int(row.last_offset)),
            int(row.claimed_at_ms),
        )
        for row in rows
    ]


def withdraw(conn: Connection, tp: TopicPartition, broker_id: int) -> None:
    """Forget broker ``broker_id``'s claim on the partition's lease, if any."""
    partition_id = (
        select(PartitionRow.id)
        .where(PartitionRow.topic == tp.topic, PartitionRow.partition == tp.partition)
        .scalar_subquery()
    )
    conn.execute(delete(Claim).where(Claim.partition_id == partition_id, Claim.broker_id == broker_id))


def forget_before(conn: Connection, partition_id: int, claimed_before_ms: int) -> None:
    """Delete the claims on partition ``partition_id``'s lease recorded before ``claimed_before_ms``."""
    conn.execute(
        delete(Claim).where(Claim.partition_id == partition_id, Claim.claimed_at_ms < claimed_before_ms)
    )
