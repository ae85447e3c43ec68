"""Tables of the metadata store (SQLAlchemy 2.0 declarative models).

``rlm_partition``     one row per topic-partition: the topic id its remote state belongs to,
                      remote log start offset, highest copied offset, remote log size,
                      deletion state and the copy lease.
``rlm_segment``       one row per remote segment (Kafka's RemoteLogSegmentMetadata).
``rlm_segment_epoch`` one row per (segment, leader epoch): lists a partition's segments by epoch.
``rlm_pending_upload`` one row per unfinished multipart upload of a segment being copied: what
                      the cleanup of a killed copy aborts by id.
``rlm_epoch_offset``  highest offset copied per (partition, leader epoch); only grows.
``rlm_offset_tree``   maxima of the COPY_SEGMENT_FINISHED segments per range of start offsets,
                      which makes timestamp and offset lookups O(log n) (see ``metadata.tree``).
``rlm_lease_claim``   per (partition, broker): how far the broker's log reached when it last wanted
                      the copy lease another broker held (see ``metadata.claims``).
``rlm_retired_topic_id`` the topic ids a partition's remote state belonged to before the topic was
                      deleted and created again under the same name: never adopted again.
``rlm_skipped_range`` offset ranges the remote tier will never hold, and why (an operator's skip,
                      or data the broker deleted before it was tiered).
``rlm_export_offset`` per (export output, topic, partition): where the next ``rlm spark export
                      --incremental`` run starts, and the topic id that offset is one of.
``rlm_cluster``       one row: the Kafka cluster (``cluster.id``) whose remote tier the store
                      records, as the first sidecar to claim it found it (see ``metadata.cluster``).

Any change here needs an Alembic migration in ``alembic/versions``; the test suite runs
``alembic check`` to catch a missing one.
"""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    SmallInteger,
    String,
    UniqueConstraint,
    Uuid,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from rlm.metastore.model import SKIP_REASON_MAX, PartitionState, SegmentState, SkipKind

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

#: Longest legal Kafka topic name.
TOPIC_NAME_MAX = 249
STATE_NAME_MAX = 32
#: Longest S3 object key (bytes of UTF-8; rlm's keys are ASCII) and the room kept for an upload id.
OBJECT_KEY_MAX = 1024
UPLOAD_ID_MAX = 1024
COMPACTION_OWNER_MAX = 64

_SEGMENT_STATES = ", ".join(f"'{state.value}'" for state in SegmentState)
_PARTITION_STATES = ", ".join(f"'{state.value}'" for state in PartitionState)
_SKIP_KINDS = ", ".join(f"'{kind.value}'" for kind in SkipKind)


class Base(DeclarativeBase):
    """Declarative base whose metadata names constraints the same way on every database."""

    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class PartitionRow(Base):
    """A topic-partition known to the store, with its copy lease."""

    __tablename__ = "rlm_partition"
    __table_args__ = (
        UniqueConstraint("topic", "partition"),
        CheckConstraint(
            f"deletion_state IS NULL OR deletion_state IN ({_PARTITION_STATES})",
            name="deletion_state",
        ),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    topic: Mapped[str] = mapped_column(String(TOPIC_NAME_MAX))
    partition: Mapped[int] = mapped_column(Integer)
    remote_log_start_offset: Mapped[int] = mapped_column(BigInteger, server_default=text("-1"))
    highest_copied_offset: Mapped[int] = mapped_column(BigInteger, server_default=text("-1"))
    remote_log_size_bytes: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))
    deletion_state: Mapped[str | None] = mapped_column(String(STATE_NAME_MAX))
    deletion_event_time_ms: Mapped[int | None] = mapped_column(BigInteger)
    lease_owner: Mapped[int | None] = mapped_column(Integer)
    lease_epoch: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))
    lease_expires_at_ms: Mapped[int | None] = mapped_column(BigInteger)
    """While ``lease_owner`` is set, when the lease expires. Once it is released (``lease_owner``
    NULL), when its last holder stopped holding it: the release, or the expiry if that came first;
    NULL when it was never taken (or released by an rlm that kept no such time)."""
    lease_incarnation: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    """The holder's process (see :attr:`rlm.metastore.model.Lease.incarnation`)."""
    topic_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    """The topic id the partition's remote state belongs to (see ``metadata.topic_ids``)."""
    lineage: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))
    """How many times the remote copies were replaced from some offset on (see
    ``metadata.truncation``); each time is a :class:`CopyTruncationRow`."""


class ClusterRow(Base):
    """The Kafka cluster whose remote tier this store records: one row, claimed by the first
    sidecar that asked (see :meth:`rlm.metastore.MetadataStore.claim_cluster`)."""

    __tablename__ = "rlm_cluster"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    """Always 1: a store records one cluster's remote tier."""
    cluster_id: Mapped[str] = mapped_column(String(255))
    broker_id: Mapped[int] = mapped_column(Integer)
    """The broker whose sidecar claimed the store."""
    claimed_at_ms: Mapped[int] = mapped_column(BigInteger)


