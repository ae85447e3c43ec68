"""Ranged reads of any :class:`~rlm.storage.protocol.RemoteStorage` for an event loop, each run on
a bounded executor (the filesystem store, and stores wrapped by tests): the loop never blocks."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

from rlm.storage.protocol import RemoteStorage


class ThreadedRangeReader:
    """``storage.read_range`` on ``threads`` threads of its own, awaited."""

    def __init__(self, storage: RemoteStorage, *, threads: int = 8) -> None:
        self.storage = storage
        self._executor = ThreadPoolExecutor(threads, thread_name_prefix="rlm-remote-read")

    async def read_range(self, key: str, start: int, length: int) -> bytes:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self.storage.read_range, key, start, length)

    async def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
