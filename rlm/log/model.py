"""Values shared by every part of the log format: constants, enums and result tuples."""

from __future__ import annotations

from enum import IntEnum
from typing import NamedTuple

NO_TIMESTAMP = -1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1

#: baseOffset (int64) + batchLength/messageSize (int32): the prefix of every batch of every magic.
LOG_OVERHEAD = 12
#: The magic byte sits at byte 16 of every batch, whatever its version.
MAGIC_OFFSET = 16
#: Fixed header of a v2 batch (RECORD_BATCH_OVERHEAD).
V2_HEADER_SIZE = 61
#: Smallest legal size field (LegacyRecord.RECORD_OVERHEAD_V0); smaller means corruption.
MIN_SIZE_FIELD = 14
INT32_MAX = 2**31 - 1

#: The KRaft cluster metadata log (``__cluster_metadata-0`` in ``metadata.log.dir``): the
#: controllers' log of the cluster's metadata, not a topic. Clients cannot read it, and it holds
#: credentials (SCRAM hashes, delegation tokens, configs).
CLUSTER_METADATA_TOPIC = "__cluster_metadata"
#: Its directory: the topic's only partition.
CLUSTER_METADATA_DIR = f"{CLUSTER_METADATA_TOPIC}-0"
#: Kafka's internal topics (``Topic.INTERNAL_TOPICS``).
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})
#: The topic of Kafka's own remote log metadata manager (``TopicBasedRemoteLogMetadataManager``).
REMOTE_LOG_METADATA_TOPIC = "__remote_log_metadata"


def never_tiered(topic: str) -> str | None:
    """Why Kafka never tiers ``topic`` whatever its ``remote.storage.enable``
    (``UnifiedLog.isRemoteLogEnabled``), or None for a topic it may tier."""
    if topic in INTERNAL_TOPICS:
        return f"{topic} is an internal topic, which Kafka never tiers"
    if topic == REMOTE_LOG_METADATA_TOPIC:
        return f"{topic} is Kafka's remote log metadata topic, which Kafka never tiers"
    if topic == CLUSTER_METADATA_TOPIC:
        return f"{topic} is the cluster's metadata log, which Kafka never tiers"
    return None


class Codec(IntEnum):
    """Compression codec, the low three attribute bits."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


class TimestampType(IntEnum):
    """Kafka's TimestampType; v0 messages have none."""

    NO_TIMESTAMP_TYPE = -1
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1

    @property
    def label(self) -> str:
        """The name Kafka prints: ``CreateTime``, ``LogAppendTime`` or ``NoTimestampType``."""
        return _TS_LABELS[self]


_TS_LABELS = {
    TimestampType.NO_TIMESTAMP_TYPE: "NoTimestampType",
    TimestampType.CREATE_TIME: "CreateTime",
    TimestampType.LOG_APPEND_TIME: "LogAppendTime",
}


class ControlType(IntEnum):
    """Type of a control record (the int16 at bytes 2-3 of its key)."""

    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6


Header = tuple[str, bytes | None]


class TopicPartition(NamedTuple):
    """A topic name and partition number."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


class Record(NamedTuple):
    """One decoded record. ``timestamp`` already follows the batch's timestamp type."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()


class BatchHeader(NamedTuple):
    """What a batch's fixed header says, for every magic, without decoding records.

    For a legacy (v0/v1) compressed wrapper ``base_offset`` and ``record_count`` are only known
    after decompression and are reported as -1 here (Kafka's ``baseOffset()`` decompresses too).
    """

    position: int
    """Byte position of the batch in its file (or buffer)."""
    base_offset: int
    last_offset: int
    size: int
    """Total size in bytes, the 12-byte prefix included."""
    leader_epoch: int
    magic: int
    crc: int
    """The stored checksum (CRC-32C for v2, CRC-32 of the wrapper for v0/v1)."""
    attributes: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def codec(self) -> Codec:
        """Compression codec (raises ValueError for the invalid ids 5-7)."""
        return Codec(self.attributes & 0x07)

    @property
    def is_compressed(self) -> bool:
        """Whether its records are compressed (a codec other than none)."""
        return bool(self.attributes & 0x07)

    @property
    def timestamp_type(self) -> TimestampType:
        """CreateTime or LogAppendTime (v0 has no timestamps)."""
        if self.magic == 0:
            return TimestampType.NO_TIMESTAMP_TYPE
        return TimestampType((self.attributes >> 3) & 1)

    @property
    def is_transactional(self) -> bool:
        return self.magic >= 2 and bool(self.attributes & 0x10)

    @property
    def is_control(self) -> bool:
        return self.magic >= 2 and bool(self.attributes & 0x20)

    @property
    def has_delete_horizon(self) -> bool:
        return self.magic >= 2 and bool(self.attributes & 0x40)

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def end_position(self) -> int:
        """Byte position just past this batch."""
        return self.position + self.size


class ControlRecord(NamedTuple):
    """The key (and, for markers, value) of a control record."""

    version: int
    type: int
    coordinator_epoch: int = -1


class TimestampAndOffset(NamedTuple):
    """Answer of an offset-for-timestamp search: a record's timestamp, offset and batch epoch."""

    timestamp: int
    offset: int
    leader_epoch: int = -1
