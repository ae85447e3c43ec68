"""Checking the answer to a ranged GET against the range asked for.

A store or a proxy may not honour ``Range``: it can answer 200 with the whole object, or 206
with more than was asked (``s3rver`` answers ``bytes=0-0`` with the whole object). Only the
``Content-Range`` header says which bytes a 206 holds, so an answer is used only when it
provably holds the asked-for bytes:

* 206 whose ``Content-Range`` covers the asked-for range (up to the object's end): the asked-for
  slice of it (normally all of it);
* 200 without ``Content-Range`` (the whole object): the asked-for slice, read without keeping what
  comes before it;
* 200 with a ``Content-Range``: held to the rules of a 206. Its body is the bytes the header
  names, not the object from its first byte (a store that honours ``Range`` but answers 200):
  slicing it as the whole object would give other bytes, or none, as if the object ended;
* anything else (a 206 without a usable ``Content-Range``, or one that does not cover the range):
  :class:`~rlm.errors.StorageError`, not retriable: the same request gets the same answer.

A 416 (``InvalidRange``) says the object ends at or before the range's first byte, so there is
nothing to read; it is believed once a HEAD agrees (:func:`check_refused_range`). A store that
refuses a range starting inside the object, rather than shortening it to the object's end as HTTP
asks, would otherwise have its objects read as ending early.
"""

from __future__ import annotations

import re
from typing import NamedTuple, Protocol

from botocore.exceptions import IncompleteReadError

from rlm.errors import NotFoundError, StorageError

#: Bytes read at a time while skipping the head of a longer answer.
_SKIP_CHUNK = 1024 * 1024
_CONTENT_RANGE = re.compile(r"^bytes (\d+)-(\d+)/(\d+|\*)$")


class Readable(Protocol):
    """A response body (botocore's ``StreamingBody``)."""

    def read(self, amt: int | None = None) -> bytes: ...


class ContentRange(NamedTuple):
    """A ``Content-Range: bytes first-last/total`` header."""

    first: int
    last: int
    total: int | None
    """``None`` for ``*`` (length unknown)."""


def parse_content_range(header: str | None) -> ContentRange | None:
    """The header's values; ``None`` when it is missing or not of the ``bytes a-b/n`` form."""
    match = _CONTENT_RANGE.match((header or "").strip())
    if match is None:
        return None
    first, last, total = match.groups()
    announced = ContentRange(int(first), int(last), None if total == "*" else int(total))
    if announced.last < announced.first:
        return None
    return announced


def ranged_answer(
    body: Readable, status: int, content_range: str | None, start: int, length: int, what: str
) -> bytes:
    """The bytes ``[start, start + length)`` from the answer to a GET with that ``Range``.

    Args:
        body: The answer's body, read no further than needed.
        status: The answer's HTTP status.
        content_range: Its ``Content-Range`` header.
        start: First byte asked for.
        length: Bytes asked for (at least 1).
        what: Names the request in errors (operation and key).

    Returns:
        The asked-for bytes; fewer only where the object ends.

    Raises:
        StorageError: The answer does not provably hold the asked-for bytes (not retriable).
        IncompleteReadError: A 206 body ended before its ``Content-Range`` said (botocore's
            error, retriable like any broken connection).
    """
    span = answer_span(status, content_range, start, length, what)
    skip(body, span.skip)
    data = read_up_to(body, span.length)
    if span.exact and len(data) != span.length:
        raise IncompleteReadError(actual_bytes=len(data), expected_bytes=span.length)
    return data


class Span(NamedTuple):
    """Where the asked-for bytes are in an answer's body."""

    skip: int
    """Bytes of the body before them."""
    length: int
    """Bytes to read (at most, when not ``exact``)."""
    exact: bool
    """The body must hold all ``count`` bytes (a 206): fewer is a broken answer."""


def answer_span(status: int, content_range: str | None, start: int, length: int, what: str) -> Span:
    """Where the bytes ``[start, start + length)`` are in the body of the answer to a GET with
    that ``Range`` (the rules of the module docstring), for sync and async bodies alike.

    Raises:
        StorageError: The answer does not provably hold the asked-for bytes (not retriable).
    """
    asked = f"bytes={start}-{start + length - 1}"
    if status not in (200, 206):
        raise StorageError(f"{what}: asked for {asked}, the store answered {status}", retriable=False)
    announced = parse_content_range(content_range)
    if status == 200 and announced is None:
        return Span(start, length, False)  # the whole object
    if announced is None:
        raise StorageError(
            f"{what}: asked for {asked}, the store answered 206 without a usable Content-Range "
            f"({content_range!r})",
            retriable=False,
        )
    if announced.total is not None and start >= announced.total:
        return Span(0, 0, True)  # an empty object: s3rver answers "bytes 0-0/0" and sends no byte
    wanted_last = start + length - 1
    if announced.total is not None:
        wanted_last = min(wanted_last, announced.total - 1)
    if announced.first > start or announced.last < wanted_last:
        raise StorageError(
            f"{what}: asked for {asked}, the store answered {status} with Content-Range {content_range!r}",
            retriable=False,
        )
    return Span(start - announced.first, wanted_last - start + 1, True)


def check_refused_range(size: int | None, start: int, length: int, what: str, key: str) -> None:
    """Return when a 416 (``InvalidRange``) to a GET of ``[start, start + length)`` means what it
    says: the object, ``size`` bytes by a HEAD made after it, ends at or before ``start``.

    Raises:
        NotFoundError: The HEAD found no object (``size`` is None).
        StorageError: The object holds byte ``start``: the store refused a range it should have
            answered (not retriable: the same request gets the same answer).
    """
    if size is None:
        raise NotFoundError(f"{what}: no such object")
    if start < size:
        raise StorageError(
            f"{what}: the store refused bytes={start}-{start + length - 1} (InvalidRange), but the "
            f"object holds {size} bytes",
            key=key,
            retriable=False,
        )


def skip(body: Readable, count: int) -> None:
    """Read and drop up to ``count`` bytes (fewer when the body ends first)."""
    while count > 0:
        chunk = body.read(min(count, _SKIP_CHUNK))
        if not chunk:
            return
        count -= len(chunk)


def read_up_to(body: Readable, count: int) -> bytes:
    """Up to ``count`` bytes: fewer only when the body ends first."""
    chunks: list[bytes] = []
    while count > 0:
        chunk = body.read(count)
        if not chunk:
            break
        chunks.append(chunk)
        count -= len(chunk)
    return b"".join(chunks)
