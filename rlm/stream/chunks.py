"""Whole batches out of a byte range read in chunks, with one chunk of read-ahead.

The range is read ``chunk_bytes`` at a time through an awaitable ``read(position, length)`` (a
ranged GET on the event loop, or a file read off it). While the batches of one chunk are taken,
the next chunk is being read: at most two chunks (and a batch larger than a chunk, read whole)
are held, whatever the range's size. The consumer sets the pace: the read after the next starts
only when it asks for more, so a slow client slows the reads. Closing the iterator cancels the
read in flight at once. Once the range's last chunk is in and no read is in flight, ``on_last``
is called (a caller reading range after range starts the next one's first read there, keeping
to the same two chunks).
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
#: Stored bytes of a run at most (a batch larger than that excepted): a chunk's batches are copied
#: out of it a run at a time, so that the chunk and copies of all its batches are not held at once.
RUN_BYTES = 256 * 1024


async def _chunks(
    read: ReadRange, start: int, end: int, chunk_bytes: int, on_last: Callable[[], None] | None = None
) -> AsyncIterator[bytes]:
    """The bytes ``[start, end)`` in order, the next chunk read while the current one is used;
    ``on_last()`` before the last chunk is yielded (no read is in flight then)."""
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
            if pending is None and on_last is not None:
                on_last()
            yield data
    finally:
        if pending is not None:
            pending.cancel()
            with contextlib.suppress(BaseException):
                await pending


async def batches_in_range(
    read: ReadRange,
    start: int,
    end: int,
    *,
    chunk_bytes: int,
    name: str,
    on_last: Callable[[], None] | None = None,
) -> AsyncGenerator[tuple[BatchHeader, bytes], None]:
    """Each batch of :func:`batch_runs_in_range`, one at a time."""
    async with contextlib.aclosing(
        batch_runs_in_range(read, start, end, chunk_bytes=chunk_bytes, name=name, on_last=on_last)
    ) as runs:
        async for run in runs:
            for batch in run:
                yield batch


async def batch_runs_in_range(
    read: ReadRange,
    start: int,
    end: int,
    *,
    chunk_bytes: int,
    name: str,
    on_last: Callable[[], None] | None = None,
) -> AsyncGenerator[list[tuple[BatchHeader, bytes]], None]:
    """Yield ``(header, batch bytes)`` for each whole batch in ``[start, end)`` (``start`` at a batch
    boundary), batches of one chunk in lists (runs: none empty, of about :data:`RUN_BYTES`);
    header positions are positions in the object or file named ``name``.

    A batch cut by ``end`` is not yielded (the tail of a file the broker is appending to). Each
    batch's bytes are copied once out of the chunks; only a batch begun in one chunk and ended in
    a later one is gathered first (a chunk is never copied whole). ``on_last()`` is called once
    the last chunk is read, before its batches are yielded (see the module docstring).

    Raises:
        CorruptDataError: a batch header is not valid (located in ``name``); the batches before
            it are yielded first.
    """
    tail = bytearray()  # the bytes of a batch begun in the chunks before
    tail_total: int | None = None  # its size, once its header's start is in
    at = start  # the position of the next batch (of tail[0] when there is a tail)
    async for chunk in _chunks(read, start, end, chunk_bytes, on_last):
        run: list[tuple[BatchHeader, bytes]] = []
        held = 0
        try:
            with memoryview(chunk) as view:
                used = 0
                if tail:
                    if tail_total is None:  # its size field is (partly) in this chunk
                        tail_total = _whole_size(bytes(tail) + chunk[: LOG_OVERHEAD + 5], 0, at, name)
                    if tail_total is None or len(tail) + len(view) < tail_total:
                        tail += view  # not ended yet: gathered
                        continue
                    used = tail_total - len(tail)
                    tail += view[:used]
                    data = bytes(tail)
                    run.append((_batch(data, at, name), data))
                    at += tail_total
                    held = tail_total
                    tail.clear()
                while True:
                    tail_total = _whole_size(view, used, at, name)
                    if tail_total is None or used + tail_total > len(view):
                        break
                    data = bytes(view[used : used + tail_total])  # one copy of the batch, none of the chunk
                    run.append((_batch(data, at, name), data))
                    used += tail_total
                    at += tail_total
                    held += tail_total
                    if held >= RUN_BYTES:
                        yield run
                        run, held = [], 0
                tail += view[used:]
        except CorruptDataError:
            if run:  # what came before the corrupt batch goes first
                yield run
            raise
        if run:
            yield run


def _whole_size(buffer: bytes | bytearray | memoryview, used: int, at: int, name: str) -> int | None:
    """The size of the batch at ``used`` of ``buffer`` (at ``at`` in ``name``), header and all, or
    None when ``buffer`` does not hold the start of its header yet.

    Raises:
        CorruptRecordError: its size field is below the minimum.
    """
    if len(buffer) - used < LOG_OVERHEAD + 5:
        return None
    _, size = _PREFIX.unpack_from(buffer, used)
    if size < MIN_SIZE_FIELD:
        raise CorruptRecordError(
            f"batch size field {size} is smaller than the minimum {MIN_SIZE_FIELD}", path=name, position=at
        )
    return int(LOG_OVERHEAD + size)


def _batch(data: bytes, at: int, name: str) -> BatchHeader:
    """The header of the batch ``data``, at ``at`` in ``name``.

    Raises:
        CorruptDataError: it is not valid.
    """
    try:
        return parse_header(data, 0, at)
    except CorruptDataError as exc:
        raise exc.at(name, at) from exc
    except struct.error as exc:
        raise CorruptRecordError(f"batch header is truncated: {exc}", path=name, position=at) from exc
