"""Record batches of message format v2 (magic 2, Kafka >= 0.11): parse, decode, encode.

Batch header, 61 bytes, big-endian (DefaultRecordBatch.java)::

    0  baseOffset            int64   offset of the first record as written; not in the CRC
    8  batchLength           int32   bytes after this field (batch size - 12)
    12 partitionLeaderEpoch  int32   set by the leader; not in the CRC
    16 magic                 int8    2
    17 crc                   uint32  CRC-32C of bytes [21, end of batch)
    21 attributes            int16   codec:3 | timestampType:1 | transactional:1 | control:1 | deleteHorizon:1
    23 lastOffsetDelta       int32
    27 baseTimestamp         int64   (the delete horizon when bit 6 is set)
    35 maxTimestamp          int64   (the append time for LogAppendTime)
    43 producerId            int64
    51 producerEpoch         int16
    53 baseSequence          int32
    57 recordsCount          int32
    61 records...                    one compressed stream when codec != none

Record (DefaultRecord.java), lengths and deltas as zig-zag varints::

    length varint | attributes int8 | timestampDelta varlong | offsetDelta varint |
    keyLength varint | key | valueLength varint | value | headersCount varint |
    (headerKeyLength varint | headerKey utf-8 | headerValueLength varint | headerValue)*

A record's offset is ``baseOffset + offsetDelta``: past int64 the batch is corrupt (no broker
assigns such an offset). Its timestamp is ``baseTimestamp + timestampDelta`` in Java's long
arithmetic, which wraps: a producer writes the delta the same way, so a batch with a timestamp of
-1 (none) before one near ``Long.MAX_VALUE`` (the broker accepts both) reads back as written.

A header key is UTF-8 by convention only: Kafka keeps its bytes (``DefaultRecord.readHeaders``)
and its client decodes them when asked, with Java's ``new String(bytes, UTF_8)``, never failing.
Producers of other languages send any bytes there, and the broker never checks them. The records
decoded here present a key as Kafka's client does (:func:`header_key`: malformed sequences become
U+FFFD); with ``raw_header_keys`` they keep its bytes instead (as surrogate escapes), which
:func:`encode_record` writes back unchanged, for a rewrite that must not alter a kept record.
"""

from __future__ import annotations

import codecs as _codecs
import struct
from collections.abc import Callable, Sequence
from typing import NamedTuple

import crc32c

from rlm.errors import CorruptRecordError
from rlm.log import codecs, scan
from rlm.log.model import (
    V2_HEADER_SIZE,
    BatchHeader,
    Codec,
    ControlRecord,
    ControlType,
    Header,
    Record,
    TimestampType,
)
from rlm.log.varint import read_uvarint, read_varint, write_varint, write_varlong

try:
    from rlm.log import _decode
except ImportError:  # built without a C compiler: the Python reference alone
    _decode = None  # type: ignore[assignment]

ACCELERATED = _decode is not None
"""Whether :func:`decode_v2` decodes records in C."""

HEADER = struct.Struct(">qiibIhiqqqhii")
_CRC = struct.Struct(">I")
_CONTROL_KEY = struct.Struct(">hh")
_END_TXN_VALUE = struct.Struct(">hi")

CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
_CODEC_MASK = 0x07
_LOG_APPEND_TIME = 0x08
_TRANSACTIONAL = 0x10
_CONTROL = 0x20
_DELETE_HORIZON = 0x40

_JAVA_REPLACE = "rlm.java-utf8-replace"
"""The decoding error handler of :func:`header_key`."""
_RAW = "surrogateescape"

_INT32_BITS = 0xFFFFFFFF
_INT64_BITS = 0xFFFFFFFFFFFFFFFF

Buffer = bytes | bytearray | memoryview


def _java_replace(exc: UnicodeError) -> tuple[str, int]:
    """Replace a malformed UTF-8 sequence as Java's ``new String(bytes, UTF_8)`` does.

    Python's 'replace' handler makes one U+FFFD per maximal invalid subpart, as Java does, but for
    an encoded surrogate (``ED`` then ``A0``-``BF``): Java replaces those two bytes and a
    continuation byte after them with one U+FFFD, where Python makes one per byte.
    """
    if not isinstance(exc, UnicodeDecodeError):
        raise exc
    data, at = exc.object, exc.start
    if data[at] == 0xED and at + 1 < len(data) and 0xA0 <= data[at + 1] <= 0xBF:
        end = at + 3 if at + 2 < len(data) and 0x80 <= data[at + 2] <= 0xBF else at + 2
        return "\ufffd", end
    return "\ufffd", exc.end


