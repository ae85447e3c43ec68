"""Zig-zag varints and varlongs against Kafka's ByteUtilsTest vectors and kafka-python."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka.record.util import decode_varint as kp_decode_varint
from kafka.record.util import encode_varint as kp_encode_varint
from kafka.record.util import size_of_varint as kp_size_of_varint

from rlm.errors import CorruptRecordError
from rlm.log.model import Record
from rlm.log.v2 import decode_v2, parse_v2_header
from rlm.log.varint import (
    read_uvarint,
    read_varint,
    read_varlong,
    size_of_varint,
    write_uvarint,
    write_varint,
    write_varlong,
)
from tests.unit.kafka_vectors import raw_batch

INT32 = st.integers(min_value=-(2**31), max_value=2**31 - 1)
INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)

# ByteUtilsTest.testVarintSerde and kafka-python test_util.varint_data (int32 range).
VARINT_VECTORS = [
    (0, "00"),
    (-1, "01"),
    (1, "02"),
    (63, "7e"),
    (-64, "7f"),
    (64, "8001"),
    (-65, "8101"),
    (8191, "fe7f"),
    (-8192, "ff7f"),
    (8192, "808001"),
    (-8193, "818001"),
    (1048575, "feff7f"),
    (-1048576, "ffff7f"),
    (1048576, "80808001"),
    (-1048577, "81808001"),
    (134217727, "feffff7f"),
    (-134217728, "ffffff7f"),
    (134217728, "8080808001"),
    (-134217729, "8180808001"),
    (2**31 - 1, "feffffff0f"),
    (-(2**31), "ffffffff0f"),
]

# ByteUtilsTest.testVarlongSerde: values outside the int32 range.
VARLONG_VECTORS = [
    (17179869183, "feffffff7f"),
    (-17179869184, "ffffffff7f"),
    (17179869184, "808080808001"),
    (-17179869185, "818080808001"),
    (2**63 - 1, "feffffffffffffffff01"),
    (-(2**63), "ffffffffffffffffff01"),
    (4611686018427387904, "80808080808080808001"),
    (-4611686018427387905, "81808080808080808001"),
]

# ByteUtilsTest.testUnsignedVarintSerde: Java ints written as unsigned 32-bit varints.
UVARINT_VECTORS = [
    (0, "00"),
    (-1, "ffffffff0f"),
    (1, "01"),
    (63, "3f"),
    (-64, "c0ffffff0f"),
    (64, "40"),
    (8191, "ff3f"),
    (-8192, "80c0ffff0f"),
    (8192, "8040"),
    (-8193, "ffbfffff0f"),
    (1048575, "ffff3f"),
]


def _varint(v: int) -> bytes:
    out = bytearray()
    write_varint(v, out)
    return bytes(out)


def _varlong(v: int) -> bytes:
    out = bytearray()
    write_varlong(v, out)
    return bytes(out)


def _kafka_python_encode(v: int) -> bytes:
    out = bytearray()
    kp_encode_varint(v, out.append)
    return bytes(out)


@pytest.mark.parametrize(("value", "hex_bytes"), VARINT_VECTORS)
def test_varint_vectors_encode_and_decode(value: int, hex_bytes: str) -> None:
    encoded = bytes.fromhex(hex_bytes)
    assert _varint(value) == encoded
    assert read_varint(encoded, 0) == (value, len(encoded))
    assert size_of_varint(value) == len(encoded)


@pytest.mark.parametrize(("value", "hex_bytes"), VARINT_VECTORS + VARLONG_VECTORS)
def test_varlong_vectors_encode_and_decode(value: int, hex_bytes: str) -> None:
    encoded = bytes.fromhex(hex_bytes)
    assert _varlong(value) == encoded
    assert read_varlong(encoded, 0) == (value, len(encoded))


@pytest.mark.parametrize(("value", "hex_bytes"), UVARINT_VECTORS)
def test_unsigned_varint_vectors(value: int, hex_bytes: str) -> None:
    encoded = bytes.fromhex(hex_bytes)
    out = bytearray()
    write_uvarint(value & 0xFFFFFFFF, out)
    assert bytes(out) == encoded
    assert read_uvarint(encoded, 0, 5) == (value & 0xFFFFFFFF, len(encoded))


def test_decoding_starts_at_the_given_position_and_returns_the_next() -> None:
    buf = b"\xaa\xbb" + bytes.fromhex("808001") + bytes.fromhex("7f") + b"\xcc"
    value, pos = read_varint(buf, 2)
    assert (value, pos) == (8192, 5)
    assert read_varlong(buf, pos) == (-64, 6)


@pytest.mark.parametrize(
    "data",
    [
        # ByteUtilsTest.testInvalidVarint: the fifth byte still says "more follows".
        bytes.fromhex("ffffffffff01"),
        bytes.fromhex("8080808080"),
        bytes.fromhex("8080808080808080"),
    ],
)
def test_varint_longer_than_five_bytes_is_corrupt(data: bytes) -> None:
    with pytest.raises(CorruptRecordError, match="too long"):
        read_varint(data, 0)


@pytest.mark.parametrize(
    "data",
    [
        # ByteUtilsTest.testInvalidVarlong: the tenth byte still says "more follows".
        bytes.fromhex("ffffffffffffffffffff01"),
        bytes.fromhex("80808080808080808080"),
        bytes.fromhex("80" * 12),
    ],
)
def test_varlong_longer_than_ten_bytes_is_corrupt(data: bytes) -> None:
    with pytest.raises(CorruptRecordError, match="too long"):
        read_varlong(data, 0)


@pytest.mark.parametrize(
    ("data", "pos"),
    [(b"", 0), (b"\x80", 0), (b"\xff\xff\xff", 0), (b"\x00\x00", 2), (b"\x02\x80\x80", 1)],
)
def test_varint_running_past_the_buffer_is_corrupt(data: bytes, pos: int) -> None:
    with pytest.raises(CorruptRecordError, match="past the end"):
        read_varint(data, pos)
    with pytest.raises(CorruptRecordError, match="past the end"):
        read_varlong(data, pos)


def test_varint_running_past_a_memoryview_slice_is_corrupt() -> None:
    # The buffer limit, not the underlying object, bounds the read.
    view = memoryview(bytes.fromhex("80808001"))[:2]
    with pytest.raises(CorruptRecordError):
        read_varint(view, 0)


def test_overlong_fifth_byte_keeps_only_the_low_32_bits_like_kafka() -> None:
    # ByteUtils.readUnsignedVarint shifts the fifth byte left by 28 in 32-bit arithmetic, so its
    # upper bits fall off: FE FF FF FF 1F reads as 0xFFFFFFFE, i.e. Integer.MAX_VALUE.
    assert read_varint(bytes.fromhex("feffffff1f"), 0) == (2**31 - 1, 5)
    assert read_varint(bytes.fromhex("ffffffff7f"), 0) == (-(2**31), 5)


def test_overlong_tenth_byte_keeps_only_the_low_64_bits_like_kafka() -> None:
    assert read_varlong(bytes.fromhex("feffffffffffffffff7f"), 0) == (2**63 - 1, 10)
    assert read_varlong(bytes.fromhex("ffffffffffffffffff7f"), 0) == (-(2**63), 10)


def test_overlong_varints_inside_a_record_read_as_kafka_reads_them() -> None:
    # Non-canonical encodings whose last byte carries bits past 32 (varint) or 64 (varlong):
    # DefaultRecord.readFrom sees them through ByteUtils, which drops those bits.
    body = (
        b"\x00"  # attributes
        + bytes.fromhex("8080808080808080807e")  # timestampDelta 0 (bits 64+ set)
        + bytes.fromhex("8280808010")  # offsetDelta 1 (bit 32 set)
        + bytes.fromhex("8280808010")  # key length 1
        + b"k"
        + b"\x01"  # null value
        + bytes.fromhex("8080808010")  # header count 0
    )
    assert len(body) == 28
    length = bytes.fromhex("b880808010")  # 28 (bit 32 set)
    batch = raw_batch(length + body, 1, base_offset=100, base_timestamp=5000, max_timestamp=5000)
    header = parse_v2_header(batch, 0)
    assert decode_v2(batch, header) == [Record(101, 5000, b"k", None, ())]


@pytest.mark.parametrize("value", [2**31, -(2**31) - 1, 2**40])
def test_write_varint_rejects_values_outside_int32(value: int) -> None:
    with pytest.raises(ValueError, match="int32"):
        write_varint(value, bytearray())


@pytest.mark.parametrize("value", [2**63, -(2**63) - 1])
def test_write_varlong_rejects_values_outside_int64(value: int) -> None:
    with pytest.raises(ValueError, match="int64"):
        write_varlong(value, bytearray())


def test_write_uvarint_rejects_negative_values() -> None:
    with pytest.raises(ValueError, match="negative"):
        write_uvarint(-1, bytearray())


@given(INT32, st.binary(max_size=4), st.binary(max_size=4))
def test_varint_round_trip_over_int32(value: int, prefix: bytes, suffix: bytes) -> None:
    encoded = _varint(value)
    assert 1 <= len(encoded) <= 5
    assert len(encoded) == size_of_varint(value)
    buf = prefix + encoded + suffix
    assert read_varint(buf, len(prefix)) == (value, len(prefix) + len(encoded))
    # A varint is also a valid varlong with the same value.
    assert read_varlong(buf, len(prefix)) == (value, len(prefix) + len(encoded))


@given(INT64, st.binary(max_size=4), st.binary(max_size=4))
def test_varlong_round_trip_over_int64(value: int, prefix: bytes, suffix: bytes) -> None:
    encoded = _varlong(value)
    assert 1 <= len(encoded) <= 10
    buf = prefix + encoded + suffix
    assert read_varlong(buf, len(prefix)) == (value, len(prefix) + len(encoded))


@given(INT64)
def test_varlong_matches_kafka_python(value: int) -> None:
    encoded = _varlong(value)
    assert encoded == _kafka_python_encode(value)
    assert kp_decode_varint(encoded, 0) == (value, len(encoded))
    assert kp_size_of_varint(value) == len(encoded)


@given(INT32)
def test_varint_matches_kafka_python(value: int) -> None:
    assert _varint(value) == _kafka_python_encode(value)


@given(INT32)
def test_every_strict_prefix_of_a_varint_is_corrupt(value: int) -> None:
    encoded = _varint(value)
    for cut in range(len(encoded)):
        with pytest.raises(CorruptRecordError):
            read_varint(encoded[:cut], 0)
