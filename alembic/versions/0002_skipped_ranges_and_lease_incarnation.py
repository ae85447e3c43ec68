"""Skipped offset ranges, and the incarnation (process) holding a copy lease.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23 15:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SKIP_KINDS = "'OPERATOR', 'NOT_IN_LOCAL_LOG'"


def upgrade() -> None:
    """Add ``rlm_skipped_range`` and ``rlm_partition.lease_incarnation``."""
    op.create_table(
        "rlm_skipped_range",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("partition_id", sa.Integer(), nullable=False),
        sa.Column("start_offset", sa.BigInteger(), nullable=False),
        sa.Column("end_offset", sa.BigInteger(), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("reason", sa.String(length=1000), nullable=False),
        sa.Column("recorded_at_ms", sa.BigInteger(), nullable=False),
        sa.CheckConstraint(
            "start_offset >= 0 AND end_offset >= start_offset",
            name=op.f("ck_rlm_skipped_range_offsets"),
        ),
        sa.CheckConstraint(f"kind IN ({SKIP_KINDS})", name=op.f("ck_rlm_skipped_range_kind")),
        sa.ForeignKeyConstraint(
            ["partition_id"],
            ["rlm_partition.id"],
            name=op.f("fk_rlm_skipped_range_partition_id_rlm_partition"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_rlm_skipped_range")),
    )
    op.create_index("ix_rlm_skipped_range_offset", "rlm_skipped_range", ["partition_id", "start_offset"])
    with op.batch_alter_table("rlm_partition") as batch:
        batch.add_column(sa.Column("lease_incarnation", sa.Uuid(), nullable=True))


def downgrade() -> None:
    """Drop them again."""
    with op.batch_alter_table("rlm_partition") as batch:
        batch.drop_column("lease_incarnation")
    op.drop_index("ix_rlm_skipped_range_offset", table_name="rlm_skipped_range")
    op.drop_table("rlm_skipped_range")