_codecs.register_error(_JAVA_REPLACE, _java_replace)


def header_key(data: bytes) -> str:
    """A header key's bytes as Kafka's client presents it: UTF-8, each malformed sequence
    replaced by U+FFFD as Java replaces it."""
    return data.decode("utf-8", _JAVA_REPLACE)


def parse_v2_header(buf: Buffer, pos: int, position: int | None = None) -> BatchHeader:
    """Read the 61-byte header of the v2 batch at ``pos`` (the whole header must be in ``buf``).

    ``position`` is reported as the batch's position (default ``pos``): scanners that read a file
    through a window pass the file position here.
    """
    if len(buf) - pos < V2_HEADER_SIZE:
        raise CorruptRecordError(f"v2 batch header needs {V2_HEADER_SIZE} bytes but {len(buf) - pos} remain")
    (base, length, epoch, magic, crc, attrs, last_delta, base_ts, max_ts, pid, p_epoch, base_seq, count) = (
        HEADER.unpack_from(buf, pos)
    )
    size = length + 12
    if size < V2_HEADER_SIZE:
        raise CorruptRecordError(f"v2 batch size {size} is smaller than its {V2_HEADER_SIZE}-byte header")
    if count < 0:
        raise CorruptRecordError(f"v2 batch has a negative record count {count}")
    if last_delta < 0:
        raise CorruptRecordError(f"v2 batch has a negative lastOffsetDelta {last_delta}")
    if attrs & _CODEC_MASK > Codec.ZSTD:
        raise CorruptRecordError(f"v2 batch uses unknown compression codec id {attrs & _CODEC_MASK}")
    return BatchHeader(
        pos if position is None else position,
        base,
        base + last_delta,
        size,
        epoch,
        magic,
        crc,
        attrs,
        base_ts,
        max_ts,
        pid,
        p_epoch,
        base_seq,
        count,
    )


def compute_crc(buf: Buffer, pos: int, size: int) -> int:
    """CRC-32C of the bytes a v2 batch's checksum covers."""
    return int(crc32c.crc32c(memoryview(buf)[pos + ATTRIBUTES_OFFSET : pos + size]))


def crc_valid(buf: Buffer, header: BatchHeader) -> bool:
    """Whether the stored CRC matches the batch bytes."""
    return compute_crc(buf, header.position, header.size) == header.crc


class V2Records(NamedTuple):
    """The records of one v2 batch, checked and decompressed: ``record_count`` records in
    ``data[pos:end]``."""

    data: Buffer
    pos: int
    end: int
    record_count: int
    base_offset: int
    base_timestamp: int
    log_append: int | None
    """The batch's append time, every record's timestamp, when it has the LogAppendTime type."""
    compressed: bool
    """Whether ``data`` was decompressed (for error messages)."""


def records_of(
    buf: Buffer,
    header: BatchHeader,
    verify_crc: bool,
    decompress: Callable[[Codec, memoryview], bytes] = codecs.decompress_v2,
) -> V2Records:
    """The records of the batch described by ``header`` (``header.position`` indexes ``buf``):
    ``buf`` itself (a view of a bytearray) when the batch is not compressed, so that nothing is
    copied. ``decompress`` is :func:`rlm.log.codecs.decompress_v2` or the reference,
    :func:`rlm.log.codecs.decompress`.

    Raises:
        CorruptRecordError: the batch runs past ``buf``, fails its CRC or cannot be decompressed.
    """
    pos = header.position
    end = _check_batch(buf, header, verify_crc, pos)
    compressed = bool(header.attributes & _CODEC_MASK)
    data: Buffer
    if compressed:
        data = decompress(Codec(header.attributes & _CODEC_MASK), memoryview(buf)[pos + V2_HEADER_SIZE : end])
        start, stop = 0, len(data)
    else:
        data = memoryview(buf) if isinstance(buf, bytearray) else buf
        start, stop = pos + V2_HEADER_SIZE, end
    log_append = header.max_timestamp if header.attributes & _LOG_APPEND_TIME else None
    return V2Records(
        data,
        start,
        stop,
        header.record_count,
        header.base_offset,
        header.base_timestamp,
        log_append,
        compressed,
    )


