"""Header-only scanning of a log (iter_headers) through a bounded window, over files and bytes."""

from __future__ import annotations

import itertools
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlm.errors import CorruptRecordError
from rlm.log.batches import crc_valid, decode_batch
from rlm.log.byte_source import BytesSource, FileSource, iter_headers, read_batch_bytes
from rlm.log.model import BatchHeader, Codec, Record
from rlm.log.v2 import encode_v2_batch, parse_v2_header
from tests.unit.kafka_vectors import (
    ATTRIBUTES_OFFSET,
    BROKER_BATCHES,
    BROKER_V1_MESSAGES,
    LENGTH_OFFSET,
    MAGIC_OFFSET,
    RECORDS_COUNT_OFFSET,
    TS,
    VECTOR_A,
    VECTOR_D,
    VECTOR_E,
)

WINDOWS = [1, 61, 100, 4096, 256 * 1024]


def build_log(value_sizes: list[int], codecs: list[Codec] | None = None) -> tuple[bytes, list[BatchHeader]]:
    """A log of one v2 batch per size (two records each) and the headers a scan must yield."""
    parts: list[bytes] = []
    expected: list[BatchHeader] = []
    offset, position = 0, 0
    for i, size in enumerate(value_sizes):
        codec = Codec.NONE if codecs is None else codecs[i % len(codecs)]
        records = [
            Record(offset, TS + i, b"k%d" % i, bytes([i % 251]) * size),
            Record(offset + 1, TS + i + 1, None, b"v"),
        ]
        batch = encode_v2_batch(records, codec=codec, leader_epoch=i % 3)
        expected.append(parse_v2_header(batch, 0)._replace(position=position))
        parts.append(batch)
        offset += 2
        position += len(batch)
    return b"".join(parts), expected


LOG, HEADERS = build_log([0, 5, 300, 1, 5000, 61, 17, 0, 20000, 2, 120, 59] * 3)


class CountingSource(BytesSource):
    """A BytesSource that records every read."""

    def __init__(self, data: bytes) -> None:
        super().__init__(data, name="counted")
        self.reads: list[tuple[int, int]] = []

    def read(self, position: int, length: int) -> bytes:
        self.reads.append((position, length))
        return super().read(position, length)


@pytest.fixture
def log_file(tmp_path: Path) -> Path:
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(LOG)
    return path


@pytest.fixture
def file_source(log_file: Path) -> Iterator[FileSource]:
    with FileSource(log_file) as source:
        yield source


# --- whole logs ---------------------------------------------------------------------------------


@pytest.mark.parametrize("window", WINDOWS)
def test_every_header_of_a_log_in_bytes(window: int) -> None:
    assert list(iter_headers(BytesSource(LOG), window_bytes=window)) == HEADERS


@pytest.mark.parametrize("window", WINDOWS)
def test_every_header_of_a_log_file(file_source: FileSource, window: int) -> None:
    headers = list(iter_headers(file_source, window_bytes=window))
    assert headers == HEADERS
    assert headers[-1].end_position == len(LOG) == file_source.size


def test_positions_sizes_and_offsets_chain(file_source: FileSource) -> None:
    headers = list(iter_headers(file_source, window_bytes=100))
    assert headers[0].position == 0
    for before, after in itertools.pairwise(headers):
        assert after.position == before.end_position
        assert after.base_offset == before.next_offset
    for header in headers:
        batch = read_batch_bytes(file_source, header)
        assert batch == LOG[header.position : header.end_position]
        assert crc_valid(LOG, header)


def test_headers_of_compressed_batches() -> None:
    log, expected = build_log([10, 3000, 0, 70000], codecs=list(Codec))
    headers = list(iter_headers(BytesSource(log), window_bytes=61))
    assert headers == expected
    assert [h.codec for h in headers] == [Codec.NONE, Codec.GZIP, Codec.SNAPPY, Codec.LZ4]
    for header in headers:
        assert len(decode_batch(log, header)) == 2


