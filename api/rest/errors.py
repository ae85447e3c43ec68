"""Every error the REST API answers, mapped to an HTTP status in one place.

Bodies are ``{"error": "<what was wrong, in words>", "status": <code>}``.
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from api.auth import TokenRevokedError
from rlm.errors import (
    ConfigError,
    InvalidArgumentError,
    InvalidRecordError,
    InvalidTopicNameError,
    NotFoundError,
    PoolClosedError,
    PoolFullError,
    RequestTimedOutError,
    RlmError,
)
from rlm.lookup.list_offsets import ErrorCode

log = logging.getLogger(__name__)
#: The logger uvicorn reports an app's exceptions to.
SERVER_LOGGER = "uvicorn.error"

#: HTTP status for a Kafka error code of a single-partition answer.
STATUS_FOR_CODE = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: 404,
    ErrorCode.REQUEST_TIMED_OUT: 504,
    ErrorCode.INVALID_TOPIC_EXCEPTION: 400,
    ErrorCode.INVALID_REQUEST: 400,
    ErrorCode.THROTTLING_QUOTA_EXCEEDED: 429,
    ErrorCode.KAFKA_STORAGE_ERROR: 503,
    ErrorCode.UNKNOWN_SERVER_ERROR: 500,
}
#: Statuses whose answers say when to try again (``Retry-After``).
RETRIABLE_STATUSES = (429, 503)


class ApiError(Exception):
    """An error answer with a status and a message."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}


def unauthenticated() -> ApiError:
    """The answer to a request without a valid bearer token."""
    return ApiError(
        401,
        "a valid bearer token is required (Authorization: Bearer <token>)",
        {"WWW-Authenticate": "Bearer"},
    )


def status_for(exc: BaseException) -> int:
    """The HTTP status of an rlm error."""
    if isinstance(exc, TokenRevokedError):
        return 401
    if isinstance(exc, NotFoundError):
        return 404
    if isinstance(exc, InvalidTopicNameError | InvalidRecordError | ConfigError | ValueError):
        return 400
    if isinstance(exc, PoolFullError):
        return 429
    if isinstance(exc, RequestTimedOutError):
        return 504
    if isinstance(exc, PoolClosedError) or (isinstance(exc, RlmError) and exc.retriable):
        return 503  # a closed pool: the server is stopping, as gRPC's UNAVAILABLE says
    return 500


def ended_stream(what: str, exc: Exception) -> tuple[int, str]:
    """The status and words of the error ``exc`` that ends a stream whose answer began (``what``
    names the request, as ``GET /path``), reported as the handlers of :func:`install` report an
    error answer: a revoked token and a 5xx of rlm's as warnings, anything else unexpected as an
    error with its traceback, its words kept from the client."""
    if isinstance(exc, TokenRevokedError):
        log.warning("%s: stream cut: %s", what, exc)
        return 401, str(exc)
    if isinstance(exc, RlmError | ValueError):
        status = status_for(exc)
        if status >= 500:
            log.warning("%s failed: %s", what, exc)
        return status, str(exc)
    log.error("%s failed", what, exc_info=exc)
    return 500, f"internal error: {type(exc).__name__}"


def problem(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": message, "status": status}, status_code=status, headers=headers)


class CutStreamLog(logging.Filter):
    """Leaves out uvicorn's report of a stream cut because its token was revoked.

    A raw or Arrow stream that cannot continue is cut by raising out of the app once its answer
    began, and uvicorn reports that as "Exception in ASGI application", an error with a traceback.
    For a revoked token that is no fault of the server, and the app has logged it already, as a
    warning naming the request (:func:`install`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], TokenRevokedError))


def install(app: FastAPI) -> None:
    """Register the handlers on ``app`` (and :class:`CutStreamLog` on uvicorn's logger, once)."""
    server_log = logging.getLogger(SERVER_LOGGER)
    if not any(isinstance(f, CutStreamLog) for f in server_log.filters):
        server_log.addFilter(CutStreamLog())

    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> JSONResponse:
        return problem(exc.status, exc.message, exc.headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        parts = []
        for err in exc.errors()[:5]:
            loc = tuple(err.get("loc", ()))
            if err.get("type") == "json_invalid":  # its loc holds the position, not a field
                position = loc[1] if len(loc) > 1 else "?"
                detail = err.get("ctx", {}).get("error")
                said = f": {detail}" if isinstance(detail, str) else ""
                parts.append(f"body: not valid JSON at character {position} (counting from 0){said}")
                continue
            # The body itself (not one of its fields) is named as such.
            where = ".".join(str(p) for p in loc if p != "body") or "body"
            found = err.get("ctx", {}).get("error")
            # The shared parser's words (rlm.arguments) rather than pydantic's wrapping of them.
            what = found.reason if isinstance(found, InvalidArgumentError) else err.get("msg", "invalid")
            parts.append(f"{where}: {what}")
        return problem(400, "invalid request: " + "; ".join(parts))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return problem(exc.status_code, str(exc.detail), getattr(exc, "headers", None))

    @app.exception_handler(RlmError)
    async def rlm_error(request: Request, exc: RlmError) -> JSONResponse:
        status = status_for(exc)
        if status >= 500:
            log.warning("%s %s failed: %s", request.method, request.url.path, exc)
        return problem(status, str(exc), {"Retry-After": "1"} if status in RETRIABLE_STATUSES else None)

    @app.exception_handler(ValueError)
    async def value_error(request: Request, exc: ValueError) -> JSONResponse:
        return problem(400, str(exc))

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        if isinstance(exc, TokenRevokedError):  # a stream cut once its answer began
            log.warning("%s %s: stream cut: %s", request.method, request.url.path, exc)
        else:
            log.exception("%s %s failed", request.method, request.url.path)
        return problem(500, f"internal error: {type(exc).__name__}")