def decode_v2(
    buf: Buffer, header: BatchHeader, *, verify_crc: bool = True, raw_header_keys: bool = False
) -> list[Record]:
    """Decode every record of the v2 batch described by ``header`` (positions index ``buf``).

    A header key that is not UTF-8 is presented as Kafka's client presents it
    (:func:`header_key`), or, with ``raw_header_keys``, keeps its bytes as surrogate escapes
    (what :func:`encode_record` writes back as they were).

    The records are decoded by the C module :mod:`rlm.log._decode` when it is built; where it gives
    up (anything not plainly well-formed) :func:`decode_records_py`, the reference, decodes them
    and says what is wrong.

    Raises:
        CorruptRecordError: bad CRC, a record that does not fit, a count that does not match,
            bytes left over, or a payload the codec cannot decompress.
    """
    if _decode is not None and not header.attributes & _CODEC_MASK:
        try:  # the whole batch in C: header fields, CRC and records
            return _decode.decode_batch_records(Record, buf, header.position, verify_crc)
        except (ValueError, OverflowError, BufferError):
            pass  # not plainly well-formed: as any batch, below
    records = records_of(buf, header, verify_crc)
    if _decode is not None:
        try:
            return _decode.decode_records(Record, *records[:7])
        except (ValueError, OverflowError, BufferError):
            pass  # not plainly well-formed (a header key not UTF-8, say): the reference decodes it
    return decode_records_py(records, raw_header_keys=raw_header_keys)


def decode_records_py(records: V2Records, *, raw_header_keys: bool = False) -> list[Record]:
    """The reference decoder of :func:`decode_v2`, in Python (the C decoder takes only header
    keys that are UTF-8, which both ways of decoding leave alike).

    Raises:
        CorruptRecordError: as :func:`decode_v2`.
    """
    data, pos, end, count, base_offset, base_timestamp, log_append, compressed = records
    if not isinstance(data, bytes):  # the records' bytes alone, as the loop indexes bytes
        data, end, pos = bytes(memoryview(data)[pos:end]), end - pos, 0
    try:
        return _decode_records(
            data,
            pos,
            end,
            count,
            base_offset,
            base_timestamp,
            log_append,
            compressed=compressed,
            key_errors=_RAW if raw_header_keys else _JAVA_REPLACE,
        )
    except IndexError as exc:
        raise CorruptRecordError("a record runs past the end of the batch data") from exc


def _check_batch(buf: Buffer, header: BatchHeader, verify_crc: bool, pos: int) -> int:
    end = pos + header.size
    if end > len(buf):
        raise CorruptRecordError(f"v2 batch of {header.size} bytes runs past the end of its data")
    if verify_crc:
        computed = compute_crc(buf, pos, header.size)
        if computed != header.crc:
            raise CorruptRecordError(
                f"v2 batch CRC mismatch: stored 0x{header.crc:08x}, computed 0x{computed:08x}"
            )
    return end


def _records_data(buf: Buffer, header: BatchHeader, verify_crc: bool, pos: int) -> tuple[bytes, int, int]:
    """The bytes holding the records of the batch at ``pos``, checked and decompressed:
    ``(data, start, stop)``."""
    end = _check_batch(buf, header, verify_crc, pos)
    codec = header.attributes & _CODEC_MASK
    if codec:
        data = codecs.decompress_v2(Codec(codec), memoryview(buf)[pos + V2_HEADER_SIZE : end])
        return data, 0, len(data)
    if isinstance(buf, bytes):
        return buf, pos + V2_HEADER_SIZE, end
    data = bytes(buf[pos + V2_HEADER_SIZE : end])
    return data, 0, len(data)


def find_v2(
    buf: Buffer,
    header: BatchHeader,
    timestamp: int,
    start_offset: int,
    *,
    verify_crc: bool = True,
    at: int | None = None,
) -> tuple[int, int] | None:
    """``(timestamp, offset)`` of the batch's first record whose timestamp is ≥ ``timestamp`` and
    whose offset is ≥ ``start_offset``; None when no record qualifies. The batch starts at ``at``
    in ``buf`` (default ``header.position``).

    What a timestamp search does with a batch, without decoding it: each record's length,
    timestamp delta and offset delta are read, and its key, value and headers skipped.

    Raises:
        CorruptRecordError: as :func:`decode_v2` for the batch, or a record that does not fit.
    """
    if header.max_timestamp < timestamp or header.last_offset < start_offset:
        return None
    data, pos, end = _records_data(buf, header, verify_crc, header.position if at is None else at)
    log_append = bool(header.attributes & _LOG_APPEND_TIME)
    return scan.find_record(
        data,
        pos,
        end,
        header.record_count,
        header.base_offset,
        header.max_timestamp if log_append else header.base_timestamp,
        log_append,
        timestamp,
        start_offset,
    )