def test_spec_vectors_and_broker_batches_in_one_log() -> None:
    log = BROKER_BATCHES + VECTOR_A + VECTOR_D + VECTOR_E
    headers = list(iter_headers(BytesSource(log), window_bytes=61))
    assert [h.position for h in headers] == [0, 71, 147, 218, 299, 375, 453]
    assert [h.crc for h in headers[-3:]] == [0xDB5E9CDD, 0xA1756980, 0x2CD63DA2]
    assert [h.last_offset for h in headers] == [0, 2, 3, 0, 0, 5, 14]
    assert headers[5].is_control and headers[6].record_count == 0
    assert all(crc_valid(log, h) for h in headers)


def test_legacy_messages_then_v2_batches() -> None:
    # A partition written before and after the upgrade to message format v2.
    legacy = b"".join(BROKER_V1_MESSAGES)
    v2 = encode_v2_batch([Record(4, TS, None, b"after"), Record(5, TS + 1, None, b"upgrade")])
    log = legacy + v2
    for window in (61, 100, 4096):
        headers = list(iter_headers(BytesSource(log), window_bytes=window))
        assert [h.magic for h in headers] == [1, 1, 1, 1, 2]
        assert [h.position for h in headers] == [0, 37, 71, 105, 142]
        assert [h.last_offset for h in headers] == [0, 1, 2, 3, 5]
        assert headers[0].max_timestamp == 1503648000942
        assert headers[-1].end_position == len(log)
        assert [r.value for r in decode_batch(log, headers[0])] == [b"123"]


def test_empty_source_has_no_headers() -> None:
    assert list(iter_headers(BytesSource(b""))) == []


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 3000), min_size=1, max_size=12),
    window=st.integers(1, 5000),
)
def test_any_window_size_yields_the_same_headers(sizes: list[int], window: int) -> None:
    log, expected = build_log(sizes)
    assert list(iter_headers(BytesSource(log), window_bytes=window)) == expected


# --- bounded reads ------------------------------------------------------------------------------


@pytest.mark.parametrize("window", [61, 100, 4096])
def test_reads_never_exceed_the_window(window: int) -> None:
    source = CountingSource(LOG)
    assert list(iter_headers(source, window_bytes=window)) == HEADERS
    assert max(length for _, length in source.reads) == window


def test_payloads_larger_than_the_window_are_skipped_not_read() -> None:
    log, expected = build_log([50_000] * 20)
    source = CountingSource(log)
    assert list(iter_headers(source, window_bytes=4096)) == expected
    # One window per batch: the 50 kB payloads themselves are never read.
    assert len(source.reads) == 20
    assert sum(length for _, length in source.reads) == 20 * 4096 < len(log) // 10


# --- torn tails ---------------------------------------------------------------------------------


def test_a_log_cut_anywhere_inside_its_last_batch_ends_after_the_last_whole_batch() -> None:
    log, expected = build_log([10, 200, 70, 30])
    last = expected[-1]
    for cut in range(last.position, last.end_position):
        for window in (61, 100):
            headers = list(iter_headers(BytesSource(log[:cut]), window_bytes=window))
            assert headers == expected[:-1], cut


def test_a_whole_log_cut_anywhere_inside_its_last_batch_is_corrupt_there() -> None:
    """A rolled segment is written whole: a last batch cut short (a size field, outside the CRC,
    saying more than there is) is damage, raised after the whole batches before it."""
    log, expected = build_log([10, 200, 70, 30])
    last = expected[-1]
    for cut in range(last.position + 1, last.end_position):
        for window in (61, 100):
            found: list[BatchHeader] = []
            with pytest.raises(CorruptRecordError, match="the last batch is cut short") as raised:
                found.extend(iter_headers(BytesSource(log[:cut]), window_bytes=window, whole=True))
            assert found == expected[:-1] and raised.value.position == last.position, cut
    assert list(iter_headers(BytesSource(log), whole=True)) == expected


def test_a_file_cut_inside_its_first_batch_has_no_headers(tmp_path: Path) -> None:
    path = tmp_path / "torn.log"
    for cut in (0, 1, 11, 12, 16, 17, 18, 60, 61, len(VECTOR_A) - 1):
        path.write_bytes(VECTOR_A[:cut])
        with FileSource(path) as source:
            assert list(iter_headers(source)) == [], cut


