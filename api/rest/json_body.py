"""JSON request bodies read strictly: a key given twice in one object, or a number longer than
Python parses, is refused with words (400), not settled by taking one of the values or answered
"There was an error parsing the body".

:class:`StrictJsonRoute` is the route class of the routers whose operations take a body.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import HTTPException, Request, Response
from fastapi.routing import APIRoute

from rlm.arguments import shown


class _RefusedBodyError(ValueError):
    """A body that parses as JSON but is not taken."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found = dict(pairs)
    if len(found) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _RefusedBodyError(f"the key {shown(key)} is given twice in one object")
            seen.add(key)
    return found


class StrictJsonRequest(Request):
    """A request whose ``json()`` refuses duplicate keys and numbers beyond Python's parser."""

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            body = await self.body()
            try:
                self._json = json.loads(body, object_pairs_hook=_unique_keys)
            except json.JSONDecodeError:
                raise  # answered by the app's handler, with the position
            except _RefusedBodyError as exc:
                raise HTTPException(400, f"invalid request: body: {exc}") from None
            except ValueError as exc:  # int() of a number of thousands of digits
                if "digits" not in str(exc):
                    raise
                raise HTTPException(
                    400, "invalid request: body: a number of thousands of digits is out of range"
                ) from None
        return self._json


class StrictJsonRoute(APIRoute):
    """A route whose body is read by :class:`StrictJsonRequest`."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def strict(request: Request) -> Response:
            return await handler(StrictJsonRequest(request.scope, request.receive))

        return strict
