"""The remote-segment metadata store: its records, state machines and contract.

rlm's core uses :class:`MetadataStore`; ``metadata.SqlMetadataStore`` implements it.
"""

from rlm.metastore.model import (
    NO_TIMESTAMP,
    ByteRange,
    ClusterClaim,
    IndexType,
    LeaderEpochEntry,
    Lease,
    LeaseClaim,
    LogPosition,
    ObjectLayout,
    PartitionRecord,
    PartitionState,
    PendingUpload,
    RemoteSegment,
    RemoteTierSummary,
    SegmentState,
    SkipKind,
    SkippedRange,
    StateUpdate,
    TopicIdChange,
    TopicPartition,
    check_transition,
)
from rlm.metastore.protocol import MetadataStore

__all__ = [
    "NO_TIMESTAMP",
    "ByteRange",
    "ClusterClaim",
    "IndexType",
    "LeaderEpochEntry",
    "Lease",
    "LeaseClaim",
    "LogPosition",
    "MetadataStore",
    "ObjectLayout",
    "PartitionRecord",
    "PartitionState",
    "PendingUpload",
    "RemoteSegment",
    "RemoteTierSummary",
    "SegmentState",
    "SkipKind",
    "SkippedRange",
    "StateUpdate",
    "TopicIdChange",
    "TopicPartition",
    "check_transition",
]
