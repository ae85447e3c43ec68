"""Fault injection for S3 at the HTTP level, through botocore's ``before-send`` event.

A :class:`FaultInjector` installed on a boto3 session answers a share of the session's S3
requests itself: with an S3 error response (status and XML body, parsed by botocore like any
other), a read timeout, or — after really sending the request — an error in place of the real
response (a "lost response": the server did the work, the client does not know it). Nothing of
the client is mocked; everything above the socket runs as in production.

Usage::

    faults = FaultInjector(rate=0.2, seed=7)
    faults.install(session)            # before building the store from the session
    store = S3Storage(bucket, session=session, ...)
    ...
    faults.rate = 0.0                  # turn off to look at the bucket
"""

from __future__ import annotations

import enum
import random
import threading
from collections import Counter
from collections.abc import Callable, Collection, Iterator, Sequence
from typing import Any, cast

import boto3
from botocore.awsrequest import AWSPreparedRequest, AWSResponse
from botocore.compat import HTTPHeaders
from botocore.exceptions import ReadTimeoutError
from botocore.httpsession import URLLib3Session


class Fault(enum.Enum):
    """What an injected fault looks like to the client."""

    SLOW_DOWN = "503 SlowDown"
    SERVICE_UNAVAILABLE = "503 ServiceUnavailable"
    INTERNAL_ERROR = "500 InternalError"
    ACCESS_DENIED = "403 AccessDenied"
    READ_TIMEOUT = "read timeout"
    LOST_RESPONSE = "request sent, 500 InternalError returned"
    CORRUPT_BODY = "request body altered in transit"
    NO_SUCH_UPLOAD = "404 NoSuchUpload"


#: The faults S3 documents as "retry with backoff".
SERVER_ERRORS: tuple[Fault, ...] = (Fault.SLOW_DOWN, Fault.SERVICE_UNAVAILABLE, Fault.INTERNAL_ERROR)
#: Faults where the request may or may not have reached the server.
NETWORK_ERRORS: tuple[Fault, ...] = (Fault.READ_TIMEOUT, Fault.LOST_RESPONSE)

_ERROR_RESPONSES = {
    Fault.SLOW_DOWN: (503, "SlowDown", "Please reduce your request rate."),
    Fault.SERVICE_UNAVAILABLE: (503, "ServiceUnavailable", "Service is unable to handle request."),
    Fault.INTERNAL_ERROR: (500, "InternalError", "We encountered an internal error. Please try again."),
    Fault.LOST_RESPONSE: (500, "InternalError", "We encountered an internal error. Please try again."),
    Fault.ACCESS_DENIED: (403, "AccessDenied", "Access Denied"),
    Fault.NO_SUCH_UPLOAD: (404, "NoSuchUpload", "The specified upload does not exist."),
}


class _Body:
    """The raw body of a made-up response, in the shape botocore reads it."""

    def __init__(self, data: bytes) -> None:
        self._data = data

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self._data


class FaultInjector:
    """Answers ``rate`` of the requests (of ``operations``, or all) with one of ``faults``.

    At most ``max_faults`` faults are injected in all, when given; with ``in_order`` the faults
    are taken in turn instead of at random (to script a sequence). With ``per_operation`` each
    operation draws from a random sequence of its own (seeded by ``seed`` and its name), so that
    which of its requests fail does not depend on how many requests of other operations, from
    other threads, came first. The settings may be changed while installed. ``injected`` counts
    the faults by kind and ``requests`` the requests seen, by operation name (``PutObject``...).
    Thread-safe.
    """

    def __init__(
        self,
        rate: float,
        *,
        faults: Sequence[Fault] = SERVER_ERRORS,
        operations: Collection[str] | None = None,
        max_faults: int | None = None,
        in_order: bool = False,
        per_operation: bool = False,
        seed: int = 0,
    ) -> None:
        self.rate = rate
        self.max_faults = max_faults
        self.in_order = in_order
        self.faults = tuple(faults)
        self.operations = operations
        self.injected: Counter[Fault] = Counter()
        self.injected_by_operation: Counter[str] = Counter()
        self.requests: Counter[str] = Counter()
        self._random = random.Random(seed)
        self._seed = seed
        self._per_operation: dict[str, random.Random] | None = {} if per_operation else None
        self._lock = threading.Lock()
        self._http = URLLib3Session()

    def install(self, session: boto3.session.Session) -> None:
        """Intercept the S3 requests of every client the session creates from now on."""
        # botocore's stubs type handlers as returning None; a before-send handler may return a response.
        session.events.register("before-send.s3", cast("Callable[..., None]", self._before_send))

    def close(self) -> None:
        """Close the connections used to send requests of lost responses."""
        self._http.close()

    @property
    def total_injected(self) -> int:
        """Faults injected so far."""
        with self._lock:
            return sum(self.injected.values())

    def _pick(self, operation: str) -> Fault | None:
        with self._lock:
            self.requests[operation] += 1
            if self.operations is not None and operation not in self.operations:
                return None
            if self.max_faults is not None and sum(self.injected.values()) >= self.max_faults:
                return None
            draws = self._random
            if self._per_operation is not None:
                draws = self._per_operation.setdefault(operation, random.Random(f"{self._seed}:{operation}"))
            if draws.random() >= self.rate:
                return None
            done = sum(self.injected.values())
            fault = self.faults[done % len(self.faults)] if self.in_order else draws.choice(self.faults)
            self.injected[fault] += 1
            self.injected_by_operation[operation] += 1
            return fault

    def _before_send(self, request: AWSPreparedRequest, event_name: str, **_: Any) -> AWSResponse | None:
        fault = self._pick(event_name.rsplit(".", 1)[-1])
        if fault is None:
            return None
        if fault is Fault.READ_TIMEOUT:
            raise ReadTimeoutError(endpoint_url=request.url)
        if fault is Fault.CORRUPT_BODY:
            _flip_first_byte(request)
            return None  # botocore sends the altered request
        if fault is Fault.LOST_RESPONSE:
            self._http.send(request)
        status, code, message = _ERROR_RESPONSES[fault]
        return made_up_response(
            request.url, status, b"" if request.method == "HEAD" else _error_xml(code, message)
        )


def made_up_response(url: str, status: int, body: bytes) -> AWSResponse:
    """An XML response to a request to ``url``, for a ``before-send`` handler to answer with."""
    headers = HTTPHeaders.from_dict({"Content-Type": "application/xml", "Content-Length": str(len(body))})
    return AWSResponse(url, status, headers, _Body(body))


def _error_xml(code: str, message: str) -> bytes:
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Error><Code>{code}</Code><Message>{message}</Message>"
        "<RequestId>rlm-fault</RequestId></Error>"
    ).encode()


def _flip_first_byte(request: AWSPreparedRequest) -> None:
    body = request.body
    if body is not None and not isinstance(body, str | bytes | bytearray):
        body = body.read()
    if isinstance(body, bytes | bytearray) and body:
        request.body = bytes([body[0] ^ 0xFF]) + bytes(body[1:])
