"""The two inner loops of a timestamp search: stepping over the v2 batches below the target, and
finding the first record at or after it inside the batch that holds it; and the loop that reads
the headers of a stream's chunk, batch after batch (:func:`v2_headers`).

Each is defined here in Python, the reference; the C module :mod:`rlm.log._scan` (built with the
package when a C compiler is there) runs the same loops some twenty times faster. The C code never
reports corruption itself: on anything that is not plainly well-formed it gives up (raising
ValueError, or stopping) and the Python loop takes over from the same point, so the errors, their
wording and every answer are the reference's. ``ACCELERATED`` says which is in use.
"""

from __future__ import annotations

import struct

from rlm.errors import CorruptRecordError
from rlm.log.model import LOG_OVERHEAD, MAGIC_OFFSET, MIN_SIZE_FIELD, V2_HEADER_SIZE, BatchHeader
from rlm.log.varint import read_uvarint

try:
    from rlm.log import _scan
except ImportError:  # built without a C compiler: the Python loops alone
    _scan = None  # type: ignore[assignment]

Buffer = bytes | bytearray | memoryview

ACCELERATED = _scan is not None
"""Whether the C loops are in use."""

_INT32_BITS = 0xFFFFFFFF
_INT64_BITS = 0xFFFFFFFFFFFFFFFF
_INT64_MAX = 2**63 - 1
_INT64_MIN = -(2**63)
_PREFIX = struct.Struct(">qi")
#: lastOffsetDelta, then (past baseTimestamp) maxTimestamp of a v2 batch header, from byte 23.
_LAST_DELTA_AND_MAX_TIMESTAMP = struct.Struct(">i8xq")
_LAST_OFFSET_DELTA = 23


def find_record(
    data: Buffer,
    pos: int,
    end: int,
    count: int,
    base_offset: int,
    base_timestamp: int,
    log_append: bool,
    timestamp: int,
    start_offset: int,
) -> tuple[int, int] | None:
    """``(timestamp, offset)`` of the first of ``count`` v2 records in ``data[pos:end]`` whose
    timestamp is ≥ ``timestamp`` and whose offset is ≥ ``start_offset``; None when none is.

    Each record's length, timestamp delta and offset delta are read; its key, value and headers
    are skipped. With ``log_append`` every record's timestamp is ``base_timestamp``; otherwise it
    is ``base_timestamp`` plus the delta in Java's long arithmetic, which wraps, as
    :func:`rlm.log.v2.decode_v2` reads it (the C loop gives such a record up to the reference).

    Raises:
        CorruptRecordError: a record that does not fit, or fewer records than ``count``.
    """
    if _scan is not None:
        try:
            return _scan.find_record(
                data, pos, end, count, base_offset, base_timestamp, log_append, timestamp, start_offset
            )
        except (ValueError, OverflowError, BufferError):
            pass  # not plainly well-formed (or not a plain buffer): the reference says what is wrong
    return find_record_py(
        data, pos, end, count, base_offset, base_timestamp, log_append, timestamp, start_offset
    )


def find_record_py(
    data: Buffer,
    pos: int,
    end: int,
    count: int,
    base_offset: int,
    base_timestamp: int,
    log_append: bool,
    timestamp: int,
    start_offset: int,
) -> tuple[int, int] | None:
    """:func:`find_record` in Python: the reference."""
    # Varints of one and two bytes (three for the timestamp delta) are decoded inline: a call per
    # field would cost more than the rest of the loop. Longer ones take the general path, masked
    # to 32/64 bits as Kafka's ByteUtils reads them.
    for i in range(count):
        if pos >= end:
            raise CorruptRecordError(f"batch declares {count} records but its data ends after {i}")
        try:
            u = data[pos]
            if u < 0x80:
                pos += 1
            elif data[pos + 1] < 0x80:
                u = (u & 0x7F) | (data[pos + 1] << 7)
                pos += 2
            else:
                u, pos = read_uvarint(data, pos, 5)
                u &= _INT32_BITS
            length = (u >> 1) ^ -(u & 1)
            rec_end = pos + length
            if length < 6 or rec_end > end:
                raise CorruptRecordError(
                    f"record {i} declares {length} bytes but {end - pos} remain in the batch"
                )
            pos += 1  # record attributes: unused
            u = data[pos]
            if u < 0x80:
                pos += 1
            elif data[pos + 1] < 0x80:
                u = (u & 0x7F) | (data[pos + 1] << 7)
                pos += 2
            elif data[pos + 2] < 0x80:
                u = (u & 0x7F) | ((data[pos + 1] & 0x7F) << 7) | (data[pos + 2] << 14)
                pos += 3
            else:
                u, pos = read_uvarint(data, pos, 10)
                u &= _INT64_BITS
            ts = base_timestamp if log_append else base_timestamp + ((u >> 1) ^ -(u & 1))
            if not _INT64_MIN <= ts <= _INT64_MAX:  # wraps as Java's long does, as a decode reads it
                ts = ((ts - _INT64_MIN) & _INT64_BITS) + _INT64_MIN
            u = data[pos]
            if u >= 0x80:
                if data[pos + 1] < 0x80:
                    u = (u & 0x7F) | (data[pos + 1] << 7)
                else:
                    u = read_uvarint(data, pos, 5)[0] & _INT32_BITS
        except IndexError as exc:
            raise CorruptRecordError(f"record {i} runs past the end of the batch data") from exc
        offset = base_offset + ((u >> 1) ^ -(u & 1))
        if ts >= timestamp and offset >= start_offset:
            return ts, offset
        pos = rec_end
    return None


