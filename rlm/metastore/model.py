"""What the metadata store records about the remote tier, and the rules its states follow.

Pure values: enums with their transition check, and frozen records. The store protocol
(:mod:`rlm.metastore.protocol`) speaks in these types; the SQL adapter in ``metadata/`` maps
them to rows.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from typing import NamedTuple
from uuid import UUID

from rlm.errors import InvalidStateTransitionError
from rlm.log.model import TopicPartition as TopicPartition  # noqa: PLC0414 (re-exported)

#: Kafka's "no timestamp": a segment whose batches carry no timestamps (magic 0).
NO_TIMESTAMP = -1
#: The broker id of a row rebuilt from objects that do not say which broker copied them (nor when).
UNKNOWN_BROKER = -1


class SegmentState(enum.Enum):
    """Kafka's ``RemoteLogSegmentState``: where a remote segment is in its life.

    ``COPY_SEGMENT_STARTED → COPY_SEGMENT_FINISHED | DELETE_SEGMENT_STARTED``,
    ``COPY_SEGMENT_FINISHED → DELETE_SEGMENT_STARTED``,
    ``DELETE_SEGMENT_STARTED → DELETE_SEGMENT_FINISHED``. A state may always repeat itself, so
    a retried update is a no-op.
    """

    COPY_SEGMENT_STARTED = "COPY_SEGMENT_STARTED"
    COPY_SEGMENT_FINISHED = "COPY_SEGMENT_FINISHED"
    DELETE_SEGMENT_STARTED = "DELETE_SEGMENT_STARTED"
    DELETE_SEGMENT_FINISHED = "DELETE_SEGMENT_FINISHED"

    @property
    def successors(self) -> frozenset[SegmentState]:
        """The states this one may move to, itself excluded."""
        return _SEGMENT_SUCCESSORS[self]


_SEGMENT_SUCCESSORS: dict[SegmentState, frozenset[SegmentState]] = {
    SegmentState.COPY_SEGMENT_STARTED: frozenset(
        {SegmentState.COPY_SEGMENT_FINISHED, SegmentState.DELETE_SEGMENT_STARTED}
    ),
    SegmentState.COPY_SEGMENT_FINISHED: frozenset({SegmentState.DELETE_SEGMENT_STARTED}),
    SegmentState.DELETE_SEGMENT_STARTED: frozenset({SegmentState.DELETE_SEGMENT_FINISHED}),
    SegmentState.DELETE_SEGMENT_FINISHED: frozenset(),
}


class PartitionState(enum.Enum):
    """Kafka's ``RemotePartitionDeleteState``: deletion of a whole partition from the remote tier.

    A partition starts with no deletion state; then
    ``DELETE_PARTITION_MARKED → DELETE_PARTITION_STARTED → DELETE_PARTITION_FINISHED``, each state
    repeatable.
    """

    DELETE_PARTITION_MARKED = "DELETE_PARTITION_MARKED"
    DELETE_PARTITION_STARTED = "DELETE_PARTITION_STARTED"
    DELETE_PARTITION_FINISHED = "DELETE_PARTITION_FINISHED"

    @property
    def successors(self) -> frozenset[PartitionState]:
        """The states this one may move to, itself excluded."""
        return _PARTITION_SUCCESSORS[self]


_PARTITION_SUCCESSORS: dict[PartitionState, frozenset[PartitionState]] = {
    PartitionState.DELETE_PARTITION_MARKED: frozenset({PartitionState.DELETE_PARTITION_STARTED}),
    PartitionState.DELETE_PARTITION_STARTED: frozenset({PartitionState.DELETE_PARTITION_FINISHED}),
    PartitionState.DELETE_PARTITION_FINISHED: frozenset(),
}


def check_transition(
    current: SegmentState | PartitionState | None,
    requested: SegmentState | PartitionState,
    *,
    subject: str | None = None,
) -> bool:
    """Check a state change against its state machine.

    Args:
        current: The present state; ``None`` only for a partition that has no deletion state yet.
        requested: The state asked for, of the same kind as ``current``.
        subject: What changes state (e.g. ``"segment 1f0c…"``), used in the error message.

    Returns:
        ``True`` when the state changes, ``False`` when ``requested`` repeats ``current`` (a no-op).

    Raises:
        InvalidStateTransitionError: The machine does not allow it; the message names both states.
        TypeError: ``current`` and ``requested`` belong to different state machines.
    """
    if current is None:
        if not isinstance(requested, PartitionState):
            raise TypeError("only a partition may have no state")
        if requested is PartitionState.DELETE_PARTITION_MARKED:
            return True
        raise InvalidStateTransitionError("no deletion state", requested.value, subject=subject)
    if type(current) is not type(requested):
        raise TypeError(f"cannot compare {type(current).__name__} with {type(requested).__name__}")
    if current is requested:
        return False
    if requested in current.successors:
        return True
    raise InvalidStateTransitionError(current.value, requested.value, subject=subject)


class LeaderEpochEntry(NamedTuple):
    """One line of a leader-epoch checkpoint: ``epoch`` led from ``start_offset`` on."""

    epoch: int
    start_offset: int


class ByteRange(NamedTuple):
    """``size`` bytes starting at byte ``position`` of an object."""

    position: int
    size: int

    @property
    def end(self) -> int:
        """One past the last byte (the ``Range`` header's last byte is ``end - 1``)."""
        return self.position + self.size


class IndexType(enum.Enum):
    """Kafka's ``RemoteStorageManager.IndexType``: the small files stored beside a ``.log``."""

    OFFSET = "offset"
    TIMESTAMP = "timestamp"
    PRODUCER_SNAPSHOT = "producer_snapshot"
    TRANSACTION = "transaction"
    LEADER_EPOCH = "leader_epoch"


@dataclass(frozen=True)
class ObjectLayout:
    """Where a remote segment's bytes live: two objects per segment.

    The ``.log`` is one object. The small files are concatenated into one index object, and each
    file's byte range is kept here so that one ranged GET fetches one index.
    """

    log_key: str
    """Object key of the segment's ``.log`` bytes."""
    index_key: str
    """Object key of the concatenated index files."""
    index_ranges: tuple[tuple[IndexType, ByteRange], ...]
    """Byte range of each index file inside the index object; absent files are not listed."""

    def __post_init__(self) -> None:
        if not self.log_key or not self.index_key:
            raise ValueError("object keys must not be empty")
        kinds = [kind for kind, _ in self.index_ranges]
        if len(set(kinds)) != len(kinds):
            raise ValueError("an index type is listed twice")
        for kind, byte_range in self.index_ranges:
            if byte_range.position < 0 or byte_range.size < 0:
                raise ValueError(f"{kind.value} index range {byte_range} is negative")

    def index_range(self, kind: IndexType) -> ByteRange | None:
        """The byte range of one index file in the index object, ``None`` when absent."""
        for listed, byte_range in self.index_ranges:
            if listed is kind:
                return byte_range
        return None


@dataclass(frozen=True)
class RemoteSegment:
    """Kafka's ``RemoteLogSegmentMetadata``: one copy of a rolled segment on the remote tier."""

    segment_id: UUID
    """Identifies one copy attempt; a retried copy gets a new id."""
    topic_partition: TopicPartition
    topic_id: UUID | None
    """From ``partition.metadata`` when the broker wrote one."""
    start_offset: int
    end_offset: int
    """Offset of the last record in the segment (inclusive)."""
    max_timestamp_ms: int
    """Largest record timestamp in the segment, or ``NO_TIMESTAMP``."""
    size_bytes: int
    """Size of the ``.log`` object."""
    broker_id: int
    """The broker whose sidecar copied the segment."""
    event_time_ms: int
    """Wall-clock time of the last state change."""
    leader_epochs: tuple[LeaderEpochEntry, ...]
    """Epochs that wrote the segment's records, ascending; the first starts at ``start_offset``."""
    layout: ObjectLayout
    txn_index_empty: bool
    """True when the segment has no aborted transactions (no transaction index was stored)."""
    state: SegmentState = SegmentState.COPY_SEGMENT_STARTED
    delete_after_ms: int | None = None
    """When a segment a compaction replaced may lose its objects (``None`` for any other): until
    then lookups and fetches that picked it before the swap can still read it."""

    def __post_init__(self) -> None:
        if self.start_offset < 0 or self.end_offset < self.start_offset:
            raise ValueError(f"bad offset range [{self.start_offset}, {self.end_offset}]")
        if self.max_timestamp_ms < NO_TIMESTAMP:
            raise ValueError(f"bad max timestamp {self.max_timestamp_ms}")
        if self.size_bytes < 0:
            raise ValueError(f"bad size {self.size_bytes}")
        if not self.leader_epochs:
            raise ValueError("a segment has at least one leader epoch")
        if self.leader_epochs[0].start_offset != self.start_offset:
            raise ValueError(
                f"first leader epoch starts at {self.leader_epochs[0].start_offset}, "
                f"the segment at {self.start_offset}"
            )
        for before, after in zip(self.leader_epochs, self.leader_epochs[1:], strict=False):
            if after.epoch <= before.epoch or after.start_offset < before.start_offset:
                raise ValueError(f"leader epochs out of order: {before} then {after}")
        if self.leader_epochs[-1].start_offset > self.end_offset:
            raise ValueError(f"leader epoch {self.leader_epochs[-1]} starts after the segment")

    def contains(self, offset: int) -> bool:
        """Whether ``offset`` lies in ``[start_offset, end_offset]``."""
        return self.start_offset <= offset <= self.end_offset

    def epoch_range(self, epoch: int) -> tuple[int, int] | None:
        """First and last offset that ``epoch`` wrote in this segment; ``None`` if it wrote none."""
        for index, entry in enumerate(self.leader_epochs):
            if entry.epoch == epoch:
                following = self.leader_epochs[index + 1 : index + 2]
                last = following[0].start_offset - 1 if following else self.end_offset
                return (entry.start_offset, last) if last >= entry.start_offset else None
        return None

    def age_ms(self) -> int:
        """What retention by time judges the segment by: its largest record timestamp; for a
        segment whose records carry none (v0 messages, or records written with timestamp -1), its
        event time: when it was tiered (a compaction output keeps its inputs' newest age).

        Kafka judges such a segment by its file's last modification, which its cleaner carries
        over to a cleaned segment; rlm keeps no such time, and the copy came after the last
        write, so the segment is kept at least as long as Kafka keeps it. A timestamp of -1 is
        never taken as the epoch: that deleted such segments on the first pass.
        """
        return self.max_timestamp_ms if self.max_timestamp_ms >= 0 else self.event_time_ms

    def with_state(self, state: SegmentState, event_time_ms: int) -> RemoteSegment:
        """A copy of this segment in ``state``, as of ``event_time_ms``."""
        return dataclasses.replace(self, state=state, event_time_ms=event_time_ms)


class PendingUpload(NamedTuple):
    """An unfinished upload of one object, as the store names it: an S3 multipart upload.

    A copy records it before sending any of its bytes, so that a copy killed mid-upload leaves
    nothing the cleanup cannot name: the upload is aborted by its id, without listing uploads.
    """

    key: str
    """Object key (relative to the store's root) the upload writes."""
    upload_id: str
    """The store's id of the upload."""


class StateUpdate(NamedTuple):
    """The result of a state change: the segment as stored, and whether anything changed."""

    segment: RemoteSegment
    changed: bool


@dataclass(frozen=True)
class PartitionRecord:
    """What the store keeps per partition besides its segments."""

    topic_partition: TopicPartition
    remote_log_start_offset: int
    """First offset still readable from the remote tier; -1 before any was recorded."""
    highest_copied_offset: int
    """Highest offset ever copied (end offset of a FINISHED segment); -1 if none. Never falls."""
    remote_log_size_bytes: int
    """Total size of the partition's COPY_SEGMENT_FINISHED segments."""
    deletion_state: PartitionState | None
    """``None`` while the partition is not being deleted."""
    deletion_event_time_ms: int | None
    topic_id: UUID | None = None
    """The topic id the partition's remote state belongs to (``partition.metadata``'s); ``None``
    while no segment or copier has told it. A topic deleted and created again under the same name
    has a new id: the remote state of the old one is not the new topic's
    (:meth:`~rlm.metastore.protocol.MetadataStore.adopt_topic_id`)."""
    lineage: int = 0
    """How many times the remote copies were replaced from some offset on
    (:meth:`~rlm.metastore.protocol.MetadataStore.truncate_copies`). An export records it when it
    plans: its commit is then held below the offsets replaced since
    (:meth:`~rlm.metastore.protocol.MetadataStore.record_export_offsets`)."""


class TopicIdChange(NamedTuple):
    """What :meth:`~rlm.metastore.protocol.MetadataStore.adopt_topic_id` did."""

    previous: UUID | None
    """The topic id recorded before (``None`` when there was none)."""
    retired: int
    """Segments of another topic moved to ``DELETE_SEGMENT_STARTED`` (their objects are the
    deleter's to remove); when above 0, or when ``previous`` was another id, the partition's
    remote state was reset."""
    reset: bool
    """Whether the highest copied offset, the remote log start offset, the per-epoch offsets and
    the skipped ranges were set back to what the remaining segments say (nothing, usually)."""


#: Longest reason a skipped range keeps.
SKIP_REASON_MAX = 1000
_INT64_MAX = 2**63 - 1


class SkipKind(enum.Enum):
    """Why a range of offsets is accounted for on the remote tier without being there."""

    OPERATOR = "OPERATOR"
    """An operator skipped it (``rlm copy skip``), e.g. past a segment that cannot be repaired."""
    NOT_IN_LOCAL_LOG = "NOT_IN_LOCAL_LOG"
    """The copier found the broker had deleted it (retention, DeleteRecords) before it was tiered."""


@dataclass(frozen=True)
class SkippedRange:
    """Offsets ``[start_offset, end_offset]`` the remote tier will never hold, and why.

    The copier treats them as accounted for and copies on above them; they stay listed (in
    ``/v1/topics``) so that a gap in the remote tier is always explained.
    """

    topic_partition: TopicPartition
    start_offset: int
    end_offset: int
    """Inclusive."""
    kind: SkipKind
    reason: str
    recorded_at_ms: int

    def __post_init__(self) -> None:
        if not 0 <= self.start_offset <= self.end_offset <= _INT64_MAX:
            raise ValueError(f"bad offset range [{self.start_offset}, {self.end_offset}]")
        if not self.reason.strip():
            raise ValueError("a skipped range needs a reason")
        if len(self.reason) > SKIP_REASON_MAX:
            raise ValueError(f"the reason is {len(self.reason)} characters long, at most {SKIP_REASON_MAX}")

    def overlaps(self, start: int, end: int) -> bool:
        """Whether ``[start, end]`` shares an offset with this range."""
        return start <= self.end_offset and self.start_offset <= end


@dataclass(frozen=True)
class RemoteTierSummary:
    """What a lookup needs to know of one partition's remote tier, read in one snapshot."""

    record: PartitionRecord
    first_offset: int | None
    """Start offset of the first ``COPY_SEGMENT_FINISHED`` segment; None when there is none."""
    max_timestamp: int | None
    """KIP-1075's maxTimestamp: the largest max timestamp of the finished segments; None when none."""


@dataclass(frozen=True)
class Lease:
    """The right to copy one partition, held by one broker's sidecar until ``expires_at_ms``.

    ``epoch`` grows by one at every acquisition; writes carry the lease and are refused once the
    partition records another (a newer epoch, or the same epoch held by another broker or
    incarnation: an epoch handed out twice), so a holder that lost its lease cannot write.
    """

    topic_partition: TopicPartition
    owner: int
    """Broker id of the holder."""
    epoch: int
    expires_at_ms: int
    incarnation: UUID | None = None
    """Which process of broker ``owner`` holds it (each sidecar process draws its own), so that
    two processes started with the same ``broker.id`` can tell each other apart."""

    def is_expired(self, now_ms: int) -> bool:
        """Whether another broker may take the lease over at ``now_ms``."""
        return now_ms >= self.expires_at_ms


@dataclass(frozen=True)
class LogPosition:
    """How far a replica's log of one partition reaches: its latest leader epoch (from
    ``leader-epoch-checkpoint``, -1 when it has none) and an offset of it (-1: none).

    ``topic_id`` is the topic id of the broker's ``partition.metadata`` (None without one):
    positions of two topic ids (a stale replica of a deleted topic) are never compared.
    """

    topic_id: UUID | None
    leader_epoch: int
    offset: int

    def ahead_of(self, other: LogPosition) -> bool:
        """Whether this position is strictly ahead of ``other``, of the same topic id: a newer
        leader epoch, or the same one and a higher offset."""
        if self.topic_id != other.topic_id:
            return False
        return (self.leader_epoch, self.offset) > (other.leader_epoch, other.offset)


@dataclass(frozen=True)
class ClusterClaim:
    """The Kafka cluster whose remote tier a metadata store records: its brokers' ``cluster.id``
    (``meta.properties``), as the first sidecar to claim the store found it."""

    cluster_id: str
    broker_id: int
    """The broker whose sidecar claimed the store."""
    claimed_at_ms: int
    """When, by the metadata store's clock."""


@dataclass(frozen=True)
class LeaseClaim:
    """That broker ``broker_id`` wanted the copy lease of a partition while another broker held
    it, and how far its log reached then. A claim grants nothing: a holder that finds its own log
    behind gives the lease up (see :mod:`rlm.tiering.leases`)."""

    topic_partition: TopicPartition
    broker_id: int
    position: LogPosition
    """The last offset the claimer could tier (see :class:`rlm.tiering.reach.Reach`)."""
    claimed_at_ms: int
    """When, by the metadata store's clock (the one leases expire by)."""
