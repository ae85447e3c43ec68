"""Streamed records of a range: ``GET /v1/topics/{t}/partitions/{p}/records`` when a stream is asked.

The route shares its path with the bounded JSON answer (:mod:`api.rest.records`) and takes the
requests that ask to stream: an ``Accept`` of ``application/x-ndjson`` or
``application/vnd.apache.arrow.stream``, or a range argument (``from_timestamp``,
``to_timestamp``, ``end_offset``, ``isolation_level``). Media types:

* ``application/x-ndjson``: one record object a line, as the JSON answer's records; a stream that
  cannot continue ends with a line ``{"error": ..., "status": ...}``;
* ``application/octet-stream``: the stored batches, byte for byte, whole (but a diverged copy's
  batch kept across its cut, sent cut short there: :mod:`rlm.log.clip`);
* ``application/vnd.apache.arrow.stream``: Arrow IPC record batches of the export's columns.

Octet and Arrow streams that cannot continue are cut (the connection closes before the chunked
body's end, and an Arrow stream lacks its end marker): a client never takes a short stream for a
whole one. A stream whose bearer token is revoked (:mod:`api.auth`) ends the same way (an NDJSON
error line with status 401) at its next piece once the tokens file is read again, logged as a
warning (:mod:`api.rest.errors`), not as an error. The range is
planned before the status is sent, so bad arguments and unknown partitions get their 4xx; above
``remote.fetch.max.streams`` streams the answer is 429 with ``Retry-After``. A client that goes
away cancels the stream's reads at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
from collections.abc import AsyncIterator, Callable
from functools import partial
from typing import Annotated, Any
from urllib.parse import parse_qsl

from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute
from starlette.datastructures import Headers
from starlette.responses import StreamingResponse
from starlette.routing import Match
from starlette.types import Message, Receive, Send
from starlette.types import Scope as AsgiScope

from api.auth import Admission, Scope
from api.rest.accept import Accept
from api.rest.deps import admission, known_query, require, runtime
from api.rest.errors import ApiError, ended_stream
from api.rest.schemas import MAX_TIMEOUT_MS, text_int
from api.streaming import open_stream
from rlm.arguments import INT32_MAX, INT64_MAX
from rlm.bootstrap import Runtime
from rlm.lookup.plans import IsolationLevel
from rlm.metastore.model import TopicPartition
from rlm.storage.layout import MAX_TOPIC_LENGTH
from rlm.stream.chunks import StreamBatch, chunk_runs, joined
from rlm.stream.ndjson import ndjson_lines
from rlm.stream.plan import RangePlan, RangeQuery
from rlm.stream.service import RecordStreams, StreamSlot, group_batches
from rlm.timestamps import parse_timestamp

PATH = "/v1/topics/{topic}/partitions/{partition}/records"
NDJSON = "application/x-ndjson"
JSON = "application/json"
OCTET = "application/octet-stream"
ARROW = "application/vnd.apache.arrow.stream"
#: Arguments only streams take: they make a request a stream whatever its ``Accept``.
RANGE_ARGUMENTS = (b"from_timestamp=", b"to_timestamp=", b"end_offset=", b"isolation_level=")
#: Stored bytes gathered before a piece of an NDJSON body is made and sent: each send costs the
#: HTTP server about as much as making a few hundred lines, so fewer, larger pieces (a piece's
#: lines take about 1.4 times its stored bytes).
PIECE_BYTES = 512 * 1024
#: The same for raw streams, whose pieces cost nothing to make: fewer sends per megabyte.
RAW_PIECE_BYTES = 256 * 1024
ISOLATION = {
    "read_uncommitted": IsolationLevel.READ_UNCOMMITTED,
    "read_committed": IsolationLevel.READ_COMMITTED,
}


def streamed_media(accept: str | None) -> str | None:
    """The streamed media type an ``Accept`` header prefers (:mod:`api.rest.accept`: q-values,
    wildcards; equal weights in the order NDJSON, Arrow, octet-stream), or None."""
    return Accept.parse(accept).best((NDJSON, ARROW, OCTET))


def asks_stream(scope: AsgiScope) -> bool:
    """Whether a request is one for this route: ``Accept`` names NDJSON or Arrow with a weight
    above 0 and no lower than JSON's (octet-stream alone keeps the bounded answer), or a range
    argument."""
    accept = Accept.parse(Headers(scope=scope).get("accept"))
    streamed = max(accept.explicit(NDJSON), accept.explicit(ARROW))
    if streamed > 0 and streamed >= accept.weight(JSON):
        return True
    query: bytes = scope.get("query_string", b"")
    if b"%" in query or b"+" in query:  # names written encoded: compared once decoded, as routes read them
        names = {name for name, _ in parse_qsl(query.decode("latin-1"), keep_blank_values=True)}
        return any(arg[:-1].decode() in names for arg in RANGE_ARGUMENTS)
    return any(query.startswith(arg) or b"&" + arg in query for arg in RANGE_ARGUMENTS)


class StreamRoute(APIRoute):
    """Matches only the requests :func:`asks_stream` picks; the others go to the next route."""

    def matches(self, scope: AsgiScope) -> tuple[Match, AsgiScope]:
        match, child = super().matches(scope)
        if match is Match.FULL and not asks_stream(scope):
            return Match.NONE, {}
        return match, child


router = APIRouter(
    prefix="/v1", tags=["records"], route_class=StreamRoute, dependencies=[Depends(known_query)]
)


class _ClientGoneError(Exception):
    """The server could not send a piece: the client went away (an ``OSError`` of ``send``)."""


class _SlotStream(StreamingResponse):
    """A streamed body that holds a stream place until it ends, watches for the client going away
    (then cancels the body at once) and closes the body whatever happens.

    Only an ``OSError`` of sending is the client going away: one of the body (a local segment
    the disk cannot read) fails the stream, which is cut, as any other error of its reads."""

    def __init__(
        self,
        body: AsyncIterator[bytes | memoryview],
        media_type: str,
        headers: dict[str, str],
        slot: StreamSlot,
    ):
        super().__init__(body, media_type=media_type, headers=headers)
        self.slot = slot

    async def __call__(self, scope: AsgiScope, receive: Receive, send: Send) -> None:
        outcome = "cancelled"

        async def sent(message: Message) -> None:
            try:
                await send(message)
            except OSError as exc:
                raise _ClientGoneError from exc

        sending = asyncio.ensure_future(self.stream_response(sent))
        watching = asyncio.ensure_future(self.listen_for_disconnect(receive))
        try:
            done, _ = await asyncio.wait((sending, watching), return_when=asyncio.FIRST_COMPLETED)
            if sending in done:
                try:
                    sending.result()
                except _ClientGoneError:  # the client went away while a piece was sent
                    return
                except BaseException:
                    outcome = "failed"
                    raise
                outcome = "completed"
        finally:
            for task in (sending, watching):
                task.cancel()
            await asyncio.gather(sending, watching, return_exceptions=True)
            closing = getattr(self.body_iterator, "aclose", None)
            if closing is not None:
                await closing()
            self.slot.release(outcome)


@router.get(
    PATH.removeprefix("/v1"),
    summary="Records of a range, streamed (NDJSON, raw Kafka batches or Arrow IPC)",
    response_class=StreamingResponse,
    responses={
        200: {"content": {NDJSON: {}, OCTET: {}, ARROW: {}}, "description": "the records, streamed"},
        406: {"description": "a range asked for without a streamed media type"},
    },
)
async def stream_records(
    request: Request,
    topic: Annotated[str, Path(min_length=1, max_length=MAX_TOPIC_LENGTH)],
    partition: Annotated[int, Path(ge=0, le=INT32_MAX), text_int(0, INT32_MAX)],
    rt: Annotated[Runtime, Depends(runtime)],
    _: Annotated[Scope, Depends(require(Scope.READ))],
    admitted: Annotated[Admission, Depends(admission)],
    offset: Annotated[int | None, Query(ge=0, le=INT64_MAX), text_int(0, INT64_MAX)] = None,
    end_offset: Annotated[int | None, Query(ge=0, le=INT64_MAX), text_int(0, INT64_MAX)] = None,
    from_timestamp: Annotated[str | None, Query(max_length=64)] = None,
    to_timestamp: Annotated[str | None, Query(max_length=64)] = None,
    isolation_level: Annotated[
        str, Query(pattern="^(read_uncommitted|read_committed)$")
    ] = "read_uncommitted",
    timeout_ms: Annotated[int | None, Query(ge=1, le=MAX_TIMEOUT_MS), text_int(1, MAX_TIMEOUT_MS)] = None,
) -> StreamingResponse:
    args = {
        "offset": offset,
        "end_offset": end_offset,
        "from_timestamp": from_timestamp,
        "to_timestamp": to_timestamp,
        "isolation_level": isolation_level,
    }
    tp = TopicPartition(topic, partition)
    what = f"{request.method} {request.url.path}"
    return await _stream_records(request.headers, tp, rt, args, timeout_ms, admitted.check, what)


def _query(
    tp: TopicPartition,
    offset: int | None,
    end_offset: int | None,
    from_timestamp: str | None,
    to_timestamp: str | None,
    isolation_level: str,
) -> RangeQuery:
    return RangeQuery(
        tp,
        offset=offset,
        from_timestamp=None if from_timestamp is None else parse_timestamp(from_timestamp, "from_timestamp"),
        end_offset=end_offset,
        to_timestamp=None if to_timestamp is None else parse_timestamp(to_timestamp, "to_timestamp"),
        isolation=ISOLATION[isolation_level],
    )


async def _ndjson(
    plan: RangePlan, streams: RecordStreams, check: Callable[[], None], slot: StreamSlot, what: str
) -> AsyncIterator[bytes]:
    try:
        async with contextlib.aclosing(
            streams.encoded_range(plan, partial(ndjson_lines, plan), PIECE_BYTES)
        ) as pieces:
            async for piece in pieces:
                check()
                yield piece
    except Exception as exc:  # the trailer says why the stream ends here
        slot.release("failed")  # the body itself ends as any other: counted here, not as completed
        # Reported here: the body ends as a whole one does, so no handler of the app sees the error.
        status, message = ended_stream(what, exc)
        yield (json.dumps({"error": message, "status": status}) + "\n").encode()


async def _raw(
    batches: AsyncIterator[list[StreamBatch]], check: Callable[[], None]
) -> AsyncIterator[bytes | memoryview]:
    async for group in group_batches(batches, RAW_PIECE_BYTES):
        check()
        data = [batch.data for batch in group]
        for start, end in chunk_runs(data):  # one piece per chunk's run: nothing copied
            yield joined(data[start:end])


async def _arrow(
    plan: RangePlan, streams: RecordStreams, check: Callable[[], None]
) -> AsyncIterator[bytes | memoryview]:
    # pyarrow is imported by the first Arrow stream, off the event loop (a tenth of a second), not
    # by the server: a process that never streams Arrow does not hold it (some 45 MiB).
    arrow = await streams.run(partial(importlib.import_module, "rlm.stream.arrow"))
    yield arrow.SCHEMA_MESSAGE
    writer = arrow.MessageWriter()  # on the loop, in order: the messages are made ahead, at once
    made = streams.encoded_range(
        plan, partial(arrow.message, plan), streams.group_bytes, arrow.RECORDS_PER_MESSAGE
    )
    async with contextlib.aclosing(made) as messages:
        async for message in messages:
            check()
            for part in writer.parts(message):
                yield part
    yield arrow.END_OF_STREAM


async def _stream_records(
    request_headers: Headers,
    tp: TopicPartition,
    rt: Runtime,
    query_args: dict[str, Any],
    timeout_ms: int | None,
    check: Callable[[], None],
    what: str,
) -> StreamingResponse:
    media = streamed_media(request_headers.get("accept"))
    if media is None:
        raise ApiError(
            406,
            f"from_timestamp, to_timestamp and end_offset stream records: ask for {NDJSON}, {OCTET} or "
            f"{ARROW} in Accept",
        )
    slot, planned = await open_stream(rt, _query(tp, **query_args), timeout_ms)
    streams = rt.streams
    body: AsyncIterator[bytes | memoryview]
    # check() before each piece: a stream whose token was revoked ends there (TokenRevokedError).
    if media == NDJSON:
        body = _ndjson(planned, streams, check, slot, what)
    elif media == ARROW:
        body = _arrow(planned, streams, check)
    else:
        body = _raw(streams.runs(planned), check)
    headers = {
        "X-Rlm-Start-Offset": str(planned.start),
        "X-Rlm-End-Offset": str(max(planned.start, planned.end)),
    }
    return _SlotStream(body, media, headers, slot)


def document(schema: dict[str, Any]) -> dict[str, Any]:
    """Merge this route's operation into the records operation of an OpenAPI document.

    Both routes share a path and a method, where a document has room for one operation: the
    records operation is kept, with this one's parameters (``offset`` then optional), media types
    and words added."""
    mine = get_openapi(title="rlm", version="1", routes=router.routes)["paths"][PATH]["get"]
    operation = schema.get("paths", {}).get(PATH, {}).get("get")
    if operation is None:
        return schema
    names = {p["name"] for p in operation.get("parameters", [])}
    for parameter in operation.get("parameters", []):
        if parameter["name"] == "offset":
            parameter["required"] = False
    operation["parameters"] = operation.get("parameters", []) + [
        p for p in mine.get("parameters", []) if p["name"] not in names
    ]
    responses = operation.setdefault("responses", {})
    for status, response in mine.get("responses", {}).items():
        responses.setdefault(status, response)
    content = responses.setdefault("200", {}).setdefault("content", {})
    for media in (NDJSON, OCTET, ARROW):
        content.setdefault(media, {})
    operation["description"] = (operation.get("description", "") + "\n\n" + (__doc__ or "")).strip()
    return schema
