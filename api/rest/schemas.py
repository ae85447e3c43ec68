"""Request and response bodies of the REST API (pydantic; table models live in ``metadata``).

Integers of requests (bodies, paths, queries) are checked by the parser every API shares
(:mod:`rlm.arguments`): a JSON integer, not ``true``, ``5.0`` or ``"5"``; in a path or a query,
ASCII digits only. Their ranges are also written into the OpenAPI document.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from rlm.arguments import INT32_MAX, INT64_MAX, INT64_MIN, check_int, parse_int

MAX_TIMEOUT_MS = 3_600_000


def json_int(low: int = INT64_MIN, high: int = INT64_MAX) -> BeforeValidator:
    """A field's check: an integer of a JSON body (null passes, for optional fields)."""

    def check(value: object) -> object:
        return value if value is None else check_int(value, "value", low, high)

    return BeforeValidator(check)


def text_int(low: int = INT64_MIN, high: int = INT64_MAX) -> BeforeValidator:
    """A parameter's check: an integer written in a path or a query (null passes)."""

    def check(value: object) -> object:
        if value is None:
            return value
        return (
            parse_int(value, "value", low, high)
            if isinstance(value, str)
            else check_int(value, "value", low, high)
        )

    return BeforeValidator(check)


def documented(low: int, high: int) -> Callable[[dict[str, Any]], None]:
    """Writes a range into the OpenAPI document only (the check is the shared parser's)."""

    def extra(schema: dict[str, Any]) -> None:
        schema.update(minimum=low, maximum=high)

    return extra


PartitionIndex = Annotated[int, json_int(0, INT32_MAX), Field(ge=0, le=INT32_MAX)]


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
    partition_index: PartitionIndex
    timestamp: Annotated[int, json_int(), Field(description="epoch ms, or -1 latest … -5 latest tiered")]


class ListOffsetsTopicIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(description="checked by the service: a bad name answers error code 17")
    partitions: list[ListOffsetsPartitionIn]


class ListOffsetsIn(BaseModel):
    """Kafka's ListOffsetsRequest v10 in snake_case. At most ``list.offsets.max.partitions``
    partitions in all (a topic without any counts as one); a bigger request answers 400."""

    model_config = ConfigDict(extra="forbid")
    timeout_ms: Annotated[
        Annotated[int, Field(ge=-1, le=MAX_TIMEOUT_MS)] | None, json_int(-1, MAX_TIMEOUT_MS)
    ] = None
    isolation_level: Annotated[int, json_int(0, 1), Field(ge=0, le=1)] = 0
    topics: list[ListOffsetsTopicIn]


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
    topic_id: str | None = None
    """The topic id (Kafka's base64 form) of the topic the segment was copied from; None for
    segments copied before brokers wrote ``partition.metadata``. A topic deleted and created again
    under the same name has a new id: its deleted incarnation's segments, listed until the copier
    retires them, carry the old one."""
    deleted_topic: bool | None = None
    """True for a segment of a topic deleted under this name (its topic id is not the one of the
    broker's ``partition.metadata``): no read uses it, and the copier deletes it. False when
    either id is unknown, as reads take it; None when the broker's topic id cannot be read
    (``topic_id_error`` of the listing says why)."""


class SegmentsOut(BaseModel):
    """Every segment the store holds for the partition, of every state and topic id: the deleted
    topic's of a topic created again under the same name are listed (as ``deleted_topic``) until
    the copier has deleted them."""

    topic: str
    partition: int
    segments: list[SegmentOut]
    next_page_token: str | None
    topic_id: str | None = None
    """The topic id (Kafka's base64 form) of the broker's ``partition.metadata`` of the partition;
    None without one (no directory, an older broker) or when it cannot be read."""
    topic_id_error: str | None = None
    """Why the broker's ``partition.metadata`` cannot be read, naming the file; None when it can."""


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
    topic_id: str | None = None
    """The topic id (Kafka's base64 form) of the broker's ``partition.metadata``: the figures are of
    that topic only, a deleted topic's of the same name left out. None without one (no directory,
    an older broker) or when it cannot be read."""
    topic_id_error: str | None = None
    """Why the broker's ``partition.metadata`` cannot be read, naming the file: the figures are then
    the store's, whichever topic's they are, and reads of the partition fail until it is put right."""
    deletion_state: str | None = None
    """``DELETE_PARTITION_MARKED``, ``_STARTED`` or ``_FINISHED`` while or once the partition is
    deleted from the remote tier (``rlm retention delete-topic``: its topic was deleted); reads
    then find none of its remote records. None otherwise."""
    remote_topic_id: str | None = None
    """The topic id (Kafka's base64 form) the remote tier records for the partition (the one its
    copier adopted); None while none is recorded. After the topic was deleted, its id is here:
    what ``rlm retention delete-topic --topic-id`` takes."""


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
    """New values of the run-time settings; their ranges are checked where they are applied
    (``DynamicConfig.update``, for every API), all or none."""

    model_config = ConfigDict(extra="forbid")
    remote_log_offset_reader_threads: Annotated[
        Annotated[int, Field(json_schema_extra=documented(1, 256))] | None, json_int()
    ] = None
    remote_list_offsets_request_timeout_ms: Annotated[
        Annotated[int, Field(json_schema_extra=documented(1, MAX_TIMEOUT_MS))] | None, json_int()
    ] = None
    remote_log_manager_copy_max_bytes_per_second: Annotated[
        Annotated[int, Field(json_schema_extra=documented(-1, INT64_MAX))] | None, json_int()
    ] = None


class Health(BaseModel):
    status: str
    problems: list[str] = []
