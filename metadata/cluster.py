"""The Kafka cluster a store records (``rlm_cluster``): claimed once, by the first sidecar.

Two sidecars claiming an empty store at once both insert row 1; one insert wins, and the other
finds the winner's row.
"""

from __future__ import annotations

from sqlalchemy import Connection, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from metadata.models import ClusterRow
from rlm.metastore.model import ClusterClaim


def claim(conn: Connection, cluster_id: str, broker_id: int, now_ms: int) -> ClusterClaim:
    """Record ``cluster_id`` as the store's cluster unless one is recorded; returns the one recorded."""
    dialect_insert = pg_insert if conn.dialect.name == "postgresql" else sqlite_insert
    conn.execute(
        dialect_insert(ClusterRow)
        .values(id=1, cluster_id=cluster_id, broker_id=broker_id, claimed_at_ms=now_ms)
        .on_conflict_do_nothing(index_elements=["id"])
    )
    row = conn.execute(select(ClusterRow.__table__).where(ClusterRow.id == 1)).one()
    return ClusterClaim(str(row.cluster_id), int(row.broker_id), int(row.claimed_at_ms))