@pytest.mark.parametrize("tail", range(1, 18))
def test_seventeen_bytes_or_fewer_after_the_last_batch_end_the_scan(tail: int) -> None:
    # FileLogInputStream.nextBatch: position + HEADER_SIZE_UP_TO_MAGIC >= end -> no more batches.
    log = VECTOR_A + bytes(tail)
    assert [h.position for h in iter_headers(BytesSource(log))] == [0]


def test_eighteen_zero_bytes_after_the_last_batch_are_corrupt() -> None:
    # A preallocated or crash-torn file ends in zeros: size 0 < 14 is corruption (recovery
    # truncates there).
    log = VECTOR_A + bytes(18)
    scan = iter_headers(BytesSource(log, name="zeros.log"))
    assert next(scan).position == 0
    with pytest.raises(CorruptRecordError) as excinfo:
        next(scan)
    assert excinfo.value.position == len(VECTOR_A)
    assert str(excinfo.value).startswith(f"zeros.log, position {len(VECTOR_A)}: ")


# --- corruption ---------------------------------------------------------------------------------


def _corrupt_at(data: bytes, index: int, offset: int, fmt: str, value: int) -> tuple[bytes, int]:
    """``data`` with a field of the ``index``-th batch of HEADERS overwritten; and its position."""
    buf = bytearray(data)
    position = HEADERS[index].position
    struct.pack_into(fmt, buf, position + offset, value)
    return bytes(buf), position


@pytest.mark.parametrize("size", [-(2**31), -1, 0, 13])
def test_size_field_below_14_names_the_file_and_position(tmp_path: Path, size: int) -> None:
    data, position = _corrupt_at(LOG, 5, LENGTH_OFFSET, ">i", size)
    path = tmp_path / "00000000000000000010.log"
    path.write_bytes(data)
    with FileSource(path) as source:
        scan = iter_headers(source, window_bytes=100)
        assert [h.position for h in (next(scan) for _ in range(5))] == [h.position for h in HEADERS[:5]]
        with pytest.raises(CorruptRecordError) as excinfo:
            next(scan)
    err = excinfo.value
    assert (err.path, err.position) == (str(path), position)
    assert str(path) in str(err) and f"position {position}" in str(err)
    assert f"batch size field {size} is smaller than the minimum 14" in str(err)


@pytest.mark.parametrize("magic", [3, 7, 0x7F, 0xFF])
def test_unknown_magic_names_the_position(log_file: Path, magic: int) -> None:
    data, position = _corrupt_at(LOG, 3, MAGIC_OFFSET, ">B", magic)
    log_file.write_bytes(data)
    with FileSource(log_file) as source, pytest.raises(CorruptRecordError) as excinfo:
        list(iter_headers(source, window_bytes=61))
    err = excinfo.value
    assert (err.path, err.position) == (str(log_file), position)
    assert f"unknown magic byte {magic}" in str(err)
    assert f"{log_file}, position {position}: " in str(err)


@pytest.mark.parametrize(
    ("offset", "fmt", "value", "message"),
    [
        (LENGTH_OFFSET, ">i", 14, "smaller than its 61-byte header"),
        (LENGTH_OFFSET, ">i", 48, "smaller than its 61-byte header"),
        (ATTRIBUTES_OFFSET, ">h", 6, "unknown compression codec id 6"),
        (RECORDS_COUNT_OFFSET, ">i", -3, "negative record count"),
    ],
)
def test_malformed_v2_header_names_the_position(offset: int, fmt: str, value: int, message: str) -> None:
    data, position = _corrupt_at(LOG, 7, offset, fmt, value)
    with pytest.raises(CorruptRecordError, match=message) as excinfo:
        list(iter_headers(BytesSource(data, name="seg.log"), window_bytes=100))
    assert (excinfo.value.path, excinfo.value.position) == ("seg.log", position)


def test_small_v2_size_at_the_end_of_the_source_is_corrupt() -> None:
    # A size that fits the source but not a v2 header, with fewer than 61 bytes left.
    data = VECTOR_A + struct.pack(">qiib", 1, 20, 0, 2) + bytes(20 - 5)
    with pytest.raises(CorruptRecordError) as excinfo:
        list(iter_headers(BytesSource(data)))
    assert excinfo.value.position == len(VECTOR_A)


