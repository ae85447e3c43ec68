"""v2 record batches: spec vectors byte for byte, ports of Kafka's DefaultRecordBatchTest and
DefaultRecordTest, compressed round trips (corruption: test_v2_corruption.py).
"""

from __future__ import annotations

import struct

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlm.errors import CorruptRecordError
from rlm.log import codecs, v2
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
from rlm.log.v2 import (
    crc_valid,
    decode_records_py,
    decode_v2,
    encode_control_batch,
    encode_v2_batch,
    parse_control_record,
    parse_v2_header,
    records_of,
    with_base_offset,
    with_leader_epoch,
)
from tests.unit.kafka_vectors import (
    ATTRIBUTES_OFFSET,
    ATTRS_TS_OFFSET,
    BROKER_BATCH_LAYOUT,
    BROKER_BATCHES,
    CRC_OFFSET,
    LENGTH_OFFSET,
    NULL_KEY_VALUE,
    PAYLOAD_PREFIX,
    RECORDS_COUNT_OFFSET,
    TS,
    VECTOR_A,
    VECTOR_B,
    VECTOR_C,
    VECTOR_D,
    VECTOR_E,
    decode,
    padded_record,
    patch,
    raw_batch,
    record_bytes,
    record_lists,
    zigzag,
)

ALL_CODECS = list(Codec)
COMPRESSED = [Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD]


# --- spec vectors (§7.5) ------------------------------------------------------------------------


def test_vector_a_is_written_byte_for_byte() -> None:
    batch = encode_v2_batch([Record(0, TS, b"key", b"value")], leader_epoch=0)
    assert batch.hex() == VECTOR_A.hex()


def test_vector_a_reads_back() -> None:
    header, records = decode(VECTOR_A)
    assert header == BatchHeader(
        position=0, base_offset=0, last_offset=0, size=76, leader_epoch=0, magic=2,
        crc=0xDB5E9CDD, attributes=0, base_timestamp=TS, max_timestamp=TS, producer_id=-1,
        producer_epoch=-1, base_sequence=-1, record_count=1,
    )  # fmt: skip
    assert header.codec is Codec.NONE
    assert header.timestamp_type is TimestampType.CREATE_TIME
    assert not header.is_transactional and not header.is_control
    assert header.next_offset == 1
    assert crc_valid(VECTOR_A, header)
    assert records == [Record(0, TS, b"key", b"value", ())]


def test_vector_a_moved_to_offset_1234_and_epoch_5_keeps_its_crc() -> None:
    moved = with_leader_epoch(with_base_offset(VECTOR_A, 1234), 5)
    assert moved[0:8] == bytes.fromhex("00000000000004d2")
    assert moved[12:16] == bytes.fromhex("00000005")
    assert moved[8:12] == VECTOR_A[8:12] and moved[16:] == VECTOR_A[16:]
    header, records = decode(moved)
    assert (header.base_offset, header.leader_epoch, header.crc) == (1234, 5, 0xDB5E9CDD)
    assert crc_valid(moved, header)
    assert records == [Record(1234, TS, b"key", b"value", ())]
    assert encode_v2_batch([Record(1234, TS, b"key", b"value")], leader_epoch=5) == moved


def test_vector_b_is_written_byte_for_byte() -> None:
    records = [
        Record(42, TS, None, b"a", (("h", b"1"),)),
        Record(43, TS - 5, b"k2", None),
        Record(44, TS + 300, b"k3", b"c", (("x", None),)),
    ]
    assert encode_v2_batch(records, leader_epoch=7).hex() == VECTOR_B.hex()


def test_vector_b_reads_back() -> None:
    header, records = decode(VECTOR_B)
    assert (header.base_offset, header.last_offset, header.size) == (42, 44, 96)
    assert (header.leader_epoch, header.crc, header.record_count) == (7, 0x46FACEC1, 3)
    assert (header.base_timestamp, header.max_timestamp) == (TS, TS + 300)
    assert records == [
        Record(42, TS, None, b"a", (("h", b"1"),)),
        Record(43, TS - 5, b"k2", None, ()),
        Record(44, TS + 300, b"k3", b"c", (("x", None),)),
    ]