def skip_below(data: Buffer, pos: int, limit: int, timestamp: int, start_offset: int) -> int:
    """Where the first batch from ``pos`` that a search for (``timestamp``, ``start_offset``) must
    look at starts: the whole v2 batches before it (in ``data``, ending at or before ``limit``)
    have a max timestamp below ``timestamp`` or a last offset below ``start_offset``, read from
    their size, magic, last offset delta and max timestamp alone. Stops, without judging, at a
    batch whose header is not whole in ``data``, that ends past ``limit``, or that is not plainly
    a v2 batch (the caller's parser then says what it is).
    """
    if _scan is not None:
        try:
            return _scan.skip_below(data, pos, limit, timestamp, start_offset)
        except (OverflowError, BufferError):
            pass  # a bound beyond int64, or not a plain buffer: the reference judges
    return skip_below_py(data, pos, limit, timestamp, start_offset)


def skip_below_py(data: Buffer, pos: int, limit: int, timestamp: int, start_offset: int) -> int:
    """:func:`skip_below` in Python: the reference."""
    size_of = len(data)
    while pos >= 0 and limit - pos > MAGIC_OFFSET + 1 and pos + V2_HEADER_SIZE <= size_of:
        base, size = _PREFIX.unpack_from(data, pos)
        total = LOG_OVERHEAD + size
        if size < MIN_SIZE_FIELD or pos + total > limit or data[pos + MAGIC_OFFSET] != 2:
            return pos
        if total < V2_HEADER_SIZE:
            return pos
        last_delta, max_timestamp = _LAST_DELTA_AND_MAX_TIMESTAMP.unpack_from(data, pos + _LAST_OFFSET_DELTA)
        last_offset = base + last_delta
        if last_delta < 0 or last_offset > _INT64_MAX:
            return pos
        if max_timestamp >= timestamp and last_offset >= start_offset:
            return pos
        pos += total
    return pos


def v2_headers(data: Buffer, pos: int, at: int, budget: int) -> tuple[list[BatchHeader], int]:
    """The headers of the whole v2 batches of ``data`` from ``pos``, one after the other, as
    :func:`rlm.log.v2.parse_v2_header` reads them, each with the position ``at`` plus its
    distance from ``pos``; taken until ``budget`` bytes are (the batch that reaches it included).
    Returns them and the position after the last.

    Stops, without judging, before a batch cut by the end of ``data``, one that is not v2, and one
    the parser would refuse (or whose last offset is past int64): the caller's parser reads that
    batch and says what it is.
    """
    if _scan is not None:
        try:
            return _scan.v2_headers(data, pos, at, budget, BatchHeader)
        except (OverflowError, BufferError):
            pass  # a bound beyond int64, or not a plain buffer: the reference reads them
    return v2_headers_py(data, pos, at, budget)


def v2_headers_py(data: Buffer, pos: int, at: int, budget: int) -> tuple[list[BatchHeader], int]:
    """:func:`v2_headers` in Python: the reference."""
    from rlm.log.v2 import parse_v2_header  # not at the top: that module imports this one

    found: list[BatchHeader] = []
    start, size_of = pos, len(data)
    while pos >= 0 and pos - start < budget and size_of - pos >= V2_HEADER_SIZE:
        _, length = _PREFIX.unpack_from(data, pos)
        total = LOG_OVERHEAD + length
        if length < MIN_SIZE_FIELD or total > size_of - pos or data[pos + MAGIC_OFFSET] != 2:
            break
        try:
            header = parse_v2_header(data, pos, at + pos - start)
        except CorruptRecordError:
            break
        if header.last_offset > _INT64_MAX:
            break
        found.append(header)
        pos += total
    return found, pos


def adjoining(views: list[bytes | memoryview]) -> memoryview | None:
    """One view of all the bytes of ``views`` where they are memoryviews of one object that lie
    end to end in it, in order (a slice of that object, not a copy); None otherwise, and where the
    C module is not built (the caller joins them)."""
    return None if _scan is None else _scan.adjoining(views)