def _decode_records(
    data: bytes,
    pos: int,
    end: int,
    count: int,
    base_offset: int,
    base_ts: int,
    log_append: int | None,
    *,
    compressed: bool,
    key_errors: str = _JAVA_REPLACE,
) -> list[Record]:
    # The hot loop of every record read. Varints of one and two bytes (lengths up to 8191, i.e.
    # nearly every field) are decoded inline: a function call per field would cost more than the
    # rest of the loop. Longer ones take the general path, masked to 32/64 bits as ByteUtils
    # reads them (the last byte of an overlong encoding may carry bits Java shifts out).
    out: list[Record] = []
    append = out.append
    new = tuple.__new__
    for i in range(count):
        if pos >= end:
            raise CorruptRecordError(f"batch declares {count} records but its data ends after {i}")
        # length
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
        # timestampDelta (varlong)
        u = data[pos]
        if u < 0x80:
            pos += 1
        elif data[pos + 1] < 0x80:
            u = (u & 0x7F) | (data[pos + 1] << 7)
            pos += 2
        else:
            u, pos = read_uvarint(data, pos, 10)
            u &= _INT64_BITS
        ts_delta = (u >> 1) ^ -(u & 1)
        # offsetDelta
        u = data[pos]
        if u < 0x80:
            pos += 1
        elif data[pos + 1] < 0x80:
            u = (u & 0x7F) | (data[pos + 1] << 7)
            pos += 2
        else:
            u, pos = read_uvarint(data, pos, 5)
            u &= _INT32_BITS
        offset_delta = (u >> 1) ^ -(u & 1)
        # key
        u = data[pos]
        if u < 0x80:
            pos += 1
        elif data[pos + 1] < 0x80:
            u = (u & 0x7F) | (data[pos + 1] << 7)
            pos += 2
        else:
            u, pos = read_uvarint(data, pos, 5)
            u &= _INT32_BITS
        if u & 1:  # any negative size is null, as DefaultRecord.readFrom reads it
            key = None
        else:
            u >>= 1
            if pos + u > rec_end:
                raise CorruptRecordError(f"record {i} has a key of {u} bytes, more than the record holds")
            key = data[pos : pos + u]
            pos += u
        # value
        u = data[pos]
        if u < 0x80:
            pos += 1
        elif data[pos + 1] < 0x80:
            u = (u & 0x7F) | (data[pos + 1] << 7)
            pos += 2
        else:
            u, pos = read_uvarint(data, pos, 5)
            u &= _INT32_BITS
        if u & 1:
            value = None
        else:
            u >>= 1
            if pos + u > rec_end:
                raise CorruptRecordError(f"record {i} has a value of {u} bytes, more than the record holds")
            value = data[pos : pos + u]
            pos += u
        # headers
        u = data[pos]
        if u == 0:
            headers: tuple[Header, ...] = ()
            pos += 1
        elif u < 0x80 and not u & 1 and u >> 1 <= (rec_end - pos) // 2:
            pos += 1
            found: list[Header] = []
            for _ in range(u >> 1):
                u = data[pos]
                if u < 0x80 and not u & 1:
                    pos += 1
                    name_end = pos + (u >> 1)
                else:
                    klen, pos = read_varint(data, pos)
                    if klen < 0:
                        raise CorruptRecordError(f"record {i} has an invalid header key length {klen}")
                    name_end = pos + klen
                if name_end > rec_end:
                    raise CorruptRecordError(
                        f"record {i} has an invalid header key length {name_end - pos}: "
                        "it runs past the record"
                    )
                try:
                    name = data[pos:name_end].decode("utf-8")
                except UnicodeDecodeError:
                    name = data[pos:name_end].decode("utf-8", key_errors)
                pos = name_end
                u = data[pos]
                if u == 1:
                    found.append((name, None))
                    pos += 1
                    continue
                if u < 0x80 and not u & 1:
                    pos += 1
                    vlen = u >> 1
                else:
                    vlen, pos = read_varint(data, pos)
                    if vlen < 0:
                        found.append((name, None))
                        continue
                if pos + vlen > rec_end:
                    raise CorruptRecordError(
                        f"record {i} has an invalid header value length {vlen}: it runs past the record"
                    )
                found.append((name, data[pos : pos + vlen]))
                pos += vlen
            headers = tuple(found)
        else:
            headers, pos = _decode_headers(data, pos, rec_end, i, key_errors)
        if pos != rec_end:
            raise CorruptRecordError(
                f"record {i} declares {length} bytes but its fields take {length + pos - rec_end}"
            )
        offset = base_offset + offset_delta
        if not -0x8000000000000000 <= offset <= 0x7FFFFFFFFFFFFFFF:
            raise CorruptRecordError(f"record {i} has offset {offset}, outside int64")
        if log_append is not None:
            timestamp = log_append
        else:
            timestamp = base_ts + ts_delta
            if not -0x8000000000000000 <= timestamp <= 0x7FFFFFFFFFFFFFFF:
                timestamp = _wrap_int64(timestamp)
        append(new(Record, (offset, timestamp, key, value, headers)))
    if pos != end:
        where = "decompressed stream" if compressed else "batch"
        raise CorruptRecordError(f"{end - pos} bytes left in the {where} after its {count} records")
    return out


