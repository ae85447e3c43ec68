"""Request dependencies: the running services and the caller's scope."""

from __future__ import annotations

from collections.abc import Callable

from fastapi import Request

from api.auth import Scope, TokenAuthenticator
from api.rest.errors import ApiError, unauthenticated
from rlm.bootstrap import Runtime


def runtime(request: Request) -> Runtime:
    """The services of this app."""
    found: Runtime | None = getattr(request.app.state, "runtime", None)
    if found is None:
        raise ApiError(503, "rlm is starting up or shutting down")
    return found


def require(scope: Scope) -> Callable[[Request], Scope]:
    """A dependency admitting callers whose bearer token has ``scope``."""

    def check(request: Request) -> Scope:
        authenticator: TokenAuthenticator = request.app.state.authenticator
        granted = authenticator.authenticate(request.headers.get("authorization"))
        if granted is None:
            raise unauthenticated()
        if not granted.allows(scope):
            raise ApiError(403, f"this token's scope is {granted.value}; {scope.value} is required")
        return granted

    return check
