"""Translation between the ``rlm.v1`` protobuf messages and the values of rlm's services.

Pure functions: requests are checked field by field with the parser every API shares
(:mod:`rlm.arguments`: a bad field raises ``InvalidArgumentError``, INVALID_ARGUMENT naming the
field) and answers are copied into messages. The limits are the REST API's; topic names and the
size of a ListOffsets request are checked by the services, for every API.
"""

from __future__ import annotations

from uuid import UUID

from api.gen.rlm.v1 import rlm_pb2 as pb
from rlm.arguments import INT32_MAX, INT64_MAX, check_range
from rlm.dynamic_config import DynamicSettings
from rlm.errors import InvalidArgumentError
from rlm.log.checkpoints import uuid_to_topic_id
from rlm.log.model import TimestampType
from rlm.lookup.fetch import FetchResult
from rlm.lookup.list_offsets import (
    ListOffsetsRequest,
    ListOffsetsResponse,
    PartitionQuery,
    PartitionResult,
    TopicQuery,
)
from rlm.metastore.model import RemoteSegment, SegmentState, TopicPartition
from rlm.tiering.overview import PartitionOverview, SegmentPage

MAX_TIMEOUT_MS = 3_600_000
DEFAULT_FETCH_BYTES = 1024 * 1024
MAX_FETCH_BYTES = 64 * 1024 * 1024
DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000
#: The words for a required field left unset: proto3 reads an unset number as 0, a real value.
REQUIRED = "is required (0 too must be set)"

TIERS = {None: pb.TIER_UNSPECIFIED, "local": pb.TIER_LOCAL, "remote": pb.TIER_REMOTE}
TIMESTAMP_TYPES = {
    TimestampType.NO_TIMESTAMP_TYPE: pb.TIMESTAMP_TYPE_NO_TIMESTAMP,
    TimestampType.CREATE_TIME: pb.TIMESTAMP_TYPE_CREATE_TIME,
    TimestampType.LOG_APPEND_TIME: pb.TIMESTAMP_TYPE_LOG_APPEND_TIME,
}
SEGMENT_STATES = {
    SegmentState.COPY_SEGMENT_STARTED: pb.SEGMENT_STATE_COPY_SEGMENT_STARTED,
    SegmentState.COPY_SEGMENT_FINISHED: pb.SEGMENT_STATE_COPY_SEGMENT_FINISHED,
    SegmentState.DELETE_SEGMENT_STARTED: pb.SEGMENT_STATE_DELETE_SEGMENT_STARTED,
    SegmentState.DELETE_SEGMENT_FINISHED: pb.SEGMENT_STATE_DELETE_SEGMENT_FINISHED,
}


def topic_partition(topic: str, partition: int) -> TopicPartition:
    """The topic-partition of a request (the services check the topic name)."""
    return TopicPartition(topic, check_range(partition, "partition", 0, INT32_MAX))


def list_offsets_request(request: pb.ListOffsetsRequest, deadline_ms: int | None) -> ListOffsetsRequest:
    """The service's request; its timeout is the request's ``timeout_ms`` capped by the call deadline."""
    check_range(request.isolation_level, "isolation_level", 0, 1)
    timeout_ms: int | None = None
    if request.HasField("timeout_ms"):
        check_range(request.timeout_ms, "timeout_ms", -1, MAX_TIMEOUT_MS)
        timeout_ms = request.timeout_ms if request.timeout_ms >= 0 else None
    if deadline_ms is not None:
        timeout_ms = deadline_ms if timeout_ms is None else min(timeout_ms, deadline_ms)
    topics = []
    for i, topic in enumerate(request.topics):
        for j, p in enumerate(topic.partitions):
            check_range(p.partition_index, f"topics[{i}].partitions[{j}].partition_index", 0, INT32_MAX)
            if not p.HasField("timestamp"):
                raise InvalidArgumentError(f"topics[{i}].partitions[{j}].timestamp", REQUIRED)
        queries = tuple(PartitionQuery(p.partition_index, p.timestamp) for p in topic.partitions)
        topics.append(TopicQuery(topic.name, queries))
    return ListOffsetsRequest(tuple(topics), timeout_ms, request.isolation_level)


def list_offsets_response(response: ListOffsetsResponse) -> pb.ListOffsetsResponse:
    return pb.ListOffsetsResponse(
        topics=[
            pb.ListOffsetsTopicResponse(
                name=t.name,
                partitions=[
                    pb.ListOffsetsPartitionResponse(
                        partition_index=p.partition_index,
                        error_code=int(p.error_code),
                        timestamp=p.timestamp,
                        offset=p.offset,
                        leader_epoch=p.leader_epoch,
                        error_message=p.error_message,
                    )
                    for p in t.partitions
                ],
            )
            for t in response.topics
        ]
    )


def offset_response(tp: TopicPartition, result: PartitionResult) -> pb.GetOffsetResponse:
    return pb.GetOffsetResponse(
        topic=tp.topic,
        partition=tp.partition,
        offset=result.offset,
        timestamp=result.timestamp,
        leader_epoch=result.leader_epoch,
        tier=TIERS[result.tier],
    )


def fetch_offset(request: pb.FetchRecordsRequest) -> int:
    """The offset a fetch starts at, which must be set (proto3 would read a forgotten one as 0)
    and not negative (INVALID_ARGUMENT, as REST refuses it; not OUT_OF_RANGE)."""
    if not request.HasField("offset"):
        raise InvalidArgumentError("offset", REQUIRED)
    return check_range(request.offset, "offset", 0, INT64_MAX)


