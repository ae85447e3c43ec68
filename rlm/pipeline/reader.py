"""Reading one remote segment on an executor: the ``.log`` object streamed, index files by range.

The ``.log`` object is read front to back with ranged reads of ``chunk_bytes`` (8 MiB by default;
the next chunk is fetched while the current one is worked on), so memory holds at most two chunks
and one batch whatever the object's size, and each read is one request of a size object stores
serve at full speed. :func:`iter_batches` cuts the stream into whole batches without decoding
records. Index files are read by the byte ranges the metadata row records, one ranged read each.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor

from rlm.errors import CorruptDataError, CorruptIndexError, CorruptRecordError
from rlm.log.batches import parse_header
from rlm.log.model import LOG_OVERHEAD, MIN_SIZE_FIELD, BatchHeader
from rlm.metastore.model import IndexType
from rlm.pipeline.plan import IndexRef, SegmentSummary
from rlm.storage.protocol import RemoteStorage

DEFAULT_CHUNK_BYTES = 8 * 1024 * 1024
_PREFIX = struct.Struct(">qi")


class RawBatch:
    """One whole batch as stored: its header (``position`` is its byte position in the object)
    and its bytes."""

    __slots__ = ("data", "header")

    def __init__(self, header: BatchHeader, data: bytes) -> None:
        self.header = header
        self.data = data

    @property
    def local_header(self) -> BatchHeader:
        """The header with ``position`` 0, for the decoders that index :attr:`data`."""
        return self.header._replace(position=0)


def read_chunks(
    storage: RemoteStorage, key: str, size: int, *, chunk_bytes: int = DEFAULT_CHUNK_BYTES
) -> Iterator[bytes]:
    """Yield bytes ``[0, size)`` of ``key`` in order, ``chunk_bytes`` per ranged read.

    The read of the next chunk runs on a thread while the caller works on the current one. The
    stream ends early, without error, when the object is shorter than ``size`` (the caller
    compares what it got with what it expected).

    Raises:
        NotFoundError: The object is missing.
        StorageError: A read failed after the backend's retries.
    """
    if chunk_bytes <= 0:
        raise ValueError(f"chunk size must be positive, not {chunk_bytes}")
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="rlm-read-ahead") as pool:

        def fetch(position: int) -> tuple[Future[bytes], int] | None:
            if position >= size:
                return None
            length = min(chunk_bytes, size - position)
            return pool.submit(storage.read_range, key, position, length), length

        position = 0
        pending = fetch(position)
        try:
            while pending is not None:
                future, asked = pending
                chunk = future.result()
                position += len(chunk)
                # A short read means the object ends here: nothing more to fetch.
                pending = fetch(position) if len(chunk) == asked else None
                if chunk:
                    yield chunk
        finally:
            if pending is not None:
                pending[0].cancel()


def iter_batches(chunks: Iterable[bytes], name: str, total: int) -> Iterator[RawBatch]:
    """Cut a ``.log`` object's bytes, arriving in ``chunks``, into whole batches.

    Args:
        chunks: The object's bytes from position 0, in order.
        name: The object's key, for error messages.
        total: The object's size: a batch whose size field runs past it is reported at once,
            never waited for.

    Raises:
        CorruptRecordError: A size field that cannot be a batch, a malformed header, a batch cut
            short, or bytes after the last whole batch; it names the object and the position.
            The batches before it have been yielded.
    """
    buf = b""
    at = 0
    position = 0
    for chunk in chunks:
        buf = buf[at:] + chunk if at < len(buf) else chunk
        at = 0
        while len(buf) - at >= LOG_OVERHEAD:
            _, size = _PREFIX.unpack_from(buf, at)
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
            if len(buf) - at < length:
                break
            data = buf[at : at + length]
            try:
                header = parse_header(data, 0, position)
            except CorruptDataError as exc:
                raise exc.at(name, position) from exc
            except struct.error as exc:
                raise CorruptRecordError(
                    f"batch header is truncated: {exc}", path=name, position=position
                ) from exc
            yield RawBatch(header, data)
            at += length
            position += length
    left = len(buf) - at
    if left:
        raise CorruptRecordError(f"{left} bytes after the last whole batch", path=name, position=position)


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
        self.bytes_read = 0

    def chunks(self, size: int | None = None) -> Iterator[bytes]:
        """The ``.log`` object's bytes in chunks; ``size`` defaults to the row's ``size_bytes``."""
        for chunk in read_chunks(
            self.storage,
            self.summary.log_key,
            self.summary.segment.size_bytes if size is None else size,
            chunk_bytes=self.chunk_bytes,
        ):
            self.bytes_read += len(chunk)
            yield chunk

    def batches(self, size: int | None = None) -> Iterator[RawBatch]:
        """Every batch of the ``.log`` object, in order (see :func:`iter_batches`).

        ``size`` is how much of the object to read, by default the row's ``size_bytes``; a
        scrubber passes the size the store reports, to see bytes the row does not account for.
        """
        total = self.summary.segment.size_bytes if size is None else size
        return iter_batches(self.chunks(total), self.summary.log_key, total)

    def read_ref(self, ref: IndexRef) -> bytes:
        """The bytes of one file of an index object (this segment's or another's).

        Raises:
            NotFoundError: The index object is missing.
            CorruptIndexError: The index object ends before the file does.
        """
        if ref.byte_range.size == 0:
            return b""
        data = self.storage.read_range(ref.key, ref.byte_range.position, ref.byte_range.size)
        self.bytes_read += len(data)
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
