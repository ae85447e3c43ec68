"""uvicorn's HTTP/1.1 protocol, sending the pieces of a chunked body without joining them.

uvicorn frames each piece of a chunked body by joining the chunk's size line, the piece and the
CRLF after it into one new bytes object before writing it: a copy of every byte streamed (about a
tenth of the CPU a range stream of NDJSON takes). :class:`ChunkedHttpProtocol` gives each request
an ASGI ``send`` (:func:`unjoined_send`) that writes the same three parts with
``transport.writelines`` instead: the event loop (uvloop) sends them with one ``writev`` and keeps
the piece itself, uncopied, for what the socket does not take at once. The bytes on the wire are
the same.

Only the common case takes this path: a piece of a chunked body with more to come, the response
started, not paused for flow control, the client still there. Anything else (the status line and
headers, the last piece, a paused transport, HEAD) goes to uvicorn's own ``send``.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from uvicorn._types import ASGI3Application, ASGIReceiveCallable, ASGISendCallable, ASGISendEvent, Scope
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle


def unjoined_send(cycle: Any, send: ASGISendCallable) -> Callable[[ASGISendEvent], Coroutine[Any, Any, None]]:
    """``send`` of ``cycle`` (uvicorn's ``RequestResponseCycle``), the pieces of a chunked body
    with more to come written unjoined to its transport."""

    async def sending(message: ASGISendEvent) -> None:
        if (
            message["type"] == "http.response.body"
            and message.get("more_body", False)
            and cycle.chunked_encoding
            and cycle.response_started
            and not cycle.response_complete
            and not cycle.disconnected
            and not cycle.flow.write_paused
            and cycle.scope["method"] != "HEAD"
        ):
            body = message.get("body", b"")
            if body:
                cycle.transport.writelines((b"%x\r\n" % len(body), body, b"\r\n"))
            return
        await send(message)

    return sending


class ChunkedHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol; the pieces of chunked bodies are written unjoined."""

    def _start_asgi_task(self, cycle: RequestResponseCycle, app: ASGI3Application) -> None:
        async def unjoined(scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable) -> None:
            await app(scope, receive, unjoined_send(cycle, send))

        super()._start_asgi_task(cycle, unjoined)