def fetch_bytes(request: pb.FetchRecordsRequest) -> int:
    """The byte bound of a fetch: ``max_bytes``, checked, or the default."""
    if not request.HasField("max_bytes"):
        return DEFAULT_FETCH_BYTES
    return check_range(request.max_bytes, "max_bytes", 1, MAX_FETCH_BYTES)


def fetch_response(tp: TopicPartition, result: FetchResult) -> pb.FetchRecordsResponse:
    """The fetch's records and its batches, as read (:class:`~rlm.lookup.fetch.FetchResult`)."""
    records = [
        pb.Record(
            offset=r.offset,
            timestamp=r.timestamp,
            timestamp_type=TIMESTAMP_TYPES[batch.header.timestamp_type],
            key=r.key,
            value=r.value,
            headers=[pb.RecordHeader(key=k, value=v) for k, v in r.headers],
            leader_epoch=batch.header.leader_epoch,
        )
        for batch in result.batches
        for r in batch.records
    ]
    return pb.FetchRecordsResponse(
        topic=tp.topic,
        partition=tp.partition,
        tier=TIERS[result.tier],
        high_watermark=result.high_watermark,
        next_offset=result.next_offset,
        records=records,
        raw_batches=result.raw,
    )


def page_size(request: pb.ListSegmentsRequest) -> int:
    """The page size asked for, checked here to name the field (the service calls it ``limit``)."""
    if not request.HasField("page_size"):
        return DEFAULT_PAGE_SIZE
    return check_range(request.page_size, "page_size", 1, MAX_PAGE_SIZE)


def segments_response(tp: TopicPartition, page: SegmentPage) -> pb.ListSegmentsResponse:
    return pb.ListSegmentsResponse(
        topic=tp.topic,
        partition=tp.partition,
        segments=[_segment(s, page.of_deleted_topic(s)) for s in page.segments],
        next_page_token=page.next_page_token or "",
        topic_id=_topic_id(page.topic_id),
        topic_id_error=page.topic_id_error or "",
    )


def _topic_id(topic_id: UUID | None) -> str:
    """Kafka's base64 form of ``topic_id``; empty when None."""
    return uuid_to_topic_id(topic_id) if topic_id is not None else ""


def _segment(s: RemoteSegment, deleted_topic: bool | None) -> pb.RemoteSegment:
    return pb.RemoteSegment(
        segment_id=str(s.segment_id),
        start_offset=s.start_offset,
        end_offset=s.end_offset,
        max_timestamp=s.max_timestamp_ms,
        size_bytes=s.size_bytes,
        state=SEGMENT_STATES[s.state],
        broker_id=s.broker_id,
        event_time_ms=s.event_time_ms,
        leader_epochs=[
            pb.LeaderEpochEntry(epoch=e.epoch, start_offset=e.start_offset) for e in s.leader_epochs
        ],
        txn_index_empty=s.txn_index_empty,
        topic_id=_topic_id(s.topic_id),
        deleted_topic=deleted_topic,
    )


def partitions_response(partitions: list[PartitionOverview]) -> pb.ListPartitionsResponse:
    return pb.ListPartitionsResponse(
        partitions=[
            pb.PartitionOverview(
                topic=p.topic,
                partition=p.partition,
                tiered_bytes=p.tiered_bytes,
                tiered_segments=p.tiered_segments,
                remote_log_start_offset=p.remote_log_start_offset,
                highest_tiered_offset=p.highest_tiered_offset,
                max_remote_timestamp=p.max_remote_timestamp,
                copy_lag_segments=p.copy_lag_segments,
                copy_lag_bytes=p.copy_lag_bytes,
                local_log_start_offset=p.local_log_start_offset,
                high_watermark=p.high_watermark,
                skipped_ranges=[
                    pb.SkippedRange(
                        start_offset=r.start_offset,
                        end_offset=r.end_offset,
                        kind=r.kind.value,
                        reason=r.reason,
                        recorded_at_ms=r.recorded_at_ms,
                    )
                    for r in p.skipped_ranges
                ],
                topic_id=_topic_id(p.topic_id),
                topic_id_error=p.topic_id_error or "",
                deletion_state=p.deletion_state or "",
                remote_topic_id=_topic_id(p.remote_topic_id),
            )
            for p in partitions
        ]
    )


def config_changes(request: pb.UpdateConfigRequest) -> dict[str, int | None]:
    """The keyword arguments of ``DynamicConfig.update``: None for the settings left as they are."""
    return {
        "reader_threads": (
            request.remote_log_offset_reader_threads
            if request.HasField("remote_log_offset_reader_threads")
            else None
        ),
        "request_timeout_ms": (
            request.remote_list_offsets_request_timeout_ms
            if request.HasField("remote_list_offsets_request_timeout_ms")
            else None
        ),
        "copy_max_bytes_per_second": (
            request.remote_log_manager_copy_max_bytes_per_second
            if request.HasField("remote_log_manager_copy_max_bytes_per_second")
            else None
        ),
    }


def config_response(current: DynamicSettings) -> pb.DynamicConfig:
    return pb.DynamicConfig(
        remote_log_offset_reader_threads=current.remote_log_offset_reader_threads,
        remote_list_offsets_request_timeout_ms=current.remote_list_offsets_request_timeout_ms,
        remote_log_manager_copy_max_bytes_per_second=current.remote_log_manager_copy_max_bytes_per_second,
    )
