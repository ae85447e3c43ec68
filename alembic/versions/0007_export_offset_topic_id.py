"""The topic id of each export ledger offset (``rlm_export_offset.topic_id``).

A topic deleted and created again under the same name starts from offset 0 again: an offset the
ledger recorded for the deleted topic must not hold back the new one's export. Rows recorded
before this revision keep no id (``NULL``): they are taken as the partition's current topic's.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-04 09:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Add ``rlm_export_offset.topic_id``."""
    with op.batch_alter_table("rlm_export_offset") as batch:
        batch.add_column(sa.Column("topic_id", sa.Uuid(), nullable=True))


def downgrade() -> None:
    """Drop ``rlm_export_offset.topic_id``."""
    with op.batch_alter_table("rlm_export_offset") as batch:
        batch.drop_column("topic_id")