def _wrap_int64(value: int) -> int:
    """``value`` as Java's long arithmetic leaves it (two's complement, 64 bits)."""
    return ((value + 0x8000000000000000) & _INT64_BITS) - 0x8000000000000000


def _decode_headers(
    data: bytes, pos: int, rec_end: int, index: int, key_errors: str
) -> tuple[tuple[Header, ...], int]:
    count, pos = read_varint(data, pos)
    if count < 0 or count > (rec_end - pos) // 2:
        raise CorruptRecordError(f"record {index} has an invalid header count {count}")
    headers: list[Header] = []
    for _ in range(count):
        klen = data[pos]
        if klen < 0x80:
            klen = (klen >> 1) ^ -(klen & 1)
            pos += 1
        else:
            klen, pos = read_varint(data, pos)
        if klen < 0 or pos + klen > rec_end:
            raise CorruptRecordError(f"record {index} has an invalid header key length {klen}")
        name = data[pos : pos + klen].decode("utf-8", key_errors)
        pos += klen
        vlen = data[pos]
        if vlen < 0x80:
            vlen = (vlen >> 1) ^ -(vlen & 1)
            pos += 1
        else:
            vlen, pos = read_varint(data, pos)
        if pos + vlen > rec_end:
            raise CorruptRecordError(f"record {index} has an invalid header value length {vlen}")
        if vlen < 0:  # any negative size is null, as DefaultRecord.readFrom reads it
            headers.append((name, None))
        else:
            headers.append((name, data[pos : pos + vlen]))
            pos += vlen
    return tuple(headers), pos


def encode_record(
    out: bytearray,
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[Header] = (),
) -> None:
    """Append one v2 record (length prefix included) to ``out``. A header name's surrogate
    escapes (``raw_header_keys`` of :func:`decode_v2`) are written as the bytes they stand for."""
    body = bytearray(b"\x00")
    write_varlong(timestamp_delta, body)
    write_varint(offset_delta, body)
    _write_blob(key, body)
    _write_blob(value, body)
    write_varint(len(headers), body)
    for name, hvalue in headers:
        encoded = name.encode("utf-8", _RAW)
        write_varint(len(encoded), body)
        body += encoded
        _write_blob(hvalue, body)
    write_varint(len(body), out)
    out += body


def _write_blob(blob: bytes | None, out: bytearray) -> None:
    if blob is None:
        out.append(0x01)  # varint(-1)
    else:
        write_varint(len(blob), out)
        out += blob


