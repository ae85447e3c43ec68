"""A fault-injecting HTTP proxy in front of an S3 server, for what neither test server does.

The proxy forwards each path-style request unchanged to the upstream server (moto or s3rver) and
relays the answer, recording both (:class:`Exchange`: what went over the wire, headers included).
A store pointed at the proxy's ``endpoint_url`` runs exactly as in production: botocore signs,
sends and parses real HTTP. Faults are injected per S3 operation:

* ``NOT_IMPLEMENTED``: answer 501 ``NotImplemented`` (a store without the call);
* ``IGNORE_RANGE``: drop the ``Range`` header, so the server answers 200 with the whole object;
* ``WRONG_CONTENT_RANGE``: relay a 206 whose ``Content-Range`` says other bytes than asked;
* ``RANGE_AS_200``: relay a 206 as a 200, its ``Content-Range`` and ranged body kept (a store
  that honours ``Range`` but answers 200);
* ``SHORT_206``: relay a 206 with the first half of its body only, ``Content-Length`` saying so
  and ``Content-Range`` unchanged (a store or proxy that sends less than it announces);
* ``REJECT_CHECKSUM_HEADERS``: answer 400 ``InvalidArgument`` to any request carrying an
  ``x-amz-checksum-*`` or ``x-amz-sdk-checksum-algorithm`` header (as Backblaze B2 does);
* ``NO_CHECKSUM_ON_HEAD``: remove the ``x-amz-checksum-*`` headers from HEAD answers (a store that
  keeps no checksum);
* ``CORRUPT_BODY``: flip the first byte of the request body before forwarding it (damage in
  transit, after the client computed its checksums);
* ``SERVER_ERROR``: answer 500 ``InternalError`` without forwarding;
* ``CUT_BODY``: send the upstream answer's headers and half its body, then close the connection
  (a connection reset mid-answer);
* ``REFUSE_RANGE_PAST_END``: answer 416 ``InvalidRange`` to a GET whose range runs past the
  object's end, though it starts inside it (a store that does not shorten such a range);
* ``SMALL_PAGES``: ask for listing pages of two entries (``max-keys=2``), so that a few keys
  cross many page ends;
* ``IGNORE_CONTINUATION``: drop a listing's ``continuation-token``, so the server answers its
  first page again (a store that does not implement it);
* ``READS_EMPTY``: answer a HEAD or GET as for an empty object (a store that answers a PUT before
  the object reads back whole, as s3rver does now and then).

A fault may apply to every ``every``-th request of its operations only (``inject(..., every=3)``),
so that retries of the failed request succeed, and to its first ``times`` requests only (so that a
call fails after all its retries, and the calls after it succeed).

Usage::

    with S3Proxy(server.endpoint_url) as proxy:
        proxy.inject(ProxyFault.NOT_IMPLEMENTED, "ListMultipartUploads")
        store = server.storage(bucket, endpoint_url=proxy.endpoint_url)
        ...
        proxy.exchanges_of("ListMultipartUploads")
"""

from __future__ import annotations

import enum
import http.client
import socket
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any
from urllib.parse import parse_qs, parse_qsl, quote, urlencode, urlsplit

#: Headers that belong to one connection, not to the request or answer.
_HOP_BY_HOP = frozenset({"connection", "keep-alive", "transfer-encoding", "expect", "content-length"})


class ProxyFault(enum.Enum):
    """What the proxy does to the requests of an operation."""

    NOT_IMPLEMENTED = "501 NotImplemented"
    IGNORE_RANGE = "Range dropped: 200 with the whole object"
    WRONG_CONTENT_RANGE = "206 whose Content-Range is one byte further than asked"
    RANGE_AS_200 = "206 relayed as 200, Content-Range and ranged body kept"
    SHORT_206 = "206 with half its body, Content-Length saying so, Content-Range unchanged"
    REJECT_CHECKSUM_HEADERS = "400 InvalidArgument to checksum headers"
    NO_CHECKSUM_ON_HEAD = "x-amz-checksum-* removed from HEAD answers"
    CORRUPT_BODY = "first byte of the request body flipped"
    SERVER_ERROR = "500 InternalError"
    CUT_BODY = "half the answer's body, then the connection closed"
    REFUSE_RANGE_PAST_END = "416 InvalidRange to a range that starts inside the object and ends past it"
    SMALL_PAGES = "listing pages of two entries"
    IGNORE_CONTINUATION = "continuation-token dropped: the first page again"
    READS_EMPTY = "HEAD and GET answered as for an empty object"


