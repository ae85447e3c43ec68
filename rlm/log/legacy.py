"""Legacy message sets: message format v0 (magic 0) and v1 (magic 1, KIP-32).

Each log entry is one message. A compressed "wrapper" message carries, as its value, a whole
compressed message set of uncompressed inner messages (one level of nesting). Parsing takes bytes
and returns values; it does no I/O. Every inconsistency is a :class:`~rlm.errors.CorruptRecordError`
with the reason in words and no position (callers add it with ``err.at(path, position)``).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence

from rlm.errors import CorruptRecordError, InvalidRecordError
from rlm.log import codecs
from rlm.log.model import (
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    BatchHeader,
    Codec,
    Record,
    TimestampType,
)

# One log entry, v0 (offsets are from the start of the entry):
#   0  offset        int64   absolute offset; a wrapper's is the offset of its last inner message
#   8  message_size  int32   bytes after this field (v0 at least 14)
#   12 crc           uint32  CRC-32 (IEEE/zlib) of bytes [16, 12 + message_size)
#   16 magic         int8    0
#   17 attributes    int8    bits 0-2 codec; bits 3-7 unused (0)
#   18 key_length    int32   -1 for a null key
#   .. key           bytes
#   .. value_length  int32   -1 for a null value
#   .. value         bytes   a wrapper's: the compressed inner message set
_ENTRY_V0 = struct.Struct(">qiIbB")

# One log entry, v1: as v0 with a timestamp after the attributes:
#   0  offset        int64   as v0 (inner messages of a v1 wrapper: relative, 0..n-1)
#   8  message_size  int32   at least 22
#   12 crc           uint32  CRC-32 of bytes [16, 12 + message_size)
#   16 magic         int8    1
#   17 attributes    int8    bits 0-2 codec; bit 3 timestamp type (1 = LogAppendTime)
#   18 timestamp     int64   milliseconds since the epoch, -1 for none
#   26 key_length    int32   then key, value_length, value as in v0
_ENTRY_V1 = struct.Struct(">qiIbBq")

# The fields after the CRC, which the CRC covers: magic, attributes (v1: timestamp), key length.
_BODY_V0 = struct.Struct(">bBi")
_BODY_V1 = struct.Struct(">bBqi")
_PREFIX = struct.Struct(">qiI")  # offset, message_size, crc
_LENGTH = struct.Struct(">i")  # key_length, value_length
_CRC = struct.Struct(">I")
_TIMESTAMP = struct.Struct(">q")
_CRC_OFFSET = 12
_TIMESTAMP_OFFSET = 18

_CODEC_MASK = 0x07
_LOG_APPEND_TIME = 0x08
#: messageSize minimum of each magic (LegacyRecord.RECORD_OVERHEAD_V0/V1).
_MIN_SIZE = (14, 22)
_KEY_OFFSET = (_ENTRY_V0.size, _ENTRY_V1.size)

# offset, crc, magic, attributes, timestamp, key, value, end position of the entry
_Entry = tuple[int, int, int, int, int, memoryview | None, memoryview | None, int]


def parse_legacy_header(buf: bytes | memoryview, pos: int) -> BatchHeader:
    """Read the header of the v0/v1 entry at ``pos``, without decoding its records.

    Args:
        buf: Bytes holding the whole entry from ``pos`` (its 12-byte prefix included).
        pos: Position of the entry in ``buf``; reported as the header's position.

    Returns:
        The header. A compressed wrapper reports ``base_offset`` and ``record_count`` as -1: they
        are known only after decompression.

    Raises:
        CorruptRecordError: the size is below the minimum of its magic, the entry does not fit
            ``buf``, or the magic is not 0 or 1. A v0 message's timestamp-type bit is ignored,
            as Kafka ignores it.
    """
    if len(buf) - pos < LOG_OVERHEAD + _MIN_SIZE[0]:
        raise CorruptRecordError("legacy message is cut short: no room for its header")
    offset, size, crc, magic, attributes = _ENTRY_V0.unpack_from(buf, pos)
    _check_header(size, magic, len(buf) - pos - LOG_OVERHEAD)
    timestamp = _timestamp(buf, pos, magic)
    compressed = attributes & _CODEC_MASK != Codec.NONE
    return BatchHeader(
        position=pos,
        base_offset=-1 if compressed else offset,
        last_offset=offset,
        size=LOG_OVERHEAD + size,
        leader_epoch=NO_PARTITION_LEADER_EPOCH,
        magic=magic,
        crc=crc,
        attributes=attributes,
        base_timestamp=timestamp,
        max_timestamp=timestamp,
        producer_id=NO_PRODUCER_ID,
        producer_epoch=NO_PRODUCER_EPOCH,
        base_sequence=NO_SEQUENCE,
        record_count=-1 if compressed else 1,
    )


def _check_header(size: int, magic: int, room: int) -> None:
    # The attributes are not judged here: a v0 message's bit 3 (timestamp type) is ignored, as
    # Kafka's LegacyRecord.timestampType ignores it, and the codec is checked where it is used.
    if size < _MIN_SIZE[0]:
        raise CorruptRecordError(f"legacy messageSize {size} is below the minimum {_MIN_SIZE[0]}")
    if size > room:
        raise CorruptRecordError(f"legacy messageSize {size} runs past the {room} bytes available")
    if magic not in (0, 1):
        raise CorruptRecordError(f"legacy message has magic {magic}, expected 0 or 1")
    if size < _MIN_SIZE[magic]:
        raise CorruptRecordError(
            f"legacy v{magic} messageSize {size} is below the minimum {_MIN_SIZE[magic]}"
        )


def _timestamp(buf: bytes | memoryview, pos: int, magic: int) -> int:
    if magic == 0:
        return NO_TIMESTAMP
    timestamp: int = _TIMESTAMP.unpack_from(buf, pos + _TIMESTAMP_OFFSET)[0]
    return timestamp


def legacy_crc_valid(buf: bytes | memoryview, pos: int, size: int) -> bool:
    """Whether the stored CRC-32 of the entry of ``size`` bytes at ``pos`` matches its bytes."""
    if size < MAGIC_OFFSET or len(buf) - pos < size:
        return False
    (stored,) = _CRC.unpack_from(buf, pos + _CRC_OFFSET)
    return bool(stored == zlib.crc32(memoryview(buf)[pos + MAGIC_OFFSET : pos + size]))


def _read_entry(view: memoryview, pos: int, limit: int, verify_crc: bool) -> _Entry:
    """Parse and check the entry at ``pos``, which must end by ``limit``."""
    if limit - pos < LOG_OVERHEAD + _MIN_SIZE[0]:
        raise CorruptRecordError(f"legacy message set is truncated: {limit - pos} bytes left")
    offset, size, crc, magic, attributes = _ENTRY_V0.unpack_from(view, pos)
    _check_header(size, magic, limit - pos - LOG_OVERHEAD)
    end = pos + LOG_OVERHEAD + size
    if verify_crc:
        computed = zlib.crc32(view[pos + MAGIC_OFFSET : end])
        if computed != crc:
            raise CorruptRecordError(
                f"legacy message CRC mismatch: stored 0x{crc:08x}, computed 0x{computed:08x}"
            )
    timestamp = _timestamp(view, pos, magic)
    key, at = _read_bytes(view, pos + _KEY_OFFSET[magic], end, "key")
    value, at = _read_bytes(view, at, end, "value")
    if at != end:
        raise CorruptRecordError(f"legacy message has {end - at} bytes after its value")
    return offset, crc, magic, attributes, timestamp, key, value, end


def _read_bytes(view: memoryview, pos: int, end: int, what: str) -> tuple[memoryview | None, int]:
    if end - pos < 4:
        raise CorruptRecordError(f"legacy message is too short for its {what} length")
    (length,) = _LENGTH.unpack_from(view, pos)
    pos += 4
    if length == -1:
        return None, pos
    if length < 0 or length > end - pos:
        raise CorruptRecordError(
            f"legacy message {what} length {length} does not fit the {end - pos} bytes left"
        )
    return view[pos : pos + length], pos + length


def _bytes(view: memoryview | None) -> bytes | None:
    return None if view is None else view.tobytes()


def decode_legacy(buf: bytes | memoryview, header: BatchHeader, *, verify_crc: bool = True) -> list[Record]:
    """Decode the v0/v1 entry ``header`` describes into records with absolute offsets.

    Args:
        buf: The bytes ``header`` was parsed from.
        header: From :func:`parse_legacy_header`.
        verify_crc: Check the CRC-32 of the entry and, for a wrapper, of every inner message.

    Returns:
        One record for an uncompressed message; the inner messages of a compressed wrapper.
        Timestamps follow Kafka: -1 for v0; the wrapper's for every inner message of a
        LogAppendTime wrapper; otherwise each message's own.

    Raises:
        CorruptRecordError: a CRC, length, magic, codec or offset is not what the format says.
    """
    view = memoryview(buf)
    entry = _read_entry(view, header.position, header.end_position, verify_crc)
    offset, _, magic, attributes, timestamp, key, value, _ = entry
    codec = attributes & _CODEC_MASK
    if codec == Codec.NONE:
        return [Record(offset, timestamp, _bytes(key), _bytes(value))]
    if codec > Codec.ZSTD:
        raise CorruptRecordError(f"legacy message has unknown compression codec id {codec}")
    if value is None:
        raise CorruptRecordError("compressed legacy message has a null value")
    inner = codecs.decompress(Codec(codec), value, magic=magic)
    return _decode_inner(memoryview(inner), entry, verify_crc)


def _decode_inner(view: memoryview, wrapper: _Entry, verify_crc: bool) -> list[Record]:
    wrapper_offset, _, magic, attributes, wrapper_timestamp, _, _, _ = wrapper
    entries = []
    pos, limit = 0, len(view)
    while pos < limit:
        entry = _read_entry(view, pos, limit, verify_crc)
        if entry[2] != magic:
            raise CorruptRecordError(
                f"inner legacy message has magic {entry[2]} inside a magic {magic} wrapper"
            )
        if entry[3] & _CODEC_MASK:
            raise CorruptRecordError("inner legacy message is itself compressed")
        entries.append(entry)
        pos = entry[7]
    if not entries:
        raise CorruptRecordError("compressed legacy message holds no inner messages")
    base = 0
    if magic == 1 and wrapper_offset != 0:
        # v1 inner offsets are relative; a wrapper offset of 0 (some librdkafka versions) means
        # the inner offsets are taken as they are, as Kafka does.
        last_inner = entries[-1][0]
        if wrapper_offset < last_inner:
            raise CorruptRecordError(
                f"legacy wrapper offset {wrapper_offset} is below its last inner offset "
                f"{last_inner} and is not 0"
            )
        base = wrapper_offset - last_inner
    log_append_time = magic == 1 and attributes & _LOG_APPEND_TIME
    return [
        Record(
            base + e[0],
            wrapper_timestamp if log_append_time else e[4],
            _bytes(e[5]),
            _bytes(e[6]),
        )
        for e in entries
    ]


def legacy_up_to(buf: bytes | memoryview, header: BatchHeader, kept: int, last_kept: int) -> bytes:
    """The compressed v0/v1 wrapper ``header`` describes holding only its first ``kept`` inner
    messages, byte for byte, the last of them at offset ``last_kept``
    (:func:`rlm.log.clip.batch_up_to`): its offset that one's (left 0 where a v1 wrapper's is 0,
    whose inner offsets are taken as they are), its timestamp the kept messages' largest (a
    LogAppendTime wrapper keeps its own), its key and attributes as they were (but for a v0
    wrapper's timestamp-type bit, which Kafka ignores and a writer does not set).

    Raises:
        CorruptRecordError: as :func:`decode_legacy`, or the wrapper is not compressed.
    """
    view = memoryview(buf)
    entry = _read_entry(view, header.position, header.end_position, True)
    offset, _, magic, attributes, timestamp, key, value, _ = entry
    codec = attributes & _CODEC_MASK
    if codec == Codec.NONE or codec > Codec.ZSTD or value is None:
        raise CorruptRecordError("only a compressed legacy message holds more than one record")
    inner = memoryview(codecs.decompress(Codec(codec), value, magic=magic))
    records = _decode_inner(inner, entry, True)
    end = 0
    for _ in range(kept):
        end = _read_entry(inner, end, len(inner), False)[7]
    if magic == 1 and not attributes & _LOG_APPEND_TIME:
        timestamp = max(r.timestamp for r in records[:kept])
    return encode_legacy_entry(
        0 if magic == 1 and offset == 0 else last_kept,
        _bytes(key),
        codecs.compress(Codec(codec), inner[:end].tobytes(), magic=magic),
        magic=magic,
        timestamp=timestamp,
        attributes=attributes if magic == 1 else attributes & ~_LOG_APPEND_TIME,
    )


def encode_legacy_entry(
    offset: int,
    key: bytes | None,
    value: bytes | None,
    *,
    magic: int,
    timestamp: int = -1,
    attributes: int = 0,
) -> bytes:
    """Encode one v0/v1 log entry (12-byte prefix included) with its CRC-32.

    Raises:
        InvalidRecordError: ``magic`` is not 0 or 1, or a v0 message asks for LogAppendTime.
    """
    if magic not in (0, 1):
        raise InvalidRecordError(f"legacy messages have magic 0 or 1, not {magic}")
    if magic == 0 and attributes & _LOG_APPEND_TIME:
        raise InvalidRecordError("a v0 message has no timestamp type")
    key_length = -1 if key is None else len(key)
    value_length = -1 if value is None else len(value)
    if magic == 0:
        fixed = _BODY_V0.pack(magic, attributes, key_length)
    else:
        fixed = _BODY_V1.pack(magic, attributes, timestamp, key_length)
    body = b"".join((fixed, key or b"", _LENGTH.pack(value_length), value or b""))
    return _PREFIX.pack(offset, 4 + len(body), zlib.crc32(body)) + body


def encode_legacy_batch(
    records: Sequence[Record],
    *,
    magic: int,
    codec: Codec = Codec.NONE,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    log_append_time: int | None = None,
    wrapper_offset_zero: bool = False,
) -> bytes:
    """Encode ``records`` as a v0/v1 message set, the way a Kafka broker lays it out.

    Uncompressed: one entry per record at its absolute offset. Compressed: one wrapper whose
    value is the compressed inner set; inner offsets are relative (0..n-1 when contiguous) for
    v1 and absolute for v0; the wrapper offset is the last record's offset (0 when
    ``wrapper_offset_zero``, to reproduce data from some librdkafka versions); the wrapper
    timestamp is the largest inner timestamp (CreateTime) or ``log_append_time``, in which case
    the inner messages keep their CreateTimes, as when the broker stamps a wrapper in place.

    Args:
        records: Records with increasing offsets and no headers. v0 ignores their timestamps.
        magic: 0 or 1.
        codec: Any codec but zstd, which v0/v1 do not allow.
        timestamp_type: LogAppendTime (v1 only) stamps ``log_append_time`` and sets bit 3.
        log_append_time: Required with LogAppendTime.
        wrapper_offset_zero: Write 0 as the wrapper offset.

    Returns:
        The message set; empty when there are no records.

    Raises:
        InvalidRecordError: the arguments break a rule of the legacy formats.
    """
    log_append = timestamp_type == TimestampType.LOG_APPEND_TIME
    _check_batch(records, magic, codec, log_append, log_append_time)
    if not records:
        return b""
    append_time = NO_TIMESTAMP if log_append_time is None else log_append_time
    stamp = _LOG_APPEND_TIME if log_append else 0
    if codec == Codec.NONE:
        return b"".join(
            encode_legacy_entry(
                r.offset,
                r.key,
                r.value,
                magic=magic,
                timestamp=append_time if log_append else r.timestamp,
                attributes=stamp,
            )
            for r in records
        )
    first = records[0].offset
    inner = b"".join(
        encode_legacy_entry(
            r.offset - first if magic == 1 else r.offset,
            r.key,
            r.value,
            magic=magic,
            timestamp=r.timestamp,
        )
        for r in records
    )
    timestamp = append_time if log_append else max(r.timestamp for r in records)
    return encode_legacy_entry(
        0 if wrapper_offset_zero else records[-1].offset,
        None,
        codecs.compress(codec, inner, magic=magic),
        magic=magic,
        timestamp=timestamp,
        attributes=codec | stamp,
    )


def _check_batch(
    records: Sequence[Record],
    magic: int,
    codec: Codec,
    log_append: bool,
    log_append_time: int | None,
) -> None:
    if magic not in (0, 1):
        raise InvalidRecordError(f"legacy message sets have magic 0 or 1, not {magic}")
    if codec == Codec.ZSTD:
        raise InvalidRecordError("zstd compression needs magic 2; v0/v1 do not support it")
    if log_append and (magic == 0 or log_append_time is None):
        raise InvalidRecordError("LogAppendTime needs magic 1 and a log_append_time")
    previous = -1
    for record in records:
        if record.headers:
            raise InvalidRecordError("legacy messages cannot carry headers")
        if record.offset <= previous:
            raise InvalidRecordError(f"offset {record.offset} does not follow {previous}")
        previous = record.offset
