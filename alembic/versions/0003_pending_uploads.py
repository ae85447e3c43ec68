"""Pending multipart uploads: the upload id of each unfinished upload of a segment being copied.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23 15:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Create ``rlm_pending_upload``."""
    op.create_table(
        "rlm_pending_upload",
        sa.Column("segment_id", sa.Uuid(), nullable=False),
        sa.Column("upload_id", sa.String(length=1024), nullable=False),
        sa.Column("object_key", sa.String(length=1024), nullable=False),
        sa.ForeignKeyConstraint(
            ["segment_id"],
            ["rlm_segment.segment_id"],
            name=op.f("fk_rlm_pending_upload_segment_id_rlm_segment"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("segment_id", "upload_id", name=op.f("pk_rlm_pending_upload")),
    )


def downgrade() -> None:
    """Drop ``rlm_pending_upload``."""
    op.drop_table("rlm_pending_upload")