def test_vector_c_log_append_time_is_written_byte_for_byte() -> None:
    batch = encode_v2_batch(
        [Record(0, TS, b"key", b"value")],
        leader_epoch=0,
        timestamp_type=TimestampType.LOG_APPEND_TIME,
        log_append_time=TS + 999,
    )
    assert batch.hex() == VECTOR_C.hex()


def test_vector_c_every_record_reads_the_append_time() -> None:
    header, records = decode(VECTOR_C)
    assert header.attributes == 0x0008
    assert header.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert header.timestamp_type.label == "LogAppendTime"
    assert (header.base_timestamp, header.max_timestamp, header.crc) == (TS, TS + 999, 0x01C519A9)
    assert records == [Record(0, TS + 999, b"key", b"value", ())]
    # The broker leaves the record bytes alone: only attributes, maxTimestamp and CRC differ.
    assert VECTOR_C[61:] == VECTOR_A[61:]


def test_vector_d_commit_marker_is_written_byte_for_byte() -> None:
    marker = {"producer_id": 4242, "producer_epoch": 3, "coordinator_epoch": 7, "leader_epoch": 1}
    batch = encode_control_batch(5, ControlType.COMMIT, timestamp=TS, **marker)
    assert batch.hex() == VECTOR_D.hex()


def test_vector_d_reads_as_a_commit_from_coordinator_epoch_7() -> None:
    header, records = decode(VECTOR_D)
    assert header.attributes == 0x0030
    assert header.is_control and header.is_transactional
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (4242, 3, -1)
    assert (header.base_offset, header.last_offset, header.leader_epoch) == (5, 5, 1)
    assert header.crc == 0xA1756980
    assert len(records) == 1
    assert records[0].offset == 5 and records[0].timestamp == TS
    assert parse_control_record(records[0]) == ControlRecord(0, ControlType.COMMIT, 7)


def test_vector_e_empty_batch_is_written_byte_for_byte() -> None:
    batch = encode_v2_batch(
        [],
        base_offset=10,
        last_offset_delta=4,
        max_timestamp=TS,
        leader_epoch=2,
        producer_id=77,
        producer_epoch=0,
        base_sequence=12,
    )
    assert batch.hex() == VECTOR_E.hex()


def test_vector_e_empty_batch_reads_back_without_records() -> None:
    header, records = decode(VECTOR_E)
    assert (header.base_offset, header.last_offset, header.next_offset) == (10, 14, 15)
    assert (header.size, header.record_count, header.crc) == (61, 0, 0x2CD63DA2)
    assert (header.base_timestamp, header.max_timestamp) == (-1, TS)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (77, 0, 12)
    assert records == []


def test_an_empty_batch_needs_its_offsets_and_timestamp() -> None:
    with pytest.raises(ValueError, match="empty batch"):
        encode_v2_batch([], base_offset=10, last_offset_delta=4)


def test_batches_written_by_a_real_broker_read_back() -> None:
    # kafka-python test_records.record_batch_data_v2 (Kafka 0.11 broker).
    expected = [
        [Record(0, 1503229838908, None, b"123", ())],
        [Record(1, 1503229959532, None, b"", ()), Record(2, 1503229959700, None, b"", ())],
        [Record(3, 1503229962141, None, b"123", ())],
        [Record(0, 1535546684353, None, b"hdr", (("hkey", b"hval"),))],
    ]
    for (position, size, crc), want in zip(BROKER_BATCH_LAYOUT, expected, strict=True):
        header = parse_v2_header(BROKER_BATCHES, position)
        assert (header.position, header.size, header.crc) == (position, size, crc)
        assert crc_valid(BROKER_BATCHES, header)
        assert decode_v2(BROKER_BATCHES, header) == want