@dataclass(frozen=True)
class Exchange:
    """One request as it went over the wire, and the status it was answered with."""

    operation: str
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    """Request headers, names in lower case."""
    body: bytes
    status: int
    response_headers: dict[str, str]
    """Answer headers as relayed, names in lower case."""


def operation_of(method: str, path: str, query: dict[str, list[str]]) -> str:
    """The S3 operation a path-style request is (``GetObject``, ``ListMultipartUploads``...)."""
    key = path.lstrip("/").partition("/")[2]
    if not key:
        if method == "GET":
            if "uploads" in query:
                return "ListMultipartUploads"
            return "ListObjectsV2" if query.get("list-type") == ["2"] else "ListObjects"
        if method == "POST" and "delete" in query:
            return "DeleteObjects"
        return {"PUT": "CreateBucket", "HEAD": "HeadBucket", "DELETE": "DeleteBucket"}.get(method, method)
    if method == "POST":
        return "CreateMultipartUpload" if "uploads" in query else "CompleteMultipartUpload"
    if method == "PUT":
        return "UploadPart" if "uploadId" in query else "PutObject"
    if method == "DELETE":
        return "AbortMultipartUpload" if "uploadId" in query else "DeleteObject"
    if method == "HEAD":
        return "HeadObject"
    return "ListParts" if "uploadId" in query else "GetObject"


def is_checksum_header(name: str) -> bool:
    """Whether a header is one of those ``s3.checksums: md5|off`` never sends."""
    lowered = name.lower()
    return lowered.startswith("x-amz-checksum-") or lowered == "x-amz-sdk-checksum-algorithm"


def error_xml(code: str, message: str) -> bytes:
    """An S3 error body."""
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Error><Code>{code}</Code><Message>{message}</Message><RequestId>rlm-proxy</RequestId></Error>"
    ).encode()


