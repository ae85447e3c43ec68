"""Segments: Kafka's LogSegmentTest scenario and the §7.6 vectors, rebuilt and looked up."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlm.errors import CorruptRecordError
from rlm.log import legacy
from rlm.log.files import segment_file_name
from rlm.log.model import Record, TimestampAndOffset
from rlm.log.segment import Segment, rebuild_segment_indexes
from rlm.log.v2 import encode_v2_batch
from rlm.log.writer import PartitionAppender, ProducerRecord, TopicConfig

TS = 1_700_000_000_000

LOG_SEGMENT_TEST_INDEX = bytes.fromhex("000000020000004e000000040000009c00000006000000ea0000000800000138")
LOG_SEGMENT_TEST_TIMEINDEX = bytes.fromhex(
    "00000000000001a400000002"
    "00000000000001b800000004"
    "00000000000001cc00000006"
    "00000000000001e000000008"
    "00000000000001ea00000009"
)
SYNTHETIC_INDEX = bytes.fromhex("000000020000102c00000004000020580000000600003084")
SYNTHETIC_TIMEINDEX = bytes.fromhex(
    "0000018bcfe5680a000000010000018bcfe5681e000000040000018bcfe5682800000006"
)
SYNTHETIC_DELTAS = (0, 10, 5, 20, 30, 25, 40, 35)


def _log_segment_test(tmp_path: Path) -> Segment:
    """Ten v1 messages at offsets 40-49, timestamps offset*10, values msg<i> (39 bytes each)."""
    data = b"".join(
        legacy.encode_legacy_batch([Record(i, i * 10, None, f"msg{i}".encode())], magic=1)
        for i in range(40, 50)
    )
    assert len(data) == 390
    (tmp_path / segment_file_name(40, ".log")).write_bytes(data)
    return Segment(tmp_path, 40)


def _synthetic_v2(tmp_path: Path) -> Segment:
    batches = [
        encode_v2_batch([Record(1000 + i, TS + d, None, b"v" * 2000)]) for i, d in enumerate(SYNTHETIC_DELTAS)
    ]
    assert {len(b) for b in batches} == {2070}
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / segment_file_name(1000, ".log")).write_bytes(b"".join(batches))
    return Segment(tmp_path, 1000)


def test_log_segment_test_indexes_rebuilt_byte_for_byte(tmp_path: Path) -> None:
    rebuilt = rebuild_segment_indexes(_log_segment_test(tmp_path), index_interval_bytes=77)
    assert rebuilt.offset_index.to_bytes() == LOG_SEGMENT_TEST_INDEX
    assert rebuilt.time_index.to_bytes() == LOG_SEGMENT_TEST_TIMEINDEX
    assert rebuilt.max_timestamp == 490
    assert rebuilt.valid_bytes == 390
    assert rebuilt.error is None


@pytest.mark.parametrize(
    ("target", "offset"),
    [(420, 42), (421, 43), (430, 43), (431, 44), (401, 41), (399, 40), (491, None)],
)
def test_log_segment_test_find_offset_by_timestamp(tmp_path: Path, target: int, offset: int | None) -> None:
    segment = _log_segment_test(tmp_path)
    rebuilt = rebuild_segment_indexes(segment, index_interval_bytes=77)
    rebuilt.offset_index.write(segment.index_path)
    rebuilt.time_index.write(segment.time_index_path)
    found = segment.find_offset_by_timestamp(target)
    if offset is None:
        assert found is None
    else:
        assert found == TimestampAndOffset(offset * 10, offset, -1)
    assert segment.max_timestamp_and_offset().timestamp == 490


def test_synthetic_v2_vectors_recovery_and_live_append_agree(tmp_path: Path) -> None:
    rebuilt = rebuild_segment_indexes(_synthetic_v2(tmp_path / "recovered"), index_interval_bytes=4096)
    assert rebuilt.offset_index.to_bytes() == SYNTHETIC_INDEX
    assert rebuilt.time_index.to_bytes() == SYNTHETIC_TIMEINDEX

    appender = PartitionAppender(
        tmp_path / "live",
        TopicConfig(timestamp_after_max_ms=2**62),
        clock=lambda: TS,
        start_offset=1000,
        leader_epoch=-1,
    )
    for d in SYNTHETIC_DELTAS:
        appender.append([ProducerRecord(TS + d, None, b"v" * 2000)])
    appender.close()
    live = Segment(tmp_path / "live", 1000)
    recovered_log = tmp_path / "recovered" / live.log_path.name
    assert live.log_path.read_bytes() == recovered_log.read_bytes()
    assert live.index_path.read_bytes() == SYNTHETIC_INDEX
    assert live.time_index_path.read_bytes() == SYNTHETIC_TIMEINDEX
    assert live.find_offset_by_timestamp(TS + 22) == TimestampAndOffset(TS + 30, 1004, -1)


def test_missing_indexes_are_rebuilt_in_memory_without_writing(tmp_path: Path) -> None:
    segment = _synthetic_v2(tmp_path)
    assert segment.find_offset_by_timestamp(TS + 22) == TimestampAndOffset(TS + 30, 1004, -1)
    assert not segment.index_path.exists()
    assert segment.offset_index().to_bytes() == SYNTHETIC_INDEX


def test_garbage_index_is_not_trusted(tmp_path: Path) -> None:
    segment = _synthetic_v2(tmp_path)
    segment.index_path.write_bytes(b"\x00\x00\x00\x09\x00\x00\x00\x05" * 2 + b"\x7f" * 8)
    segment.time_index_path.write_bytes(b"\xff" * 24)
    assert segment.find_offset_by_timestamp(TS + 22) == TimestampAndOffset(TS + 30, 1004, -1)
    assert segment.find_offset_by_timestamp(TS + 41) is None


def test_translate_offset_and_torn_tail(tmp_path: Path) -> None:
    segment = _synthetic_v2(tmp_path)
    whole = segment.log_path.read_bytes()
    segment.log_path.write_bytes(whole + whole[:100])  # the broker is mid-way through a write
    headers = list(segment.headers())
    assert [h.base_offset for h in headers] == list(range(1000, 1008))
    found = segment.translate_offset(1005)
    assert found is not None and found.position == 5 * 2070
    assert segment.translate_offset(1008) is None


def test_corrupt_batch_stops_recovery_with_its_position(tmp_path: Path) -> None:
    segment = _synthetic_v2(tmp_path)
    data = bytearray(segment.log_path.read_bytes())
    data[3 * 2070 + 100] ^= 0xFF
    segment.log_path.write_bytes(bytes(data))
    rebuilt = rebuild_segment_indexes(segment)
    assert rebuilt.valid_bytes == 3 * 2070
    assert rebuilt.error is not None
    assert rebuilt.error.position == 3 * 2070
    assert str(segment.log_path) in str(rebuilt.error)
    with pytest.raises(CorruptRecordError, match="CRC"):
        rebuild_segment_indexes(segment, stop_at_corruption=False)


def test_active_segment_appended_after_indexes_were_loaded(tmp_path: Path) -> None:
    """A live broker keeps appending: lookups see data newer than the indexes they loaded."""
    from rlm.log.logdir import PartitionDir

    appender = PartitionAppender(
        tmp_path / "t-0", TopicConfig(timestamp_after_max_ms=2**62), clock=lambda: TS, leader_epoch=1
    )
    appender.append([ProducerRecord(TS + i, None, b"x" * 100) for i in range(10)])
    partition = PartitionDir(tmp_path / "t-0")
    assert partition.find_offset_by_timestamp(TS + 5) == TimestampAndOffset(TS + 5, 5, 1)
    assert partition.find_offset_by_timestamp(TS + 50) is None
    appender.append([ProducerRecord(TS + 50 + i, None, b"y" * 100) for i in range(10)])
    assert partition.find_offset_by_timestamp(TS + 50) == TimestampAndOffset(TS + 50, 10, 1)
    latest = partition.max_timestamp_offset()
    assert latest is not None and (latest.offset, latest.timestamp) == (19, TS + 59)


def test_segment_rolled_after_its_indexes_were_loaded_is_not_skipped(tmp_path: Path) -> None:
    """A segment whose indexes were loaded while it was active, then appended to and rolled: the
    next lookup uses the indexes the broker completed at the roll, not the ones loaded before, even
    within the interval in which segments do not look at their files (the clock does not move)."""
    from rlm.log.logdir import LogDir
    from tests.clock import FakeClock

    appender = PartitionAppender(
        tmp_path / "t-0", TopicConfig(index_interval_bytes=1, timestamp_after_max_ms=2**62), clock=lambda: TS
    )
    for ts in (TS, TS + 1, TS + 2):
        appender.append([ProducerRecord(ts, b"k", b"v")])  # offsets 0-2
    appender.roll()
    for ts in (TS + 100, TS + 101, TS + 102):
        appender.append([ProducerRecord(ts, b"k", b"v")])  # offsets 3-5, segment 3 active
    partition = LogDir(tmp_path, clock=FakeClock(100.0)).partition("t", 0)
    assert partition.find_offset_by_timestamp(TS + 101) == TimestampAndOffset(TS + 101, 4, 0)

    appender.append([ProducerRecord(TS + 9000, b"k", b"v")])  # offset 6, still in segment 3
    appender.roll()
    appender.append([ProducerRecord(TS + 8000, b"k", b"v")])  # offset 7, segment 7 active
    partition.forget_listing()  # the directory changed within its mtime's tick: read it now
    assert [s.base_offset for s in partition.segments()] == [0, 3, 7]
    assert partition.find_offset_by_timestamp(TS + 8000) == TimestampAndOffset(TS + 9000, 6, 0)
    assert partition.find_offset_by_timestamp(TS + 9000) == TimestampAndOffset(TS + 9000, 6, 0)
    assert partition.max_timestamp_offset() == TimestampAndOffset(TS + 9000, 6, 0)


def test_a_timestamp_search_reads_a_wrapped_timestamp_delta_as_kafka_does(tmp_path: Path) -> None:
    """A batch whose first record has no timestamp (-1) and whose next is at Long.MAX_VALUE holds
    the wrapped delta Long.MIN_VALUE, as the producer wrote it; Kafka reads the timestamp back in
    long arithmetic, so a search finds the record where a decode shows it."""
    int64_max = 2**63 - 1
    batch = encode_v2_batch([Record(0, -1, None, b"a"), Record(1, int64_max, None, b"b")])
    (tmp_path / segment_file_name(0, ".log")).write_bytes(batch)
    segment = Segment(tmp_path, 0)
    header = next(iter(segment.headers()))
    assert [r.timestamp for r in segment.read_records(header)] == [-1, int64_max]
    assert segment.find_offset_by_timestamp(int64_max - 5) == TimestampAndOffset(int64_max, 1, -1)