def encode_v2_batch(
    records: Sequence[Record],
    *,
    base_offset: int | None = None,
    codec: Codec = Codec.NONE,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    log_append_time: int | None = None,
    leader_epoch: int = -1,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    is_transactional: bool = False,
    is_control: bool = False,
    delete_horizon: int | None = None,
    last_offset_delta: int | None = None,
    max_timestamp: int | None = None,
) -> bytes:
    """Build one v2 batch from records with absolute offsets and (CreateTime) timestamps.

    ``base_offset`` defaults to the first record's offset. For LogAppendTime give
    ``log_append_time``: it becomes ``maxTimestamp`` and the records keep their original deltas,
    as the broker writes them. With no records an empty (header-only) batch is written, which
    needs ``base_offset``, ``last_offset_delta`` and ``max_timestamp``.
    """
    if not records:
        if base_offset is None or last_offset_delta is None or max_timestamp is None:
            raise ValueError("an empty batch needs base_offset, last_offset_delta and max_timestamp")
        payload = b""
        base_ts = -1
        codec = Codec.NONE
    else:
        if base_offset is None:
            base_offset = records[0].offset
        base_ts = records[0].timestamp if delete_horizon is None else delete_horizon
        body = bytearray()
        previous = -1
        for rec in records:
            delta = rec.offset - base_offset
            if delta <= previous:
                raise ValueError(f"record offsets must increase within a batch (offset {rec.offset})")
            if rec.timestamp < -1:
                raise ValueError(f"invalid record timestamp {rec.timestamp}")
            previous = delta
            # the delta in long arithmetic, as MemoryRecordsBuilder writes it (readers wrap too)
            ts_delta = _wrap_int64(rec.timestamp - base_ts)
            encode_record(body, delta, ts_delta, rec.key, rec.value, rec.headers)
        payload = codecs.compress(codec, memoryview(body)) if codec else bytes(body)
        if last_offset_delta is None:
            last_offset_delta = records[-1].offset - base_offset
        if max_timestamp is None:
            max_timestamp = max(rec.timestamp for rec in records)
    attributes = int(codec)
    if timestamp_type is TimestampType.LOG_APPEND_TIME:
        if log_append_time is None:
            raise ValueError("a LogAppendTime batch needs log_append_time")
        attributes |= _LOG_APPEND_TIME
        max_timestamp = log_append_time
    if is_transactional:
        attributes |= _TRANSACTIONAL
    if is_control:
        attributes |= _CONTROL
    if delete_horizon is not None:
        attributes |= _DELETE_HORIZON
    buf = bytearray(V2_HEADER_SIZE + len(payload))
    HEADER.pack_into(
        buf,
        0,
        base_offset,
        V2_HEADER_SIZE - 12 + len(payload),
        leader_epoch,
        2,
        0,
        attributes,
        last_offset_delta,
        base_ts,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        len(records),
    )
    buf[V2_HEADER_SIZE:] = payload
    _CRC.pack_into(buf, CRC_OFFSET, crc32c.crc32c(memoryview(buf)[ATTRIBUTES_OFFSET:]))
    return bytes(buf)


def encode_control_batch(
    base_offset: int,
    control_type: ControlType,
    *,
    producer_id: int,
    producer_epoch: int,
    timestamp: int,
    coordinator_epoch: int = 0,
    leader_epoch: int = -1,
    log_append_time: int | None = None,
) -> bytes:
    """Build a transaction marker batch (COMMIT or ABORT) as the broker writes it.

    On a LogAppendTime topic pass ``log_append_time``: the broker stamps markers like any batch.
    """
    key = _CONTROL_KEY.pack(0, control_type)
    value = _END_TXN_VALUE.pack(0, coordinator_epoch)
    return encode_v2_batch(
        [Record(base_offset, timestamp, key, value)],
        leader_epoch=leader_epoch,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        is_transactional=True,
        is_control=True,
        timestamp_type=TimestampType.CREATE_TIME
        if log_append_time is None
        else TimestampType.LOG_APPEND_TIME,
        log_append_time=log_append_time,
    )


def parse_control_record(record: Record) -> ControlRecord:
    """Read the type (and, for transaction markers, the coordinator epoch) of a control record."""
    key = record.key
    if key is None or len(key) < 4:
        raise CorruptRecordError(f"control record at offset {record.offset} has a short key")
    version, ctype = _CONTROL_KEY.unpack_from(key)
    if version < 0:
        raise CorruptRecordError(f"control record at offset {record.offset} has version {version}")
    coordinator_epoch = -1
    if ctype in (ControlType.ABORT, ControlType.COMMIT):
        value = record.value
        if value is None or len(value) < 6:
            raise CorruptRecordError(f"transaction marker at offset {record.offset} has a short value")
        _, coordinator_epoch = _END_TXN_VALUE.unpack_from(value)
    return ControlRecord(version, ctype, coordinator_epoch)


def with_leader_epoch(batch: bytes, epoch: int) -> bytes:
    """Return ``batch`` with its partitionLeaderEpoch replaced (the CRC does not cover it)."""
    buf = bytearray(batch)
    struct.pack_into(">i", buf, 12, epoch)
    return bytes(buf)


def with_base_offset(batch: bytes, base_offset: int) -> bytes:
    """Return ``batch`` with its baseOffset replaced (the CRC does not cover it)."""
    buf = bytearray(batch)
    struct.pack_into(">q", buf, 0, base_offset)
    return bytes(buf)
