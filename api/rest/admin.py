"""Operator views: topics and partitions overview, remote segments (paged), dynamic settings."""

from __future__ import annotations

from typing import Annotated
from uuid import UUID

from fastapi import APIRouter, Depends, Path, Query

from api.auth import Scope
from api.rest.deps import known_query, require, runtime
from api.rest.json_body import StrictJsonRoute
from api.rest.offsets import BODY_ERRORS, ERRORS
from api.rest.schemas import (
    ConfigOut,
    ConfigPatch,
    PartitionOut,
    SegmentOut,
    SegmentsOut,
    SkippedRangeOut,
    TopicOut,
    TopicsOut,
    text_int,
)
from rlm.arguments import INT32_MAX
from rlm.bootstrap import Runtime
from rlm.dynamic_config import DynamicSettings
from rlm.log.checkpoints import uuid_to_topic_id
from rlm.metastore.model import TopicPartition
from rlm.storage.layout import MAX_TOPIC_LENGTH

router = APIRouter(
    prefix="/v1", tags=["admin"], dependencies=[Depends(known_query)], route_class=StrictJsonRoute
)


@router.get("/topics", response_model=TopicsOut, responses=ERRORS, summary="What is tiered, per partition")
def topics(
    rt: Annotated[Runtime, Depends(runtime)],
    _: Annotated[Scope, Depends(require(Scope.READ))],
    topic: Annotated[str | None, Query(min_length=1, max_length=MAX_TOPIC_LENGTH)] = None,
) -> TopicsOut:
    grouped: dict[str, list[PartitionOut]] = {}
    for p in rt.overview.partitions(topic):
        grouped.setdefault(p.topic, []).append(
            PartitionOut(
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
                topic_id=_topic_id(p.topic_id),
                topic_id_error=p.topic_id_error,
                deletion_state=p.deletion_state,
                remote_topic_id=_topic_id(p.remote_topic_id),
                skipped_ranges=[
                    SkippedRangeOut(
                        start_offset=r.start_offset,
                        end_offset=r.end_offset,
                        kind=r.kind.value,
                        reason=r.reason,
                        recorded_at_ms=r.recorded_at_ms,
                    )
                    for r in p.skipped_ranges
                ],
            )
        )
    return TopicsOut(topics=[TopicOut(name=name, partitions=parts) for name, parts in grouped.items()])


@router.get(
    "/topics/{topic}/partitions/{partition}/segments",
    response_model=SegmentsOut,
    responses=ERRORS,
    summary="Remote segments of a partition, in offset order, paged",
)
def segments(
    topic: Annotated[str, Path(min_length=1, max_length=MAX_TOPIC_LENGTH)],
    partition: Annotated[int, Path(ge=0, le=INT32_MAX), text_int(0, INT32_MAX)],
    rt: Annotated[Runtime, Depends(runtime)],
    _: Annotated[Scope, Depends(require(Scope.READ))],
    limit: Annotated[int, Query(ge=1, le=1000), text_int(1, 1000)] = 100,
    page_token: Annotated[str | None, Query(max_length=100)] = None,
) -> SegmentsOut:
    page = rt.overview.segments(TopicPartition(topic, partition), limit=limit, page_token=page_token)
    return SegmentsOut(
        topic=topic,
        partition=partition,
        segments=[
            SegmentOut(
                segment_id=str(s.segment_id),
                start_offset=s.start_offset,
                end_offset=s.end_offset,
                max_timestamp=s.max_timestamp_ms,
                size_bytes=s.size_bytes,
                state=s.state.value,
                broker_id=s.broker_id,
                event_time_ms=s.event_time_ms,
                leader_epochs=[(e.epoch, e.start_offset) for e in s.leader_epochs],
                txn_index_empty=s.txn_index_empty,
                topic_id=_topic_id(s.topic_id),
                deleted_topic=page.of_deleted_topic(s),
            )
            for s in page.segments
        ],
        next_page_token=page.next_page_token,
        topic_id=_topic_id(page.topic_id),
        topic_id_error=page.topic_id_error,
    )


def _topic_id(topic_id: UUID | None) -> str | None:
    """Kafka's base64 form of ``topic_id``."""
    return uuid_to_topic_id(topic_id) if topic_id is not None else None


def _config(current: DynamicSettings) -> ConfigOut:
    return ConfigOut(
        remote_log_offset_reader_threads=current.remote_log_offset_reader_threads,
        remote_list_offsets_request_timeout_ms=current.remote_list_offsets_request_timeout_ms,
        remote_log_manager_copy_max_bytes_per_second=current.remote_log_manager_copy_max_bytes_per_second,
    )


@router.get("/config", response_model=ConfigOut, responses=ERRORS, summary="Settings changeable at run time")
def get_config(
    rt: Annotated[Runtime, Depends(runtime)], _: Annotated[Scope, Depends(require(Scope.READ))]
) -> ConfigOut:
    return _config(rt.dynamic_config.current())


@router.patch("/config", response_model=ConfigOut, responses=BODY_ERRORS, summary="Change settings (admin)")
def patch_config(
    body: ConfigPatch,
    rt: Annotated[Runtime, Depends(runtime)],
    _: Annotated[Scope, Depends(require(Scope.ADMIN))],
) -> ConfigOut:
    return _config(
        rt.dynamic_config.update(
            reader_threads=body.remote_log_offset_reader_threads,
            request_timeout_ms=body.remote_list_offsets_request_timeout_ms,
            copy_max_bytes_per_second=body.remote_log_manager_copy_max_bytes_per_second,
        )
    )
