"""Records from an offset, across both tiers: decoded JSON or raw Kafka record batches."""

from __future__ import annotations

import base64
from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from api.auth import Scope
from api.rest.accept import Accept
from api.rest.deps import known_query, require, runtime
from api.rest.errors import ApiError
from api.rest.offsets import ERRORS
from api.rest.schemas import MAX_TIMEOUT_MS, RecordOut, RecordsOut, text_int
from rlm.arguments import INT32_MAX, INT64_MAX
from rlm.bootstrap import Runtime
from rlm.errors import RequestTimedOutError
from rlm.lookup.fetch import FetchResult
from rlm.lookup.pool import CancelToken, run_on
from rlm.metastore.model import TopicPartition
from rlm.storage.layout import MAX_TOPIC_LENGTH

router = APIRouter(prefix="/v1", tags=["records"], dependencies=[Depends(known_query)])
OCTET = "application/octet-stream"
JSON = "application/json"
MAX_FETCH_BYTES = 64 * 1024 * 1024


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


@router.get(
    "/topics/{topic}/partitions/{partition}/records",
    response_model=RecordsOut,
    responses={**ERRORS, 200: {"content": {OCTET: {}}, "description": "JSON, or raw batches"}},
    summary="Records from an offset (Accept: application/octet-stream for raw Kafka batches)",
)
async def get_records(
    request: Request,
    topic: Annotated[str, Path(min_length=1, max_length=MAX_TOPIC_LENGTH)],
    partition: Annotated[int, Path(ge=0, le=INT32_MAX), text_int(0, INT32_MAX)],
    offset: Annotated[int, Query(ge=0, le=INT64_MAX), text_int(0, INT64_MAX)],
    rt: Annotated[Runtime, Depends(runtime)],
    _: Annotated[Scope, Depends(require(Scope.READ))],
    max_bytes: Annotated[int, Query(ge=1, le=MAX_FETCH_BYTES), text_int(1, MAX_FETCH_BYTES)] = 1024 * 1024,
    timeout_ms: Annotated[int | None, Query(ge=1, le=MAX_TIMEOUT_MS), text_int(1, MAX_TIMEOUT_MS)] = None,
) -> Response:
    tp = TopicPartition(topic, partition)

    def read(token: CancelToken) -> FetchResult:
        return rt.fetcher.fetch(tp, offset, max_bytes, checkpoint=token.raise_if_cancelled)

    timeout_s = rt.request_timeout.seconds_for(timeout_ms)
    what = f"reading {tp} from offset {offset}"
    try:
        result = await run_on(rt.fetch_pool, read, timeout_s, label=tp, what=what)
    except RequestTimedOutError as exc:
        raise ApiError(504, f"{what} did not finish in time") from exc
    accept = Accept.parse(request.headers.get("accept"))
    # Raw batches when Accept names them and weighs them no lower than JSON (without a header, or
    # with */*, JSON).
    raw = accept.explicit(OCTET)
    if raw > 0 and raw >= accept.weight(JSON):
        return Response(
            result.raw,
            media_type=OCTET,
            headers={"X-Rlm-Tier": result.tier or "", "X-Rlm-High-Watermark": str(result.high_watermark)},
        )
    # Translating up to max_bytes of records is work for a thread, not the event loop.
    return await run_in_threadpool(_json, topic, partition, result)


def _json(topic: str, partition: int, result: FetchResult) -> Response:
    records = [
        RecordOut(
            offset=r.offset,
            timestamp=r.timestamp,
            timestamp_type=batch.header.timestamp_type.label,
            key=_b64(r.key),
            value=_b64(r.value),
            headers=[(k, _b64(v)) for k, v in r.headers],
            leader_epoch=batch.header.leader_epoch,
        )
        for batch in result.batches
        for r in batch.records
    ]
    answer = RecordsOut(
        topic=topic,
        partition=partition,
        tier=result.tier,
        high_watermark=result.high_watermark,
        next_offset=result.next_offset,
        records=records,
    )
    return Response(answer.model_dump_json(), media_type="application/json")
