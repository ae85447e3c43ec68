"""rlm.log.legacy: v0/v1 message sets, cross-checked with kafka-python and ported Kafka tests."""

from __future__ import annotations

import struct
import types
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record import MemoryRecords
from kafka.record.legacy_records import LegacyRecordBatchBuilder

from rlm.errors import CorruptRecordError, InvalidRecordError
from rlm.log.codecs import compress
from rlm.log.legacy import (
    decode_legacy,
    encode_legacy_batch,
    encode_legacy_entry,
    legacy_crc_valid,
    legacy_up_to,
    parse_legacy_header,
)
from rlm.log.model import BatchHeader, Codec, Record, TimestampType

LEGACY_CODECS = [Codec.NONE, Codec.GZIP, Codec.SNAPPY, Codec.LZ4]
TS = 1700000000000
RECORDS = [
    Record(1000, TS + 5, b"k0", b"first"),
    Record(1001, TS, None, b""),
    Record(1002, TS + 300, b"", None),
    Record(1003, TS + 7, b"key", b"v" * 5000),
]


@pytest.fixture(autouse=True)
def _codecs(kafka_python_codecs: types.ModuleType) -> None:
    """kafka-python given snappy and xxhash back-ends (``tests/unit/conftest.py``) in every test."""


def read_all(buf: bytes, *, verify_crc: bool = True) -> tuple[list[BatchHeader], list[Record]]:
    """Every entry header and record of a message set, as a log reader walks it."""
    headers, records, pos = [], [], 0
    while pos < len(buf):
        header = parse_legacy_header(buf, pos)
        headers.append(header)
        records.extend(decode_legacy(buf, header, verify_crc=verify_crc))
        pos = header.end_position
    return headers, records


def kafka_python_read(buf: bytes) -> list[tuple[int, int, int | None, bytes | None, bytes | None]]:
    """(offset, timestamp, timestamp type, key, value) of each record, per kafka-python."""
    out = []
    records = MemoryRecords(buf)
    while records.has_next():
        batch = records.next_batch()
        assert batch.validate_crc()
        for r in batch:
            assert r.validate_crc()
            ts = -1 if r.timestamp is None else r.timestamp
            out.append((r.offset, ts, r.timestamp_type, r.key, r.value))
    return out


def kafka_python_build(records: list[Record], magic: int, codec: Codec) -> bytes:
    """kafka-python's LegacyRecordBatchBuilder output, with its wrapper fixed as a broker has it.

    The builder writes inner offsets as given (so relative ones for v1), and wrapper offset 0 and
    timestamp 0: both are patched and the wrapper CRC recomputed.
    """
    base = records[0].offset
    builder = LegacyRecordBatchBuilder(magic=magic, compression_type=int(codec), batch_size=1 << 24)
    for r in records:
        offset = r.offset - base if codec and magic == 1 else r.offset
        assert builder.append(offset, timestamp=r.timestamp, key=r.key, value=r.value)
    buf = bytearray(builder.build())
    if codec:
        struct.pack_into(">q", buf, 0, records[-1].offset)
        if magic == 1:
            struct.pack_into(">q", buf, 18, max(r.timestamp for r in records))
        struct.pack_into(">I", buf, 12, zlib.crc32(buf[16:]))
    return bytes(buf)


def set_last_offset(buf: bytes, offset: int) -> bytes:
    """Kafka's ByteBufferLegacyRecordBatch.setLastOffset: the offset is outside the CRC."""
    return struct.pack(">q", offset) + buf[8:]


def patch(buf: bytes, at: int, fmt: str, value: int) -> bytes:
    """Overwrite a field of the entry at 0 and recompute its CRC, so only the field is wrong."""
    out = bytearray(buf)
    struct.pack_into(fmt, out, at, value)
    struct.pack_into(">I", out, 12, zlib.crc32(out[16:]))
    return bytes(out)


def expected(records: list[Record], magic: int) -> list[Record]:
    return [r._replace(timestamp=-1) for r in records] if magic == 0 else records


# --- cross-checks with kafka-python -------------------------------------------------------------


