"""Offset lookups for many partitions at once: POST /v1/list-offsets (Kafka's v10 shape).

One partition's lookup by GET is :mod:`api.rest.lookup_route`. The request's deadline starts
when it arrives; the service checks its size and topic names (as for every API) and answers,
awaiting its pools without holding a thread.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from api.auth import Scope
from api.rest.deps import arrived, known_query, require, runtime
from api.rest.json_body import StrictJsonRoute
from api.rest.schemas import (
    ListOffsetsIn,
    ListOffsetsOut,
    ListOffsetsPartitionOut,
    ListOffsetsTopicOut,
    Problem,
)
from rlm.bootstrap import Runtime
from rlm.lookup.list_offsets import ListOffsetsRequest, ListOffsetsResponse, PartitionQuery, TopicQuery

router = APIRouter(
    prefix="/v1", tags=["offsets"], dependencies=[Depends(known_query)], route_class=StrictJsonRoute
)
#: Answers of at most this many partitions are serialized on the event loop, not in a thread.
SERIALIZE_INLINE_PARTITIONS = 64
ERRORS: dict[int | str, dict[str, object]] = {
    s: {"model": Problem} for s in (400, 401, 403, 404, 429, 503, 504)
}
#: The error answers of an operation that takes a JSON body: also 415 (:mod:`api.rest.json_body`).
BODY_ERRORS: dict[int | str, dict[str, object]] = {
    **ERRORS,
    415: {
        "model": Problem,
        "description": "Unsupported Media Type: a body sent without Content-Type: application/json",
    },
}


@router.post(
    "/list-offsets",
    response_model=ListOffsetsOut,
    responses=BODY_ERRORS,
    summary="Kafka ListOffsets (v10 shape): per-partition error codes",
)
async def list_offsets(
    incoming: Request,
    body: ListOffsetsIn,
    rt: Annotated[Runtime, Depends(runtime)],
    _: Annotated[Scope, Depends(require(Scope.READ))],
) -> Response:
    # The deadline started when the request arrived: reading its body and waiting for a worker
    # thread count against the request's time.
    deadline = rt.list_offsets.deadline(body.timeout_ms, arrived=arrived(incoming))
    request = ListOffsetsRequest(
        tuple(
            TopicQuery(t.name, tuple(PartitionQuery(p.partition_index, p.timestamp) for p in t.partitions))
            for t in body.topics
        ),
        timeout_ms=body.timeout_ms,
        isolation_level=body.isolation_level,
    )

    response = await rt.list_offsets.handle_async(request, deadline=deadline)

    def serialized() -> Response:
        # Tens of thousands of objects: serialized off the event loop, and once (the model is
        # built from trusted values, not validated again on the way out).
        return Response(_answer(response).model_dump_json(), media_type="application/json")

    if sum(len(t.partitions) for t in response.topics) <= SERIALIZE_INLINE_PARTITIONS:
        return serialized()
    return await run_in_threadpool(serialized)


def _answer(response: ListOffsetsResponse) -> ListOffsetsOut:
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
