"""The chunked-body protocol of ``rlm serve`` (api/http_protocol.py) puts on the wire the bytes
uvicorn's own protocol puts there: the same app served by both, read off a raw socket."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route
from uvicorn._types import HTTPResponseBodyEvent

from api.http_protocol import ChunkedHttpProtocol, unjoined_send

#: Pieces of distinct bytes, of sizes from empty to larger than a socket's buffer.
PIECES = [bytes([i % 251]) * size for i, size in enumerate([1, 0, 15, 4096, 0, 65537, 3, 2 * 1024 * 1024, 7])]


async def body() -> AsyncIterator[bytes | memoryview]:
    for i, piece in enumerate(PIECES):
        yield memoryview(piece) if i % 2 else piece


async def stream(request: Request) -> StreamingResponse:
    return StreamingResponse(body(), media_type="application/octet-stream")


APP = Starlette(routes=[Route("/stream", stream)])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Served:
    def __init__(self, protocol: Any) -> None:
        self.port = free_port()
        config = uvicorn.Config(
            APP,
            host="127.0.0.1",
            port=self.port,
            http=protocol,
            log_config=None,
            access_log=False,
            loop="uvloop",
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> Served:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[Served, Served]]:
    with Served(ChunkedHttpProtocol) as ours, Served("httptools") as theirs:
        yield ours, theirs


def wire(port: int, method: str = "GET", slow: bool = False) -> bytes:
    """The whole answer to one request, as received (the connection closed after it)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        if slow:  # a small receive window: the server's transport fills and pauses
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        sock.sendall(f"{method} /stream HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n".encode())
        got = bytearray()
        waits = 20 if slow else 0  # long enough for the server to pause writing, then read at will
        while data := sock.recv(1 << 16):
            got += data
            if waits:
                waits -= 1
                time.sleep(0.02)
    return bytes(got)


def without_date(answer: bytes) -> bytes:
    head, _, rest = answer.partition(b"\r\n\r\n")
    lines = [line for line in head.split(b"\r\n") if not line.lower().startswith(b"date:")]
    return b"\r\n".join(lines) + b"\r\n\r\n" + rest


def chunked(pieces: list[bytes]) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces if p) + b"0\r\n\r\n"


@pytest.mark.parametrize("slow", [False, True], ids=["fast-reader", "slow-reader"])
def test_chunked_bodies_are_the_bytes_uvicorn_sends(servers: tuple[Served, Served], slow: bool) -> None:
    ours, theirs = servers
    mine, reference = without_date(wire(ours.port, slow=slow)), without_date(wire(theirs.port))
    assert mine == reference
    assert mine.partition(b"\r\n\r\n")[2] == chunked(PIECES)


def test_head_answers_are_uvicorns(servers: tuple[Served, Served]) -> None:
    ours, theirs = servers
    assert without_date(wire(ours.port, "HEAD")) == without_date(wire(theirs.port, "HEAD"))


class _Transport:
    def __init__(self) -> None:
        self.lines: list[tuple[object, ...]] = []

    def writelines(self, parts: tuple[object, ...]) -> None:
        self.lines.append(parts)


class _Flow:
    write_paused = False


class _Cycle:
    """The fields of uvicorn's request cycle that :func:`unjoined_send` reads."""

    def __init__(self) -> None:
        self.chunked_encoding = True
        self.response_started = True
        self.response_complete = False
        self.disconnected = False
        self.flow = _Flow()
        self.scope = {"method": "GET"}
        self.transport = _Transport()


def test_a_piece_with_more_to_come_is_written_uncopied() -> None:
    import asyncio

    cycle, passed = _Cycle(), []

    async def send(message: Any) -> None:
        passed.append(message)

    piece = memoryview(b"abc" * 1000)
    sending = unjoined_send(cycle, send)
    first: HTTPResponseBodyEvent = {"type": "http.response.body", "body": piece, "more_body": True}  # type: ignore[typeddict-item]
    asyncio.run(sending(first))
    assert passed == []
    [(size, body, end)] = cycle.transport.lines
    assert (size, end) == (b"bb8\r\n", b"\r\n") and body is piece
    cycle.flow.write_paused = True  # paused: uvicorn's send waits for the transport
    last: HTTPResponseBodyEvent = {"type": "http.response.body", "body": b"x", "more_body": True}
    asyncio.run(sending(last))
    assert passed == [last] and len(cycle.transport.lines) == 1