@pytest.mark.parametrize("codec", LEGACY_CODECS)
@pytest.mark.parametrize("magic", [0, 1])
def test_kafka_python_reads_ours(magic: int, codec: Codec) -> None:
    buf = encode_legacy_batch(RECORDS, magic=magic, codec=codec)
    want_type = None if magic == 0 else 0
    assert kafka_python_read(buf) == [
        (r.offset, r.timestamp, want_type, r.key, r.value) for r in expected(RECORDS, magic)
    ]


@pytest.mark.parametrize("codec", LEGACY_CODECS)
@pytest.mark.parametrize("magic", [0, 1])
def test_we_read_kafka_python(magic: int, codec: Codec) -> None:
    buf = kafka_python_build(RECORDS, magic, codec)
    headers, records = read_all(buf)
    assert records == expected(RECORDS, magic)
    assert all(legacy_crc_valid(buf, h.position, h.size) for h in headers)
    assert headers[-1].last_offset == RECORDS[-1].offset
    if codec:
        assert len(headers) == 1
        assert headers[0].codec is codec
        assert headers[0].max_timestamp == (-1 if magic == 0 else TS + 300)


@pytest.mark.parametrize("codec", LEGACY_CODECS)
@pytest.mark.parametrize("magic", [0, 1])
def test_same_bytes_as_kafka_python_where_compression_is_deterministic(magic: int, codec: Codec) -> None:
    if codec in (Codec.NONE, Codec.SNAPPY) or (codec is Codec.LZ4 and magic == 0):
        assert encode_legacy_batch(RECORDS, magic=magic, codec=codec) == kafka_python_build(
            RECORDS, magic, codec
        )
    else:  # gzip level and LZ4 content-size flag differ; compare what is inside instead
        ours = read_all(encode_legacy_batch(RECORDS, magic=magic, codec=codec))[1]
        assert ours == read_all(kafka_python_build(RECORDS, magic, codec))[1]


@pytest.mark.parametrize("codec", LEGACY_CODECS)
def test_log_append_time_v1_read_by_kafka_python(codec: Codec) -> None:
    buf = encode_legacy_batch(
        RECORDS,
        magic=1,
        codec=codec,
        timestamp_type=TimestampType.LOG_APPEND_TIME,
        log_append_time=TS + 999,
    )
    assert [(o, t, tt) for o, t, tt, _, _ in kafka_python_read(buf)] == [
        (r.offset, TS + 999, 1) for r in RECORDS
    ]
    headers, records = read_all(buf)
    assert {h.timestamp_type for h in headers} == {TimestampType.LOG_APPEND_TIME}
    assert [r.timestamp for r in records] == [TS + 999] * len(RECORDS)


@pytest.mark.parametrize("codec", LEGACY_CODECS)
def test_offsets_with_gaps_after_compaction(codec: Codec) -> None:
    compacted = [RECORDS[0], RECORDS[2]._replace(offset=1005), RECORDS[3]._replace(offset=1009)]
    buf = encode_legacy_batch(compacted, magic=1, codec=codec)
    assert read_all(buf)[1] == compacted
    assert [o for o, *_ in kafka_python_read(buf)] == [1000, 1005, 1009]


# --- headers ------------------------------------------------------------------------------------


def test_header_of_uncompressed_entry() -> None:
    entry = encode_legacy_entry(42, b"k", b"v", magic=1, timestamp=TS)
    buf = b"\x00" * 7 + entry
    header = parse_legacy_header(buf, 7)
    assert header == BatchHeader(
        position=7,
        base_offset=42,
        last_offset=42,
        size=len(entry),
        leader_epoch=-1,
        magic=1,
        crc=zlib.crc32(entry[16:]),
        attributes=0,
        base_timestamp=TS,
        max_timestamp=TS,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        record_count=1,
    )
    assert header.size == 12 + 22 + 2
    assert legacy_crc_valid(buf, 7, header.size)


@pytest.mark.parametrize("magic", [0, 1])
def test_header_of_compressed_wrapper(magic: int) -> None:
    buf = encode_legacy_batch(RECORDS, magic=magic, codec=Codec.GZIP)
    header = parse_legacy_header(buf, 0)
    assert (header.base_offset, header.last_offset, header.record_count) == (-1, 1003, -1)
    assert header.size == len(buf)
    assert header.max_timestamp == header.base_timestamp == (-1 if magic == 0 else TS + 300)
    assert header.codec is Codec.GZIP