def test_aiokafka_published_transactional_batch_crc() -> None:
    # aiokafka tests/record/test_default_records.py::test_read_write_serde_v2 (uncompressed).
    headers = (("header1", b"aaa"), ("header2", b"bbb"))
    records = [Record(i, 9999999 + i, b"test", b"Super", headers) for i in range(10)]
    batch = encode_v2_batch(
        records,
        leader_epoch=0,
        producer_id=123456,
        producer_epoch=123,
        base_sequence=9999,
        is_transactional=True,
    )
    header, decoded = decode(batch)
    assert (len(batch), header.crc, header.attributes) == (461, 3950153926, 0x10)
    assert decoded == records


# --- DefaultRecordBatchTest ---------------------------------------------------------------------


def test_write_empty_header() -> None:
    # DefaultRecordBatchTest.testWriteEmptyHeader
    batch = encode_v2_batch(
        [],
        base_offset=15,
        last_offset_delta=22,
        max_timestamp=TS,
        timestamp_type=TimestampType.LOG_APPEND_TIME,
        log_append_time=TS,
        leader_epoch=15,
        producer_id=23423,
        producer_epoch=145,
        base_sequence=983,
        is_transactional=True,
    )
    header, records = decode(batch)
    assert crc_valid(batch, header)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (23423, 145, 983)
    assert (header.base_offset, header.last_offset, header.leader_epoch) == (15, 37, 15)
    assert header.record_count == 0 and records == []
    assert header.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert header.max_timestamp == TS
    assert header.is_transactional and not header.is_control
    assert header.size == V2_HEADER_SIZE


@pytest.mark.parametrize("producer", [(-1, -1, -1), (23423, 145, 983)], ids=["plain", "producer-id"])
def test_build_default_record_batch(producer: tuple[int, int, int]) -> None:
    # DefaultRecordBatchTest.buildDefaultRecordBatch / buildDefaultRecordBatchWithProducerId
    records = [Record(1234567, 1, b"a", b"1"), Record(1234568, 2, b"b", b"2")]
    producer_id, producer_epoch, base_sequence = producer
    batch = encode_v2_batch(
        records, producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=base_sequence
    )
    header, decoded = decode(batch)
    assert crc_valid(batch, header)
    assert (header.base_offset, header.last_offset, header.max_timestamp) == (1234567, 1234568, 2)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == producer
    assert header.timestamp_type is TimestampType.CREATE_TIME and not header.is_transactional
    assert decoded == [Record(1234567, 1, b"a", b"1", ()), Record(1234568, 2, b"b", b"2", ())]


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_size_in_bytes(codec: Codec) -> None:
    # DefaultRecordBatchTest.testSizeInBytes: the header's size is the batch's byte length.
    records = [Record(i, TS + i, b"k%d" % i, b"v%d" % i, (("h", b"v"),) * i) for i in range(3)]
    batch = encode_v2_batch(records, codec=codec)
    header = parse_v2_header(batch, 0)
    assert header.size == len(batch)
    assert struct.unpack_from(">i", batch, LENGTH_OFFSET)[0] == len(batch) - 12
    assert header.end_position == len(batch)


def test_invalid_record_size() -> None:
    # DefaultRecordBatchTest.testInvalidRecordSize: batchLength 10 cannot hold a v2 header.
    batch = encode_v2_batch([Record(0, TS, b"a", b"1")])
    with pytest.raises(CorruptRecordError, match="smaller than its 61-byte header"):
        parse_v2_header(patch(batch, LENGTH_OFFSET, ">i", 10), 0)


