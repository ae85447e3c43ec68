"""Export ledger: where the next incremental ``rlm spark export`` of an output starts.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-26 07:30:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Create ``rlm_export_offset``."""
    op.create_table(
        "rlm_export_offset",
        sa.Column("output", sa.String(length=1024), nullable=False),
        sa.Column("topic", sa.String(length=249), nullable=False),
        sa.Column("partition", sa.Integer(), nullable=False),
        sa.Column("next_offset", sa.BigInteger(), nullable=False),
        sa.Column("updated_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("output", "topic", "partition", name=op.f("pk_rlm_export_offset")),
    )


def downgrade() -> None:
    """Drop ``rlm_export_offset``."""
    op.drop_table("rlm_export_offset")
