"""The batches of a planned range, remote segments first, then the broker's files.

The remote tier is read from the segment holding the next offset (overlapping segments are legal:
batches below the next offset are stepped over), from the position its offset index gives to the
segment's end, by one streamed read of the store (one GET on S3, resumed where it broke:
:meth:`AsyncRangeReader.stream_range`) taken a piece at a time (:mod:`rlm.stream.chunks`). Once
the next offset is one the broker still has (:attr:`RangePlan.local_start`), the rest is read from
its segment files: no offset is sent twice and none is skipped. Blocking calls (the metadata
store, index files, file reads) run on the stream's executor, never on the event loop; remote
bytes come from an :class:`AsyncRangeReader`.

A stream that encodes its records (:meth:`BatchReader.encoded`) reads the broker's files a chunk
per call on the executor, the chunk's batches chosen and encoded in the same call, chunks in
flight at once (:mod:`rlm.stream.local_chunks`): nothing of them but their pieces passes through
the event loop.

Once a remote segment's read is within :data:`NEXT_SEGMENT_LEAD_BYTES` of its end, the segment
after it is looked up and its read begun, its first piece taken, while the rest of the one before
is read and sent (:class:`_NextSegment`), so that a stream does not wait for S3 at every segment
boundary: a GET's first bytes take longer than the last megabytes of a segment take to send. It
holds one piece more than the two it reads a segment with.

The broker deletes its oldest segments once they are tiered (local retention: it renames their
files ``.deleted``, then removes them), whenever it likes. A segment the stream finds gone, or a
listing that now starts above the next offset, sends the stream back to the remote tier for the
offsets the broker no longer has, then to the broker's files from their new start
(:meth:`BatchReader.runs`): nothing is skipped. A remote segment's object found gone (a compaction
replaced the segment, or retention deleted it, since the stream looked it up) sends the stream to
the copy holding the next offset now, looked up afresh, as each of Kafka's fetches looks its
segment up. Offsets neither tier holds any more end the stream with
:class:`~rlm.errors.OffsetOutOfRangeError`.

Batches sent: every stored batch overlapping ``[start, end)`` that lies wholly below the last
fetchable offset, but control batches (transaction markers) and, with READ_COMMITTED, the batches
of aborted transactions. A remote copy is read up to the last offset reads answer from it
(:func:`~rlm.lookup.answer_end.remote_answer_end`): a diverged copy's batch kept across the cut
is sent cut short there (:func:`rlm.log.clip.batch_up_to`: its records below the cut, the old
leader's past it left out), raw or decoded alike, and the stream goes on from the cut.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from functools import partial
from typing import Any, NamedTuple, Protocol, TypeVar

from rlm.errors import CorruptDataError, NotFoundError, OffsetOutOfRangeError
from rlm.log.aborted import AbortedIndex
from rlm.log.byte_source import FileSource
from rlm.log.clip import cut_short
from rlm.log.logdir import PartitionDir
from rlm.log.model import BatchHeader
from rlm.log.segment import Segment
from rlm.lookup import answer_end
from rlm.lookup.index_cache import RemoteIndexCache
from rlm.lookup.service import LookupService
from rlm.lookup.topic_ids import open_of_topic
from rlm.metastore.model import RemoteSegment
from rlm.stream.chunks import (
    Batch,
    Chunk,
    ReadMeter,
    StreamBatch,
    batch_runs,
    batch_runs_in_range,
    read_ahead,
)
from rlm.stream.local_chunks import ChunkJob, ChunkRead, Encoding, chunk_bounds, ends_range, first_of, is_sent
from rlm.stream.plan import RangePlan

T = TypeVar("T")
G = TypeVar("G")
log = logging.getLogger(__name__)
#: Pieces a remote segment's read is taken in, per chunk. A piece of an open read costs no round
#: trip, so that it need not be large: an eighth of a chunk (256 KiB by default) taken and one ahead
#: hold a quarter chunk of read bytes, leaving the rest of a stream's window to what the HTTP client
#: holds of its open reads, to a group of batches gathered (their pieces held while they are) and
#: to the pieces being encoded and sent. 64 slow raw streams took 2.3 MiB each with eighths, 2.6
#: with quarters (and a 4 MiB window).
PIECES_PER_CHUNK = 8
#: How far before a remote segment's end the stream begins reading the next one (its first piece
#: taken, its GET left open): more than a GET's first bytes take (11 ms of the 21 a GET of one of
#: the bench's 8 MiB segments takes from moto's server here; tens of milliseconds from S3) at the
#: hundreds of MB/s a stream is sent at. Begun at the last piece instead, raw streams from moto
#: were 1.2 times as slow; begun 4 MiB ahead, 1.11 times. The open GET holds its piece and what
#: the HTTP client buffers of it: 64 slow streams of segments no longer than the lead (one GET
#: always open ahead) held about 1.1 MiB more each (3.1-3.2 MiB, within the 4 MiB window).
NEXT_SEGMENT_LEAD_BYTES = 8 * 1024 * 1024
#: Times in a row the broker's files may be found changed under a stream (a segment gone between
#: its listing and its opening) with no batch read in between, before the stream gives up.
MAX_LOCAL_RELISTS = 8
#: Times in a row a remote segment's object may be found gone at the same next offset, each time
#: another copy said to hold it, before the stream gives up.
MAX_REMOTE_LOOKUPS = 8
RunBlocking = Callable[[Callable[[], T]], Awaitable[T]]
"""Runs a blocking call off the event loop and awaits it."""


class AsyncRangeReader(Protocol):
    """Streamed reads of remote objects for an event loop (the async side of ``RemoteStorage``)."""

    def stream_range(
        self, key: str, start: int, length: int, *, piece_bytes: int
    ) -> AsyncGenerator[Chunk, None]:
        """As :meth:`RemoteStorage.stream_range <rlm.storage.protocol.RemoteStorage.stream_range>`:
        ``length`` bytes of ``key`` from ``start``, ``piece_bytes`` at a time (the last piece
        excepted), from one read of the store (one GET on S3), resumed from where it stopped when
        it fails part way, within the backend's retries. Close the iterator to end the read.

        Raises (when the pieces are taken):
            NotFoundError: No object is stored under ``key``.
            StorageUnavailableError: Retries are spent (retriable).
            StorageError: The store refused the read, or answered other bytes than asked.
        """
        ...

    async def close(self) -> None:
        """Release connections; idempotent."""
        ...


class _NextSegment(NamedTuple):
    """The remote segment holding ``offset``, looked up ahead, and the last offset reads answer
    from it (``last``; :func:`~rlm.lookup.answer_end.remote_answer_end`); when the stream reads
    it from its start, its read begun (``pieces``) and its first piece taken (``first``; empty
    where the object is)."""

    offset: int
    segment: RemoteSegment | None
    pieces: AsyncGenerator[Chunk, None] | None
    first: Chunk
    last: int | None = None


class BatchReader:
    """Reads the batches of one :class:`RangePlan`."""

    def __init__(
        self,
        plan: RangePlan,
        service: LookupService,
        indexes: RemoteIndexCache,
        remote: AsyncRangeReader,
        run: RunBlocking[object],
        *,
        chunk_bytes: int,
        meter: ReadMeter | None = None,
    ) -> None:
        self.plan = plan
        self.service = service
        self.indexes = indexes
        self.remote = remote
        self._run = run
        self.chunk_bytes = chunk_bytes
        self._meter = meter
        self._aborted = AbortedIndex(plan.aborted)
        self._done = False  # a batch past the range was met
        self.next_offset = plan.start
        """The offset the stream continues from."""
        self.local_start = plan.local_start
        """The first offset the broker's log holds, as last seen: the plan's, until the broker
        deletes segments under the stream."""
        self._local_dir = plan.local
        self._relist = False  # the broker's files changed under the stream: list them again
        self._relists = 0  # at the same next offset
        self._relisted_at = -1
        self._active_base = -1  # the base offset of the broker's active segment, as last listed
        self._ahead: asyncio.Task[_NextSegment] | None = None
        self._reading: RemoteSegment | None = None  # the remote segment being read
        self._lookups = 0  # of the next offset after an object was found gone, at the same offset
        self._looked_up_at = -1

    async def _blocking(self, call: Callable[[], T]) -> T:
        return await self._run(call)  # type: ignore[return-value]

    async def batches(self) -> AsyncGenerator[StreamBatch, None]:
        """Every batch the stream sends, in offset order (those of :meth:`runs`, one at a time)."""
        async with contextlib.aclosing(self.runs()) as runs:
            async for run in runs:
                for batch in run:
                    yield batch

    def runs(self) -> AsyncGenerator[list[StreamBatch], None]:
        """Every batch the stream sends, in offset order, those of a chunk read in one list (a run;
        none is empty): the batches cost no step of the generators each."""
        return self._tiers(self._segment_runs, _as_they_are)

    def encoded(
        self,
        encoding: Encoding[T],
        grouped: Callable[[AsyncIterator[list[StreamBatch]]], AsyncGenerator[T, None]],
        ahead: int,
    ) -> AsyncGenerator[T, None]:
        """The pieces ``encoding`` makes of the batches :meth:`runs` gives, in order: the remote
        tier's runs made into pieces by ``grouped`` (grouped, then encoded off the event loop), the
        broker's segments a chunk per call on the executor, ``ahead`` chunks at once
        (:mod:`rlm.stream.local_chunks`). Close the iterator to cancel its reads."""
        return self._tiers(partial(self._segment_encoded, encoding, grouped, ahead), grouped)

    async def _tiers(
        self,
        local: Callable[[Segment, FileSource, int], AsyncGenerator[G, None]],
        remote: Callable[[AsyncGenerator[list[StreamBatch], None]], AsyncGenerator[G, None]],
    ) -> AsyncGenerator[G, None]:
        """What ``remote`` makes of the remote tier's runs and ``local`` of each of the broker's
        segments, in offset order, from tier to tier until the range is done (module docstring)."""
        plan = self.plan
        try:
            while self.next_offset < plan.end:
                if self._relist:
                    await self._list_local_again()
                if self.local_start is not None and self.next_offset >= self.local_start:
                    async with contextlib.aclosing(self._local_segments(local)) as segments:
                        async for item in segments:
                            yield item
                    if not self._relist:
                        return
                    continue
                async with contextlib.aclosing(remote(self._remote_runs())) as remote_tier:
                    async for item in remote_tier:
                        yield item
                if self._done:
                    return
        finally:
            await self._drop_ahead()

    async def _remote_runs(self) -> AsyncGenerator[list[StreamBatch], None]:
        """The runs of the remote segments from the next offset, until it is one the broker holds
        or the range is done (``_done``)."""
        while self.next_offset < self.plan.end:
            if self.local_start is not None and self.next_offset >= self.local_start:
                return
            try:
                async with contextlib.aclosing(self._remote_segment()) as remote:
                    async for found in remote:
                        if found is None:
                            self._done = True
                            return
                        yield found
            except OffsetOutOfRangeError:
                raise
            except NotFoundError as exc:
                await self._look_up_again(exc)

    async def _look_up_again(self, gone: NotFoundError) -> None:
        """After ``gone``: an object of the segment being read is no longer stored (a compaction
        replaced the segment, or retention deleted it, since it was looked up). The next offset is
        looked up afresh, and the stream goes on from the copy holding it now.

        Raises:
            OffsetOutOfRangeError: no copy holds the next offset any more.
            NotFoundError: ``gone``, where the copy still said to hold the next offset is the one
                whose object is missing.
        """
        tp, offset, failed = self.plan.tp, self.next_offset, self._reading
        self._lookups = self._lookups + 1 if offset == self._looked_up_at else 1
        self._looked_up_at = offset
        self.service.invalidate(tp)  # the store changed since the segment was looked up
        segment = await self._segment_for(offset)
        if segment is None:
            raise OffsetOutOfRangeError(
                f"no remote segment of {tp} holds offset {offset} any more ({gone})"
            ) from gone
        if self._lookups > MAX_REMOTE_LOOKUPS or (
            failed is not None and failed.segment_id == segment.segment_id
        ):
            raise gone
        log.info(
            "a remote segment of %s went under a stream at offset %d (%s): reading on from %s",
            tp,
            offset,
            gone,
            segment.layout.log_key,
        )

    async def _list_local_again(self) -> None:
        """List the broker's segments afresh (they changed under the stream): the log's new start."""
        self._relist = False
        self._relists = self._relists + 1 if self.next_offset == self._relisted_at else 1
        self._relisted_at = self.next_offset
        tp = self.plan.tp
        if self._relists > MAX_LOCAL_RELISTS:
            raise OffsetOutOfRangeError(
                f"the broker's segments of {tp} kept changing under the stream at offset {self.next_offset}"
            )
        local = await self._blocking(lambda: self.service.pinned_partition(tp, relisted=True))
        segments = await self._blocking(local.segments) if local is not None else []
        self._local_dir = local
        self.local_start = segments[0].base_offset if segments else None
        log.info(
            "the broker deleted segments of %s under a stream at offset %d: its log now starts at %s",
            tp,
            self.next_offset,
            self.local_start,
        )

    async def _segment_for(self, offset: int) -> RemoteSegment | None:
        tp, local = self.plan.tp, self.plan.local
        return await self._blocking(lambda: self.service.remote_segment_for_offset(tp, local, offset))

    async def _look_ahead(self, offset: int) -> _NextSegment:
        """The segment holding ``offset``, its last answered offset (both asked in one call on
        the executor), and its first chunk when it is read from its start."""
        tp, local, service = self.plan.tp, self.plan.local, self.service

        def find() -> tuple[RemoteSegment | None, int | None]:
            segment = service.remote_segment_for_offset(tp, local, offset)
            if segment is None:
                return None, None
            return segment, answer_end.remote_answer_end(service, tp, local, segment)

        segment, last = await self._blocking(find)
        if segment is None or offset > segment.start_offset:
            return _NextSegment(offset, segment, None, b"", last)
        pieces = self._remote_pieces(segment.layout.log_key, 0, segment.size_bytes)
        try:
            first = await anext(pieces, b"")
        except BaseException:
            await pieces.aclose()
            raise
        return _NextSegment(offset, segment, pieces, first, last)

    def _answer_end(self, segment: RemoteSegment) -> Awaitable[int]:
        """The last offset reads answer from ``segment``, asked on the executor."""
        tp, local = self.plan.tp, self.plan.local
        return self._blocking(lambda: answer_end.remote_answer_end(self.service, tp, local, segment))

    async def _remote_pieces(self, key: str, start: int, end: int) -> AsyncGenerator[Chunk, None]:
        """The bytes ``[start, end)`` of ``key`` in pieces of :data:`PIECES_PER_CHUNK` to a chunk,
        from one streamed read of the store (each piece counted as a read)."""
        piece_bytes = max(1, self.chunk_bytes // PIECES_PER_CHUNK)
        pieces = self.remote.stream_range(key, start, end - start, piece_bytes=piece_bytes)
        read = 0
        async with contextlib.aclosing(pieces):
            while piece := await self._counted(anext(pieces, b"")):
                read += len(piece)
                yield piece
        if read < end - start:
            # The object is shorter than its row: its last batches would be skipped silently, the
            # stream going on from the segment's end offset.
            raise CorruptDataError(
                f"the object ends at byte {start + read}, short of the {end} bytes its metadata records",
                path=key,
                position=start + read,
            )

    def _start_ahead(self, segment: RemoteSegment) -> None:
        """Look up (and start reading) the segment after ``segment`` when the range goes on there."""
        plan, offset = self.plan, segment.end_offset + 1
        if self._ahead is not None or offset >= plan.end:
            return
        if self.local_start is not None and offset >= self.local_start:
            return
        self._ahead = asyncio.ensure_future(self._look_ahead(offset))

    async def _drop_ahead(self) -> None:
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            ahead.cancel()
            with contextlib.suppress(BaseException):
                found = await ahead
                if found.pieces is not None:
                    await found.pieces.aclose()

    async def _remote_segment(self) -> AsyncGenerator[list[StreamBatch] | None, None]:
        """The runs of the segment holding the next offset; None once the range is done."""
        tp, offset = self.plan.tp, self.next_offset
        ahead: _NextSegment | None = None
        if self._ahead is not None:
            task, self._ahead = self._ahead, None
            ahead = await task
            if ahead.offset != offset:  # looked up for another offset: as if it had not been
                if ahead.pieces is not None:
                    await ahead.pieces.aclose()
                ahead = None
        segment = ahead.segment if ahead is not None else await self._segment_for(offset)
        self._reading = segment
        if segment is None:
            deleted = (
                " (the broker deleted its local segment under the stream)" if self._relisted_at >= 0 else ""
            )
            raise OffsetOutOfRangeError(f"no remote segment of {tp} holds offset {offset}{deleted}")
        if offset <= segment.start_offset:  # from the object's start: no index to fetch
            position = 0
        else:
            position = await self._blocking(
                lambda: self.indexes.offset_index(segment).lookup(offset).position
            )
        key = segment.layout.log_key
        # The copy's last answered offset: asked ahead with the segment, else while its first
        # bytes are on their way.
        last = ahead.last if ahead is not None else None
        if last is not None and last < offset:  # the store has the copy answer here: as it says
            last = None
        answered = (
            asyncio.ensure_future(self._answer_end(segment)) if ahead is None or ahead.last is None else None
        )
        if ahead is not None and ahead.pieces is not None and position == 0:
            chunks = _then(ahead.first, ahead.pieces)  # the read begun ahead goes on
        else:
            if ahead is not None and ahead.pieces is not None:
                await ahead.pieces.aclose()
            chunks = self._remote_pieces(key, position, segment.size_bytes)
        async with (
            _dropped(answered),
            contextlib.aclosing(
                batch_runs(
                    read_ahead(
                        chunks,
                        position,
                        segment.size_bytes,
                        lambda: self._start_ahead(segment),
                        lead=NEXT_SEGMENT_LEAD_BYTES,
                    ),
                    position,
                    name=key,
                    whole=True,
                )
            ) as found,
        ):
            async for run in found:
                if answered is not None:
                    last, answered = await answered, None
                    if last < offset:  # the store has the copy answer here: as it says
                        last = None
                sent: list[StreamBatch] = []
                for header, data in run:
                    if header.last_offset < self.next_offset:
                        continue
                    if self.local_start is not None and header.base_offset >= self.local_start:
                        # The broker has the rest. No record lies between the next offset and
                        # its first (compacted away, or this segment would hold it): go on from
                        # there, not from this segment again.
                        self.next_offset = max(self.next_offset, self.local_start)
                        if sent:
                            yield sent
                        return
                    if last is not None and header.last_offset > last:
                        # Another copy or the broker's log answers past ``last``: a batch across
                        # it is sent cut short there (the old leader's records are past it, and
                        # so is the end of the batch as stored, which may lie past the range or
                        # the high watermark where the batch cut short does not).
                        clipped = None
                        if header.base_offset <= last and is_sent(header, self._aborted):
                            clipped = await self._blocking(partial(cut_short, header, bytes(data), last, key))
                        if clipped is not None and await self._ends_here(*clipped):
                            if sent:
                                yield sent
                            yield None
                            return
                        self.next_offset = max(self.next_offset, last + 1)
                        if clipped is not None:
                            sent.append(StreamBatch(*clipped, "remote", key))
                        if sent:
                            yield sent
                        return
                    # (the test inline, not through _ends_here: no coroutine made per batch)
                    if header.last_offset >= self.plan.end and await self._past_the_end(header, data):
                        if sent:
                            yield sent
                        yield None
                        return
                    self.next_offset = header.last_offset + 1
                    if is_sent(header, self._aborted):
                        sent.append(StreamBatch(header, data, "remote", key))
                if sent:
                    yield sent
        self.next_offset = max(self.next_offset, segment.end_offset + 1)

    async def _local_segments(
        self, read: Callable[[Segment, FileSource, int], AsyncGenerator[G, None]]
    ) -> AsyncGenerator[G, None]:
        """What ``read(segment, source, position)`` yields of each of the broker's segments from the
        next offset (opened at the position its offset index gives), until the range is done;
        where a segment is gone (or the listing starts above the next offset), none more:
        ``_relist`` tells :meth:`runs` to list them again."""
        local = self._local_dir
        assert local is not None
        segments = await self._blocking(local.segments)
        if not segments or segments[0].base_offset > self.next_offset:
            self._relist = True  # deleted since it was listed
            return
        self._active_base = segments[-1].base_offset
        for i, segment in enumerate(segments):
            if i + 1 < len(segments) and segments[i + 1].base_offset <= self.next_offset:
                continue  # wholly below the next offset
            offset = self.next_offset
            try:
                entry = await self._blocking(lambda: segment.offset_index().lookup(offset))  # noqa: B023
                source = await self._blocking(partial(self._open, local, segment))
            except FileNotFoundError:  # the broker deleted it since it was listed
                self._relist = True
                return
            try:
                position = await self._blocking(partial(segment.read_position, offset, entry, source))
                async with contextlib.aclosing(read(segment, source, position)) as found:
                    async for item in found:
                        yield item
            finally:
                source.close()
            if self._done:
                return

    def _open(self, local: PartitionDir, segment: Segment) -> FileSource:
        """``segment`` opened, where the broker's directory holds the planned topic still (blocking)."""
        return open_of_topic(local, segment, self.plan.topic_id, "stream", self.next_offset)

    async def _segment_runs(
        self, segment: Segment, source: FileSource, position: int
    ) -> AsyncGenerator[list[StreamBatch], None]:
        """The runs of one of the broker's segments from ``position``, read a chunk at a time."""

        async def read(at: int, length: int) -> Chunk:
            return await self._counted(self._blocking(lambda: source.read(at, length)))

        # Only the active segment may end in a batch the broker is still writing.
        rolled = segment.base_offset < self._active_base
        async with contextlib.aclosing(
            batch_runs_in_range(
                read, position, source.size, chunk_bytes=self.chunk_bytes, name=source.name, whole=rolled
            )
        ) as found:
            async for run in found:
                sent: list[StreamBatch] = []
                for header, data in run:
                    if header.last_offset < self.next_offset:
                        continue
                    if header.last_offset >= self.plan.end and await self._past_the_end(header, data):
                        self._done = True
                        if sent:
                            yield sent
                        return
                    self.next_offset = header.last_offset + 1
                    if is_sent(header, self._aborted):
                        sent.append(StreamBatch(header, data, "local", source.name))
                if sent:
                    yield sent

    async def _segment_encoded(
        self,
        encoding: Encoding[T],
        grouped: Callable[[AsyncIterator[list[StreamBatch]]], AsyncGenerator[T, None]],
        ahead: int,
        segment: Segment,
        source: FileSource,
        position: int,
    ) -> AsyncGenerator[T, None]:
        """The pieces of one of the broker's segments from ``position``, a chunk per call, ``ahead``
        at once; from a chunk whose batches do not end where the next begins, the rest as
        :meth:`_segment_runs` reads it, made into pieces by ``grouped``."""
        step = max(1, self.chunk_bytes // ahead)  # the chunks in flight hold one chunk's bytes
        bounds = await self._blocking(
            lambda: chunk_bounds(segment.offset_index().positions_apart, position, source.size, step)
        )
        jobs: deque[tuple[ChunkJob[T], asyncio.Future[ChunkRead[T]]]] = deque()
        taken = 0  # chunks submitted
        from_offset = self.next_offset

        def submit() -> None:
            nonlocal taken
            lo, hi = bounds[taken], bounds[taken + 1]
            job = ChunkJob(
                self.plan,
                self._aborted,
                encoding,
                source.duplicate(),
                source.name,
                lo,
                hi,
                from_offset,
                self._meter,
            )
            future = asyncio.ensure_future(self._blocking(job))
            future.add_done_callback(_retrieved)
            jobs.append((job, future))
            taken += 1

        try:
            while jobs or taken < len(bounds) - 1:
                while taken < len(bounds) - 1 and len(jobs) < ahead:
                    submit()
                job, future = jobs.popleft()
                read = await future
                whole = read.error is None and not read.done and read.end == job.hi
                if whole and taken < len(bounds) - 1:
                    submit()  # read and encoded while this chunk's pieces are sent
                for piece in read.pieces:
                    yield piece
                self.next_offset = max(self.next_offset, read.next_offset)
                if read.error is not None:
                    raise read.error
                if read.done:
                    self._done = True
                    return
                if not whole:  # a batch cut by the chunk's end, or an index entry not at a batch
                    for left, _ in jobs:
                        left.cancelled = True
                    jobs.clear()
                    async with contextlib.aclosing(
                        grouped(self._segment_runs(segment, source, read.end))
                    ) as rest:
                        async for piece in rest:
                            yield piece
                    return
        finally:
            for left, _ in jobs:
                left.cancelled = True

    async def _ends_here(self, header: BatchHeader, data: Batch) -> bool:
        """Whether the stream ends before a batch: it reaches the range's end and
        :meth:`_past_the_end` says so."""
        return header.last_offset >= self.plan.end and await self._past_the_end(header, data)

    async def _past_the_end(self, header: BatchHeader, data: Batch) -> bool:
        """Whether a batch ending at or past the range's end lies wholly past it or past the last
        fetchable offset (:func:`~rlm.stream.local_chunks.ends_range`)."""
        first = header.base_offset
        if first < 0 and header.last_offset < self.plan.limit:  # decompressed off the event loop
            first = await self._blocking(lambda: first_of(header, data))
        return ends_range(self.plan, header, first)

    async def _counted(self, read: Awaitable[Chunk]) -> Chunk:
        if self._meter is None:
            return await read
        self._meter.read_started()
        data: Chunk = b""
        try:
            data = await read
        finally:
            self._meter.read_ended(len(data))
        return data


async def _then(first: Chunk, rest: AsyncGenerator[Chunk, None]) -> AsyncGenerator[Chunk, None]:
    """``first`` (none when empty: the object ended), then the pieces of ``rest``."""
    async with contextlib.aclosing(rest):
        if not first:
            return
        yield first
        async for piece in rest:
            yield piece


def _as_they_are(runs: AsyncGenerator[list[StreamBatch], None]) -> AsyncGenerator[list[StreamBatch], None]:
    return runs


def _retrieved(future: asyncio.Future[Any]) -> None:
    """Take a chunk call's outcome, so that one the stream no longer waits for is not reported
    as never retrieved."""
    if not future.cancelled():
        future.exception()


@contextlib.asynccontextmanager
async def _dropped(call: asyncio.Future[Any] | None) -> AsyncIterator[None]:
    """Cancels ``call`` at the end of the block where it is still running; its outcome, unseen in
    the block, is dropped (a failure included, not left to be logged as never retrieved)."""
    try:
        yield
    finally:
        if call is not None:
            call.cancel()  # done: nothing to cancel
            with contextlib.suppress(BaseException):
                await call
