"""How often a partition's remote copies were replaced from some offset on (``rlm_partition.lineage``),
and from which offsets (``rlm_copy_truncation``).

An export planned before copies were replaced (after an unclean leader election) and committed
after must not move its ledger past the first replaced offset: the rows it wrote there are the old
leader's, and the broker's records there are still to export (see ``metadata.exports``). The
export records the partition's lineage when it plans; its commit is held below every truncation
of a later lineage. No truncation was recorded before this revision: every partition starts at 0.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-08 09:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op
from metadata.schema import refuse_losing_rows

revision: str = "0009"
down_revision: str | Sequence[str] | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Add ``rlm_partition.lineage`` and create ``rlm_copy_truncation``."""
    with op.batch_alter_table("rlm_partition") as batch:
        batch.add_column(sa.Column("lineage", sa.BigInteger(), server_default=sa.text("0"), nullable=False))
    op.create_table(
        "rlm_copy_truncation",
        sa.Column("partition_id", sa.Integer(), nullable=False),
        sa.Column("lineage", sa.BigInteger(), nullable=False),
        sa.Column("from_offset", sa.BigInteger(), nullable=False),
        sa.Column("truncated_ms", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(["partition_id"], ["rlm_partition.id"]),
        sa.PrimaryKeyConstraint("partition_id", "lineage"),
    )


def downgrade() -> None:
    """Drop ``rlm_copy_truncation`` and ``rlm_partition.lineage``; refused once a truncation is
    recorded: the lineages would count from 0 again on the way back up, and an export planned
    before a truncation could then commit past it."""
    refuse_losing_rows(op.get_bind(), "rlm_copy_truncation", revision)
    op.drop_table("rlm_copy_truncation")
    with op.batch_alter_table("rlm_partition") as batch:
        batch.drop_column("lineage")
