"""A broker's segment streamed a chunk at a time: each chunk read, its batches chosen and encoded in
one call on the streams' executor.

The broker's files need nothing of the event loop but the sends. A segment is cut into chunks of
about ``chunk_bytes`` at batch starts its offset index names (an entry every
``index.interval.bytes``: :func:`chunk_bounds`), and each chunk is one call (:class:`ChunkJob`): its
bytes read, its batches walked (:func:`rlm.stream.chunks.whole_batches`), those the stream sends
chosen (:func:`is_sent`, :func:`ends_range`), grouped and encoded. As many chunks are in flight as
the executor has threads; the event loop takes their pieces in order (:mod:`rlm.stream.reader`).
Before, each chunk read was handed to the event loop, which walked, chose and grouped its batches
under the GIL the encodings wanted, and each group went back to the executor, where the next read
queued behind it: a local stream waited on its reads about half of its time.

A chunk whose batches do not end where the next one begins (an index entry that is not a batch's
start, or a batch cut by the chunk's end) is the last taken so: the reader reads the rest of the
segment from where its batches ended, one chunk at a time, as it reads a remote object.

A chunk's call reads through a duplicate of the segment's file descriptor, which it closes itself:
the stream may close the segment while the call runs (a client gone), and the number is never
reused under it. Calls that have not begun when the stream ends read nothing
(:attr:`ChunkJob.cancelled`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Generic, NamedTuple, TypeVar

from rlm.errors import CorruptDataError
from rlm.log.aborted import AbortedIndex
from rlm.log.batches import first_offset
from rlm.log.model import BatchHeader
from rlm.stream.chunks import Batch, ReadMeter, StreamBatch, whole_batches
from rlm.stream.plan import RangePlan

T = TypeVar("T")
_CONTROL = 0x20
"""The control flag of a v2 batch's attributes (``BatchHeader.is_control``)."""


def is_sent(header: BatchHeader, aborted: AbortedIndex) -> bool:
    """Whether a stream sends a batch of its range: not a control batch (a transaction marker),
    nor, with READ_COMMITTED (``aborted`` not empty), a batch of an aborted transaction."""
    if header.magic >= 2 and header.attributes & _CONTROL:
        return False
    return not aborted or not aborted.is_aborted(header)


def ends_range(plan: RangePlan, header: BatchHeader, first: int) -> bool:
    """Whether a batch (``first``, its first offset) lies wholly past the plan's range or past
    its last fetchable offset: then neither it nor any batch after it is sent."""
    return header.last_offset >= plan.limit or first >= plan.end


def first_of(header: BatchHeader, data: Batch) -> int:
    """A batch's first offset: a legacy compressed wrapper names only its last, and its first is
    that of its first inner message (decompressed: a blocking call)."""
    if header.base_offset >= 0:
        return header.base_offset
    return first_offset(data, header._replace(position=0))


def chunk_bounds(
    positions_apart: Callable[[int, int, int], list[int]], start: int, size: int, chunk_bytes: int
) -> list[int]:
    """``start``, the batch starts cutting ``[start, size)`` into chunks of about ``chunk_bytes``
    (``positions_apart`` as :meth:`rlm.log.index.OffsetIndex.positions_apart`), and ``size``;
    ``[start]`` alone when the range is empty."""
    if size <= start:
        return [start]
    return [start, *positions_apart(start, size, chunk_bytes), size]