def _three_records_batch(codec: Codec) -> bytes:
    values = [b"hello", b"there", b"beautiful"]
    return encode_v2_batch([Record(i, TS, None, v) for i, v in enumerate(values)], codec=codec)


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_invalid_record_count_too_many(codec: Codec) -> None:
    # DefaultRecordBatchTest.testInvalidRecordCountTooMany{NonCompressedV2,CompressedV2}
    batch = patch(_three_records_batch(codec), RECORDS_COUNT_OFFSET, ">i", 5)
    header = parse_v2_header(batch, 0)
    with pytest.raises(CorruptRecordError, match="declares 5 records but its data ends after 3"):
        decode_v2(batch, header)


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_invalid_record_count_too_little(codec: Codec) -> None:
    # DefaultRecordBatchTest.testInvalidRecordCountTooLittle{NonCompressedV2,CompressedV2}
    batch = patch(_three_records_batch(codec), RECORDS_COUNT_OFFSET, ">i", 2)
    header = parse_v2_header(batch, 0)
    where = "batch" if codec is Codec.NONE else "decompressed stream"
    with pytest.raises(CorruptRecordError, match=f"bytes left in the {where} after its 2 records"):
        decode_v2(batch, header)


def test_invalid_crc() -> None:
    # DefaultRecordBatchTest.testInvalidCrc
    batch = patch(VECTOR_A, CRC_OFFSET, ">I", 982743, fix_crc=False)
    header = parse_v2_header(batch, 0)
    assert not crc_valid(batch, header)
    with pytest.raises(CorruptRecordError, match="CRC mismatch: stored 0x000efed7, computed 0xdb5e9cdd"):
        decode_v2(batch, header)
    # Decoding without the check still reads the (intact) records.
    assert decode_v2(batch, header, verify_crc=False) == [Record(0, TS, b"key", b"value", ())]


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_set_partition_leader_epoch(codec: Codec) -> None:
    # DefaultRecordBatchTest.testSetPartitionLeaderEpoch: the CRC stays valid.
    records = [Record(0, TS, b"a", b"1"), Record(1, TS + 1, b"b", b"2")]
    batch = encode_v2_batch(records, codec=codec)
    moved = with_leader_epoch(batch, 15)
    header, decoded = decode(moved)
    assert header.leader_epoch == 15
    assert header.crc == parse_v2_header(batch, 0).crc
    assert crc_valid(moved, header)
    assert decoded == decode(batch)[1]


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_set_log_append_time(codec: Codec) -> None:
    # DefaultRecordBatchTest.testSetLogAppendTime
    records = [Record(0, TS, b"a", b"1"), Record(1, TS + 1, b"b", b"2"), Record(2, TS + 2, None, b"")]
    append_time = TS + 10_000
    create = encode_v2_batch(records, codec=codec)
    batch = encode_v2_batch(
        records,
        codec=codec,
        timestamp_type=TimestampType.LOG_APPEND_TIME,
        log_append_time=append_time,
    )
    header, decoded = decode(batch)
    assert header.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert header.max_timestamp == append_time
    assert crc_valid(batch, header)
    assert [r.timestamp for r in decoded] == [append_time] * 3
    assert [(r.offset, r.key, r.value) for r in decoded] == [(0, b"a", b"1"), (1, b"b", b"2"),
                                                            (2, None, b"")]  # fmt: skip
    # Switching to LogAppendTime touches only the CRC, the attributes and maxTimestamp.
    changed = {i for i in range(len(batch)) if batch[i] != create[i]}
    assert len(batch) == len(create)
    assert changed <= {*range(17, 23), *range(35, 43)}
    assert 22 in changed  # the timestamp-type bit


@pytest.mark.parametrize("control_type", [ControlType.COMMIT, ControlType.ABORT])
def test_read_and_write_control_batch(control_type: ControlType) -> None:
    # DefaultRecordBatchTest.testReadAndWriteControlBatch
    batch = encode_control_batch(
        0, control_type, producer_id=1, producer_epoch=0, timestamp=TS, coordinator_epoch=15
    )
    header, records = decode(batch)
    assert header.is_control and header.is_transactional
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (1, 0, -1)
    assert header.record_count == 1 and len(records) == 1
    assert parse_control_record(records[0]) == ControlRecord(0, control_type, 15)


