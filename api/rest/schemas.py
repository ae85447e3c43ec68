"""Request and response bodies of the REST API (pydantic; table models live in ``metadata``)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class Problem(BaseModel):
    """An error, in words."""

    error: str = Field(description="What went wrong, for a person to read")
    status: int


class OffsetResponse(BaseModel):
    topic: str
    partition: int
    offset: int
    timestamp: int
    leader_epoch: int
    tier: str | None = Field(description='"remote", "local", or null when nothing was found')


class ListOffsetsPartitionIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    partition_index: int = Field(ge=0, le=2**31 - 1)
    timestamp: int = Field(ge=-(2**63), le=2**63 - 1)


class ListOffsetsTopicIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=249)
    partitions: list[ListOffsetsPartitionIn] = Field(max_length=10_000)


class ListOffsetsIn(BaseModel):
    """Kafka's ListOffsetsRequest v10 in snake_case."""

    model_config = ConfigDict(extra="forbid")
    timeout_ms: int | None = Field(default=None, ge=-1, le=3_600_000)
    isolation_level: int = Field(default=0, ge=0, le=1)
    topics: list[ListOffsetsTopicIn] = Field(max_length=1000)


class ListOffsetsPartitionOut(BaseModel):
    partition_index: int
    error_code: int
    timestamp: int
    offset: int
    leader_epoch: int
    error_message: str | None = None


class ListOffsetsTopicOut(BaseModel):
    name: str
    partitions: list[ListOffsetsPartitionOut]


class ListOffsetsOut(BaseModel):
    topics: list[ListOffsetsTopicOut]


class RecordOut(BaseModel):
    offset: int
    timestamp: int
    timestamp_type: str
    key: str | None = Field(description="base64, or null")
    value: str | None = Field(description="base64, or null (a tombstone)")
    headers: list[tuple[str, str | None]] = Field(description="[name, base64 value or null]")
    leader_epoch: int


class RecordsOut(BaseModel):
    topic: str
    partition: int
    tier: str | None
    high_watermark: int
    next_offset: int
    records: list[RecordOut]


class SegmentOut(BaseModel):
    segment_id: str
    start_offset: int
    end_offset: int
    max_timestamp: int
    size_bytes: int
    state: str
    broker_id: int
    event_time_ms: int
    leader_epochs: list[tuple[int, int]]
    txn_index_empty: bool


class SegmentsOut(BaseModel):
    topic: str
    partition: int
    segments: list[SegmentOut]
    next_page_token: str | None


class SkippedRangeOut(BaseModel):
    """Offsets the remote tier will never hold: ``kind`` is ``OPERATOR`` (``rlm copy skip``) or
    ``NOT_IN_LOCAL_LOG`` (the broker deleted them before they were tiered)."""

    start_offset: int
    end_offset: int
    kind: str
    reason: str
    recorded_at_ms: int


class PartitionOut(BaseModel):
    partition: int
    tiered_bytes: int
    tiered_segments: int
    remote_log_start_offset: int
    highest_tiered_offset: int
    max_remote_timestamp: int
    copy_lag_segments: int
    copy_lag_bytes: int
    local_log_start_offset: int
    high_watermark: int
    skipped_ranges: list[SkippedRangeOut] = []


class TopicOut(BaseModel):
    name: str
    partitions: list[PartitionOut]


class TopicsOut(BaseModel):
    topics: list[TopicOut]


class ConfigOut(BaseModel):
    remote_log_offset_reader_threads: int
    remote_list_offsets_request_timeout_ms: int
    remote_log_manager_copy_max_bytes_per_second: int


class ConfigPatch(BaseModel):
    model_config = ConfigDict(extra="forbid")
    remote_log_offset_reader_threads: int | None = Field(default=None, ge=1, le=256)
    remote_list_offsets_request_timeout_ms: int | None = Field(default=None, ge=1, le=3_600_000)
    remote_log_manager_copy_max_bytes_per_second: int | None = Field(default=None, ge=-1, le=2**63 - 1)


class Health(BaseModel):
    status: str
    problems: list[str] = []
