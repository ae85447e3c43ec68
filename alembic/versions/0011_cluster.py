"""The Kafka cluster a store records (``rlm_cluster``): one row, claimed by the first sidecar.

A sidecar refuses to tier or delete anything with a store another cluster's sidecars claimed (two
clusters pointed at one store would each take the other's partitions of the same name for a
deleted topic's, and retire them). A store upgraded to this revision is claimed by its next
sidecar: the table starts empty.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-14 09:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "0011"
down_revision: str | Sequence[str] | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Create ``rlm_cluster``."""
    op.create_table(
        "rlm_cluster",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("cluster_id", sa.String(length=255), nullable=False),
        sa.Column("broker_id", sa.Integer(), nullable=False),
        sa.Column("claimed_at_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_rlm_cluster")),
    )


def downgrade() -> None:
    """Drop ``rlm_cluster``."""
    op.drop_table("rlm_cluster")