def test_header_rejects_bad_size_and_magic() -> None:
    v0 = encode_legacy_entry(0, None, None, magic=0)
    v1 = encode_legacy_entry(0, None, None, magic=1, timestamp=TS)
    assert (len(v0), len(v1)) == (12 + 14, 12 + 22)
    cases = {
        "below the minimum 14": patch(v0, 8, ">i", 13),
        "v1 messageSize 21 is below the minimum 22": patch(v1, 8, ">i", 21)[:33],
        "runs past": patch(v1, 8, ">i", 23),
        "magic 2": patch(v1, 16, ">b", 2),
        "magic -1": patch(v0, 16, ">b", -1),
        "cut short": v1[:20],
    }
    for reason, buf in cases.items():
        with pytest.raises(CorruptRecordError, match=reason):
            parse_legacy_header(buf, 0)


def _v0_timestamp_type_bit(buf: bytes) -> bytes:
    """Every entry of the v0 message set ``buf`` with attribute bit 3 (the timestamp type) set and
    its CRC recomputed."""
    out, pos = bytearray(), 0
    while pos < len(buf):
        size = struct.unpack_from(">i", buf, pos + 8)[0] + 12
        out += patch(buf[pos : pos + size], 17, ">b", buf[pos + 17] | 0x08)
        pos += size
    return bytes(out)


def test_v0_timestamp_type_bit_is_ignored_as_kafka_does() -> None:
    """``LegacyRecord.timestampType`` is NO_TIMESTAMP_TYPE for magic 0 whatever bit 3 says: the
    entries, a wrapper and its inner messages alike, are read, and so is what follows them."""
    plain = _v0_timestamp_type_bit(encode_legacy_batch(RECORDS[:2], magic=0))
    inner = _v0_timestamp_type_bit(encode_legacy_batch(RECORDS[2:], magic=0))
    wrapper = encode_legacy_entry(
        1003, None, compress(Codec.GZIP, inner, magic=0), magic=0, attributes=Codec.GZIP
    )
    buf = (
        plain + _v0_timestamp_type_bit(wrapper) + encode_legacy_batch([Record(1004, TS, b"k", b"v")], magic=0)
    )
    headers, records = read_all(buf)
    assert [(h.last_offset, h.attributes & 0x08, h.timestamp_type) for h in headers] == [
        (1000, 0x08, TimestampType.NO_TIMESTAMP_TYPE),
        (1001, 0x08, TimestampType.NO_TIMESTAMP_TYPE),
        (1003, 0x08, TimestampType.NO_TIMESTAMP_TYPE),
        (1004, 0, TimestampType.NO_TIMESTAMP_TYPE),
    ]
    assert records == expected([*RECORDS, Record(1004, TS, b"k", b"v")], 0)
    cut = legacy_up_to(buf, headers[2], 1, 1002)
    assert read_all(cut)[1] == expected([RECORDS[2]], 0)


# --- ported from Kafka's LegacyRecordTest -------------------------------------------------------

FIELD_CASES = [
    (magic, key, value, codec)
    for magic in (0, 1)
    for key in (None, b"", b"key")
    for value in (None, b"", b"value")
    for codec in LEGACY_CODECS
]


@pytest.mark.parametrize(("magic", "key", "value", "codec"), FIELD_CASES)
def test_checksum(magic: int, key: bytes | None, value: bytes | None, codec: Codec) -> None:
    entry = encode_legacy_entry(0, key, value, magic=magic, timestamp=1234567, attributes=codec)
    header = parse_legacy_header(entry, 0)
    assert header.crc == zlib.crc32(entry[16:])
    assert legacy_crc_valid(entry, 0, header.size)
    for i in range(16, len(entry)):
        damaged = bytearray(entry)
        damaged[i] ^= 0x45
        assert not legacy_crc_valid(bytes(damaged), 0, header.size)
        with pytest.raises(CorruptRecordError):
            decode_legacy(bytes(damaged), header)


