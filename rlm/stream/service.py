"""Range streams of a process: their bound, their memory window, their reads and their metrics.

* At most ``remote.fetch.max.streams`` streams are sent at once: :meth:`RecordStreams.slot` refuses
  another (the transports answer 429 / RESOURCE_EXHAUSTED with a retry hint).
* Each stream holds at most ``remote.fetch.stream.buffer.bytes`` of read bytes: two chunks of half
  that (the one being sent and the one read ahead), a batch larger than a chunk excepted.
* Blocking calls (metadata, index files, the broker's files) run on the streams' own bounded
  executor; remote objects are read on the event loop by an :class:`AsyncRangeReader`.
* Records are decoded and encoded (NDJSON lines, Arrow record batches and messages) on that
  executor too, a group of batches at a time, ahead of the piece being sent (:func:`encode_ahead`):
  as many groups of a stream at once as the executor has threads (:attr:`RecordStreams.encodings`;
  the C decoder and line writer run without the GIL), while the event loop reads and sends. A stream holds at
  most that many encoded pieces more than the one being sent, and its groups are that much
  smaller (:attr:`RecordStreams.group_bytes`), so that they hold no more read bytes. The broker's
  files are read, their batches chosen and encoded a piece of the file per call of that executor,
  as many at once as it has threads, each that fraction of a chunk, so that together they hold one
  chunk's bytes (:meth:`RecordStreams.encoded_range`, :mod:`rlm.stream.local_chunks`).
* Calls registered with :meth:`RecordStreams.when_idle` run on that executor once a burst of
  streams is over, those registered with :meth:`RecordStreams.when_read` each time streams have
  read so many bytes more, where the read ends (``rlm serve`` hands the memory the streams freed
  back to the kernel).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import threading
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from functools import partial
from typing import TypeVar

from rlm.errors import CorruptDataError
from rlm.lookup.index_cache import RemoteIndexCache
from rlm.lookup.ranged_search import Checkpoint, never_cancelled
from rlm.lookup.service import LookupService
from rlm.metrics import Metrics
from rlm.stream.chunks import StreamBatch
from rlm.stream.local_chunks import Encoding, encode_until_damaged
from rlm.stream.plan import RangePlan, RangeQuery, plan_range
from rlm.stream.reader import AsyncRangeReader, BatchReader

T = TypeVar("T")
G = TypeVar("G")
log = logging.getLogger(__name__)

DEFAULT_BUFFER_BYTES = 4 * 1024 * 1024
DEFAULT_MAX_STREAMS = 64
#: Threads of the streams' executor: its calls are each short (a metadata query per segment, an
#: offset index for the segment a range starts inside, a file read of the broker's), and remote
#: bytes never take one, so that two serve many streams.
DEFAULT_IO_THREADS = 2
#: Seconds a refused client is told to wait (``Retry-After``).
RETRY_AFTER_S = 1
#: Seconds without a stream after which the process's idle calls run (:meth:`RecordStreams.when_idle`):
#: the end of a burst of streams, not the gap between one client's streams.
IDLE_AFTER_S = 2.0


class StreamSlot:
    """One of the process's stream places, held while a stream is sent; releasing is idempotent."""

    def __init__(self, streams: RecordStreams) -> None:
        self._streams = streams
        self._released = False

    def release(self, outcome: str) -> None:
        """Give the place back; ``outcome`` is ``completed``, ``cancelled`` or ``failed``."""
        if self._released:
            return
        self._released = True
        self._streams._release(outcome)


class _Meter:
    def __init__(self, metrics: Metrics | None) -> None:
        self.metrics = metrics
        self._lock = threading.Lock()
        self._read = 0  # bytes since the last of the calls every so many bytes
        self._every: tuple[int, Callable[[], object]] | None = None

    def every(self, size: int, call: Callable[[], object]) -> None:
        if size < 1:
            raise ValueError(f"size must be ≥ 1, not {size}")
        self._every = (size, call)

    def read_started(self) -> None:
        if self.metrics is not None:
            self.metrics.stream_reads_in_flight.inc()

    def read_ended(self, size: int) -> None:
        if self.metrics is not None:
            self.metrics.stream_reads_in_flight.dec()
            self.metrics.stream_read_bytes.inc(size)
        if self._every is None:
            return
        every, call = self._every
        with self._lock:
            self._read += size
            due = self._read >= every
            if due:
                self._read = 0
        if due:
            call()