def test_control_record_types_other_than_markers_have_no_coordinator_epoch() -> None:
    # A LEADER_CHANGE record (KRaft) carries no EndTransactionMarker value.
    record = Record(3, TS, struct.pack(">hh", 0, ControlType.LEADER_CHANGE), b"\x00\x01\x02")
    assert parse_control_record(record) == ControlRecord(0, ControlType.LEADER_CHANGE, -1)
    # Unknown types are reported, not rejected (Kafka: ControlRecordType.UNKNOWN).
    assert parse_control_record(Record(3, TS, struct.pack(">hh", 0, 99), None)).type == 99


@pytest.mark.parametrize(
    "record",
    [
        Record(7, TS, None, None),
        Record(7, TS, b"\x00\x00", b"\x00\x00\x00\x00\x00\x07"),
        Record(7, TS, struct.pack(">hh", -1, 1), b"\x00\x00\x00\x00\x00\x07"),
        Record(7, TS, struct.pack(">hh", 0, 1), None),
        Record(7, TS, struct.pack(">hh", 0, 0), b"\x00\x00\x00"),
    ],
    ids=["no-key", "short-key", "negative-version", "marker-without-value", "short-value"],
)
def test_malformed_control_records_are_corrupt(record: Record) -> None:
    with pytest.raises(CorruptRecordError):
        parse_control_record(record)


def test_delete_horizon_batch_keeps_record_timestamps() -> None:
    records = [Record(100, TS, b"k", None), Record(101, TS + 50, b"k2", b"v")]
    horizon = TS + 86_400_000
    batch = encode_v2_batch(records, delete_horizon=horizon)
    header, decoded = decode(batch)
    assert header.has_delete_horizon and header.attributes & 0x40
    assert header.base_timestamp == horizon
    assert header.max_timestamp == TS + 50
    assert [r.timestamp for r in decoded] == [TS, TS + 50]