class S3Proxy:
    """A proxy on a free port of 127.0.0.1 in front of ``upstream``. Thread-safe."""

    def __init__(self, upstream: str) -> None:
        parts = urlsplit(upstream)
        assert parts.hostname is not None and parts.port is not None, upstream
        self._upstream = (parts.hostname, parts.port)
        self._faults: dict[ProxyFault, frozenset[str] | None] = {}
        self._every: dict[ProxyFault, int] = {}
        self._times: dict[ProxyFault, int | None] = {}
        self._seen: dict[ProxyFault, int] = {}
        self._exchanges: list[Exchange] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="s3-proxy", daemon=True)
        self._thread.start()

    @property
    def endpoint_url(self) -> str:
        """Where clients send their requests."""
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def inject(self, fault: ProxyFault, *operations: str, every: int = 1, times: int | None = None) -> None:
        """Apply ``fault`` to the requests of ``operations`` (of every operation when none given);
        with ``every``, to every ``every``-th of them only; with ``times``, to that many at most."""
        with self._lock:
            self._faults[fault] = frozenset(operations) if operations else None
            self._every[fault] = every
            self._times[fault] = times
            self._seen[fault] = 0

    def clear(self) -> None:
        """Inject no fault from now on."""
        with self._lock:
            self._faults.clear()

    @property
    def exchanges(self) -> list[Exchange]:
        """Every request so far, in the order they were answered."""
        with self._lock:
            return list(self._exchanges)

    def exchanges_of(self, *operations: str) -> list[Exchange]:
        """The requests of ``operations``."""
        return [e for e in self.exchanges if e.operation in operations]

    def close(self) -> None:
        """Stop serving."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)

    def __enter__(self) -> S3Proxy:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- the work of one request ----------------------------------------------------------

    def _applies(self, fault: ProxyFault, operation: str) -> bool:
        with self._lock:
            if fault not in self._faults:
                return False
            operations = self._faults[fault]
            if operations is not None and operation not in operations:
                return False
            times = self._times[fault]
            if times is not None and self._seen[fault] >= times * self._every[fault]:
                return False
            self._seen[fault] += 1
            return self._seen[fault] % self._every[fault] == 0

    def _record(self, exchange: Exchange) -> None:
        with self._lock:
            self._exchanges.append(exchange)

    def answer(
        self, method: str, target: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, list[tuple[str, str]], bytes, str]:
        """The answer to one request: status, headers, body and the operation's name (a body
        to cut short is :class:`CutBody`)."""
        parts = urlsplit(target)
        query = parse_qs(parts.query, keep_blank_values=True)
        operation = operation_of(method, parts.path, query)
        lowered = {name.lower(): value for name, value in headers.items()}
        status, answer_headers, answer = self._forward_or_fail(operation, method, target, headers, body)
        self._record(
            Exchange(
                operation,
                method,
                parts.path,
                query,
                lowered,
                body,
                status,
                {name.lower(): value for name, value in answer_headers},
            )
        )
        return status, answer_headers, answer, operation

    def _forward_or_fail(
        self, operation: str, method: str, target: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        if self._applies(ProxyFault.REJECT_CHECKSUM_HEADERS, operation):
            refused = sorted(name.lower() for name in headers if is_checksum_header(name))
            if refused:
                message = f"Unsupported header '{refused[0]}' received for this API call."
                return _error(400, "InvalidArgument", message, method)
        if self._applies(ProxyFault.NOT_IMPLEMENTED, operation):
            message = "A header you provided implies functionality that is not implemented"
            return _error(501, "NotImplemented", message, method)
        if self._applies(ProxyFault.SERVER_ERROR, operation):
            return _error(500, "InternalError", "We encountered an internal error. Please try again.", method)
        forwarded = {name: value for name, value in headers.items() if name.lower() not in _HOP_BY_HOP}
        if operation == "ListObjectsV2":
            target = self._listing_target(target)
        if operation == "GetObject" and self._applies(ProxyFault.IGNORE_RANGE, operation):
            forwarded = {name: value for name, value in forwarded.items() if name.lower() != "range"}
        if body and self._applies(ProxyFault.CORRUPT_BODY, operation):
            body = bytes([body[0] ^ 0xFF]) + body[1:]
        status, answer_headers, answer = self._send(method, target, forwarded, body)
        if status == 206 and self._applies(ProxyFault.WRONG_CONTENT_RANGE, operation):
            answer_headers = [
                (name, _shifted(value) if name.lower() == "content-range" else value)
                for name, value in answer_headers
            ]
        if (
            status == 206
            and _runs_past_the_end(forwarded, answer_headers)
            and self._applies(ProxyFault.REFUSE_RANGE_PAST_END, operation)
        ):
            return _error(416, "InvalidRange", "The requested range is not satisfiable", method)
        if status == 206 and self._applies(ProxyFault.RANGE_AS_200, operation):
            status = 200
        if status == 206 and len(answer) > 1 and self._applies(ProxyFault.SHORT_206, operation):
            answer = answer[: len(answer) // 2]  # the relayed Content-Length is the answer's
        if method == "HEAD" and self._applies(ProxyFault.NO_CHECKSUM_ON_HEAD, operation):
            answer_headers = [
                (n, v) for n, v in answer_headers if not n.lower().startswith("x-amz-checksum-")
            ]
        if method in ("HEAD", "GET") and status == 200 and self._applies(ProxyFault.READS_EMPTY, operation):
            answer = b""
            answer_headers = [
                (n, "0" if n.lower() == "content-length" else v)
                for n, v in answer_headers
                if not n.lower().startswith("x-amz-checksum-")
            ]
        if len(answer) > 1 and self._applies(ProxyFault.CUT_BODY, operation):
            answer = CutBody(answer)
        return status, answer_headers, answer

    def _listing_target(self, target: str) -> str:
        """A ListObjectsV2 request's path and query, with the listing faults applied."""
        parts = urlsplit(target)
        query = parse_qsl(parts.query, keep_blank_values=True)
        if self._applies(ProxyFault.SMALL_PAGES, "ListObjectsV2"):
            query = [(n, v) for n, v in query if n != "max-keys"] + [("max-keys", "2")]
        if self._applies(ProxyFault.IGNORE_CONTINUATION, "ListObjectsV2"):
            query = [(n, v) for n, v in query if n != "continuation-token"]
        return f"{parts.path}?{urlencode(query, quote_via=quote, safe='-_.~')}"

    def _send(
        self, method: str, target: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        connection = http.client.HTTPConnection(*self._upstream, timeout=60)
        try:
            connection.putrequest(method, target, skip_host=True, skip_accept_encoding=True)
            for name, value in headers.items():
                connection.putheader(name, value)
            connection.putheader("Content-Length", str(len(body)))
            connection.endheaders(body)
            response = connection.getresponse()
            answer = b"" if method == "HEAD" else response.read()
            answer_headers = [(n, v) for n, v in response.getheaders() if n.lower() not in _HOP_BY_HOP]
            if method == "HEAD":
                length = response.getheader("Content-Length")
                if length is not None:
                    answer_headers.append(("Content-Length", length))
            return response.status, answer_headers, answer
        finally:
            connection.close()


class CutBody(bytes):
    """An answer body of which only the first half is sent before the connection closes."""


def _error(status: int, code: str, message: str, method: str) -> tuple[int, list[tuple[str, str]], bytes]:
    body = b"" if method == "HEAD" else error_xml(code, message)
    return status, [("Content-Type", "application/xml")], body


def _runs_past_the_end(request_headers: dict[str, str], answer_headers: list[tuple[str, str]]) -> bool:
    """Whether a 206 answers a ``bytes=a-b`` range with fewer bytes, as the object ends before ``b``."""
    asked = {n.lower(): v for n, v in request_headers.items()}.get("range", "")
    answered = {n.lower(): v for n, v in answer_headers}.get("content-range", "")
    if not asked.startswith("bytes=") or not answered.startswith("bytes "):
        return False
    asked_last = asked.removeprefix("bytes=").partition("-")[2]
    answered_last = answered.removeprefix("bytes ").partition("/")[0].partition("-")[2]
    return asked_last.isdigit() and answered_last.isdigit() and int(answered_last) < int(asked_last)


def _shifted(content_range: str) -> str:
    """``bytes a-b/n`` one byte further on: ``bytes a+1-b+1/n``."""
    span, _, total = content_range.removeprefix("bytes ").partition("/")
    first, _, last = span.partition("-")
    return f"bytes {int(first) + 1}-{int(last) + 1}/{total}"


def _handler(proxy: S3Proxy) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as botocore's pool expects

        def _relay(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            headers = {name: value for name, value in self.headers.items()}
            status, answer_headers, answer, _ = proxy.answer(self.command, self.path, headers, body)
            self.send_response(status)
            has_length = False
            for name, value in answer_headers:
                if name.lower() in ("server", "date"):
                    continue
                has_length = has_length or name.lower() == "content-length"
                self.send_header(name, value)
            if not has_length:
                self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            if isinstance(answer, CutBody):
                self.wfile.write(answer[: len(answer) // 2])
                self.wfile.flush()
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
            elif self.command != "HEAD":
                self.wfile.write(answer)

        # http.server's names for the handlers of each method.
        do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _relay  # noqa: N815

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: the exchanges are recorded instead."""

    return Handler


def wire_headers(exchanges: Iterable[Exchange]) -> set[str]:
    """Every request header name sent in ``exchanges``, in lower case."""
    return {name for exchange in exchanges for name in exchange.headers}
