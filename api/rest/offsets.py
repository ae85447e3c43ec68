"""Offset lookups: one partition by GET, many by POST /v1/list-offsets (Kafka's v10 shape)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query

from api.auth import Scope
from api.rest.deps import require, runtime
from api.rest.errors import STATUS_FOR_CODE, ApiError
from api.rest.schemas import (
    ListOffsetsIn,
    ListOffsetsOut,
    ListOffsetsPartitionOut,
    ListOffsetsTopicOut,
    OffsetResponse,
    Problem,
)
from rlm.bootstrap import Runtime
from rlm.lookup.list_offsets import ErrorCode, ListOffsetsRequest, PartitionQuery, TopicQuery
from rlm.metastore.model import TopicPartition
from rlm.storage.layout import validate_topic
from rlm.timestamps import parse_timestamp

router = APIRouter(prefix="/v1", tags=["offsets"])
ERRORS: dict[int | str, dict[str, object]] = {
    s: {"model": Problem} for s in (400, 401, 403, 404, 429, 503, 504)
}
Topic = Annotated[str, Path(min_length=1, max_length=249, description="Kafka topic name")]
Partition = Annotated[int, Path(ge=0, le=2**31 - 1)]


@router.get(
    "/topics/{topic}/partitions/{partition}/offsets",
    response_model=OffsetResponse,
    responses=ERRORS,
    summary="Offset of the first record at or after a timestamp",
)
def get_offset(
    topic: Topic,
    partition: Partition,
    timestamp: Annotated[
        str,
        Query(
            max_length=64,
            description="epoch ms, ISO-8601, or latest | earliest | max-timestamp | earliest-local | "
            "latest-tiered (or -1 .. -5)",
        ),
    ],
    rt: Annotated[Runtime, Depends(runtime)],
    _: Annotated[Scope, Depends(require(Scope.READ))],
    timeout_ms: Annotated[int | None, Query(ge=1, le=3_600_000)] = None,
) -> OffsetResponse:
    validate_topic(topic)
    result = rt.list_offsets.find_one(
        TopicPartition(topic, partition), parse_timestamp(timestamp), timeout_ms
    )
    if result.error_code is not ErrorCode.NONE:
        status = STATUS_FOR_CODE.get(result.error_code, 500)
        raise ApiError(status, result.error_message or result.error_code.name)
    return OffsetResponse(
        topic=topic,
        partition=partition,
        offset=result.offset,
        timestamp=result.timestamp,
        leader_epoch=result.leader_epoch,
        tier=result.tier,
    )


@router.post(
    "/list-offsets",
    response_model=ListOffsetsOut,
    responses=ERRORS,
    summary="Kafka ListOffsets (v10 shape): per-partition error codes",
)
def list_offsets(
    body: ListOffsetsIn,
    rt: Annotated[Runtime, Depends(runtime)],
    _: Annotated[Scope, Depends(require(Scope.READ))],
) -> ListOffsetsOut:
    request = ListOffsetsRequest(
        tuple(
            TopicQuery(t.name, tuple(PartitionQuery(p.partition_index, p.timestamp) for p in t.partitions))
            for t in body.topics
        ),
        timeout_ms=body.timeout_ms,
        isolation_level=body.isolation_level,
    )
    response = rt.list_offsets.handle(request)
    return ListOffsetsOut(
        topics=[
            ListOffsetsTopicOut(
                name=t.name,
                partitions=[
                    ListOffsetsPartitionOut(
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
