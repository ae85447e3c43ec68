"""Whole batches out of a byte range read in chunks, with one chunk of read-ahead.

The range is read ``chunk_bytes`` at a time through an awaitable ``read(position, length)`` (a
ranged GET on the event loop, or a file read off it). While the batches of one chunk are taken,
the next chunk is being read: at most two chunks (and a batch larger than a chunk, read whole)
are held, whatever the range's size. The consumer sets the pace: the read after the next starts
only when it asks for more, so a slow client slows the reads. Closing the iterator cancels the
read in flight at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable

from rlm.errors import CorruptDataError, CorruptRecordError
from rlm.log.batches import parse_header
from rlm.log.model import LOG_OVERHEAD, MIN_SIZE_FIELD, BatchHeader

ReadRange = Callable[[int, int], Awaitable[bytes]]
"""Reads ``length`` bytes from ``position`` (fewer only where the object or file ends)."""
_PREFIX = struct.Struct(">qi")


async def _chunks(read: ReadRange, start: int, end: int, chunk_bytes: int) -> AsyncIterator[bytes]:
    """The bytes ``[start, end)`` in order, the next chunk read while the current one is used."""
    position = start
    pending: asyncio.Task[bytes] | None = None
    try:
        if position < end:
            pending = asyncio.ensure_future(read(position, min(chunk_bytes, end - position)))
        while pending is not None:
            data = await pending
            pending = None
            position += len(data)
            if data and position < end:
                pending = asyncio.ensure_future(read(position, min(chunk_bytes, end - position)))
            if not data:
                return
            yield data
    finally:
        if pending is not None:
            pending.cancel()
            with contextlib.suppress(BaseException):
                await pending


async def batches_in_range(
    read: ReadRange, start: int, end: int, *, chunk_bytes: int, name: str
) -> AsyncGenerator[tuple[BatchHeader, bytes], None]:
    """Yield ``(header, batch bytes)`` for each whole batch in ``[start, end)`` (``start`` at a batch
    boundary); header positions are positions in the object or file named ``name``.

    A batch cut by ``end`` is not yielded (the tail of a file the broker is appending to).

    Raises:
        CorruptDataError: a batch header is not valid (located in ``name``).
    """
    buffer = bytearray()
    at = start  # the position of buffer[0]
    async for chunk in _chunks(read, start, end, chunk_bytes):
        buffer += chunk
        used = 0
        while len(buffer) - used >= LOG_OVERHEAD + 5:
            _, size = _PREFIX.unpack_from(buffer, used)
            if size < MIN_SIZE_FIELD:
                raise CorruptRecordError(
                    f"batch size field {size} is smaller than the minimum {MIN_SIZE_FIELD}",
                    path=name,
                    position=at + used,
                )
            total = LOG_OVERHEAD + size
            if used + total > len(buffer):
                break
            with memoryview(buffer) as view:  # one copy of the batch, none of the buffer
                data = bytes(view[used : used + total])
            try:
                header = parse_header(data, 0, at + used)
            except CorruptDataError as exc:
                raise exc.at(name, at + used) from exc
            except struct.error as exc:
                raise CorruptRecordError(
                    f"batch header is truncated: {exc}", path=name, position=at + used
                ) from exc
            yield header, data
            used += total
        del buffer[:used]
        at += used
