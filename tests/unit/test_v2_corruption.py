"""v2 record batches that are corrupt, truncated or absurd: each must surface as a
CorruptRecordError, never hang, allocate without bound or raise anything else.
"""

from __future__ import annotations

import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlm.errors import CorruptRecordError
from rlm.log import codecs
from rlm.log.model import (
    V2_HEADER_SIZE,
    Codec,
    Record,
)
from rlm.log.v2 import (
    crc_valid,
    decode_v2,
    encode_v2_batch,
    parse_v2_header,
)
from tests.unit.kafka_vectors import (
    ATTRIBUTES_OFFSET,
    ATTRS_TS_OFFSET,
    CRC_OFFSET,
    LAST_OFFSET_DELTA_OFFSET,
    LEADER_EPOCH_OFFSET,
    LENGTH_OFFSET,
    NULL_KEY_VALUE,
    RECORDS_COUNT_OFFSET,
    TS,
    VECTOR_A,
    assert_corrupt,
    decode,
    decode_or_corrupt,
    padded_record,
    patch,
    raw_batch,
    recompute_crc,
    record_lists,
    v2_batches,
    zigzag,
)

ALL_CODECS = list(Codec)
COMPRESSED = [Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD]


# --- corruption ---------------------------------------------------------------------------------

corruption_settings = settings(max_examples=150, deadline=None)


@corruption_settings
@given(batch=v2_batches(), data=st.data())
def test_any_flipped_byte_the_crc_covers_is_detected(batch: bytes, data: st.DataObject) -> None:
    # The CRC itself, the attributes and everything after; also the length (it moves the end).
    at = data.draw(st.one_of(st.integers(CRC_OFFSET, len(batch) - 1), st.integers(LENGTH_OFFSET, 11)))
    mask = data.draw(st.integers(1, 255))
    corrupted = bytearray(batch)
    corrupted[at] ^= mask
    assert_corrupt(corrupted)


@corruption_settings
@given(batch=v2_batches(), data=st.data())
def test_bytes_outside_the_crc_can_change(batch: bytes, data: st.DataObject) -> None:
    # baseOffset and partitionLeaderEpoch are rewritten by the broker without a new CRC.
    at = data.draw(st.one_of(st.integers(0, 7), st.integers(LEADER_EPOCH_OFFSET, 15)))
    corrupted = bytearray(batch)
    corrupted[at] ^= data.draw(st.integers(1, 255))
    header, records = decode(bytes(corrupted))
    assert crc_valid(corrupted, header)
    original_header, original = decode(batch)
    shift = header.base_offset - original_header.base_offset
    assert [r.offset - shift for r in records] == [r.offset for r in original]


@corruption_settings
@given(batch=v2_batches(), data=st.data())
def test_flipped_bytes_behind_a_recomputed_crc_raise_only_corrupt_record_error(
    batch: bytes, data: st.DataObject
) -> None:
    # Defeat the CRC so the record parser and the codecs see the damage.
    corrupted = bytearray(batch)
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(ATTRIBUTES_OFFSET, len(batch) - 1))
        corrupted[at] ^= data.draw(st.integers(1, 255))
    decode_or_corrupt(recompute_crc(corrupted), verify_crc=True)
    decode_or_corrupt(corrupted, verify_crc=False)


@corruption_settings
@given(batch=v2_batches(), data=st.data())
def test_truncated_batch_is_corrupt(batch: bytes, data: st.DataObject) -> None:
    cut = data.draw(st.integers(0, len(batch) - 1))
    truncated = batch[:cut]
    assert_corrupt(truncated)
    # A header parsed from the whole batch cannot read past the cut either.
    with pytest.raises(CorruptRecordError):
        decode_v2(truncated, parse_v2_header(batch, 0), verify_crc=False)


@corruption_settings
@given(batch=v2_batches(), data=st.data())
def test_truncated_records_behind_a_consistent_header_are_corrupt(batch: bytes, data: st.DataObject) -> None:
    # The length field and CRC agree with the cut, so only the records can tell.
    cut = data.draw(st.integers(V2_HEADER_SIZE, len(batch) - 1))
    truncated = patch(batch[:cut], LENGTH_OFFSET, ">i", cut - 12)
    assert parse_v2_header(truncated, 0).record_count > 0
    assert_corrupt(truncated)


@pytest.mark.parametrize(
    ("offset", "fmt", "value", "message"),
    [
        *[(ATTRIBUTES_OFFSET, ">h", c, f"unknown compression codec id {c}") for c in (5, 6, 7)],
        (RECORDS_COUNT_OFFSET, ">i", -1, "negative record count"),
        (LAST_OFFSET_DELTA_OFFSET, ">i", -1, "negative lastOffsetDelta"),
        (LENGTH_OFFSET, ">i", 48, "smaller than its 61-byte header"),
        (LENGTH_OFFSET, ">i", -(2**31), "smaller than its 61-byte header"),
    ],
)
def test_impossible_header_fields_are_corrupt(offset: int, fmt: str, value: int, message: str) -> None:
    with pytest.raises(CorruptRecordError, match=message):
        parse_v2_header(patch(VECTOR_A, offset, fmt, value), 0)