def test_scanning_reads_headers_only_and_does_not_check_crcs() -> None:
    # A damaged payload is found by the decode (or the recovery check), not by the header scan.
    data = bytearray(LOG)
    damaged = HEADERS[4]
    data[damaged.end_position - 1] ^= 0xFF
    headers = list(iter_headers(BytesSource(bytes(data)), window_bytes=61))
    assert headers == HEADERS
    assert not crc_valid(bytes(data), headers[4])
    with pytest.raises(CorruptRecordError, match="CRC mismatch"):
        decode_batch(bytes(data), headers[4])


# --- start and end ------------------------------------------------------------------------------


@pytest.mark.parametrize("index", [0, 1, 7, len(HEADERS) - 1])
def test_start_at_a_batch_boundary(file_source: FileSource, index: int) -> None:
    start = HEADERS[index].position
    assert list(iter_headers(file_source, start, window_bytes=100)) == HEADERS[index:]


@pytest.mark.parametrize("index", [0, 3, len(HEADERS) - 1])
def test_end_at_a_batch_boundary(file_source: FileSource, index: int) -> None:
    end = HEADERS[index].end_position
    assert list(iter_headers(file_source, end=end, window_bytes=61)) == HEADERS[: index + 1]


def test_end_inside_a_batch_stops_before_it() -> None:
    source = BytesSource(LOG)
    for index in (2, 8):
        header = HEADERS[index]
        for end in (header.position + 17, header.position + 61, header.end_position - 1):
            assert list(iter_headers(source, end=end, window_bytes=100)) == HEADERS[:index]


def test_start_and_end_together() -> None:
    start, end = HEADERS[3].position, HEADERS[9].end_position
    assert list(iter_headers(BytesSource(LOG), start, end, window_bytes=61)) == HEADERS[3:10]


@pytest.mark.parametrize(
    ("start", "end"), [(0, 0), (100, 100), (len(LOG), None), (len(LOG) + 50, None), (0, 17)]
)
def test_empty_ranges(start: int, end: int | None) -> None:
    assert list(iter_headers(BytesSource(LOG), start, end)) == []


def test_end_past_the_source_is_clamped() -> None:
    assert list(iter_headers(BytesSource(LOG), end=len(LOG) + 10_000)) == HEADERS


# --- sources ------------------------------------------------------------------------------------


def test_file_source_basics(log_file: Path) -> None:
    source = FileSource(log_file)
    try:
        assert source.name == str(log_file)
        assert source.size == len(LOG)
        assert source.read(0, 61) == LOG[:61]
        assert source.read(len(LOG) - 5, 100) == LOG[-5:]
        assert source.read(len(LOG), 10) == b""
        assert source.read(len(LOG) + 10, 10) == b""
    finally:
        source.close()
    source.close()  # idempotent


def test_file_source_sees_appends_after_refresh(log_file: Path) -> None:
    extra = encode_v2_batch([Record(HEADERS[-1].next_offset, TS, None, b"late")])
    with FileSource(log_file) as source:
        with log_file.open("ab") as f:
            f.write(extra)
        # Until refreshed, the size is the one seen at opening.
        assert list(iter_headers(source)) == HEADERS
        assert source.refresh() == len(LOG) + len(extra)
        headers = list(iter_headers(source, HEADERS[-1].end_position))
    assert [(h.position, h.base_offset) for h in headers] == [(len(LOG), HEADERS[-1].next_offset)]


def test_bytes_source_basics() -> None:
    source = BytesSource(VECTOR_A)
    assert (source.name, source.size) == ("<memory>", 76)
    assert source.read(70, 100) == VECTOR_A[70:]
    assert BytesSource(b"", name="x").name == "x"


def test_read_batch_bytes_of_a_shrunk_source_is_corrupt() -> None:
    header = HEADERS[-1]
    shrunk = BytesSource(LOG[: header.end_position - 1], name="shrunk")
    with pytest.raises(CorruptRecordError, match="cut short") as excinfo:
        read_batch_bytes(shrunk, header)
    assert (excinfo.value.path, excinfo.value.position) == ("shrunk", header.position)