class Encoding(NamedTuple, Generic[T]):
    """How a stream's batches become pieces: ``encode`` of each group of them, a group of about
    ``group_bytes`` stored bytes and at most about ``group_records`` records (a batch's excepted)."""

    encode: Callable[[Sequence[StreamBatch]], T]
    group_bytes: int
    group_records: int | None = None

    def pieces(self, batches: list[StreamBatch]) -> tuple[list[T], CorruptDataError | None]:
        """``encode`` of each group of a chunk's ``batches``, in order (:meth:`groups`), up to a
        group that cannot be decoded, and its error (None when there is none)."""
        made: list[T] = []
        for group in self.groups(batches):
            done, damaged = encode_until_damaged(self.encode, group)
            made += done
            if damaged is not None:
                return made, damaged
        return made, None

    def groups(self, batches: list[StreamBatch]) -> list[list[StreamBatch]]:
        """A chunk's ``batches`` in at most as many groups as its bytes hold ``group_bytes`` whole
        (one at least), or as ``group_records`` records need where that is more, each closed once
        it holds its share: a group of a few batches left over costs a call as much as a full one."""
        if not batches:
            return []
        sizes = [len(batch.data) for batch in batches]
        counts = [max(1, batch.header.record_count) for batch in batches]
        total_bytes, total_records = sum(sizes), sum(counts)
        by_bytes = max(1, total_bytes // max(1, self.group_bytes))
        by_records = 1 if self.group_records is None else -(-total_records // self.group_records)
        wanted = max(by_bytes, by_records)
        if wanted == 1:
            return [batches]
        unbounded = 1 << 62  # the groups are cut by the bound that asks for more of them
        most_bytes = -(-total_bytes // wanted) if by_bytes >= by_records else unbounded
        most_records = -(-total_records // wanted) if by_records > by_bytes else unbounded
        groups: list[list[StreamBatch]] = [[]]
        held = count = 0
        for batch, size, records in zip(batches, sizes, counts, strict=True):
            if held >= most_bytes or count >= most_records:  # no more groups than wanted
                groups.append([])
                held = count = 0
            groups[-1].append(batch)
            held += size
            count += records
        return groups


def encode_until_damaged(
    encode: Callable[[Sequence[StreamBatch]], T], batches: Sequence[StreamBatch]
) -> tuple[list[T], CorruptDataError | None]:
    """``[encode(batches)]`` and None; where one of them cannot be decoded, ``encode`` of those
    before it (nothing when it is the first) and its error, so that a stream sends every record
    before a damaged batch, as a Kafka consumer is given them, before it fails: a group sent
    whole or not at all would leave the records before the damage out of reach of a stream
    resumed after the last one it sent."""
    try:
        return [encode(batches)], None
    except CorruptDataError as exc:
        where = (exc.path, exc.position)
        damaged = next((i for i, b in enumerate(batches) if (b.name, b.header.position) == where), 0)
        if damaged:
            try:
                return [encode(batches[:damaged])], exc
            except CorruptDataError:
                pass
        return [], exc


class ChunkRead(NamedTuple, Generic[T]):
    """What :class:`ChunkJob` made of a chunk."""

    pieces: list[T]
    """The encoded groups of the batches sent, in order."""
    end: int
    """The position after the last whole batch walked: the chunk's end unless a batch is cut by it
    or the walk stopped."""
    next_offset: int
    """The offset after the last batch walked at or past the stream's next offset (or that next
    offset): where the stream goes on."""
    done: bool
    """A batch past the range was met: the stream ends."""
    error: BaseException | None
    """Why the chunk could not be read whole (raised after ``pieces`` are sent)."""
    read: int
    """Bytes read."""


class ChunkJob(Generic[T]):
    """One chunk of a segment, ``[lo, hi)``, read through its own descriptor (``fd``, closed at the
    end of the call), walked, chosen from ``next_offset`` on, and encoded (module docstring)."""

    def __init__(
        self,
        plan: RangePlan,
        aborted: AbortedIndex,
        encoding: Encoding[T],
        fd: int,
        name: str,
        lo: int,
        hi: int,
        next_offset: int,
        meter: ReadMeter | None = None,
    ) -> None:
        self.plan = plan
        self.aborted = aborted
        self.encoding = encoding
        self.fd = fd
        self.name = name
        self.lo = lo
        self.hi = hi
        self.next_offset = next_offset
        self.meter = meter
        self.cancelled = False
        """Set by the event loop when the stream ends: a call not begun reads nothing."""

    def __call__(self) -> ChunkRead[T]:
        data = b""
        counted = False  # the stream may be cancelled while the read runs: it is still counted ended
        try:
            if self.cancelled:
                return ChunkRead([], self.lo, self.next_offset, True, None, 0)
            if self.meter is not None:
                self.meter.read_started()
                counted = True
            data = _pread(self.fd, self.hi - self.lo, self.lo)
        except OSError as exc:
            return ChunkRead([], self.lo, self.next_offset, False, exc, 0)
        finally:
            os.close(self.fd)
            if counted:
                self.meter.read_ended(len(data))  # type: ignore[union-attr]
        return self._chosen(data)

    def _chosen(self, data: bytes) -> ChunkRead[T]:
        found, used, error = whole_batches(data, self.lo, self.name)
        plan, next_offset, name = self.plan, self.next_offset, self.name
        sent: list[StreamBatch] = []
        done = False
        if found and found[-1][0].last_offset < plan.end and not self.aborted:
            # The common case, in one pass: no batch reaches the range's end, none is aborted.
            sent = [
                StreamBatch(h, batch, "local", name)
                for h, batch in found
                if h.last_offset >= next_offset and not (h.magic >= 2 and h.attributes & _CONTROL)
            ]
            next_offset = max(next_offset, found[-1][0].last_offset + 1)
            found = []
        for header, batch in found:
            if header.last_offset < next_offset:
                continue
            if header.last_offset >= plan.end and ends_range(plan, header, first_of(header, batch)):
                done = True
                break
            next_offset = header.last_offset + 1
            if is_sent(header, self.aborted):
                sent.append(StreamBatch(header, batch, "local", self.name))
        pieces, failed = self.encoding.pieces(sent)
        if failed is not None:  # what came before the batch that cannot be decoded goes first
            return ChunkRead(pieces, self.lo + used, next_offset, False, failed, len(data))
        return ChunkRead(pieces, self.lo + used, next_offset, done, None if done else error, len(data))


def _pread(fd: int, length: int, position: int) -> bytes:
    """``length`` bytes of ``fd`` from ``position`` (fewer only where the file ends)."""
    data = os.pread(fd, length, position)
    while len(data) < length:  # short reads on some file systems
        more = os.pread(fd, length - len(data), position + len(data))
        if not more:
            break
        data += more
    return data
