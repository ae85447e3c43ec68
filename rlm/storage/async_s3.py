"""Ranged reads of an S3 store on the event loop, with aiobotocore (the design's async S3 client).

Used by range streams, so that waiting for S3 holds no thread. It reads the objects of an
:class:`~rlm.storage.s3.S3Storage` (same bucket, prefix, endpoint, timeouts, credentials) and holds
its answers to the same rules: a ranged answer is used only when it provably holds the asked-for
bytes (:func:`rlm.storage.s3_range.answer_span`), errors are translated as the store translates
them (:mod:`rlm.storage.s3_errors`), and a retriable failure (5xx, throttling, a reset connection,
a body cut short) is retried with the store's policy: a streamed read
(:meth:`AsyncS3Reader.stream_range`) is one GET read piece by piece, and one that fails part way
is resumed by another GET from where it stopped, as the store's own streamed reads are
(:meth:`rlm.storage.s3.S3Storage.stream_range`).

aiobotocore clients belong to one event loop: one is made per loop on first use, and closed by
:meth:`AsyncS3Reader.close` (on the loop that made it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterator
from datetime import datetime
from functools import partial
from typing import Any, TypeVar

import aiohttp
from aiobotocore.config import AioConfig
from aiobotocore.session import AioSession
from botocore.credentials import Credentials
from botocore.exceptions import BotoCoreError, ClientError

from rlm.errors import RlmError, StorageUnavailableError
from rlm.storage.async_credentials import store_credential_resolver
from rlm.storage.layout import validate_key
from rlm.storage.protocol import check_stream_arguments
from rlm.storage.s3 import S3Storage
from rlm.storage.s3_client import client_options, share_loaded_data
from rlm.storage.s3_config import S3Config
from rlm.storage.s3_errors import NOT_FOUND_CODES, s3_error_code, translate
from rlm.storage.s3_range import Span, answer_span, check_refused_range

T = TypeVar("T")
_log = logging.getLogger(__name__)
#: Errors of aiohttp and of the socket that mean the connection broke: retried.
_BROKEN = (aiohttp.ClientError, ConnectionError, asyncio.TimeoutError)


class AsyncS3Reader:
    """Streamed GETs of ``bucket`` under ``prefix``, awaited (an ``AsyncRangeReader``).

    A streamed read holds its connection until it is closed, however slowly its pieces are taken:
    ``connections`` (at least ``config.max_pool_connections``) is how many the client keeps, so
    that as many reads can be open at once; one more waits for a connection to be given back.
    """

    def __init__(
        self,
        bucket: str,
        prefix: str,
        config: S3Config,
        credentials: Credentials | None,
        *,
        connections: int = 0,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        draw: Callable[[], float] = random.random,
        now: Callable[[], datetime] | None = None,
    ) -> None:
        """``credentials`` are the store's session's (refreshed from it when they are
        refreshable, :mod:`rlm.storage.async_credentials`); None lets the client look in the
        standard chain itself. ``now`` tells the time the credentials' expiry is judged by."""
        self.bucket = bucket
        self.config = config
        self.connections = max(connections, config.max_pool_connections)
        self._key_prefix = f"{prefix}/" if prefix else ""
        self._credentials = credentials
        self._now = now
        self._sleep = sleep
        self._draw = draw
        self._clients: dict[asyncio.AbstractEventLoop, tuple[contextlib.AsyncExitStack, Any]] = {}
        self._making: dict[asyncio.AbstractEventLoop, asyncio.Lock] = {}

    @classmethod
    def for_storage(
        cls, storage: S3Storage, *, connections: int = 0, now: Callable[[], datetime] | None = None
    ) -> AsyncS3Reader:
        """A reader of ``storage``'s objects, with its settings and credentials (and room for
        ``connections`` open reads, when that is more than the store's pool)."""
        return cls(
            storage.bucket,
            storage.prefix,
            storage.config,
            storage.credentials(),
            connections=connections,
            now=now,
        )

    async def _client(self) -> Any:
        loop = asyncio.get_running_loop()
        made = self._clients.get(loop)
        if made is not None:
            return made[1]
        # Making a client waits (temporary keys are fetched off the loop): reads that start
        # meanwhile wait for it rather than make clients of their own, which nothing would close.
        async with self._making.setdefault(loop, asyncio.Lock()):
            made = self._clients.get(loop)
            if made is None:
                made = self._clients[loop] = await self._new_client()
        return made[1]

    async def _new_client(self) -> tuple[contextlib.AsyncExitStack, Any]:
        stack = contextlib.AsyncExitStack()
        config = self.config
        session = AioSession()
        share_loaded_data(session)
        if self._credentials is not None:
            resolver = store_credential_resolver(
                self._credentials, **({"now": self._now} if self._now else {})
            )
            session.register_component("credential_provider", resolver)
        client = await stack.enter_async_context(
            session.create_client(
                "s3",
                endpoint_url=config.endpoint_url,
                region_name=config.region,
                config=AioConfig(**{**client_options(config), "max_pool_connections": self.connections}),
            )
        )
        return stack, client

    async def _retried(self, key: str, call: Callable[[], Awaitable[T]]) -> T:
        """``call()``, retried with the store's policy while it fails retriably."""
        policy = self.config.retry
        attempt = 1
        while True:
            try:
                return await call()
            except RlmError as exc:
                if not exc.retriable:
                    raise
                if attempt >= policy.max_attempts:
                    exc.add_note(f"gave up after {attempt} attempts")
                    raise
                wait = policy.delay(attempt, self._draw())
                _log.info(
                    "S3 GetObject %s failed (attempt %d), retrying in %.3f s: %s", key, attempt, wait, exc
                )
                await self._sleep(wait)
                attempt += 1

    async def _open(self, key: str, full_key: str, start: int, length: int) -> tuple[Any, Span] | None:
        """The body of a GET of ``[start, start + length)`` read up to the asked-for bytes, and
        where they are in it; None when the object ends before ``start``."""
        client = await self._client()
        what = f"S3 GetObject {key!r}"
        try:
            response = await client.get_object(
                Bucket=self.bucket, Key=full_key, Range=f"bytes={start}-{start + length - 1}"
            )
        except ClientError as exc:
            if s3_error_code(exc) != "InvalidRange":
                raise translate(exc, operation="GetObject", key=key) from exc
            # The object ends before start, if a HEAD agrees.
            check_refused_range(await self._size(client, key, full_key), start, length, what, key)
            return None
        except BotoCoreError as exc:
            raise translate(exc, operation="GetObject", key=key) from exc
        except _BROKEN as exc:
            raise StorageUnavailableError(f"{what}: {type(exc).__name__}: {exc}", key=key) from exc
        status = response["ResponseMetadata"]["HTTPStatusCode"]
        body = response["Body"]
        try:
            span = answer_span(status, response.get("ContentRange"), start, length, what)
            with _translated(key):
                await _skip(body, span.skip)
        except BaseException:
            body.close()
            raise
        return body, span

    async def _size(self, client: Any, key: str, full_key: str) -> int | None:
        """The object's size by a HEAD; None when there is none."""
        try:
            head = await client.head_object(Bucket=self.bucket, Key=full_key)
        except ClientError as exc:
            if s3_error_code(exc) in NOT_FOUND_CODES:
                return None
            raise translate(exc, operation="HeadObject", key=key) from exc
        except BotoCoreError as exc:
            raise translate(exc, operation="HeadObject", key=key) from exc
        except _BROKEN as exc:
            raise StorageUnavailableError(
                f"S3 HeadObject {key!r}: {type(exc).__name__}: {exc}", key=key
            ) from exc
        return int(head["ContentLength"])

    def stream_range(
        self, key: str, start: int, length: int, *, piece_bytes: int
    ) -> AsyncGenerator[bytearray, None]:
        """``length`` bytes of ``key`` from ``start``, ``piece_bytes`` at a time (the last piece
        excepted; fewer bytes only where the object ends), from one GET read as the pieces are
        taken: a consumer that stops taking them stops the reads (TCP's window). A GET that fails
        part way is followed by another from where it stopped, at most ``retry.max_attempts``
        failures in a row. Close the iterator to end the GET.

        Raises:
            ValueError: ``start`` or ``length`` is negative, or ``piece_bytes`` is not positive.
            InvalidObjectKeyError: The key is not allowed.
            NotFoundError: No object is stored under ``key`` (when the pieces are taken).
            StorageUnavailableError: Retries are spent (retriable).
            StorageError: The store refused the read, or answered other bytes than asked.
        """
        check_stream_arguments(start, length, piece_bytes)
        return self._stream(key, self._key_prefix + validate_key(key), start, start + length, piece_bytes)

    async def _stream(
        self, key: str, full_key: str, position: int, end: int, piece_bytes: int
    ) -> AsyncGenerator[bytearray, None]:
        policy = self.config.retry
        failures = 0
        while position < end:
            opened = await self._retried(key, partial(self._open, key, full_key, position, end - position))
            if opened is None:
                return  # the object ends before ``position``
            body, span = opened
            pieces = _Pieces(body, span.length)
            try:
                while position < end:
                    wanted = min(piece_bytes, end - position, pieces.left)
                    try:
                        with _translated(key):
                            piece = await pieces.take(wanted)
                        if span.exact and len(piece) < wanted:
                            raise StorageUnavailableError(
                                f"S3 GetObject {key!r}: the body ended {pieces.left} bytes early", key=key
                            )
                    except RlmError as exc:
                        failures += 1
                        if not exc.retriable or failures >= policy.max_attempts:
                            if exc.retriable:
                                exc.add_note(f"gave up after {failures} failures in a row")
                            raise
                        wait = policy.delay(failures, self._draw())
                        _log.info(
                            "S3 GetObject %s broke at byte %d, resuming in %.3f s: %s",
                            key,
                            position,
                            wait,
                            exc,
                        )
                        await self._sleep(wait)
                        break  # another GET from ``position``
                    if not piece:
                        return  # the object ends here
                    failures = 0
                    position += len(piece)
                    yield piece
            finally:
                body.close()

    async def close(self) -> None:
        """Close the client of the running loop (others belong to loops that are gone); idempotent."""
        loop = asyncio.get_running_loop()
        made = self._clients.pop(loop, None)
        self._clients.clear()
        self._making.clear()
        if made is not None:
            await made[0].aclose()