@pytest.mark.parametrize(("magic", "key", "value", "codec"), FIELD_CASES)
def test_fields(magic: int, key: bytes | None, value: bytes | None, codec: Codec) -> None:
    entry = encode_legacy_entry(0, key, value, magic=magic, timestamp=1234567, attributes=codec)
    header = parse_legacy_header(entry, 0)
    assert header.codec is codec
    assert header.magic == magic
    if magic > 0:
        assert header.max_timestamp == 1234567
        assert header.timestamp_type is TimestampType.CREATE_TIME
    else:
        assert header.max_timestamp == -1
        assert header.timestamp_type is TimestampType.NO_TIMESTAMP_TYPE
    if codec is Codec.NONE:
        assert decode_legacy(entry, header) == [Record(0, header.max_timestamp, key, value)]


# --- ported from Kafka's AbstractLegacyRecordBatchTest ------------------------------------------

ABC = [
    Record(0, 1, b"a", b"1"),
    Record(1, 2, b"b", b"2"),
    Record(2, 3, b"c", b"3"),
]


def test_set_last_offset_compressed() -> None:
    buf = set_last_offset(encode_legacy_batch(ABC, magic=1, codec=Codec.GZIP), 500)
    header = parse_legacy_header(buf, 0)
    assert header.last_offset == 500
    assert legacy_crc_valid(buf, 0, header.size)
    assert [r.offset for r in decode_legacy(buf, header)] == [498, 499, 500]


@pytest.mark.parametrize("magic", [0, 1])
def test_iterate_compressed_record_with_wrapper_offset_zero(magic: int) -> None:
    built = encode_legacy_batch(ABC, magic=magic, codec=Codec.GZIP)
    buf = set_last_offset(built, 0)
    assert buf == encode_legacy_batch(ABC, magic=magic, codec=Codec.GZIP, wrapper_offset_zero=True)
    assert [r.offset for r in decode_legacy(buf, parse_legacy_header(buf, 0))] == [0, 1, 2]
    shifted = [r._replace(offset=r.offset + 10) for r in ABC]
    buf = encode_legacy_batch(shifted, magic=1, codec=Codec.GZIP, wrapper_offset_zero=True)
    assert [r.offset for r in decode_legacy(buf, parse_legacy_header(buf, 0))] == [0, 1, 2]


def test_invalid_wrapper_offset_v1() -> None:
    buf = set_last_offset(encode_legacy_batch(ABC, magic=1, codec=Codec.GZIP), 1)
    with pytest.raises(CorruptRecordError, match="wrapper offset 1 is below its last inner"):
        decode_legacy(buf, parse_legacy_header(buf, 0))


def test_set_log_append_time_v1() -> None:
    log_append_time = 15
    built = bytearray(encode_legacy_batch(ABC, magic=1, codec=Codec.GZIP))
    # ByteBufferLegacyRecordBatch.setMaxTimestamp: wrapper attributes, timestamp and CRC only.
    built[17] |= 0x08
    struct.pack_into(">q", built, 18, log_append_time)
    struct.pack_into(">I", built, 12, zlib.crc32(built[16:]))
    buf = bytes(built)
    header = parse_legacy_header(buf, 0)
    assert header.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert header.max_timestamp == log_append_time
    assert legacy_crc_valid(buf, 0, header.size)
    assert [r.timestamp for r in decode_legacy(buf, header)] == [log_append_time] * 3
    assert buf == encode_legacy_batch(
        ABC,
        magic=1,
        codec=Codec.GZIP,
        timestamp_type=TimestampType.LOG_APPEND_TIME,
        log_append_time=log_append_time,
    )


@pytest.mark.parametrize("magic", [0, 1])
def test_zstd_compression_type_with_v0_or_v1(magic: int) -> None:
    with pytest.raises(InvalidRecordError, match="zstd"):
        encode_legacy_batch(ABC, magic=magic, codec=Codec.ZSTD)
    inner = encode_legacy_batch(ABC, magic=magic)
    wrapper = encode_legacy_entry(
        2, None, compress(Codec.ZSTD, inner), magic=magic, timestamp=3, attributes=Codec.ZSTD
    )
    with pytest.raises(CorruptRecordError, match="zstd"):
        decode_legacy(wrapper, parse_legacy_header(wrapper, 0))


# --- timestamps ---------------------------------------------------------------------------------