@pytest.mark.parametrize(
    ("records", "timestamp_type", "message"),
    [
        ([Record(5, TS, None, b"a"), Record(5, TS, None, b"b")], TimestampType.CREATE_TIME, "increase"),
        ([Record(0, TS, None, b"a"), Record(1, -2, None, b"b")], TimestampType.CREATE_TIME, "timestamp -2"),
        ([Record(0, TS, None, b"a")], TimestampType.LOG_APPEND_TIME, "needs log_append_time"),
    ],
    ids=["offsets-not-increasing", "negative-timestamp", "log-append-time-missing"],
)
def test_encoder_rejects_what_kafka_would_not_write(
    records: list[Record], timestamp_type: TimestampType, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        encode_v2_batch(records, timestamp_type=timestamp_type)


# --- DefaultRecordTest --------------------------------------------------------------------------


@pytest.mark.parametrize("key", [None, b"", b"key"])
@pytest.mark.parametrize("value", [None, b"", b"value"])
@pytest.mark.parametrize(
    "headers", [(), (("foo", b"value"), ("bar", None), ('"A\u00ea\u00f1\u00fcC"', b"value"))]
)
def test_basic_serde(key: bytes | None, value: bytes | None, headers: tuple[Header, ...]) -> None:
    # DefaultRecordTest.testBasicSerde: offsetDelta 57 from baseOffset 223, timestampDelta 323.
    record = Record(223 + 57, TS + 323, key, value, headers)
    batch = encode_v2_batch([Record(223, TS, None, None), record])
    _, decoded = decode(batch)
    assert decoded[1] == record
    assert type(decoded[1].key) is type(key) and type(decoded[1].value) is type(value)


def test_serde_with_multi_byte_varints_everywhere() -> None:
    big = b"x" * 300  # a 2-byte length
    record = Record(2**40 + 70_000, TS + 2**35, big, big, (("h" * 200, big),))
    batch = encode_v2_batch([Record(2**40, TS - 2**35, None, None), record])
    assert decode(batch)[1][1] == record


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        # testInvalidKeySize: a key longer than the record
        (padded_record(ATTRS_TS_OFFSET + zigzag(105)), "key of 105 bytes"),
        # testInvalidValueSize
        (padded_record(ATTRS_TS_OFFSET + zigzag(-1) + zigzag(105)), "value of 105 bytes"),
        # testInvalidNumHeaders
        (padded_record(NULL_KEY_VALUE + zigzag(-1)), "invalid header count -1"),
        # a header count that cannot fit the remaining bytes
        (padded_record(NULL_KEY_VALUE + zigzag(2**31 - 1)), "invalid header count 2147483647"),
        # testInvalidHeaderKey
        (padded_record(NULL_KEY_VALUE + zigzag(1) + zigzag(105)), "header key length 105"),
        # testNullHeaderKey
        (padded_record(NULL_KEY_VALUE + zigzag(1) + zigzag(-1)), "header key length -1"),
        # testInvalidHeaderValue
        (padded_record(NULL_KEY_VALUE + zigzag(1) + zigzag(1) + b"a" + zigzag(105)), "header value"),
        # testUnderflowReadingTimestamp: a body of only the attributes byte
        (record_bytes(b"\x00"), "declares 1 bytes"),
        # testUnderflowReadingVarlong: a body cut inside the timestamp varlong
        (record_bytes(b"\x00" + zigzag(156)[:1]), "declares 2 bytes"),
        # testInvalidVarlong: ten bytes with the continuation bit in the timestamp delta
        (padded_record(b"\x00" + b"\xff" * 10, 16), "too long"),
        # an offsetDelta varint of six bytes
        (padded_record(b"\x00\x00" + b"\x80" * 5 + b"\x01", 16), "too long"),
        # the record's length says more than the batch holds
        (record_bytes(NULL_KEY_VALUE + b"\x00", length=20), "declares 20 bytes but 6 remain"),
        (record_bytes(NULL_KEY_VALUE + b"\x00", length=2**31 - 1), "declares 2147483647 bytes"),
        (record_bytes(NULL_KEY_VALUE + b"\x00", length=-1), "declares -1 bytes"),
        # the fields use fewer bytes than the length says (testBasicSerdeInvalidHeaderCountTooLow)
        (record_bytes(NULL_KEY_VALUE + b"\x00\x00"), "declares 7 bytes but its fields take 6"),
    ],
)
def test_invalid_record(payload: bytes, message: str) -> None:
    # DefaultRecordTest's testInvalid* family: every one is a CorruptRecordError.
    batch = raw_batch(payload, 1)
    header = parse_v2_header(batch, 0)
    with pytest.raises(CorruptRecordError, match=message):
        decode_v2(batch, header)


#: 64 headers: a header count of two varint bytes, which the decoder reads on its general path.
_MANY_NULL_HEADERS = zigzag(64) + (zigzag(1) + b"h" + zigzag(-2)) * 64


@pytest.mark.parametrize(
    ("fields", "key", "value", "headers"),
    [
        (ATTRS_TS_OFFSET + zigzag(-2) + zigzag(1) + b"v" + zigzag(0), None, b"v", ()),
        (ATTRS_TS_OFFSET + zigzag(0) + zigzag(-7) + zigzag(0), b"", None, ()),
        (ATTRS_TS_OFFSET + zigzag(-300) + zigzag(-(2**31)) + zigzag(0), None, None, ()),
        (NULL_KEY_VALUE + zigzag(1) + zigzag(1) + b"a" + zigzag(-3), None, None, (("a", None),)),
        (NULL_KEY_VALUE + zigzag(1) + zigzag(1) + b"a" + zigzag(-(2**31)), None, None, (("a", None),)),
        (NULL_KEY_VALUE + _MANY_NULL_HEADERS, None, None, (("h", None),) * 64),
    ],
)
def test_a_length_below_minus_one_is_null_as_kafka_reads_it(
    fields: bytes, key: bytes | None, value: bytes | None, headers: tuple[Header, ...]
) -> None:
    """``DefaultRecord.readFrom`` reads any negative key, value or header value size as null (only
    a header key's must not be negative); the C decoder leaves such records to the reference."""
    batch = raw_batch(record_bytes(fields), 1, last_offset_delta=1)
    header = parse_v2_header(batch, 0)
    expected = [Record(1, 2, key, value, headers)]
    assert decode_v2(batch, header) == expected
    assert decode_records_py(records_of(batch, header, True)) == expected
    if v2.ACCELERATED:
        from rlm.log import _decode

        with pytest.raises(ValueError):  # gives up: decode_v2 above answered with the reference
            _decode.decode_batch_records(Record, batch, 0, True)