@pytest.mark.parametrize("length", [0, 1, 17, 60])
def test_header_shorter_than_61_bytes_is_corrupt(length: int) -> None:
    with pytest.raises(CorruptRecordError, match="header needs 61 bytes"):
        parse_v2_header(VECTOR_A[:length], 0)
    with pytest.raises(CorruptRecordError, match="header needs 61 bytes"):
        parse_v2_header(VECTOR_A, 76 - length)


def test_batch_length_past_the_buffer_is_corrupt() -> None:
    batch = patch(VECTOR_A, LENGTH_OFFSET, ">i", 2**31 - 1)
    header = parse_v2_header(batch, 0)
    with pytest.raises(CorruptRecordError, match="runs past the end"):
        decode_v2(batch, header)


def test_huge_record_count_fails_fast() -> None:
    batch = patch(VECTOR_A, RECORDS_COUNT_OFFSET, ">i", 2**31 - 1)
    with pytest.raises(CorruptRecordError, match="declares 2147483647 records"):
        decode(batch)


@pytest.mark.parametrize(
    "fields",
    [
        ATTRS_TS_OFFSET + zigzag(2**31 - 1),  # key length
        ATTRS_TS_OFFSET + zigzag(-1) + zigzag(2**31 - 1),  # value length
        NULL_KEY_VALUE + zigzag(2**31 - 1),  # header count
        NULL_KEY_VALUE + zigzag(1) + zigzag(2**31 - 1),  # header key length
        NULL_KEY_VALUE + zigzag(1) + zigzag(1) + b"a" + zigzag(2**31 - 1),  # header value
    ],
    ids=["key", "value", "header-count", "header-key", "header-value"],
)
def test_absurd_lengths_neither_hang_nor_allocate(fields: bytes) -> None:
    # The batch sits at the front of a large buffer (a whole segment read into memory):
    # a corrupt length must be rejected before anything is copied out of it.
    batch = raw_batch(padded_record(fields, 40), 1)
    buf = batch + bytes(16 << 20)
    header = parse_v2_header(buf, 0)
    tracemalloc.start()
    try:
        with pytest.raises(CorruptRecordError):
            decode_v2(buf, header)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20


@pytest.mark.parametrize("codec", COMPRESSED)
def test_garbage_compressed_payload_is_corrupt(codec: Codec) -> None:
    batch = raw_batch(b"this is not a compressed stream at all", 1, attributes=codec)
    assert_corrupt(batch)


@pytest.mark.parametrize("codec", COMPRESSED)
def test_compressed_payload_with_trailing_bytes_after_the_records(codec: Codec) -> None:
    records = encode_v2_batch([Record(0, TS, None, b"x" * 100)])[V2_HEADER_SIZE:]
    batch = raw_batch(codecs.compress(codec, records + b"\x00\x00"), 1, attributes=codec)
    with pytest.raises(CorruptRecordError, match="2 bytes left in the decompressed stream"):
        decode(batch)


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=160), st.integers(0, 8))
def test_random_bytes_raise_only_corrupt_record_error(data: bytes, pos: int) -> None:
    decode_or_corrupt(data, verify_crc=False, pos=pos)
    decode_or_corrupt(data, verify_crc=True, pos=pos)


@settings(max_examples=400, deadline=None)
@given(
    payload=st.binary(max_size=120),
    count=st.integers(0, 6),
    attributes=st.integers(0, 0x7F).filter(lambda a: a & 0x07 <= 4),
)
def test_random_records_behind_a_valid_header_raise_only_corrupt_record_error(
    payload: bytes, count: int, attributes: int
) -> None:
    batch = raw_batch(payload, count, attributes=attributes)
    decode_or_corrupt(batch, verify_crc=True)


@settings(max_examples=300, deadline=None)
@given(records=record_lists(max_records=4), data=st.data())
def test_random_edits_of_real_records_raise_only_corrupt_record_error(
    records: list[Record], data: st.DataObject
) -> None:
    # Mutating a well-formed payload reaches deeper into the record parser than random bytes.
    payload = bytearray(encode_v2_batch(records)[V2_HEADER_SIZE:])
    for _ in range(data.draw(st.integers(1, 3))):
        action = data.draw(st.sampled_from(["flip", "insert", "delete"]))
        at = data.draw(st.integers(0, max(len(payload) - 1, 0)))
        if action == "flip" and payload:
            payload[at] ^= data.draw(st.integers(1, 255))
        elif action == "insert":
            payload[at:at] = data.draw(st.binary(min_size=1, max_size=6))
        elif payload:
            del payload[at : at + data.draw(st.integers(1, 6))]
    batch = raw_batch(bytes(payload), len(records))
    decode_or_corrupt(batch, verify_crc=True)