@contextlib.contextmanager
def _translated(key: str) -> Iterator[None]:
    """Errors of reading a body as the store's: a broken connection is retriable."""
    try:
        yield
    except BotoCoreError as exc:
        raise translate(exc, operation="GetObject", key=key) from exc
    except _BROKEN as exc:
        raise StorageUnavailableError(f"S3 GetObject {key!r}: {type(exc).__name__}: {exc}", key=key) from exc


class _Pieces:
    """Pieces of exactly the asked-for size out of a body, at most ``left`` bytes in all: the
    pieces aiohttp received are copied into the asked-for piece one at a time, as they arrive
    (:func:`_received`), so that a piece is held once, with one received piece beside it."""

    def __init__(self, body: Any, left: int) -> None:
        content = getattr(body.raw_stream, "content", None)
        self._read: Callable[[int], Awaitable[bytes]] = (
            body.read if content is None else lambda _: _received(content)
        )
        self.left = left
        self._rest = memoryview(b"")

    async def take(self, count: int) -> bytearray:
        """``count`` bytes, fewer only where the body ends."""
        count = min(count, self.left)
        out = bytearray(count)
        got = 0
        # Copied through a view: a bytearray's own slice assignment copies a memoryview into a
        # new bytearray first, a second copy of every byte.
        with memoryview(out) as into:
            while got < count:
                if not self._rest:
                    piece = await self._read(count - got)
                    if not piece:
                        break
                    self._rest = memoryview(piece)
                part = self._rest[: count - got]
                into[got : got + len(part)] = part
                got += len(part)
                self._rest = self._rest[len(part) :]
        del out[got:]  # the body ended early
        self.left -= got
        return out


async def _received(content: aiohttp.StreamReader) -> bytes:
    """The first piece of a body aiohttp holds, as the socket gave it (``readchunk``: ``readany``
    would join all it holds into one more copy, hundreds of KiB for each open GET); empty at the
    body's end."""
    while True:
        data, _ = await content.readchunk()
        if data or content.at_eof():
            return data


async def _skip(body: Any, count: int) -> None:
    while count > 0:
        chunk = await body.read(min(count, 1024 * 1024))
        if not chunk:
            return
        count -= len(chunk)
