"""Request dependencies: the running services and the caller's scope; the authentication middleware.

The dependencies are coroutines: they do no I/O, and plain functions would each cost a thread-pool
round trip per request.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Collection
from urllib.parse import parse_qsl

from fastapi import Request
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Send
from starlette.types import Scope as AsgiScope

from api.auth import Admission, Scope, TokenAuthenticator
from api.rest.errors import ApiError, problem, unauthenticated
from rlm.bootstrap import Runtime

SCOPE_STATE = "rlm.scope"
"""Where :class:`BearerAuthentication` leaves the token's scope in the request's state."""
ARRIVED_STATE = "rlm.arrived"
"""Where :class:`BearerAuthentication` leaves when the request arrived (``time.monotonic``), before
its body was read: where request deadlines start."""


def arrived(request: Request) -> float | None:
    """When the request arrived (``time.monotonic``), if the app noted it."""
    found: float | None = request.scope.get("state", {}).get(ARRIVED_STATE)
    return found


async def runtime(request: Request) -> Runtime:
    """The services of this app."""
    found: Runtime | None = getattr(request.app.state, "runtime", None)
    if found is None:
        raise ApiError(503, "rlm is starting up or shutting down")
    return found


def refuse_unknown_query(request: Request, taken: Collection[str]) -> None:
    """Raise 400 for a query parameter not in ``taken``: ignored, it would answer another question
    than the one asked (``isolation_level`` where the route has none, a misspelt ``end_offset``)."""
    for name in request.query_params:
        if name not in taken:
            takes = ", ".join(sorted(taken)) or "none"
            raise ApiError(
                400, f"invalid request: query.{name[:64]} is not a parameter of this route (it takes {takes})"
            )


async def known_query(request: Request) -> None:
    """A dependency refusing the query parameters its route does not declare (400)."""
    dependant = getattr(request.scope.get("route"), "dependant", None)
    if dependant is not None:
        refuse_unknown_query(request, [field.alias for field in dependant.query_params])


def check_scope(request: Request, scope: Scope) -> Scope:
    """The caller's scope when it allows ``scope``; raises 401 or 403 otherwise.

    :class:`BearerAuthentication` has put the token's scope in the request's state; a request
    that did not pass it (an app without the middleware) is authenticated here.
    """
    granted: Scope | None = request.scope.get("state", {}).get(SCOPE_STATE)
    if granted is None:
        authenticator: TokenAuthenticator = request.app.state.authenticator
        granted = authenticator.authenticate(request.headers.get("authorization"))
    if granted is None:
        raise unauthenticated()
    if not granted.allows(scope):
        raise ApiError(403, f"this token's scope is {granted.value}; {scope.value} is required")
    return granted


async def admission(request: Request) -> Admission:
    """The admission of the caller's bearer token, for a stream to check as it goes on."""
    authenticator: TokenAuthenticator = request.app.state.authenticator
    return authenticator.admission(request.headers.get("authorization"))


def require(scope: Scope) -> Callable[[Request], Awaitable[Scope]]:
    """A dependency admitting callers whose bearer token has ``scope``."""

    async def check(request: Request) -> Scope:
        return check_scope(request, scope)

    return check


class BearerAuthentication:
    """ASGI middleware refusing a request without a valid bearer token (401) before anything reads
    it: FastAPI parses a body before dependencies run, so without this a caller without a token
    would learn how its input parses. ``public`` paths pass; :func:`require` checks each route's scope.
    Being first to see every request, it also notes when the request arrived (``ARRIVED_STATE``).
    """

    def __init__(self, app: ASGIApp, authenticator: TokenAuthenticator, public: Collection[str]) -> None:
        self.app = app
        self.authenticator = authenticator
        self.public = frozenset(public)

    async def __call__(self, scope: AsgiScope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            scope.setdefault("state", {})[ARRIVED_STATE] = time.monotonic()
        if scope["type"] == "http" and scope["path"] not in self.public:
            granted = self.authenticator.authenticate(Headers(scope=scope).get("authorization"))
            if granted is None:
                refusal = unauthenticated()
                await problem(refusal.status, refusal.message, refusal.headers)(scope, receive, send)
                return
            scope.setdefault("state", {})[SCOPE_STATE] = granted
        await self.app(scope, receive, send)


class SingleQueryValues:
    """ASGI middleware refusing (400) a request that gives a query parameter more than once
    (``?timestamp=latest&timestamp=0``): the routes would each take one of the values, silently.
    No route takes a list. Installed inside :class:`BearerAuthentication`: a caller without a
    token learns nothing of how its query parses."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: AsgiScope, receive: Receive, send: Send) -> None:
        query: bytes = scope.get("query_string", b"") if scope["type"] == "http" else b""
        if b"&" in query:  # one parameter cannot repeat: no work on the hot path
            seen: set[str] = set()
            for name, _ in parse_qsl(query.decode("latin-1"), keep_blank_values=True):
                if name in seen:
                    message = f"invalid request: query.{name[:64]} is given more than once"
                    await problem(400, message)(scope, receive, send)
                    return
                seen.add(name)
        await self.app(scope, receive, send)
