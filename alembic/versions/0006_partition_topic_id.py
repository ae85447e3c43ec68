"""The topic id a partition's remote state belongs to (``rlm_partition.topic_id``).

Filled in from the partition's segments where they name exactly one topic id. A partition whose
segments name several (a topic deleted and created again under the same name before this
revision) is left without one: the copier then adopts the broker's id and retires the segments of
the others.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-02 09:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Add ``rlm_partition.topic_id`` and fill it in from the segments."""
    with op.batch_alter_table("rlm_partition") as batch:
        batch.add_column(sa.Column("topic_id", sa.Uuid(), nullable=True))
    segment = sa.table(
        "rlm_segment", sa.column("partition_id", sa.Integer()), sa.column("topic_id", sa.Uuid())
    )
    partition = sa.table("rlm_partition", sa.column("id", sa.Integer()), sa.column("topic_id", sa.Uuid()))
    # One statement (no rows read back), so that `alembic upgrade --sql` can print it too.
    named = segment.c.partition_id == partition.c.id, segment.c.topic_id.is_not(None)
    ids = sa.select(sa.func.count(sa.distinct(segment.c.topic_id))).where(*named).scalar_subquery()
    one = sa.select(segment.c.topic_id).where(*named).limit(1).scalar_subquery()
    op.execute(sa.update(partition).where(ids == 1).values(topic_id=one))


def downgrade() -> None:
    """Drop ``rlm_partition.topic_id``."""
    with op.batch_alter_table("rlm_partition") as batch:
        batch.drop_column("topic_id")
