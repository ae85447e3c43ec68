"""``GET /v1/topics/{topic}/partitions/{partition}/offsets``: one partition's offset for a timestamp.

The API's hottest route, so it is a plain Starlette route: it reads and checks its parameters
itself, sparing FastAPI's per-request parameter and dependency machinery (which costs more than
a local-tier lookup). Its OpenAPI entry is written here and added to the app's document by
:func:`document`. The lookup is planned on the event loop
(:meth:`~rlm.lookup.list_offsets.ListOffsets.plan_one`): a local-tier answer is read there; a
metadata read or a remote search runs on its pool and is awaited, holding no thread, within
the request's deadline, taken when the request arrives.
Parameters are parsed by the parsers every API shares (:mod:`rlm.arguments`, :mod:`rlm.timestamps`);
the topic name is checked by the service, as for every API.
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from api.auth import Scope
from api.rest.deps import arrived, check_scope, refuse_unknown_query, runtime
from api.rest.errors import RETRIABLE_STATUSES, STATUS_FOR_CODE, ApiError
from api.rest.schemas import MAX_TIMEOUT_MS, OffsetResponse, Problem
from rlm.arguments import INT32_MAX, parse_int
from rlm.lookup.list_offsets import ErrorCode
from rlm.metastore.model import TopicPartition
from rlm.storage.layout import MAX_TOPIC_LENGTH
from rlm.timestamps import MAX_TIMESTAMP_CHARS, parse_timestamp

PATH = "/v1/topics/{topic}/partitions/{partition}/offsets"
MAX_PARTITION = INT32_MAX
ERROR_STATUSES = (400, 401, 403, 404, 429, 503, 504)

PARAMETERS: list[dict[str, Any]] = [
    {
        "name": "topic",
        "in": "path",
        "required": True,
        "description": "Kafka topic name",
        "schema": {"type": "string", "minLength": 1, "maxLength": MAX_TOPIC_LENGTH},
    },
    {
        "name": "partition",
        "in": "path",
        "required": True,
        "schema": {"type": "integer", "minimum": 0, "maximum": MAX_PARTITION},
    },
    {
        "name": "timestamp",
        "in": "query",
        "required": True,
        "description": "epoch ms, ISO-8601, or latest | earliest | max-timestamp | earliest-local | "
        "latest-tiered (or -1 .. -5)",
        "schema": {"type": "string", "maxLength": MAX_TIMESTAMP_CHARS},
    },
    {
        "name": "timeout_ms",
        "in": "query",
        "required": False,
        "description": "wait at most this long (default: remote.list.offsets.request.timeout.ms)",
        "schema": {"type": "integer", "minimum": 1, "maximum": MAX_TIMEOUT_MS},
    },
]

QUERY_NAMES = frozenset(p["name"] for p in PARAMETERS if p["in"] == "query")


async def get_offset(request: Request) -> Response:
    """The offset of the first record at or after a timestamp, as JSON (:class:`OffsetResponse`)."""
    check_scope(request, Scope.READ)
    refuse_unknown_query(request, QUERY_NAMES)
    rt = await runtime(request)
    path, query = request.path_params, request.query_params
    topic = path["topic"]
    partition = parse_int(path["partition"], "path.partition", 0, MAX_PARTITION)
    text = query.get("timestamp")
    if text is None:
        raise ApiError(400, "invalid request: query.timestamp: field required")
    at = parse_timestamp(text, "query.timestamp")
    raw_timeout = query.get("timeout_ms")
    timeout_ms = None
    if raw_timeout is not None:
        timeout_ms = parse_int(raw_timeout, "query.timeout_ms", 1, MAX_TIMEOUT_MS)
    tp = TopicPartition(topic, partition)
    planned = rt.list_offsets.plan_one(tp, at)  # a local-tier answer is found here, on the loop
    result = planned.answered
    if result is None:
        result = await planned.finish(rt.list_offsets.deadline(timeout_ms, arrived=arrived(request)))
    if result.error_code is not ErrorCode.NONE:
        status = STATUS_FOR_CODE.get(result.error_code, 500)
        retry = {"Retry-After": "1"} if status in RETRIABLE_STATUSES else None
        raise ApiError(status, result.error_message or result.error_code.name, retry)
    # Formatted by hand (json.dumps costs several times more): a valid topic name and the tier
    # need no escaping, the rest are integers.
    tier = "null" if result.tier is None else f'"{result.tier}"'
    body = (
        f'{{"topic":"{topic}","partition":{partition},"offset":{result.offset},'
        f'"timestamp":{result.timestamp},"leader_epoch":{result.leader_epoch},"tier":{tier}}}'
    )
    return Response(body.encode(), media_type="application/json")


route = Route(PATH, get_offset, methods=["GET"], name="get_offset")
route.methods = {"GET"}  # Starlette adds HEAD to a GET route; the API's other routes have none


def document(schema: dict[str, Any]) -> dict[str, Any]:
    """Add this route's operation (and the models it names) to an OpenAPI document."""

    def json_body(model: str) -> dict[str, Any]:
        return {"application/json": {"schema": {"$ref": f"#/components/schemas/{model}"}}}

    responses: dict[str, Any] = {
        "200": {"description": "Successful Response", "content": json_body("OffsetResponse")}
    }
    for status in ERROR_STATUSES:
        responses[str(status)] = {"description": HTTPStatus(status).phrase, "content": json_body("Problem")}
    schema.setdefault("paths", {})[PATH] = {
        "get": {
            "tags": ["offsets"],
            "summary": "Offset of the first record at or after a timestamp",
            "operationId": "get_offset",
            "parameters": PARAMETERS,
            "responses": responses,
        }
    }
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    for model in (OffsetResponse, Problem):
        components[model.__name__] = model.model_json_schema(ref_template="#/components/schemas/{model}")
    return schema