def _three_header_record() -> tuple[bytes, int]:
    """The record of testBasicSerdeInvalidHeaderCount*, and the position of its header count."""
    headers = (("foo", b"value"), ("bar", None), ('"A\u00ea\u00f1\u00fcC"', b"value"))
    batch = encode_v2_batch([Record(10, TS + 323, b"hi", b"there", headers)], base_offset=0)
    payload = batch[V2_HEADER_SIZE:]
    # length, attributes, timestampDelta, offsetDelta, key "hi", value "there"
    count_at = 1 + 1 + 1 + 1 + 3 + 6
    assert payload[count_at : count_at + 5] == b"\x06\x06foo"  # 3 headers, the first "foo"
    return payload, count_at


@pytest.mark.parametrize(
    ("count", "after", "message"),
    [
        (4, b"", "past the end"),
        # with more bytes after the batch, the extra header must not be read from them
        (4, VECTOR_A, "invalid header key length 0"),
        (2, b"", "its fields take 28"),
    ],
)
def test_header_count_not_matching_the_headers(count: int, after: bytes, message: str) -> None:
    # DefaultRecordTest.testBasicSerdeInvalidHeaderCountTooHigh / TooLow
    payload, count_at = _three_header_record()
    corrupted = payload[:count_at] + zigzag(count) + payload[count_at + 1 :]
    buf = raw_batch(corrupted, 1, last_offset_delta=10) + after
    with pytest.raises(CorruptRecordError, match=message):
        decode_v2(buf, parse_v2_header(buf, 0))


# --- compressed batches -------------------------------------------------------------------------


@pytest.mark.parametrize("codec", COMPRESSED)
def test_compressed_batch_structure(codec: Codec) -> None:
    records = [Record(100 + i, TS + i, b"key-%d" % i, b"value " * 20, (("h", b"v"),))
               for i in range(20)]  # fmt: skip
    plain = encode_v2_batch(records, leader_epoch=3)
    batch = encode_v2_batch(records, codec=codec, leader_epoch=3)
    header, decoded = decode(batch)
    assert header.codec is codec and header.attributes == codec
    payload = batch[V2_HEADER_SIZE:]
    assert payload.startswith(PAYLOAD_PREFIX[codec])
    # The compressed stream holds exactly the concatenated records; the header stays as it was.
    assert codecs.decompress(codec, payload) == plain[V2_HEADER_SIZE:]
    assert len(batch) < len(plain)
    assert header.crc == crc32c.crc32c(batch[ATTRIBUTES_OFFSET:])
    assert decoded == records


@pytest.mark.parametrize("codec", COMPRESSED)
def test_compressed_batch_of_many_blocks(codec: Codec) -> None:
    # More than one snappy (32 KiB) / lz4 (64 KiB) block of input.
    records = [Record(i, TS, None, (b"%08d" % i) * 512) for i in range(40)]
    batch = encode_v2_batch(records, codec=codec)
    assert decode(batch)[1] == records


