"""Reading one remote segment on an executor: the ``.log`` object streamed, index files by range.

The ``.log`` object is read front to back in one streamed ranged read (one GET on S3), taken
``chunk_bytes`` at a time (8 MiB by default), so memory holds a chunk and a batch whatever the
object's size, and a segment costs one request. :func:`iter_batches` cuts the stream into whole
batches without decoding records. Index files are read by the byte ranges the metadata row
records, one ranged read each.
"""

from __future__ import annotations

import queue
import struct
import threading
from collections.abc import Callable, Generator, Iterable, Iterator
from typing import NamedTuple, TypeVar

from rlm.errors import CorruptDataError, CorruptIndexError, CorruptRecordError, RlmError
from rlm.log.batches import Buffer, parse_header
from rlm.log.model import LOG_OVERHEAD, MIN_SIZE_FIELD, BatchHeader
from rlm.log.walk import V2Header, walk_v2_headers
from rlm.metastore.model import ByteRange, IndexType
from rlm.remote_tier.read_plan import IndexRef, SegmentSummary
from rlm.storage.protocol import RemoteStorage

DEFAULT_CHUNK_BYTES = 8 * 1024 * 1024
#: How long the read-ahead thread waits at a time to hand a chunk over (it checks for a stop).
_HAND_OVER_WAIT_S = 0.1
_PREFIX = struct.Struct(">qi")


class RawBatch:
    """One whole batch as stored: its header (``position`` is its byte position in the object)
    and its bytes (a view into the chunk it was read with: ``bytes(batch.data)`` to keep it)."""

    __slots__ = ("data", "header")

    def __init__(self, header: BatchHeader, data: Buffer) -> None:
        self.header = header
        self.data = data

    @property
    def local_header(self) -> BatchHeader:
        """The header with ``position`` 0, for the decoders that index :attr:`data`."""
        return self.header._replace(position=0)


class BatchRun(NamedTuple):
    """Whole, well-formed v2 batches one after another, their headers read and their CRCs checked
    in one call (:func:`~rlm.log.walk.walk_v2_headers`): each header's ``pos`` indexes ``data``,
    whose byte 0 is at byte ``position`` of the object."""

    data: Buffer
    position: int
    headers: list[V2Header]


def read_chunks(
    storage: RemoteStorage, key: str, size: int, *, chunk_bytes: int = DEFAULT_CHUNK_BYTES
) -> Iterator[bytes]:
    """Yield bytes ``[0, size)`` of ``key`` in order, ``chunk_bytes`` at a time, from one streamed
    read of the store (:meth:`~rlm.storage.protocol.RemoteStorage.stream_range`: one GET on S3).

    A thread reads the next chunk while the caller works on the current one, so at most three
    chunks are in memory. The stream ends early, without error, when the object is shorter than
    ``size`` (:func:`iter_batches` and :func:`iter_runs` report it: their callers must not take a
    short object for a whole one).

    Raises:
        NotFoundError: The object is missing.
        StorageError: A read failed after the backend's retries.
    """
    return _read_ahead(storage.stream_range(key, 0, size, piece_bytes=chunk_bytes))


class _End(NamedTuple):
    error: BaseException | None


def _read_ahead(pieces: Iterator[bytes]) -> Iterator[bytes]:
    """``pieces``, produced one ahead of the consumer on a thread of their own."""
    ready: queue.Queue[bytes | _End] = queue.Queue(maxsize=1)
    stop = threading.Event()

    def hand_over(item: bytes | _End) -> bool:
        while not stop.is_set():
            try:
                ready.put(item, timeout=_HAND_OVER_WAIT_S)
                return True
            except queue.Full:
                continue
        return False

    def pump() -> None:
        end = _End(None)
        try:
            for piece in pieces:
                if not hand_over(piece):
                    return
        except BaseException as exc:  # handed to the consumer, which raises it
            end = _End(exc)
        finally:
            close = getattr(pieces, "close", None)
            if close is not None:
                close()
        hand_over(end)

    thread = threading.Thread(target=pump, name="rlm-read-ahead", daemon=True)
    thread.start()
    try:
        while True:
            item = ready.get()
            if isinstance(item, _End):
                if item.error is not None:
                    raise item.error
                return
            yield item
    finally:
        stop.set()
        thread.join()


