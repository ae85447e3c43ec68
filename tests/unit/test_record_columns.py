"""rlm.log.columns and rlm.log.arrow: the records of batches as column buffers and Arrow arrays.

The rows must be the records :func:`rlm.log.batches.decode_batch` decodes (checked against
kafka-python there), batch after batch, with nothing appended when a batch is corrupt.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import crc32c
import pyarrow as pa
import pytest
from kafka.record import MemoryRecords

from rlm.errors import CorruptRecordError
from rlm.log import columns, v2
from rlm.log.arrow import HEADERS_TYPE, record_arrays
from rlm.log.batches import decode_batch, parse_header
from rlm.log.byte_source import FileSource, iter_headers
from rlm.log.columns import ColumnBuffers, append_batch
from rlm.log.legacy import encode_legacy_batch
from rlm.log.model import BatchHeader, Codec, Record, TimestampType
from rlm.log.produce import ProduceSummary
from rlm.log.v2 import V2Records, encode_record, encode_v2_batch

RECORDS = [
    Record(100, 5000, b"k0", b"v0", (("h", b"1"), ("\u00e9t\u00e9", None), ("", b""))),
    Record(101, 4990, None, b"v1"),
    Record(103, 7000, b"", None, (("x", b"y" * 300),)),
    Record(104, 7001, b"k" * 200, b"v" * 5000),
]


def _rows(cols: ColumnBuffers) -> list[Record]:
    arrays = record_arrays(cols)
    rows: Iterator[tuple[Any, Any, bytes | None, bytes | None, list[dict[str, Any]] | None]] = zip(
        arrays.offset.to_pylist(),
        arrays.timestamp.to_pylist(),
        arrays.key.to_pylist(),
        arrays.value.to_pylist(),
        arrays.headers.to_pylist(),
        strict=True,
    )
    return [Record(o, t, k, v, tuple((h["key"], h["value"]) for h in hs or ())) for o, t, k, v, hs in rows]


def _decode(batches: list[bytes], first: int = 0, last: int = 2**63 - 1) -> ColumnBuffers:
    cols = ColumnBuffers()
    for i, batch in enumerate(batches):
        header = parse_header(batch, 0)
        append_batch(cols, batch, header, first_offset=first, last_offset=last, batch_no=i)
    return cols


@pytest.mark.parametrize("codec", list(Codec))
def test_rows_are_the_records_decode_batch_reads(codec: Codec) -> None:
    batch = encode_v2_batch(RECORDS, codec=codec)
    cols = _decode([batch, batch])
    assert _rows(cols) == decode_batch(batch, parse_header(batch, 0)) * 2 == RECORDS * 2
    arrays = record_arrays(cols)
    assert arrays.batch.to_pylist() == [0] * 4 + [1] * 4
    assert arrays.headers.type == HEADERS_TYPE
    assert arrays.key.null_count == 2 and arrays.value.null_count == 2
    assert cols.header_count == 8


def test_log_append_time_and_offset_range() -> None:
    batch = encode_v2_batch(RECORDS, timestamp_type=TimestampType.LOG_APPEND_TIME, log_append_time=9999)
    cols = _decode([batch], first=101, last=103)
    assert _rows(cols) == [r._replace(timestamp=9999) for r in RECORDS[1:3]]
    assert record_arrays(cols).batch.to_pylist() == [0, 0]


def test_legacy_batches_take_the_reference_path() -> None:
    plain = [Record(i, 1000 + i, b"k%d" % i, None if i == 2 else b"v") for i in range(5)]
    v0 = encode_legacy_batch(plain, magic=0, codec=Codec.LZ4)
    v1 = encode_legacy_batch([r._replace(offset=r.offset + 5) for r in plain], magic=1, codec=Codec.GZIP)
    cols = _decode([v0, v1])
    expected = [r._replace(timestamp=-1) for r in plain] + [r._replace(offset=r.offset + 5) for r in plain]
    assert _rows(cols) == expected


def test_a_corrupt_batch_appends_nothing_and_says_what_decode_batch_says() -> None:
    good = encode_v2_batch(RECORDS)
    data = bytearray()
    for i in range(3):
        encode_record(data, i, 0, b"k", b"v")
    data[len(data) // 2] = 0x7F  # a field that runs past its record
    with pytest.raises(CorruptRecordError) as expected:
        v2._decode_records(bytes(data), 0, len(data), 3, 0, 0, None, compressed=False)
    cols = _decode([good] * 3)  # 12 rows: the validity bitmaps end in a partly used byte
    before = [bytes(cols.view(c)) for c in range(len(columns.COLUMNS))]
    for decoder in (columns.append_v2_records, columns.append_v2_records_py):
        with pytest.raises(CorruptRecordError) as got:
            decoder(cols, V2Records(bytes(data), 0, len(data), 3, 0, 0, None, False), 0, 10, 3)
        assert str(got.value) == str(expected.value)
        assert [bytes(cols.view(c)) for c in range(len(columns.COLUMNS))] == before
    flipped = bytearray(good)
    flipped[-1] ^= 1
    with pytest.raises(CorruptRecordError, match="CRC mismatch"):
        append_batch(cols, flipped, parse_header(good, 0), first_offset=0, last_offset=10**9, batch_no=3)
    assert [bytes(cols.view(c)) for c in range(len(columns.COLUMNS))] == before
    append_batch(cols, good, parse_header(good, 0), first_offset=0, last_offset=2**63 - 1, batch_no=3)
    assert _rows(cols) == RECORDS * 4


def test_an_offset_past_int64_is_corrupt_on_every_path() -> None:
    data = bytearray()
    encode_record(data, 5, 0, None, b"v")
    records = V2Records(bytes(data), 0, len(data), 1, 2**63 - 3, 0, None, False)
    cols = ColumnBuffers()
    for decoder in (columns.append_v2_records, columns.append_v2_records_py):
        with pytest.raises(CorruptRecordError, match=r"^record 0 has offset \d+, outside int64$"):
            decoder(cols, records, 0, 2**63 - 1, 0)
        assert cols.rows == 0
    with pytest.raises(CorruptRecordError, match=r"^record 0 has offset \d+, outside int64$"):
        v2.decode_records_py(records)
    batch = bytearray(encode_v2_batch([Record(2**63 - 2, 0, None, b"a")], last_offset_delta=0))
    batch[61:] = data  # one record at offset delta 5: base 2**63 - 2 + 5 is past int64
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))
    for decode in (decode_batch, columns_rows):
        with pytest.raises(CorruptRecordError, match=r"^record 0 has offset \d+, outside int64$"):
            decode(bytes(batch), parse_header(bytes(batch), 0))


def columns_rows(batch: bytes, header: BatchHeader) -> list[Record]:
    cols = ColumnBuffers()
    append_batch(cols, batch, header, first_offset=-(2**63), last_offset=2**63 - 1, batch_no=0)
    return _rows(cols)


def test_a_timestamp_past_int64_wraps_as_javas_long_arithmetic() -> None:
    # A record of timestamp -1 (none) first and one of Long.MAX_VALUE: the producer's delta
    # (MAX - -1) wraps, and Kafka's reader wraps base + delta back to MAX.
    records = [Record(7, -1, b"k", b"a"), Record(8, 2**63 - 1, b"k", b"b", (("h", b"x"),))]
    for codec in (Codec.NONE, Codec.ZSTD):
        batch = encode_v2_batch(records, codec=codec)
        header = parse_header(batch, 0)
        assert decode_batch(batch, header) == records
        assert v2.decode_records_py(v2.records_of(batch, header, True)) == records
        assert columns_rows(batch, header) == records
    data = bytearray()
    encode_record(data, 5, 2**63 - 1, None, b"v")
    wrapped = [Record(5, 10 + 2**63 - 1 - 2**64, None, b"v")]
    raw = V2Records(bytes(data), 0, len(data), 1, 0, 10, None, False)
    assert v2.decode_records_py(raw) == wrapped
    for decoder in (columns.append_v2_records, columns.append_v2_records_py):
        cols = ColumnBuffers()
        assert decoder(cols, raw, 0, 10, 0) == 1
        assert _rows(cols) == wrapped


def test_a_produced_log_reads_as_kafka_python_reads_it(sample_logdir: tuple[Path, ProduceSummary]) -> None:
    root, _ = sample_logdir
    logs = sorted(root.glob("*/*.log"))
    assert logs
    total = 0
    for path in logs:
        data = path.read_bytes()
        cols = ColumnBuffers()
        with FileSource(path) as source:
            for i, header in enumerate(iter_headers(source)):
                append_batch(cols, data, header, first_offset=0, last_offset=2**63 - 1, batch_no=i)
        theirs = []
        memory = MemoryRecords(data)
        while (batch := memory.next_batch()) is not None:
            v2 = batch.magic >= 2
            theirs += [
                Record(
                    r.offset,
                    r.timestamp if batch.magic else -1,
                    r.key,
                    r.value,
                    tuple(r.headers) if v2 else (),
                )
                for r in batch
            ]
        assert _rows(cols) == theirs
        total += len(theirs)
    assert total > 1000


def test_arrays_wrap_the_buffers_without_copying() -> None:
    cols = _decode([encode_v2_batch(RECORDS)])
    arrays = record_arrays(cols)
    value_data = arrays.value.buffers()[2]
    assert value_data is not None
    assert value_data.address == pa.py_buffer(cols.buffers[columns.VALUE_DATA]).address
