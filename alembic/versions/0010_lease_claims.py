"""Claims on copy leases (``rlm_lease_claim``): one row per (partition, broker).

A sidecar that wants a partition's copy lease while another broker holds it records how far its
broker's log reaches; a holder whose log is behind a live claim gives the lease up (see
``rlm.tiering.leases``). No claim was recorded before this revision: the table starts empty.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-10 09:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "0010"
down_revision: str | Sequence[str] | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Create ``rlm_lease_claim``."""
    op.create_table(
        "rlm_lease_claim",
        sa.Column("partition_id", sa.Integer(), nullable=False),
        sa.Column("broker_id", sa.Integer(), nullable=False),
        sa.Column("topic_id", sa.Uuid(), nullable=True),
        sa.Column("leader_epoch", sa.Integer(), nullable=False),
        sa.Column("last_offset", sa.BigInteger(), nullable=False),
        sa.Column("claimed_at_ms", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(["partition_id"], ["rlm_partition.id"]),
        sa.PrimaryKeyConstraint("partition_id", "broker_id"),
    )


def downgrade() -> None:
    """Drop ``rlm_lease_claim``."""
    op.drop_table("rlm_lease_claim")
