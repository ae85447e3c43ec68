"""Partition rows: finding and locking them, lease fencing, and the lease operations.

Every write to a partition's metadata first locks its ``rlm_partition`` row (``SELECT … FOR
UPDATE`` on PostgreSQL; SQLite write transactions are already serialized by ``BEGIN IMMEDIATE``).
The lock serializes all state changes of one partition, so each one reads the state it changes
and no update is lost; it is always the first lock a transaction takes, so there are no deadlocks.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from sqlalchemy import Connection, Row, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from metadata.models import PartitionRow
from rlm.errors import StaleLeaseError
from rlm.metastore.model import Lease, TopicPartition

Partition = PartitionRow


def find(conn: Connection, tp: TopicPartition) -> Row[Any] | None:
    """The partition's row without locking it, or ``None``."""
    return conn.execute(
        select(Partition.__table__).where(Partition.topic == tp.topic, Partition.partition == tp.partition)
    ).first()


def find_id(conn: Connection, tp: TopicPartition) -> int | None:
    """The partition's row id, or ``None``."""
    value = conn.execute(
        select(Partition.id).where(Partition.topic == tp.topic, Partition.partition == tp.partition)
    ).scalar()
    return None if value is None else int(value)


def lock(conn: Connection, tp: TopicPartition) -> Row[Any]:
    """Lock the partition's row for the rest of the transaction, creating it if needed."""
    query = (
        select(Partition.__table__)
        .where(Partition.topic == tp.topic, Partition.partition == tp.partition)
        .with_for_update()
    )
    row = conn.execute(query).first()
    if row is None:
        # Two writers may create the same partition at once: the loser's insert does nothing.
        dialect_insert = pg_insert if conn.dialect.name == "postgresql" else sqlite_insert
        conn.execute(
            dialect_insert(Partition)
            .values(topic=tp.topic, partition=tp.partition)
            .on_conflict_do_nothing(index_elements=["topic", "partition"])
        )
        row = conn.execute(query).one()
    return row


def lock_by_id(conn: Connection, partition_id: int) -> Row[Any]:
    """Lock the row of partition ``partition_id`` (which exists) for the rest of the transaction."""
    return conn.execute(
        select(Partition.__table__).where(Partition.id == partition_id).with_for_update()
    ).one()


def topic_partition(row: Row[Any]) -> TopicPartition:
    """The topic-partition of a partition row."""
    return TopicPartition(row.topic, int(row.partition))


def check_fence(row: Row[Any], fence: Lease | None) -> None:
    """Refuse a write made under a lease that is no longer the partition's.

    The lease's whole identity is compared (see :func:`holds`), not its epoch alone: a database
    failover that loses committed transactions (PostgreSQL's asynchronous replication) can hand
    one epoch out twice, to two brokers or to two processes of one, and only the holder the row
    names may write.

    Raises:
        StaleLeaseError: ``fence`` is given and is not the lease ``row`` records (it was taken
            over or released since); the message says what differs.
    """
    if fence is None or holds(row, fence):
        return
    raise StaleLeaseError(f"write to {topic_partition(row)} refused: {_stale(row, fence)}")


def holds(row: Row[Any], lease: Lease) -> bool:
    """Whether ``lease`` is the lease ``row`` records: the same partition and epoch, held by the
    same broker's same process (incarnation)."""
    return (
        row.lease_owner is not None
        and topic_partition(row) == lease.topic_partition
        and int(row.lease_epoch) == lease.epoch
        and int(row.lease_owner) == lease.owner
        and row.lease_incarnation == lease.incarnation
    )


def _stale(row: Row[Any], lease: Lease) -> str:
    """What makes ``lease`` another lease than the one ``row`` records."""
    recorded = topic_partition(row)
    if recorded != lease.topic_partition:
        return f"the lease is {lease.topic_partition}'s, not {recorded}'s"
    if row.lease_owner is None or int(row.lease_epoch) != lease.epoch:
        holder = f"held by broker {row.lease_owner}" if row.lease_owner is not None else "not held by anyone"
        return f"lease epoch {lease.epoch} is stale, the lease is at epoch {row.lease_epoch} and {holder}"
    # The same epoch held by another: it was handed out twice (a failover lost the first take).
    if int(row.lease_owner) != lease.owner:
        return (
            f"lease epoch {lease.epoch} is broker {row.lease_owner}'s, not broker {lease.owner}'s: "
            "the epoch was handed out twice"
        )
    return (
        f"lease epoch {lease.epoch} of broker {lease.owner} is held by its incarnation "
        f"{row.lease_incarnation}, not by incarnation {lease.incarnation}: the epoch was handed out twice"
    )


