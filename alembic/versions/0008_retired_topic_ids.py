"""The topic ids retired from each partition (``rlm_retired_topic_id``), never adopted again.

A stale replica of a deleted topic still names the deleted topic's id in its
``partition.metadata``; adopting that id would retire the live topic's remote segments. Filled in
from the segments a topic id change already retired: those in a deletion state whose id is not
the partition's.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-06 09:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op
from metadata.schema import refuse_losing_rows

revision: str = "0008"
down_revision: str | Sequence[str] | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

DELETING = ("DELETE_SEGMENT_STARTED", "DELETE_SEGMENT_FINISHED")


def upgrade() -> None:
    """Create ``rlm_retired_topic_id`` and fill it in from the retired segments."""
    retired = op.create_table(
        "rlm_retired_topic_id",
        sa.Column("partition_id", sa.Integer(), nullable=False),
        sa.Column("topic_id", sa.Uuid(), nullable=False),
        sa.Column("retired_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("successor", sa.Uuid(), nullable=False),
        sa.ForeignKeyConstraint(["partition_id"], ["rlm_partition.id"]),
        sa.PrimaryKeyConstraint("partition_id", "topic_id"),
    )
    segment = sa.table(
        "rlm_segment",
        sa.column("partition_id", sa.Integer()),
        sa.column("topic_id", sa.Uuid()),
        sa.column("state", sa.String()),
        sa.column("event_time_ms", sa.BigInteger()),
    )
    partition = sa.table("rlm_partition", sa.column("id", sa.Integer()), sa.column("topic_id", sa.Uuid()))
    found = (
        sa.select(
            segment.c.partition_id,
            segment.c.topic_id,
            sa.func.max(segment.c.event_time_ms),
            partition.c.topic_id,
        )
        .join(partition, partition.c.id == segment.c.partition_id)
        .where(
            segment.c.state.in_(DELETING),
            segment.c.topic_id.is_not(None),
            partition.c.topic_id.is_not(None),
            segment.c.topic_id != partition.c.topic_id,
        )
        .group_by(segment.c.partition_id, segment.c.topic_id, partition.c.topic_id)
    )
    # One statement (no rows read back), so that `alembic upgrade --sql` can print it too.
    op.execute(
        sa.insert(retired).from_select(["partition_id", "topic_id", "retired_at_ms", "successor"], found)
    )


def downgrade() -> None:
    """Drop ``rlm_retired_topic_id``; refused once an id is retired: its segments may be gone, so
    the way back up could not find it again, and a stale replica's ``partition.metadata`` could
    then have the deleted topic's id adopted and the live topic's copies retired."""
    refuse_losing_rows(op.get_bind(), "rlm_retired_topic_id", revision)
    op.drop_table("rlm_retired_topic_id")
