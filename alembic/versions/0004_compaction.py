"""Compaction of the remote tier: the per-partition compaction lease, the outputs being written,
and when a replaced segment may lose its objects.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-26 07:30:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Add ``rlm_compaction_lease``, ``rlm_compaction_output`` and ``rlm_segment.delete_after_ms``."""
    with op.batch_alter_table("rlm_segment") as batch:
        batch.add_column(sa.Column("delete_after_ms", sa.BigInteger(), nullable=True))
    op.create_table(
        "rlm_compaction_lease",
        sa.Column("partition_id", sa.Integer(), nullable=False),
        sa.Column("owner", sa.String(length=64), nullable=False),
        sa.Column("epoch", sa.BigInteger(), nullable=False),
        sa.Column("expires_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("released", sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(
            ["partition_id"],
            ["rlm_partition.id"],
            name=op.f("fk_rlm_compaction_lease_partition_id_rlm_partition"),
        ),
        sa.PrimaryKeyConstraint("partition_id", name=op.f("pk_rlm_compaction_lease")),
    )
    op.create_table(
        "rlm_compaction_output",
        sa.Column("segment_id", sa.Uuid(), nullable=False),
        sa.Column("partition_id", sa.Integer(), nullable=False),
        sa.Column("log_key", sa.String(length=1024), nullable=False),
        sa.Column("index_key", sa.String(length=1024), nullable=False),
        sa.Column("lease_epoch", sa.BigInteger(), nullable=False),
        sa.Column("recorded_at_ms", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["partition_id"],
            ["rlm_partition.id"],
            name=op.f("fk_rlm_compaction_output_partition_id_rlm_partition"),
        ),
        sa.PrimaryKeyConstraint("segment_id", name=op.f("pk_rlm_compaction_output")),
    )


def downgrade() -> None:
    """Drop them again."""
    op.drop_table("rlm_compaction_output")
    op.drop_table("rlm_compaction_lease")
    with op.batch_alter_table("rlm_segment") as batch:
        batch.drop_column("delete_after_ms")