def test_uncompressed_log_append_time_stamps_every_message() -> None:
    buf = encode_legacy_batch(
        RECORDS, magic=1, timestamp_type=TimestampType.LOG_APPEND_TIME, log_append_time=TS + 1
    )
    headers, records = read_all(buf)
    assert all(h.attributes == 0x08 and h.max_timestamp == TS + 1 for h in headers)
    assert [r.timestamp for r in records] == [TS + 1] * len(RECORDS)


def test_create_time_wrapper_carries_max_and_inner_keep_their_own() -> None:
    buf = encode_legacy_batch(RECORDS, magic=1, codec=Codec.SNAPPY)
    header = parse_legacy_header(buf, 0)
    assert header.attributes == Codec.SNAPPY
    assert header.max_timestamp == TS + 300
    assert [r.timestamp for r in decode_legacy(buf, header)] == [r.timestamp for r in RECORDS]


def test_writer_rejects_what_legacy_formats_cannot_hold() -> None:
    with pytest.raises(InvalidRecordError, match="headers"):
        encode_legacy_batch([Record(0, 0, None, b"v", (("h", b"1"),))], magic=1)
    with pytest.raises(InvalidRecordError, match="does not follow"):
        encode_legacy_batch([ABC[1], ABC[0]], magic=1)
    with pytest.raises(InvalidRecordError, match="LogAppendTime"):
        encode_legacy_batch(ABC, magic=0, timestamp_type=TimestampType.LOG_APPEND_TIME)
    with pytest.raises(InvalidRecordError, match="magic"):
        encode_legacy_batch(ABC, magic=2)
    assert encode_legacy_batch([], magic=1, codec=Codec.GZIP) == b""


# --- corruption ---------------------------------------------------------------------------------


def wrap(inner: bytes, *, magic: int = 1, offset: int = 2, codec: Codec = Codec.GZIP) -> bytes:
    """A wrapper around an inner set built by hand, with a valid wrapper CRC."""
    value = compress(codec, inner, magic=magic)
    return encode_legacy_entry(offset, None, value, magic=magic, timestamp=3, attributes=codec)


def decode_whole(buf: bytes, *, verify_crc: bool = True) -> list[Record]:
    return decode_legacy(buf, parse_legacy_header(buf, 0), verify_crc=verify_crc)


@pytest.mark.parametrize("codec", LEGACY_CODECS)
def test_flipped_crc_byte(codec: Codec) -> None:
    buf = bytearray(encode_legacy_batch(ABC[:1], magic=1, codec=codec))
    buf[13] ^= 0x01
    with pytest.raises(CorruptRecordError, match="legacy message CRC mismatch: stored 0x"):
        decode_whole(bytes(buf))
    assert decode_whole(bytes(buf), verify_crc=False) == ABC[:1]


def test_inner_crc_is_checked() -> None:
    inner = bytearray(encode_legacy_batch(ABC, magic=1))
    inner[-1] ^= 0xFF  # last value byte of the last inner message
    buf = wrap(bytes(inner))
    assert legacy_crc_valid(buf, 0, len(buf))
    with pytest.raises(CorruptRecordError, match="CRC mismatch"):
        decode_whole(buf)
    assert decode_whole(buf, verify_crc=False)[2].value == bytes([ord("3") ^ 0xFF])


@pytest.mark.parametrize("codec", [Codec.GZIP, Codec.SNAPPY, Codec.LZ4])
def test_truncated_inner_set(codec: Codec) -> None:
    inner = encode_legacy_batch(ABC, magic=1)
    for cut in (1, 5, 12, 20, len(inner) - 1):
        with pytest.raises(CorruptRecordError, match=r"truncated|runs past|too short"):
            decode_whole(wrap(inner[: len(inner) - cut], codec=codec))


def test_truncated_compressed_value() -> None:
    buf = encode_legacy_batch(ABC, magic=1, codec=Codec.LZ4)
    value_length = struct.unpack_from(">i", buf, 30)[0]
    cut = patch(buf[:-10], 8, ">i", len(buf) - 22)
    cut = patch(cut, 30, ">i", value_length - 10)
    with pytest.raises(CorruptRecordError, match="lz4 frame is truncated"):
        decode_whole(cut)