class LeaseClaimRow(Base):
    """A broker's claim on a partition's copy lease, replaced at each of its copier passes: its
    log's position then (see :class:`rlm.metastore.model.LeaseClaim`)."""

    __tablename__ = "rlm_lease_claim"

    partition_id: Mapped[int] = mapped_column(ForeignKey("rlm_partition.id"), primary_key=True)
    broker_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    topic_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    leader_epoch: Mapped[int] = mapped_column(Integer)
    last_offset: Mapped[int] = mapped_column(BigInteger)
    claimed_at_ms: Mapped[int] = mapped_column(BigInteger)


class SegmentRow(Base):
    """One remote segment. ``leader_epochs`` and ``object_layout`` are JSON documents."""

    __tablename__ = "rlm_segment"
    __table_args__ = (
        CheckConstraint(f"state IN ({_SEGMENT_STATES})", name="state"),
        CheckConstraint("start_offset >= 0 AND end_offset >= start_offset", name="offsets"),
        # Listing in offset order, all states.
        Index("ix_rlm_segment_offset", "partition_id", "start_offset", "segment_id"),
        # Listing in offset order by state, and the leaf level of the offset tree.
        Index("ix_rlm_segment_state_offset", "partition_id", "state", "start_offset", "segment_id"),
    )

    segment_id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    partition_id: Mapped[int] = mapped_column(ForeignKey("rlm_partition.id"))
    topic_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    start_offset: Mapped[int] = mapped_column(BigInteger)
    end_offset: Mapped[int] = mapped_column(BigInteger)
    max_timestamp_ms: Mapped[int] = mapped_column(BigInteger)
    size_bytes: Mapped[int] = mapped_column(BigInteger)
    broker_id: Mapped[int] = mapped_column(Integer)
    event_time_ms: Mapped[int] = mapped_column(BigInteger)
    state: Mapped[str] = mapped_column(String(STATE_NAME_MAX))
    leader_epochs: Mapped[Any] = mapped_column(JSON)
    object_layout: Mapped[Any] = mapped_column(JSON)
    txn_index_empty: Mapped[bool] = mapped_column(Boolean)
    delete_after_ms: Mapped[int | None] = mapped_column(BigInteger)
    """Set by a compaction swap on the segments it replaced: when their objects may go."""


class SegmentEpochRow(Base):
    """That ``leader_epoch`` wrote records in a segment; the index behind per-epoch listings."""

    __tablename__ = "rlm_segment_epoch"
    __table_args__ = (
        Index(
            "ix_rlm_segment_epoch_listing",
            "partition_id",
            "leader_epoch",
            "segment_start_offset",
            "segment_id",
        ),
    )

    segment_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("rlm_segment.segment_id", ondelete="CASCADE"), primary_key=True
    )
    leader_epoch: Mapped[int] = mapped_column(Integer, primary_key=True)
    partition_id: Mapped[int] = mapped_column(ForeignKey("rlm_partition.id"))
    segment_start_offset: Mapped[int] = mapped_column(BigInteger)
    last_offset: Mapped[int] = mapped_column(BigInteger)
    """Last offset the epoch wrote in the segment."""


class PendingUploadRow(Base):
    """A multipart upload of one of a segment's objects, started by its copy and not yet known done.

    Written before any part is sent; removed when the segment reaches ``COPY_SEGMENT_FINISHED`` or
    ``DELETE_SEGMENT_FINISHED``.
    """

    __tablename__ = "rlm_pending_upload"

    segment_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("rlm_segment.segment_id", ondelete="CASCADE"), primary_key=True
    )
    upload_id: Mapped[str] = mapped_column(String(UPLOAD_ID_MAX), primary_key=True)
    object_key: Mapped[str] = mapped_column(String(OBJECT_KEY_MAX))


class EpochOffsetRow(Base):
    """Highest offset of ``leader_epoch`` that reached COPY_SEGMENT_FINISHED; never lowered."""

    __tablename__ = "rlm_epoch_offset"

    partition_id: Mapped[int] = mapped_column(ForeignKey("rlm_partition.id"), primary_key=True)
    leader_epoch: Mapped[int] = mapped_column(Integer, primary_key=True)
    highest_offset: Mapped[int] = mapped_column(BigInteger)