def iter_batches(chunks: Iterable[bytes], name: str, total: int) -> Iterator[RawBatch]:
    """Cut a ``.log`` object's bytes, arriving in ``chunks``, into whole batches.

    Args:
        chunks: The object's bytes from position 0, in order.
        name: The object's key, for error messages.
        total: The object's size: a batch whose size field runs past it is reported at once,
            never waited for.

    Raises:
        CorruptRecordError: A size field that cannot be a batch, a malformed header, a batch cut
            short, bytes after the last whole batch, or chunks ending before ``total`` bytes;
            it names the object and the position. The batches before it have been yielded.
    """
    return _cut_stream(chunks, name, total, _batches_of)


def iter_runs(chunks: Iterable[bytes], name: str, total: int) -> Iterator[BatchRun | RawBatch]:
    """The batches of :func:`iter_batches`, in the same order and with the same errors, but each
    run of whole well-formed v2 batches as one :class:`BatchRun`: a scrubber reads every header
    of a chunk in one call. Other batches (legacy ones, a v2 batch whose header the walk leaves
    to the parser) come as :class:`RawBatch`."""
    return _cut_stream(chunks, name, total, _runs_of)


_T = TypeVar("_T")
#: Cuts the whole batches of ``buf`` from ``at`` (byte ``position`` of an object of ``total``
#: bytes named ``name``) on, and returns where the first batch not whole in ``buf`` starts.
_Cutter = Callable[[bytes, int, int, int, str], Generator[_T, None, int]]


def _cut_stream(chunks: Iterable[bytes], name: str, total: int, cut: _Cutter[_T]) -> Iterator[_T]:
    """What ``cut`` makes of each chunk, a batch that straddles chunks joined up first."""
    carry = b""  # the start of a batch the previous chunk ended in
    position = 0  # of the next batch in the object
    for chunk in chunks:
        at = 0
        if carry:
            if len(carry) < LOG_OVERHEAD:
                at = min(len(chunk), LOG_OVERHEAD - len(carry))
                carry += chunk[:at]
                if len(carry) < LOG_OVERHEAD:
                    continue
            need = _batch_length(carry, 0, position, total, name) - len(carry)
            if need > len(chunk) - at:
                carry += chunk[at:]
                continue
            data = carry + chunk[at : at + need]
            at += need
            carry = b""
            yield from cut(data, 0, position, total, name)
            position += len(data)
        stop = yield from cut(chunk, at, position, total, name)
        position += stop - at
        carry = chunk[stop:]
    if carry:
        raise CorruptRecordError(
            f"{len(carry)} bytes after the last whole batch", path=name, position=position
        )
    if position < total:
        # The stream ends early, without error, where the object ends: an object shorter than
        # expected (cut at a batch boundary) would otherwise look whole, its last batches gone.
        raise CorruptRecordError(
            f"the object ends at byte {position}, {total - position} bytes short of the {total} expected",
            path=name,
            position=position,
        )


def _batches_of(buf: bytes, at: int, position: int, total: int, name: str) -> Generator[RawBatch, None, int]:
    """A :data:`_Cutter`: batch by batch."""
    view = memoryview(buf)
    while len(buf) - at >= LOG_OVERHEAD:
        length = _batch_length(buf, at, position, total, name)
        if len(buf) - at < length:
            break
        yield _batch(view[at : at + length], position, name)
        at += length
        position += length
    return at


def _runs_of(
    buf: bytes, at: int, position: int, total: int, name: str
) -> Generator[BatchRun | RawBatch, None, int]:
    """A :data:`_Cutter`: runs of v2 batches, any other batch alone."""
    view = memoryview(buf)
    while True:
        stop, headers = walk_v2_headers(buf, at, len(buf), position, total)
        if headers:
            yield BatchRun(view, position - at, headers)
        position += stop - at
        at = stop
        if len(buf) - at < LOG_OVERHEAD:
            return at
        length = _batch_length(buf, at, position, total, name)
        if len(buf) - at < length:
            return at
        yield _batch(view[at : at + length], position, name)
        at += length
        position += length


def _batch_length(buf: bytes, at: int, position: int, total: int, name: str) -> int:
    """The length of the batch whose 12-byte prefix is at ``at`` in ``buf`` (``position`` in the
    object), checked against the smallest batch and the object's end."""
    size: int = _PREFIX.unpack_from(buf, at)[1]
    if size < MIN_SIZE_FIELD:
        raise CorruptRecordError(
            f"batch size field {size} is smaller than the minimum {MIN_SIZE_FIELD}",
            path=name,
            position=position,
        )
    length = LOG_OVERHEAD + size
    if position + length > total:
        raise CorruptRecordError(
            f"batch of {length} bytes is cut short: the object ends {total - position} bytes on",
            path=name,
            position=position,
        )
    return length


