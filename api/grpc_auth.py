"""Bearer tokens on the gRPC server: an interceptor that admits a call by its ``authorization`` metadata.

Every method needs a token of the read scope, except those of the standard health service
(``grpc.health.v1.Health``), which probes call without one; the methods in ``ADMIN_METHODS`` need
the admin scope. A refused call ends with UNAUTHENTICATED (no or a wrong token) or PERMISSION_DENIED
(a read token on an admin method) before any handler runs. Tokens are never logged or echoed.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeAlias

import grpc

from api.auth import Scope, TokenAuthenticator

#: Methods callable without a token (method names are ``/<service>/<method>``).
EXEMPT_PREFIXES = ("/grpc.health.v1.Health/",)
#: Methods that change settings.
ADMIN_METHODS = frozenset({"/rlm.v1.RemoteLogManager/UpdateConfig"})

if TYPE_CHECKING:  # generic only in the type stubs
    Handler: TypeAlias = grpc.RpcMethodHandler[Any, Any]


def needed_scope(method: str) -> Scope | None:
    """The scope a method needs; None for the methods callable without a token."""
    if method.startswith(EXEMPT_PREFIXES):
        return None
    return Scope.ADMIN if method in ADMIN_METHODS else Scope.READ


class BearerTokenInterceptor(grpc.aio.ServerInterceptor):
    """Admits a call when its ``authorization: Bearer <token>`` metadata grants the scope it needs."""

    def __init__(self, authenticator: TokenAuthenticator) -> None:
        self.authenticator = authenticator

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Handler | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Handler | None:
        needed = needed_scope(handler_call_details.method)
        handler = await continuation(handler_call_details)
        if needed is None or handler is None:
            return handler
        granted = self.authenticator.authenticate(authorization_of(handler_call_details.invocation_metadata))
        if granted is None:
            return _refusal(
                handler,
                grpc.StatusCode.UNAUTHENTICATED,
                "a valid bearer token is required (metadata authorization: Bearer <token>)",
            )
        if not granted.allows(needed):
            return _refusal(
                handler,
                grpc.StatusCode.PERMISSION_DENIED,
                f"this token's scope is {granted.value}; {needed.value} is required",
            )
        return handler


def authorization_of(metadata: Any) -> str | None:
    """The ``authorization`` value of a call's metadata, if any."""
    # Keys arrive lower-cased; a text value is a str.
    for key, value in metadata or ():
        if key == "authorization" and isinstance(value, str):
            return value
    return None


def _refusal(handler: Handler, code: grpc.StatusCode, message: str) -> Handler:
    """A handler of the same kind as ``handler`` that ends the call with ``code`` at once."""

    async def refuse(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        await context.abort(code, message)

    if handler.request_streaming and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(refuse)
    if handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(refuse)
    if handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(refuse)
    return grpc.unary_unary_rpc_method_handler(refuse)
