"""JSON request bodies read strictly: a key given twice in one object, a number longer than
Python parses, arrays and objects nested deeper than it parses, or bytes that are not UTF-8, is
refused with words (400), not settled by taking one of the values or answered "There was an error
parsing the body"; a body sent without a JSON ``Content-Type`` is refused (415) saying so.

:class:`StrictJsonRoute` is the route class of the routers whose operations take a body.
"""

from __future__ import annotations

import email.message
import json
import sys
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
            except UnicodeDecodeError as exc:  # JSON is UTF-8 (RFC 8259; UTF-16 and 32 are detected)
                raise HTTPException(
                    400, f"invalid request: body: not UTF-8 at byte {exc.start} (counting from 0)"
                ) from None
            except RecursionError:  # Python's parser recurses once per level
                raise HTTPException(
                    400,
                    "invalid request: body: the JSON is nested too deeply (arrays and objects within "
                    f"each other, about {sys.getrecursionlimit()} levels down or more)",
                ) from None
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
        takes_body = self.body_field is not None

        async def strict(request: Request) -> Response:
            strict_request = StrictJsonRequest(request.scope, request.receive)
            # FastAPI hands a body of another type to the model as a string ("Input should be a
            # valid dictionary"): said in words instead. The body read here is kept for the handler.
            if (
                takes_body
                and not _is_json(request.headers.get("content-type"))
                and await strict_request.body()
            ):
                raise HTTPException(
                    415, "the body must be JSON sent with the header Content-Type: application/json"
                )
            return await handler(strict_request)

        return strict


def _is_json(content_type: str | None) -> bool:
    """``application/json`` or ``application/<anything>+json``, with any parameters."""
    if not content_type:
        return False
    message = email.message.Message()
    message["content-type"] = content_type
    subtype = message.get_content_subtype()
    return message.get_content_maintype() == "application" and (
        subtype == "json" or subtype.endswith("+json")
    )
