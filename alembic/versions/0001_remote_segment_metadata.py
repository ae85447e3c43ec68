"""Remote segment metadata: partitions with leases, segments, epochs and the offset tree.

Revision ID: 0001
Revises:
Create Date: 2026-11-21 05:26:08
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SEGMENT_STATES = (
    "'COPY_SEGMENT_STARTED', 'COPY_SEGMENT_FINISHED', 'DELETE_SEGMENT_STARTED', 'DELETE_SEGMENT_FINISHED'"
)
PARTITION_STATES = "'DELETE_PARTITION_MARKED', 'DELETE_PARTITION_STARTED', 'DELETE_PARTITION_FINISHED'"


def _partition_fk(table: str) -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(
        ["partition_id"],
        ["rlm_partition.id"],
        name=op.f(f"fk_{table}_partition_id_rlm_partition"),
    )


def upgrade() -> None:
    """Create the tables of the metadata store."""
    op.create_table(
        "rlm_partition",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("topic", sa.String(length=249), nullable=False),
        sa.Column("partition", sa.Integer(), nullable=False),
        sa.Column("remote_log_start_offset", sa.BigInteger(), server_default=sa.text("-1"), nullable=False),
        sa.Column("highest_copied_offset", sa.BigInteger(), server_default=sa.text("-1"), nullable=False),
        sa.Column("remote_log_size_bytes", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("deletion_state", sa.String(length=32), nullable=True),
        sa.Column("deletion_event_time_ms", sa.BigInteger(), nullable=True),
        sa.Column("lease_owner", sa.Integer(), nullable=True),
        sa.Column("lease_epoch", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("lease_expires_at_ms", sa.BigInteger(), nullable=True),
        sa.CheckConstraint(
            f"deletion_state IS NULL OR deletion_state IN ({PARTITION_STATES})",
            name=op.f("ck_rlm_partition_deletion_state"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_rlm_partition")),
        sa.UniqueConstraint("topic", "partition", name=op.f("uq_rlm_partition_topic")),
    )
    op.create_table(
        "rlm_epoch_offset",
        sa.Column("partition_id", sa.Integer(), nullable=False),
        sa.Column("leader_epoch", sa.Integer(), nullable=False),
        sa.Column("highest_offset", sa.BigInteger(), nullable=False),
        _partition_fk("rlm_epoch_offset"),
        sa.PrimaryKeyConstraint("partition_id", "leader_epoch", name=op.f("pk_rlm_epoch_offset")),
    )
    op.create_table(
        "rlm_offset_tree",
        sa.Column("partition_id", sa.Integer(), nullable=False),
        sa.Column("level", sa.SmallInteger(), nullable=False),
        sa.Column("bucket", sa.BigInteger(), nullable=False),
        sa.Column("max_timestamp_ms", sa.BigInteger(), nullable=False),
        sa.Column("max_end_offset", sa.BigInteger(), nullable=False),
        _partition_fk("rlm_offset_tree"),
        sa.PrimaryKeyConstraint("partition_id", "level", "bucket", name=op.f("pk_rlm_offset_tree")),
    )
    op.create_table(
        "rlm_segment",
        sa.Column("segment_id", sa.Uuid(), nullable=False),
        sa.Column("partition_id", sa.Integer(), nullable=False),
        sa.Column("topic_id", sa.Uuid(), nullable=True),
        sa.Column("start_offset", sa.BigInteger(), nullable=False),
        sa.Column("end_offset", sa.BigInteger(), nullable=False),
        sa.Column("max_timestamp_ms", sa.BigInteger(), nullable=False),
        sa.Column("size_bytes", sa.BigInteger(), nullable=False),
        sa.Column("broker_id", sa.Integer(), nullable=False),
        sa.Column("event_time_ms", sa.BigInteger(), nullable=False),
        sa.Column("state", sa.String(length=32), nullable=False),
        sa.Column("leader_epochs", sa.JSON(), nullable=False),
        sa.Column("object_layout", sa.JSON(), nullable=False),
        sa.Column("txn_index_empty", sa.Boolean(), nullable=False),
        sa.CheckConstraint(f"state IN ({SEGMENT_STATES})", name=op.f("ck_rlm_segment_state")),
        sa.CheckConstraint(
            "start_offset >= 0 AND end_offset >= start_offset",
            name=op.f("ck_rlm_segment_offsets"),
        ),
        _partition_fk("rlm_segment"),
        sa.PrimaryKeyConstraint("segment_id", name=op.f("pk_rlm_segment")),
    )
    op.create_index("ix_rlm_segment_offset", "rlm_segment", ["partition_id", "start_offset", "segment_id"])
    op.create_index(
        "ix_rlm_segment_state_offset",
        "rlm_segment",
        ["partition_id", "state", "start_offset", "segment_id"],
    )
    op.create_table(
        "rlm_segment_epoch",
        sa.Column("segment_id", sa.Uuid(), nullable=False),
        sa.Column("leader_epoch", sa.Integer(), nullable=False),
        sa.Column("partition_id", sa.Integer(), nullable=False),
        sa.Column("segment_start_offset", sa.BigInteger(), nullable=False),
        sa.Column("last_offset", sa.BigInteger(), nullable=False),
        _partition_fk("rlm_segment_epoch"),
        sa.ForeignKeyConstraint(
            ["segment_id"],
            ["rlm_segment.segment_id"],
            name=op.f("fk_rlm_segment_epoch_segment_id_rlm_segment"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("segment_id", "leader_epoch", name=op.f("pk_rlm_segment_epoch")),
    )
    op.create_index(
        "ix_rlm_segment_epoch_listing",
        "rlm_segment_epoch",
        ["partition_id", "leader_epoch", "segment_start_offset", "segment_id"],
    )


def downgrade() -> None:
    """Drop the tables of the metadata store."""
    op.drop_index("ix_rlm_segment_epoch_listing", table_name="rlm_segment_epoch")
    op.drop_table("rlm_segment_epoch")
    op.drop_index("ix_rlm_segment_state_offset", table_name="rlm_segment")
    op.drop_index("ix_rlm_segment_offset", table_name="rlm_segment")
    op.drop_table("rlm_segment")
    op.drop_table("rlm_offset_tree")
    op.drop_table("rlm_epoch_offset")
    op.drop_table("rlm_partition")