def _batch(data: Buffer, position: int, name: str) -> RawBatch:
    """The batch of ``data`` (whole), which starts at ``position`` of the object."""
    try:
        header = parse_header(data, 0, position)
    except CorruptDataError as exc:
        raise exc.at(name, position) from exc
    except struct.error as exc:
        raise CorruptRecordError(f"batch header is truncated: {exc}", path=name, position=position) from exc
    return RawBatch(header, data)


class SegmentReader:
    """One remote segment's objects, read for a job on an executor.

    Counts every byte it reads in :attr:`bytes_read`.
    """

    def __init__(
        self, storage: RemoteStorage, summary: SegmentSummary, *, chunk_bytes: int = DEFAULT_CHUNK_BYTES
    ) -> None:
        self.storage = storage
        self.summary = summary
        self.chunk_bytes = chunk_bytes
        self._read = 0
        self._fetched: dict[str, tuple[ByteRange, bytes]] = {}

    @property
    def bytes_read(self) -> int:
        """Bytes read so far, fetched ones included."""
        return self._read + sum(len(data) for _, data in list(self._fetched.values()))

    def chunks(self, size: int | None = None) -> Iterator[bytes]:
        """The ``.log`` object's bytes in chunks; ``size`` defaults to the row's ``size_bytes``."""
        for chunk in read_chunks(
            self.storage,
            self.summary.log_key,
            self.summary.segment.size_bytes if size is None else size,
            chunk_bytes=self.chunk_bytes,
        ):
            self._read += len(chunk)
            yield chunk

    def batches(self, size: int | None = None) -> Iterator[RawBatch]:
        """Every batch of the ``.log`` object, in order (see :func:`iter_batches`).

        ``size`` is how much of the object to read, by default the row's ``size_bytes``; a
        scrubber passes the size the store reports, to see bytes the row does not account for.
        """
        total = self.summary.segment.size_bytes if size is None else size
        return iter_batches(self.chunks(total), self.summary.log_key, total)

    def runs(self, size: int | None = None) -> Iterator[BatchRun | RawBatch]:
        """:meth:`batches`, runs of well-formed v2 batches read at once (see :func:`iter_runs`)."""
        total = self.summary.segment.size_bytes if size is None else size
        return iter_runs(self.chunks(total), self.summary.log_key, total)

    def fetch(self, ref: IndexRef) -> None:
        """Read ``ref``'s bytes now (one ranged read), so that :meth:`read_ref` takes any file
        inside them from memory; a read that fails is left for :meth:`read_ref` to repeat and
        report. Thread-safe against other fetches of other keys (a job fetches an object's bytes
        once, on a thread of its own, while it reads the ``.log``)."""
        if ref.byte_range.size == 0:
            return
        try:
            data = self.storage.read_range(ref.key, ref.byte_range.position, ref.byte_range.size)
        except RlmError:
            return
        self._fetched[ref.key] = (ref.byte_range, data)

    def read_ref(self, ref: IndexRef) -> bytes:
        """The bytes of one file of an index object (this segment's or another's).

        Raises:
            NotFoundError: The index object is missing.
            CorruptIndexError: The index object ends before the file does.
        """
        if ref.byte_range.size == 0:
            return b""
        fetched = self._fetched.get(ref.key)
        if (
            fetched is not None
            and fetched[0].position <= ref.byte_range.position
            and ref.byte_range.end <= fetched[0].end
        ):
            at = ref.byte_range.position - fetched[0].position
            data = fetched[1][at : at + ref.byte_range.size]
        else:
            data = self.storage.read_range(ref.key, ref.byte_range.position, ref.byte_range.size)
            self._read += len(data)
        if len(data) != ref.byte_range.size:
            raise CorruptIndexError(
                f"the file should be {ref.byte_range.size} bytes at {ref.byte_range.position}, "
                f"the object holds {len(data)} there",
                path=ref.key,
                position=ref.byte_range.position,
            )
        return data

    def read_index(self, kind: IndexType) -> bytes | None:
        """One index file of this segment; ``None`` when the segment has no such file."""
        ref = self.summary.index_ref(kind)
        return None if ref is None else self.read_ref(ref)