@settings(max_examples=60, deadline=None)
@given(
    records=record_lists(),
    codec=st.sampled_from(ALL_CODECS),
    producer=st.tuples(st.integers(0, 2**63 - 1), st.integers(0, 2**15 - 1), st.integers(0, 2**31 - 1)),
    transactional=st.booleans(),
    leader_epoch=st.integers(-1, 2**31 - 1),
)
def test_round_trip(
    records: list[Record],
    codec: Codec,
    producer: tuple[int, int, int],
    transactional: bool,
    leader_epoch: int,
) -> None:
    producer_id, producer_epoch, base_sequence = producer
    batch = encode_v2_batch(
        records,
        codec=codec,
        leader_epoch=leader_epoch,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        is_transactional=transactional,
    )
    header, decoded = decode(batch)
    assert decoded == records
    assert header.base_offset == records[0].offset
    assert header.last_offset == records[-1].offset
    assert header.base_timestamp == records[0].timestamp
    assert header.max_timestamp == max(r.timestamp for r in records)
    assert header.record_count == len(records) and header.size == len(batch)
    assert (header.producer_id, header.producer_epoch) == (producer_id, producer_epoch)
    assert header.base_sequence == base_sequence
    assert header.is_transactional == transactional
    assert header.leader_epoch == leader_epoch
    assert header.codec is codec


@pytest.mark.parametrize("kind", [bytes, bytearray, memoryview])
def test_batches_in_the_middle_of_a_buffer(kind: type[bytes | bytearray | memoryview]) -> None:
    gz = encode_v2_batch([Record(50, TS, b"g", b"zip" * 30)], codec=Codec.GZIP)
    joined = VECTOR_A + VECTOR_B + gz + VECTOR_E
    buf = kind(joined)
    pos = 0
    seen = []
    while pos < len(joined):
        header = parse_v2_header(buf, pos)
        assert header.position == pos and crc_valid(buf, header)
        seen.append(decode_v2(buf, header))
        pos = header.end_position
    assert seen == [decode(VECTOR_A)[1], decode(VECTOR_B)[1], decode(gz)[1], []]


def test_reported_position_can_differ_from_the_buffer_position() -> None:
    header = parse_v2_header(b"\x00" * 7 + VECTOR_A, 7, position=4096)
    assert header.position == 4096 and header.crc == 0xDB5E9CDD


@pytest.mark.parametrize(
    ("raw", "presented"),
    [  # as Java 17 and 25 decode them with new String(bytes, UTF_8)
        (b"\xff\xfebin", "\ufffd\ufffdbin"),
        (b"\xed\xa0\x80", "\ufffd"),  # an encoded surrogate: one U+FFFD (Python's 'replace': three)
        (b"\xed\xa0\x80\xed\xb0\x80", "\ufffd\ufffd"),
        (b"a\xed\xa0A", "a\ufffdA"),
        (b"\xe0\x80\x80", "\ufffd\ufffd\ufffd"),
        (b"\xf0\x9f\x98", "\ufffd"),
        (b"\xc2\xc3", "\ufffd\ufffd"),
    ],
)
def test_a_header_key_not_utf8_reads_as_kafkas_client_presents_it(raw: bytes, presented: str) -> None:
    """Kafka keeps a header key's bytes and never rejects them; its client decodes them lazily,
    replacing what is malformed. With raw_header_keys the bytes survive a rewrite."""
    body = NULL_KEY_VALUE + zigzag(1) + zigzag(len(raw)) + raw + zigzag(-1)
    batch = raw_batch(record_bytes(body), 1)
    header = parse_v2_header(batch, 0)
    (record,) = decode_v2(batch, header)
    assert record.headers == ((presented, None),)
    assert decode_records_py(records_of(batch, header, True)) == [record]
    (kept,) = decode_v2(batch, header, raw_header_keys=True)
    assert kept.headers[0][0].encode("utf-8", "surrogateescape") == raw
    again = encode_v2_batch([kept])
    assert decode_v2(again, parse_v2_header(again, 0), raw_header_keys=True) == [kept]
    assert zigzag(len(raw)) + raw + zigzag(-1) in again
