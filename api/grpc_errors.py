"""Every error the gRPC API answers, mapped to a status code in one place.

Single calls answer a status with a message in words; ListOffsets answers Kafka error codes inside
its response instead. The mapping follows the REST API's (404 → NOT_FOUND, 400 → INVALID_ARGUMENT,
429 → RESOURCE_EXHAUSTED, 503 → UNAVAILABLE, 504 → DEADLINE_EXCEEDED), with gRPC's more specific
codes where it has them: OUT_OF_RANGE for an offset outside the log and DATA_LOSS for corrupt data.
A stream whose bearer token is revoked while it runs ends UNAUTHENTICATED, as the interceptor
(:mod:`api.grpc_auth`) refuses a call without a valid token.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any, NoReturn, TypeVar

import grpc

from api.auth import TokenRevokedError
from rlm.errors import (
    ConfigError,
    CorruptDataError,
    InvalidRecordError,
    InvalidTopicNameError,
    NotFoundError,
    OffsetOutOfRangeError,
    PoolClosedError,
    PoolFullError,
    RequestTimedOutError,
    RlmError,
)
from rlm.lookup.list_offsets import ErrorCode

log = logging.getLogger(__name__)

#: The status of a single-partition answer that carries a Kafka error code.
STATUS_FOR_CODE: dict[ErrorCode, grpc.StatusCode] = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: grpc.StatusCode.NOT_FOUND,
    ErrorCode.REQUEST_TIMED_OUT: grpc.StatusCode.DEADLINE_EXCEEDED,
    ErrorCode.INVALID_TOPIC_EXCEPTION: grpc.StatusCode.INVALID_ARGUMENT,
    ErrorCode.INVALID_REQUEST: grpc.StatusCode.INVALID_ARGUMENT,
    ErrorCode.THROTTLING_QUOTA_EXCEEDED: grpc.StatusCode.RESOURCE_EXHAUSTED,
    ErrorCode.KAFKA_STORAGE_ERROR: grpc.StatusCode.UNAVAILABLE,
    ErrorCode.UNKNOWN_SERVER_ERROR: grpc.StatusCode.INTERNAL,
}


class StatusError(Exception):
    """An answer that is a status, raised by a servicer method and sent by :func:`answers_errors`."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def for_error_code(code: ErrorCode, message: str | None) -> StatusError:
    """The status of a single-partition answer with a Kafka error code other than NONE."""
    return StatusError(STATUS_FOR_CODE.get(code, grpc.StatusCode.INTERNAL), message or code.name)


def status_for(exc: BaseException) -> grpc.StatusCode:
    """The status code of an error a service raised."""
    if isinstance(exc, StatusError):
        return exc.code
    if isinstance(exc, TokenRevokedError):
        return grpc.StatusCode.UNAUTHENTICATED
    if isinstance(exc, OffsetOutOfRangeError):
        return grpc.StatusCode.OUT_OF_RANGE
    if isinstance(exc, NotFoundError):
        return grpc.StatusCode.NOT_FOUND
    if isinstance(exc, InvalidTopicNameError | InvalidRecordError | ConfigError | ValueError):
        return grpc.StatusCode.INVALID_ARGUMENT
    if isinstance(exc, PoolFullError):
        return grpc.StatusCode.RESOURCE_EXHAUSTED
    if isinstance(exc, RequestTimedOutError):
        return grpc.StatusCode.DEADLINE_EXCEEDED
    if isinstance(exc, CorruptDataError):
        return grpc.StatusCode.DATA_LOSS
    if isinstance(exc, PoolClosedError) or (isinstance(exc, RlmError) and exc.retriable):
        return grpc.StatusCode.UNAVAILABLE
    return grpc.StatusCode.INTERNAL


S = TypeVar("S")
Req = TypeVar("Req")
Resp = TypeVar("Resp")
Context = grpc.aio.ServicerContext[Any, Any]
Method = Callable[[S, Req, Context], Awaitable[Resp]]


def answers_errors(method: Method[S, Req, Resp]) -> Method[S, Req, Resp]:
    """Wrap a unary servicer method so that what it raises becomes a status with a message in words."""

    @functools.wraps(method)
    async def wrapper(self: S, request: Req, context: Context) -> Resp:
        try:
            return await method(self, request, context)
        except grpc.aio.AbortError:
            raise
        except Exception as exc:
            await abort_for(context, exc, method.__name__)

    return wrapper


async def abort_for(context: Context, exc: Exception, method: str) -> NoReturn:
    """End the call with the status of ``exc`` and a message in words (raises ``AbortError``)."""
    code = status_for(exc)
    if isinstance(exc, StatusError | RlmError | ValueError | TokenRevokedError):
        message = str(exc)
    else:
        message = f"internal error: {type(exc).__name__}"
    if code is grpc.StatusCode.INTERNAL:
        log.error("%s failed", method, exc_info=exc)
    elif code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DATA_LOSS):
        log.warning("%s failed: %s", method, exc)
    await context.abort(code, message)