class OffsetTreeRow(Base):
    """Maxima over the COPY_SEGMENT_FINISHED segments whose start offset lies in one range.

    Node ``(level, bucket)`` covers start offsets ``[bucket << 8·level, (bucket + 1) << 8·level)``.
    A node exists exactly when its range holds at least one such segment.
    """

    __tablename__ = "rlm_offset_tree"

    partition_id: Mapped[int] = mapped_column(ForeignKey("rlm_partition.id"), primary_key=True)
    level: Mapped[int] = mapped_column(SmallInteger, primary_key=True)
    bucket: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    max_timestamp_ms: Mapped[int] = mapped_column(BigInteger)
    max_end_offset: Mapped[int] = mapped_column(BigInteger)


class SkippedRangeRow(Base):
    """Offsets ``[start_offset, end_offset]`` of a partition the remote tier will never hold."""

    __tablename__ = "rlm_skipped_range"
    __table_args__ = (
        CheckConstraint("start_offset >= 0 AND end_offset >= start_offset", name="offsets"),
        CheckConstraint(f"kind IN ({_SKIP_KINDS})", name="kind"),
        Index("ix_rlm_skipped_range_offset", "partition_id", "start_offset"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    partition_id: Mapped[int] = mapped_column(ForeignKey("rlm_partition.id"))
    start_offset: Mapped[int] = mapped_column(BigInteger)
    end_offset: Mapped[int] = mapped_column(BigInteger)
    kind: Mapped[str] = mapped_column(String(STATE_NAME_MAX))
    reason: Mapped[str] = mapped_column(String(SKIP_REASON_MAX))
    recorded_at_ms: Mapped[int] = mapped_column(BigInteger)


class RetiredTopicIdRow(Base):
    """A topic id whose remote state :func:`metadata.topic_ids.adopt` retired from a partition: the
    id of a deleted topic, which only a stale replica's ``partition.metadata`` can still name."""

    __tablename__ = "rlm_retired_topic_id"

    partition_id: Mapped[int] = mapped_column(ForeignKey("rlm_partition.id"), primary_key=True)
    topic_id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    retired_at_ms: Mapped[int] = mapped_column(BigInteger)
    successor: Mapped[uuid.UUID] = mapped_column(Uuid)
    """The id adopted when this one was retired."""


class CopyTruncationRow(Base):
    """A replacement of a partition's remote copies from ``from_offset`` on (see
    ``metadata.truncation``), the partition's ``lineage``-th: what holds back an export planned
    before it (see ``metadata.exports``)."""

    __tablename__ = "rlm_copy_truncation"

    partition_id: Mapped[int] = mapped_column(ForeignKey("rlm_partition.id"), primary_key=True)
    lineage: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    from_offset: Mapped[int] = mapped_column(BigInteger)
    truncated_ms: Mapped[int] = mapped_column(BigInteger)


class CompactionLeaseRow(Base):
    """The compaction lease of a partition: one compaction job at a time (``rlm spark compact``)."""

    __tablename__ = "rlm_compaction_lease"

    partition_id: Mapped[int] = mapped_column(ForeignKey("rlm_partition.id"), primary_key=True)
    owner: Mapped[str] = mapped_column(String(COMPACTION_OWNER_MAX))
    """The job holding it (a random id per job)."""
    epoch: Mapped[int] = mapped_column(BigInteger)
    """Grows by one at every acquisition; the swap is refused to an older epoch."""
    expires_at_ms: Mapped[int] = mapped_column(BigInteger)
    released: Mapped[bool] = mapped_column(Boolean)


class CompactionOutputRow(Base):
    """An output segment a compaction job is writing, recorded before its objects are: a job
    killed before its swap leaves objects the next job's cleanup finds here and deletes."""

    __tablename__ = "rlm_compaction_output"

    segment_id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    partition_id: Mapped[int] = mapped_column(ForeignKey("rlm_partition.id"))
    log_key: Mapped[str] = mapped_column(String(OBJECT_KEY_MAX))
    index_key: Mapped[str] = mapped_column(String(OBJECT_KEY_MAX))
    lease_epoch: Mapped[int] = mapped_column(BigInteger)
    recorded_at_ms: Mapped[int] = mapped_column(BigInteger)


#: Longest export output URI recorded in the export ledger.
OUTPUT_URI_MAX = 1024


class ExportOffsetRow(Base):
    """Where the next export of ``output`` starts in a partition: past what earlier runs wrote."""

    __tablename__ = "rlm_export_offset"

    output: Mapped[str] = mapped_column(String(OUTPUT_URI_MAX), primary_key=True)
    topic: Mapped[str] = mapped_column(String(TOPIC_NAME_MAX), primary_key=True)
    partition: Mapped[int] = mapped_column(Integer, primary_key=True)
    next_offset: Mapped[int] = mapped_column(BigInteger)
    updated_ms: Mapped[int] = mapped_column(BigInteger)
    topic_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    """The topic id ``next_offset`` is an offset of; ``None``: recorded before ids were, taken as
    the partition's current topic's (see ``metadata.exports``)."""