def acquire(
    conn: Connection,
    tp: TopicPartition,
    owner: int,
    ttl_ms: int,
    now_ms: int,
    *,
    incarnation: UUID | None = None,
    replace_own_incarnation: bool = True,
) -> Lease | None:
    """Take the lease if it is free, expired or already ``owner``'s (another incarnation's only
    with ``replace_own_incarnation``); bumps the epoch."""
    row = lock(conn, tp)
    if withheld(row, owner, now_ms, incarnation=incarnation, replace_own_incarnation=replace_own_incarnation):
        return None
    lease = Lease(tp, owner, int(row.lease_epoch) + 1, now_ms + ttl_ms, incarnation)
    conn.execute(
        update(Partition)
        .where(Partition.id == row.id)
        .values(
            lease_owner=owner,
            lease_epoch=lease.epoch,
            lease_expires_at_ms=lease.expires_at_ms,
            lease_incarnation=incarnation,
        )
    )
    return lease


def withheld(
    row: Row[Any],
    owner: int,
    now_ms: int,
    *,
    incarnation: UUID | None = None,
    replace_own_incarnation: bool = True,
) -> bool:
    """Whether :func:`acquire` refuses ``owner`` the lease of ``row``: another broker holds it
    unexpired, or another incarnation of ``owner`` does and is not to be replaced."""
    if row.lease_owner is None or int(row.lease_expires_at_ms) <= now_ms:
        return False
    if int(row.lease_owner) != owner:
        return True
    return not replace_own_incarnation and row.lease_incarnation != incarnation


def renewed_since(row: Row[Any] | None, lease: Lease, ttl_ms: int, since_ms: int) -> Lease | None:
    """``lease`` as ``row`` has it, when it is still current and was last taken or renewed (for
    ``ttl_ms``) later than ``since_ms``; else None."""
    if row is None or not holds(row, lease) or row.lease_expires_at_ms is None:
        return None
    expires_at_ms = int(row.lease_expires_at_ms)
    if expires_at_ms - ttl_ms <= since_ms:
        return None
    return Lease(lease.topic_partition, lease.owner, lease.epoch, expires_at_ms, lease.incarnation)


def renew(conn: Connection, lease: Lease, ttl_ms: int, now_ms: int) -> Lease:
    """Extend the still-current ``lease``; :class:`StaleLeaseError` when it is not current."""
    row = lock(conn, lease.topic_partition)
    if not holds(row, lease):
        raise StaleLeaseError(
            f"cannot renew the lease of {lease.topic_partition} for broker {lease.owner}: "
            f"{_stale(row, lease)}"
        )
    renewed = Lease(lease.topic_partition, lease.owner, lease.epoch, now_ms + ttl_ms, lease.incarnation)
    conn.execute(
        update(Partition).where(Partition.id == row.id).values(lease_expires_at_ms=renewed.expires_at_ms)
    )
    return renewed


def release(conn: Connection, lease: Lease, now_ms: int) -> bool:
    """Free the lease if ``lease`` is still current; the epoch stays, so it keeps growing, and
    ``lease_expires_at_ms`` keeps when the holder stopped holding it (``now_ms``, or the expiry if
    that came first): see :func:`released_at_ms`."""
    row = lock(conn, lease.topic_partition)
    if not holds(row, lease):
        return False
    held_until = min(now_ms, int(row.lease_expires_at_ms))
    conn.execute(
        update(Partition)
        .where(Partition.id == row.id)
        .values(lease_owner=None, lease_expires_at_ms=held_until, lease_incarnation=None)
    )
    return True


def released_at_ms(row: Row[Any]) -> int | None:
    """When the last holder of the lease of ``row`` released it (or its lease expired, if that came
    first); None while somebody holds it, and when nobody ever did."""
    if row.lease_owner is not None or row.lease_expires_at_ms is None:
        return None
    return int(row.lease_expires_at_ms)