class RecordStreams:
    """Plans and reads range streams (see the module docstring)."""

    def __init__(
        self,
        service: LookupService,
        indexes: RemoteIndexCache,
        remote: AsyncRangeReader,
        metrics: Metrics | None = None,
        *,
        buffer_bytes: int = DEFAULT_BUFFER_BYTES,
        max_streams: int = DEFAULT_MAX_STREAMS,
        io_threads: int = DEFAULT_IO_THREADS,
        idle_after_s: float = IDLE_AFTER_S,
    ) -> None:
        if buffer_bytes < 2 or max_streams < 1 or io_threads < 1:
            raise ValueError("buffer_bytes must be ≥ 2, max_streams and io_threads ≥ 1")
        self.service = service
        self.indexes = indexes
        self.remote = remote
        self.metrics = metrics
        self.buffer_bytes = buffer_bytes
        self.max_streams = max_streams
        self._active = 0
        self._idle_after_s = idle_after_s
        self._idle_calls: list[Callable[[], object]] = []
        self._idle_timer: asyncio.TimerHandle | None = None
        self._meter = _Meter(metrics)
        self._executor = ThreadPoolExecutor(io_threads, thread_name_prefix="rlm-stream-io")
        self.encodings = io_threads
        """Groups a stream has encoded at once: one per thread of the executor. The C decoder and
        line writer give up the GIL, so that a stream's encodings run on as many cores."""

    @property
    def chunk_bytes(self) -> int:
        """Bytes per read: half the window, as one chunk is read ahead of the one being sent."""
        return self.buffer_bytes // 2

    @property
    def active(self) -> int:
        return self._active

    def slot(self) -> StreamSlot | None:
        """A place for a new stream, or None when ``max_streams`` are being sent (counted).

        Call it on the event loop (the count is the loop's)."""
        if self._active >= self.max_streams:
            if self.metrics is not None:
                self.metrics.streams_refused.inc()
            return None
        self._active += 1
        if self._idle_timer is not None:  # not idle after all
            self._idle_timer.cancel()
            self._idle_timer = None
        if self.metrics is not None:
            self.metrics.streams_active.inc()
        return StreamSlot(self)

    def _release(self, outcome: str) -> None:
        self._active -= 1
        if self.metrics is not None:
            self.metrics.streams_active.dec()
            self.metrics.streams.labels(outcome).inc()
        if self._active == 0 and self._idle_calls:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # released off a loop: nothing to wait on
                return
            if self._idle_timer is not None:
                self._idle_timer.cancel()
            self._idle_timer = loop.call_later(self._idle_after_s, self._idle, loop)

    def when_idle(self, call: Callable[[], object]) -> None:
        """Run ``call`` on the streams' executor each time no stream has been sent for
        ``idle_after_s`` after the last one ended (once per burst of streams; not before the first)."""
        self._idle_calls.append(call)

    def when_read(self, every_bytes: int, call: Callable[[], object]) -> None:
        """Call ``call`` each time the process's streams have read ``every_bytes`` more, counted as
        their reads end, where the read that reaches it ends: on the event loop or the streams'
        executor, so it must be quick (:meth:`submit` what takes longer). Replaces an earlier one.
        (A quick check submitted to the executor each time started its second thread in a process
        that had sent only raw streams, whose file reads then went to both threads in turn: 5-7 %
        more CPU for a local raw stream, as with any second thread there.)"""
        self._meter.every(every_bytes, call)

    def submit(self, call: Callable[[], object]) -> None:
        """Run ``call`` on the streams' executor, a failure logged; nothing once they are closed."""
        with contextlib.suppress(RuntimeError):  # closed: the process is stopping
            self._executor.submit(_logged, call)

    def _idle(self, loop: asyncio.AbstractEventLoop) -> None:
        self._idle_timer = None
        if self._active:
            return
        for call in self._idle_calls:
            loop.run_in_executor(self._executor, _logged, call)

    def plan(self, query: RangeQuery, *, checkpoint: Checkpoint = never_cancelled) -> RangePlan:
        """Resolve ``query`` (blocking; may search the remote tier: run it on the reader pool,
        ``checkpoint`` its task's token, checked between remote reads).

        Raises:
            as :func:`rlm.stream.plan.plan_range`.
        """
        return plan_range(self.service, self.indexes, query, checkpoint=checkpoint)

    async def run(self, call: Callable[[], T]) -> T:
        """``call()`` on the streams' executor: a blocking call, off the event loop."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, call)

    @property
    def group_bytes(self) -> int:
        """Stored bytes per group of batches encoded as one piece (at most): a chunk shared by the
        :attr:`encodings` a stream has in flight, so that they hold no more read bytes than the
        one group of a chunk they replace."""
        return max(1, self.chunk_bytes // self.encodings)

    def encoded(self, groups: AsyncIterator[G], encode: Callable[[G], T]) -> AsyncGenerator[T, None]:
        """:func:`encode_ahead` on the streams' executor, :attr:`encodings` groups at once
        (``encode`` keeps no state from one group to the next)."""
        return encode_ahead(groups, encode, self._executor, self.encodings)

    def runs(self, plan: RangePlan) -> AsyncGenerator[list[StreamBatch], None]:
        """The batches of ``plan``, a chunk's in one list (:meth:`~rlm.stream.reader.BatchReader.runs`);
        close the iterator (``contextlib.aclosing``) to cancel its reads."""
        return self._reader(plan).runs()

    def encoded_range(
        self,
        plan: RangePlan,
        encode: Callable[[Sequence[StreamBatch]], T],
        group_bytes: int,
        group_records: int | None = None,
    ) -> AsyncGenerator[T, None]:
        """``encode`` of each group of the batches of ``plan`` (of about ``group_bytes`` stored
        bytes or ``group_records`` records: :func:`group_batches`), in order. The broker's segments
        are read, chosen and encoded a chunk per call on the executor, :attr:`encodings` chunks at
        once (:mod:`rlm.stream.local_chunks`); the remote tier's batches are read on the event loop
        and their groups encoded ahead (:meth:`encoded`). ``encode`` keeps no state from one group
        to the next. Close the iterator (``contextlib.aclosing``) to cancel its reads."""

        def grouped(runs: AsyncIterator[list[StreamBatch]]) -> AsyncGenerator[T, None]:
            groups = group_batches(runs, group_bytes, group_records)
            return _until_damaged(self.encoded(groups, partial(encode_until_damaged, encode)))

        encoding = Encoding(encode, group_bytes, group_records)
        return self._reader(plan).encoded(encoding, grouped, self.encodings)

    def _reader(self, plan: RangePlan) -> BatchReader:
        return BatchReader(
            plan,
            self.service,
            self.indexes,
            self.remote,
            self.run,
            chunk_bytes=self.chunk_bytes,
            meter=self._meter,
        )

    def close(self) -> None:
        """Stop the executor (for a process without a running loop); idempotent."""
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None
        self._executor.shutdown(wait=False, cancel_futures=True)


async def _until_damaged(
    made: AsyncGenerator[tuple[list[T], CorruptDataError | None], None],
) -> AsyncGenerator[T, None]:
    """The pieces of :func:`~rlm.stream.local_chunks.encode_until_damaged`'s answers, in order;
    after those of a group with a damaged batch, its error."""
    async with contextlib.aclosing(made):
        async for pieces, damaged in made:
            for piece in pieces:
                yield piece
            if damaged is not None:
                raise damaged


def _logged(call: Callable[[], object]) -> None:
    """``call()``, an error logged rather than left in a future no one awaits."""
    try:
        call()
    except Exception:
        log.exception("a call on the streams' executor failed")


async def encode_ahead(
    groups: AsyncIterator[G], encode: Callable[[G], T], executor: Executor, ahead: int = 1
) -> AsyncGenerator[T, None]:
    """``encode`` of each of ``groups``, in order, made on ``executor``: up to ``ahead`` groups
    are encoded at once, while the next group is read and the last piece is sent (the consumer
    holds it). ``encode`` must keep no state from one group to the next when ``ahead`` > 1.

    What was encoded before ``groups`` fails is yielded before the failure is raised; closing
    the iterator drops the encodings in flight (they run to their end, unseen)."""
    if ahead < 1:
        raise ValueError(f"ahead must be ≥ 1, not {ahead}")
    loop = asyncio.get_running_loop()
    pending: collections.deque[asyncio.Future[T]] = collections.deque()
    try:
        while True:
            try:
                group = await anext(groups)
            except StopAsyncIteration:
                break
            except Exception:
                while pending:  # what was read before the failure goes first
                    yield await pending.popleft()
                raise
            if len(pending) < ahead:
                pending.append(loop.run_in_executor(executor, encode, group))
                continue
            piece = await pending.popleft()
            pending.append(loop.run_in_executor(executor, encode, group))
            yield piece
        while pending:
            yield await pending.popleft()
    finally:
        for future in pending:
            future.cancel()


async def group_batches(
    runs: AsyncIterator[list[StreamBatch]], size: int, records: int | None = None
) -> AsyncIterator[list[StreamBatch]]:
    """The batches of ``runs``, gathered into groups of about ``size`` stored bytes (or
    ``records`` records), whatever runs they came in: a group ends at the batch that reaches
    either bound."""
    pending: list[StreamBatch] = []
    held = count = 0
    most = records if records is not None else 1 << 62
    async for run in runs:
        for batch in run:
            pending.append(batch)
            held += len(batch.data)
            count += max(1, batch.header.record_count)
            if held >= size or count >= most:
                yield pending
                pending, held, count = [], 0, 0
    if pending:
        yield pending


@contextlib.contextmanager
def outcome_of(slot: StreamSlot) -> Iterator[None]:
    """Release ``slot`` with how the block ended: completed, cancelled (the client went away:
    ``GeneratorExit`` or a cancellation) or failed."""
    try:
        yield
    except (asyncio.CancelledError, GeneratorExit):
        slot.release("cancelled")
        raise
    except BaseException:
        slot.release("failed")
        raise
    slot.release("completed")