def test_inner_rules() -> None:
    v1_inner = encode_legacy_batch(ABC, magic=1)
    v0_inner = encode_legacy_batch(ABC, magic=0)
    nested = encode_legacy_batch(ABC, magic=1, codec=Codec.GZIP)
    cases = {
        "magic 0 inside a magic 1 wrapper": wrap(v0_inner),
        "magic 1 inside a magic 0 wrapper": wrap(v1_inner, magic=0),
        "itself compressed": wrap(nested),
        "holds no inner messages": wrap(b""),
        "null value": encode_legacy_entry(0, None, None, magic=1, attributes=Codec.GZIP),
        "unknown compression codec id 6": encode_legacy_entry(0, None, b"x", magic=1, attributes=6),
    }
    for reason, buf in cases.items():
        with pytest.raises(CorruptRecordError, match=reason):
            decode_whole(buf)


def test_absurd_lengths() -> None:
    entry = encode_legacy_entry(0, b"key", b"value", magic=1, timestamp=TS)
    cases = {
        "key length 2147483647 does not fit": patch(entry, 26, ">i", 2**31 - 1),
        "key length -5 does not fit": patch(entry, 26, ">i", -5),
        "value length 1000 does not fit": patch(entry, 33, ">i", 1000),
        "1 bytes after its value": patch(entry, 33, ">i", 4),
        "messageSize 2147483647 runs past": patch(entry, 8, ">i", 2**31 - 1),
        "messageSize -2147483648 is below": patch(entry, 8, ">i", -(2**31)),
    }
    for reason, buf in cases.items():
        with pytest.raises(CorruptRecordError, match=reason):
            header = parse_legacy_header(buf, 0)
            decode_legacy(buf, header)


# --- properties ---------------------------------------------------------------------------------

record_lists = st.lists(
    st.tuples(
        st.integers(1, 3),
        st.integers(-1, 2**45),
        st.none() | st.binary(max_size=40),
        st.none() | st.binary(max_size=300),
    ),
    min_size=1,
    max_size=12,
).map(
    lambda rows: [
        Record(10**9 + sum(gap for gap, *_ in rows[: i + 1]), ts, key, value)
        for i, (_, ts, key, value) in enumerate(rows)
    ]
)


@settings(max_examples=200, deadline=None)
@given(record_lists, st.sampled_from([0, 1]), st.sampled_from(LEGACY_CODECS))
def test_round_trip_property(records: list[Record], magic: int, codec: Codec) -> None:
    buf = encode_legacy_batch(records, magic=magic, codec=codec)
    headers, decoded = read_all(buf)
    assert decoded == expected(records, magic)
    assert headers[-1].last_offset == records[-1].offset
    assert sum(h.size for h in headers) == len(buf)


@settings(max_examples=100, deadline=None)
@given(record_lists, st.sampled_from(LEGACY_CODECS), st.integers(0, 2**40))
def test_log_append_time_round_trip_property(records: list[Record], codec: Codec, append_time: int) -> None:
    buf = encode_legacy_batch(
        records,
        magic=1,
        codec=codec,
        timestamp_type=TimestampType.LOG_APPEND_TIME,
        log_append_time=append_time,
    )
    decoded = read_all(buf)[1]
    assert decoded == [r._replace(timestamp=append_time) for r in records]


@settings(max_examples=400, deadline=None)
@given(
    st.sampled_from([0, 1]),
    st.sampled_from(LEGACY_CODECS),
    st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1, max_size=4),
    st.integers(0, 60),
    st.booleans(),
)
def test_damaged_message_sets_only_raise_corrupt_record_error(
    magic: int, codec: Codec, flips: list[tuple[int, int]], cut: int, verify_crc: bool
) -> None:
    damaged = bytearray(encode_legacy_batch(ABC, magic=magic, codec=codec))
    for where, value in flips:
        damaged[where % len(damaged)] = value
    del damaged[len(damaged) - cut :]
    try:
        records = read_all(bytes(damaged), verify_crc=verify_crc)[1]
    except CorruptRecordError as exc:
        assert exc.reason
    else:
        assert all(isinstance(r, Record) for r in records)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_only_raise_corrupt_record_error(data: bytes) -> None:
    try:
        records = read_all(data, verify_crc=False)[1]
    except CorruptRecordError as exc:
        assert exc.reason
    else:
        assert all(isinstance(r, Record) for r in records)
