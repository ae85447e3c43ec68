"""Whole batches out of a byte range read in chunks, with one chunk of read-ahead.

The range is read a chunk at a time: by an awaitable ``read(position, length)`` (a file read off
the event loop: :func:`ranged`), or from a streamed read of an object (one GET). While the
batches of one chunk are taken, the next chunk is being read (:func:`read_ahead`): at most two
chunks (and a batch larger than a chunk, read whole) are held, whatever the range's size. The
consumer sets the pace: the read after the next starts only when it asks for more, so a slow
client slows the reads. Closing the iterator cancels the read in flight at once. Once the range's
last chunk is in and no read is in flight, ``on_last`` is called (a caller reading range after
range starts the next one's first read there, keeping to the same two chunks); with a ``lead``,
as soon as the chunks in reach within ``lead`` bytes of the range's end (a caller whose next read
takes long to answer, as a GET does, starts it that much sooner).
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterator
from typing import NamedTuple, Protocol

from rlm.errors import CorruptDataError, CorruptRecordError
from rlm.log.batches import parse_header
from rlm.log.model import LOG_OVERHEAD, MIN_SIZE_FIELD, BatchHeader
from rlm.log.scan import adjoining, v2_headers

Chunk = bytes | bytearray
"""Bytes read of an object or file (a streamed read's pieces are filled in place)."""
Batch = bytes | memoryview
"""A whole batch's bytes: a view of the chunk it lies in, or its own bytes where it spans two."""
ReadRange = Callable[[int, int], Awaitable[Chunk]]
"""Reads ``length`` bytes from ``position`` (fewer only where the object or file ends)."""
_PREFIX = struct.Struct(">qi")


class StreamBatch(NamedTuple):
    """One stored batch sent by a stream."""

    header: BatchHeader
    """``position`` is the batch's position in its object or file."""
    data: Batch
    """A view of the chunk it was read in (:data:`Batch`): ``bytes(data)`` to keep it."""
    tier: str
    name: str
    """The object key or file the batch was read from, for error messages."""


class ReadMeter(Protocol):
    """Told of each read a stream makes (the metrics: reads in flight, bytes read)."""

    def read_started(self) -> None: ...

    def read_ended(self, size: int) -> None:
        """The read ended (done, failed or cancelled) with ``size`` bytes."""
        ...


#: Stored bytes of a run at most (a batch larger than that excepted): a chunk's batches are handed
#: out a run at a time, so that its first batches are on their way while the rest are parsed.
RUN_BYTES = 256 * 1024


async def ranged(read: ReadRange, start: int, end: int, chunk_bytes: int) -> AsyncGenerator[Chunk, None]:
    """The bytes ``[start, end)`` in chunks of ``chunk_bytes``, each one ranged read, read when
    asked for (fewer bytes only where the object or file ends)."""
    position = start
    while position < end:
        data = await read(position, min(chunk_bytes, end - position))
        if not data:
            return
        position += len(data)
        yield data


async def read_ahead(
    chunks: AsyncGenerator[Chunk, None],
    start: int,
    end: int,
    on_last: Callable[[], None] | None = None,
    *,
    lead: int = 0,
) -> AsyncGenerator[Chunk, None]:
    """The chunks of ``[start, end)`` in order, the next one read while the current one is used
    (one chunk ahead, never more); ``on_last()`` once, before the first chunk that brings the
    bytes read within ``lead`` of ``end`` is yielded (with no ``lead``: the chunk reaching ``end``,
    when no read is in flight). Closing the iterator cancels the read in flight at once and closes
    ``chunks``."""
    position = start
    pending: asyncio.Future[Chunk] | None = None
    called = on_last is None
    try:
        if position < end:
            pending = asyncio.ensure_future(anext(chunks))
        while pending is not None:
            try:
                data = await pending
            except StopAsyncIteration:
                return
            finally:
                pending = None
            position += len(data)
            if data and position < end:
                pending = asyncio.ensure_future(anext(chunks))
            if not data:
                return
            if not called and (pending is None or end - position <= lead):
                called = True
                assert on_last is not None
                on_last()
            yield data
    finally:
        if pending is not None:
            pending.cancel()
            with contextlib.suppress(BaseException):
                await pending
        await chunks.aclose()


async def batches_in_range(
    read: ReadRange,
    start: int,
    end: int,
    *,
    chunk_bytes: int,
    name: str,
    on_last: Callable[[], None] | None = None,
    whole: bool = False,
) -> AsyncGenerator[tuple[BatchHeader, Batch], None]:
    """Each batch of :func:`batch_runs_in_range`, one at a time."""
    async with contextlib.aclosing(
        batch_runs_in_range(
            read, start, end, chunk_bytes=chunk_bytes, name=name, on_last=on_last, whole=whole
        )
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
    whole: bool = False,
) -> AsyncGenerator[list[tuple[BatchHeader, Batch]], None]:
    """Yield ``(header, batch bytes)`` for each whole batch in ``[start, end)`` (``start`` at a batch
    boundary), batches of one chunk in lists (runs: none empty, of about :data:`RUN_BYTES`);
    header positions are positions in the object or file named ``name``.

    The range is read by :func:`ranged` reads, one chunk ahead (:func:`read_ahead`): see
    :func:`batch_runs` (and its ``whole``) and the module docstring.
    """
    chunks = read_ahead(ranged(read, start, end, chunk_bytes), start, end, on_last)
    async with contextlib.aclosing(batch_runs(chunks, start, name=name, whole=whole)) as runs:
        async for run in runs:
            yield run


async def batch_runs(
    chunks: AsyncGenerator[Chunk, None], start: int, *, name: str, whole: bool = False
) -> AsyncGenerator[list[tuple[BatchHeader, Batch]], None]:
    """Yield ``(header, batch bytes)`` for each whole batch of ``chunks`` (consecutive bytes of
    the object or file named ``name`` from ``start``, a batch boundary), batches of one chunk in
    lists (runs: none empty, of about :data:`RUN_BYTES`); header positions are positions in
    ``name``. ``chunks`` is closed at the end.

    A batch cut by the chunks' end is not yielded (the tail of a file the broker is appending
    to), unless ``whole`` says the chunks hold a whole object or rolled segment: such a batch is
    then damage (its size field, which no CRC covers, says more bytes than there are), an error
    rather than the silent loss of every record from it to the end.

    A batch is a view of its chunk (a chunk is held while a batch of it is), not a copy; only a
    batch begun in one chunk and ended in a later one is gathered into bytes of its own (a chunk
    is never copied whole).

    Raises:
        CorruptDataError: a batch header is not valid (located in ``name``), or, with ``whole``,
            the last batch is cut by the end; the batches before it are yielded first.
    """
    tail = bytearray()  # the bytes of a batch begun in the chunks before
    tail_total: int | None = None  # its size, once its header's start is in
    at = start  # the position of the next batch (of tail[0] when there is a tail)
    try:
        async for chunk in chunks:
            run: list[tuple[BatchHeader, Batch]] = []
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
                        gathered = bytes(tail)
                        run.append((_batch(gathered, at, name), gathered))
                        at += tail_total
                        held = tail_total
                        tail.clear()
                    while True:
                        headers, end = v2_headers(view, used, at, RUN_BYTES - held)
                        if headers:  # read in C, up to the run's end or a batch it leaves to the parser
                            base = used - at
                            run += [
                                (h, view[base + h.position : base + h.position + h.size]) for h in headers
                            ]
                            held += end - used
                            at += end - used
                            used = end
                            if held >= RUN_BYTES:
                                yield run
                                run, held = [], 0
                            continue
                        tail_total = _whole_size(view, used, at, name)
                        if tail_total is None or used + tail_total > len(view):
                            break
                        data = view[used : used + tail_total]  # outlives ``view``
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
        if whole and tail:
            said = "its header" if tail_total is None else f"its size field's {tail_total} bytes"
            raise CorruptRecordError(
                f"the last batch is cut short: {len(tail)} bytes are left at the end, short of {said}",
                path=name,
                position=at,
            )
    finally:
        await chunks.aclose()


def whole_batches(
    data: Chunk, at: int, name: str
) -> tuple[list[tuple[BatchHeader, Batch]], int, CorruptDataError | None]:
    """The whole batches of ``data`` (bytes at ``at`` in ``name``, from a batch's start), views of
    it, with header positions in ``name``; the position in ``data`` after the last (short of its
    end where a batch is cut by it); and the error of a batch that is not valid, where the walk
    stopped (None when it did not): the batches before it are given."""
    found: list[tuple[BatchHeader, Batch]] = []
    view = memoryview(data)
    used = 0
    try:
        while True:
            headers, end = v2_headers(view, used, at + used, 1 << 62)
            if headers:  # read in C, up to the end or a batch it leaves to the parser
                found += [(h, view[h.position - at : h.position - at + h.size]) for h in headers]
                used = end
            size = _whole_size(view, used, at + used, name)
            if size is None or used + size > len(view):
                return found, used, None
            batch = view[used : used + size]
            found.append((_batch(batch, at + used, name), batch))
            used += size
    except CorruptDataError as exc:
        return found, used, exc


def chunk_runs(batches: list[Batch]) -> Iterator[tuple[int, int]]:
    """``(start, end)`` of each run ``batches[start:end]`` read in one chunk (views of one
    object), in order: :func:`joined` makes each one view, where a group of batches spanning two
    chunks would be copied whole into one buffer."""
    start = 0
    for end in range(1, len(batches) + 1):
        if end < len(batches):
            before, after = batches[end - 1], batches[end]
            if isinstance(before, memoryview) and isinstance(after, memoryview) and before.obj is after.obj:
                continue
        yield start, end
        start = end


def joined(batches: list[Batch]) -> Batch:
    """The bytes of ``batches`` end to end: a view of the chunk they were read in where they lie so
    in it (batches of one chunk, in order: no copy), else their bytes joined."""
    if len(batches) == 1:
        return batches[0]
    view = adjoining(batches)
    return b"".join(batches) if view is None else view


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


def _batch(data: Batch, at: int, name: str) -> BatchHeader:
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
