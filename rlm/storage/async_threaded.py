"""Streamed reads of any :class:`~rlm.storage.protocol.RemoteStorage` for an event loop, each piece
taken on a bounded executor (the filesystem store, and stores wrapped by tests): the loop never
blocks."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Iterator
from concurrent.futures import Future, ThreadPoolExecutor

from rlm.storage.protocol import RemoteStorage


class ThreadedRangeReader:
    """``storage.stream_range`` on ``threads`` threads of its own, awaited."""

    def __init__(self, storage: RemoteStorage, *, threads: int = 8) -> None:
        self.storage = storage
        self._executor = ThreadPoolExecutor(threads, thread_name_prefix="rlm-remote-read")

    def stream_range(
        self, key: str, start: int, length: int, *, piece_bytes: int
    ) -> AsyncGenerator[bytes, None]:
        """The pieces of ``storage.stream_range`` (arguments checked at the call), each taken on
        the executor; closing the iterator closes the store's."""
        return self._pieces(self.storage.stream_range(key, start, length, piece_bytes=piece_bytes))

    async def _pieces(self, pieces: Iterator[bytes]) -> AsyncGenerator[bytes, None]:
        taking: Future[bytes | None] | None = None
        try:
            while True:
                taking = self._executor.submit(next, pieces, None)
                piece = await asyncio.wrap_future(taking)
                if piece is None:
                    return
                yield piece
        finally:
            with contextlib.suppress(RuntimeError):  # the executor is shut down: the process ends
                self._executor.submit(_close, pieces, taking)  # once the piece being taken is in

    async def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


def _close(pieces: Iterator[bytes], taking: Future[bytes | None] | None) -> None:
    if taking is not None:
        with contextlib.suppress(BaseException):
            taking.result()
    close = getattr(pieces, "close", None)  # a generator's: releases what it holds
    if close is not None:
        close()
