"""v2 batches cross-checked against two independent readers/writers: kafka-python and aiokafka.

Both directions: batches their builders write must read identically with rlm, and batches rlm
writes must read identically with theirs (CRC included). Their builders write baseOffset 0, so
the real base offset is patched into bytes 0-7 (outside the CRC), as a broker does.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any, NamedTuple

import kafka.codec
import pytest
from aiokafka.record.control_record import ABORT_MARKER, COMMIT_MARKER
from aiokafka.record.control_record import ControlRecord as AioControlRecord
from aiokafka.record.default_records import DefaultRecordBatch as AioBatch
from aiokafka.record.default_records import DefaultRecordBatchBuilder as AioBuilder
from aiokafka.record.memory_records import MemoryRecords as AioMemoryRecords
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record import MemoryRecords as KpMemoryRecords
from kafka.record.default_records import DefaultRecordBatch as KpBatch
from kafka.record.default_records import DefaultRecordBatchBuilder as KpBuilder

from rlm.log.model import BatchHeader, Codec, ControlRecord, ControlType, Record, TimestampType
from rlm.log.v2 import (
    crc_valid,
    decode_v2,
    encode_control_batch,
    encode_v2_batch,
    parse_control_record,
    parse_v2_header,
)
from tests.unit.kafka_vectors import (
    TS,
    VECTOR_A,
    VECTOR_B,
    VECTOR_C,
    VECTOR_E,
    compressible_tail,
    record_lists,
)

RecordTuple = tuple[int, int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]


class Library(NamedTuple):
    """One independent implementation of the v2 format."""

    name: str
    builder: Callable[..., Any]
    batch: Callable[[bytes], Any]
    memory_records: Callable[[bytes], Any]
    codecs: tuple[Codec, ...]
    leader_epoch: int
    """What its builder writes into partitionLeaderEpoch."""


KAFKA_PYTHON = Library(
    "kafka-python",
    KpBuilder,
    KpBatch,
    KpMemoryRecords,
    # kafka-python reads snappy only through python-snappy, which rlm does not depend on.
    tuple(c for c in Codec if c is not Codec.SNAPPY or kafka.codec.has_snappy()),
    0,
)
AIOKAFKA = Library("aiokafka", AioBuilder, AioBatch, AioMemoryRecords, tuple(Codec), -1)
LIBRARIES = [KAFKA_PYTHON, AIOKAFKA]
LIBRARY_CODECS = [
    pytest.param(lib, codec, id=f"{lib.name}-{codec.name.lower()}")
    for lib in LIBRARIES
    for codec in lib.codecs
]

PRODUCERS = st.one_of(
    st.just((-1, -1, -1, False)),
    st.tuples(
        st.integers(0, 2**63 - 1),
        st.integers(0, 2**15 - 1),
        st.integers(0, 2**31 - 1),
        st.booleans(),
    ),
)
crosscheck_settings = settings(max_examples=40, deadline=None)


def their_build(
    lib: Library,
    records: list[Record],
    codec: Codec,
    producer: tuple[int, int, int, bool] = (-1, -1, -1, False),
) -> bytes:
    producer_id, producer_epoch, base_sequence, transactional = producer
    builder = lib.builder(2, int(codec), transactional, producer_id, producer_epoch, base_sequence, 1 << 30)
    base = records[0].offset
    for r in records:
        # The first argument is the offset delta, not the offset.
        meta = builder.append(r.offset - base, r.timestamp, r.key, r.value, list(r.headers))
        assert meta is not None
    buf = bytearray(builder.build())
    struct.pack_into(">q", buf, 0, base)
    return bytes(buf)


def their_records(batch: Any) -> list[RecordTuple]:
    assert batch.validate_crc()  # before iterating: iteration decompresses in place
    return [(r.offset, r.timestamp, r.key, r.value, tuple(r.headers)) for r in batch]


def our_records(records: list[Record]) -> list[RecordTuple]:
    return [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in records]


def assert_same_header(ours: BatchHeader, theirs: Any) -> None:
    assert ours.base_offset == theirs.base_offset
    assert ours.magic == theirs.magic == 2
    assert ours.crc == theirs.crc
    assert ours.attributes == theirs.attributes
    assert ours.codec == theirs.compression_type
    assert ours.timestamp_type == theirs.timestamp_type
    assert ours.is_transactional == theirs.is_transactional
    assert ours.is_control == theirs.is_control_batch
    assert ours.last_offset - ours.base_offset == theirs.last_offset_delta
    assert ours.next_offset == theirs.next_offset
    assert ours.base_timestamp == theirs.first_timestamp
    assert ours.max_timestamp == theirs.max_timestamp
    assert ours.producer_id == theirs.producer_id
    assert ours.producer_epoch == theirs.producer_epoch
    assert ours.base_sequence == theirs.base_sequence


def read_with_rlm(batch: bytes) -> tuple[BatchHeader, list[Record]]:
    header = parse_v2_header(batch, 0)
    assert crc_valid(batch, header)
    assert header.size == len(batch)
    return header, decode_v2(batch, header)


def read_with_them(lib: Library, data: bytes) -> list[Any]:
    """Every batch of ``data`` as their MemoryRecords yields it."""
    memory = lib.memory_records(data)
    out = []
    while memory.has_next():
        out.append(memory.next_batch())
    return out


# --- their batches, our reader ------------------------------------------------------------------


@crosscheck_settings
@pytest.mark.parametrize(("lib", "codec"), LIBRARY_CODECS)
@given(records=record_lists(), producer=PRODUCERS)
def test_their_batches_read_identically_with_rlm(
    lib: Library, codec: Codec, records: list[Record], producer: tuple[int, int, int, bool]
) -> None:
    if codec is not Codec.NONE:
        # They fall back to an uncompressed batch when compression does not shrink it.
        records = compressible_tail(records)
    batch = their_build(lib, records, codec, producer)
    header, decoded = read_with_rlm(batch)
    theirs = lib.batch(batch)
    assert_same_header(header, theirs)
    assert header.codec is codec
    assert header.leader_epoch == lib.leader_epoch
    assert header.record_count == len(records)
    producer_id, producer_epoch, base_sequence, transactional = producer
    assert (header.producer_id, header.producer_epoch) == (producer_id, producer_epoch)
    assert (header.base_sequence, header.is_transactional) == (base_sequence, transactional)
    assert decoded == records
    assert our_records(decoded) == their_records(theirs)


@pytest.mark.parametrize("lib", LIBRARIES, ids=lambda lib: lib.name)
def test_their_uncompressed_batches_are_byte_identical_to_ours(lib: Library) -> None:
    records = [
        Record(0, TS, None, b"a", (("h", b"1"),)),
        Record(1, TS - 5, b"k2", None),
        Record(3, TS + 300, b"k3", b"", (("x", None), ("\u00ea", b""))),
    ]
    ours = encode_v2_batch(records, leader_epoch=lib.leader_epoch)
    assert their_build(lib, records, Codec.NONE) == ours


@crosscheck_settings
@pytest.mark.parametrize("lib", LIBRARIES, ids=lambda lib: lib.name)
@given(records=record_lists(base_offset=0), producer=PRODUCERS)
def test_uncompressed_batches_are_byte_identical_both_ways(
    lib: Library, records: list[Record], producer: tuple[int, int, int, bool]
) -> None:
    producer_id, producer_epoch, base_sequence, transactional = producer
    ours = encode_v2_batch(
        records,
        leader_epoch=lib.leader_epoch,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        is_transactional=transactional,
    )
    assert their_build(lib, records, Codec.NONE, producer) == ours


@pytest.mark.parametrize("lib", LIBRARIES, ids=lambda lib: lib.name)
def test_aiokafka_published_crcs(lib: Library) -> None:
    # aiokafka test_read_write_serde_v2: a transactional batch whose CRC the project published.
    headers = (("header1", b"aaa"), ("header2", b"bbb"))
    records = [Record(i, 9999999 + i, b"test", b"Super", headers) for i in range(10)]
    batch = their_build(lib, records, Codec.NONE, (123456, 123, 9999, True))
    header, decoded = read_with_rlm(batch)
    assert header.crc == 3950153926
    assert decoded == records


# --- our batches, their reader ------------------------------------------------------------------


@crosscheck_settings
@pytest.mark.parametrize(("lib", "codec"), LIBRARY_CODECS)
@given(
    records=record_lists(),
    producer=PRODUCERS,
    leader_epoch=st.integers(-1, 2**31 - 1),
    log_append_time=st.one_of(st.none(), st.integers(0, 2**42)),
)
def test_our_batches_read_identically_with_theirs(
    lib: Library,
    codec: Codec,
    records: list[Record],
    producer: tuple[int, int, int, bool],
    leader_epoch: int,
    log_append_time: int | None,
) -> None:
    producer_id, producer_epoch, base_sequence, transactional = producer
    batch = encode_v2_batch(
        records,
        codec=codec,
        leader_epoch=leader_epoch,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        is_transactional=transactional,
        timestamp_type=(
            TimestampType.CREATE_TIME if log_append_time is None else TimestampType.LOG_APPEND_TIME
        ),
        log_append_time=log_append_time,
    )
    header, decoded = read_with_rlm(batch)
    (theirs,) = read_with_them(lib, batch)
    assert_same_header(header, theirs)
    assert their_records(theirs) == our_records(decoded)
    if log_append_time is not None:
        assert {r.timestamp for r in decoded} == {log_append_time}
    else:
        assert decoded == records


@pytest.mark.parametrize("lib", LIBRARIES, ids=lambda lib: lib.name)
def test_a_log_of_our_batches_reads_with_theirs(lib: Library) -> None:
    batches = []
    expected: list[RecordTuple] = []
    offset = 1000
    for i, codec in enumerate(lib.codecs * 2):
        records = [
            Record(offset + j, TS + 7 * i + j, b"k%d" % j, b"value-%d " % i * 30, (("n", b"%d" % j),))
            for j in range(5)
        ]
        batches.append(encode_v2_batch(records, codec=codec, leader_epoch=i))
        expected += our_records(records)
        offset += 5
    log = b"".join(batches)
    torn = log + batches[0][:40]  # a batch still being written
    seen = [their_records(batch) for batch in read_with_them(lib, torn)]
    assert [r for rs in seen for r in rs] == expected
    assert len(seen) == len(batches)


@pytest.mark.parametrize("lib", LIBRARIES, ids=lambda lib: lib.name)
@pytest.mark.parametrize(
    ("vector", "expected"),
    [
        (VECTOR_A, [(0, TS, b"key", b"value", ())]),
        (
            VECTOR_B,
            [
                (42, TS, None, b"a", (("h", b"1"),)),
                (43, TS - 5, b"k2", None, ()),
                (44, TS + 300, b"k3", b"c", (("x", None),)),
            ],
        ),
        (VECTOR_C, [(0, TS + 999, b"key", b"value", ())]),
        (VECTOR_E, []),
    ],
    ids=["A", "B", "C", "E"],
)
def test_spec_vectors_read_identically_with_theirs(
    lib: Library, vector: bytes, expected: list[RecordTuple]
) -> None:
    header, decoded = read_with_rlm(vector)
    (theirs,) = read_with_them(lib, vector)
    assert_same_header(header, theirs)
    assert their_records(theirs) == our_records(decoded) == expected


@pytest.mark.parametrize("control_type", [ControlType.COMMIT, ControlType.ABORT])
def test_our_transaction_markers_read_with_kafka_python(control_type: ControlType) -> None:
    batch = encode_control_batch(
        77, control_type, producer_id=4242, producer_epoch=3, timestamp=TS, coordinator_epoch=9
    )
    (theirs,) = read_with_them(KAFKA_PYTHON, batch)
    assert theirs.validate_crc()
    assert theirs.is_control_batch and theirs.is_transactional
    (marker,) = list(theirs)
    assert (marker.offset, marker.version, marker.type) == (77, 0, int(control_type))
    assert marker.commit == (control_type is ControlType.COMMIT)
    assert marker.abort == (control_type is ControlType.ABORT)
    _, (record,) = read_with_rlm(batch)
    assert parse_control_record(record) == ControlRecord(0, control_type, 9)


@pytest.mark.parametrize(
    ("control_type", "marker"), [(ControlType.COMMIT, COMMIT_MARKER), (ControlType.ABORT, ABORT_MARKER)]
)
def test_our_transaction_markers_read_with_aiokafka(
    control_type: ControlType, marker: AioControlRecord
) -> None:
    batch = encode_control_batch(
        5, control_type, producer_id=4242, producer_epoch=3, timestamp=TS, coordinator_epoch=7
    )
    (theirs,) = read_with_them(AIOKAFKA, batch)
    assert theirs.validate_crc()
    assert theirs.is_control_batch and theirs.is_transactional
    (record,) = list(theirs)
    assert record.offset == 5
    assert AioControlRecord.parse(record.key) == marker


def test_a_corrupted_batch_is_rejected_by_every_reader() -> None:
    # Sanity of the oracle: the libraries see the same CRC failure that rlm reports.
    corrupted = bytearray(VECTOR_B)
    corrupted[70] ^= 0x01
    header = parse_v2_header(corrupted, 0)
    assert not crc_valid(corrupted, header)
    for lib in LIBRARIES:
        assert not lib.batch(bytes(corrupted)).validate_crc()
