"""The broker-like appender: offsets, timestamps, rolling, indexes and checkpoints."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from rlm.errors import ConfigError, InvalidRecordError
from rlm.log.checkpoints import (
    EpochEntry,
    read_leader_epoch_checkpoint,
    read_offset_checkpoint,
    read_partition_metadata,
)
from rlm.log.dirwriter import LogDirWriter
from rlm.log.files import segment_file_name
from rlm.log.logdir import LogDir, PartitionDir
from rlm.log.model import INT32_MAX, Codec, ControlType, TimestampType, TopicPartition
from rlm.log.segment import rebuild_segment_indexes
from rlm.log.snapshot import read_snapshot
from rlm.log.txnindex import AbortedTxn
from rlm.log.verify import verify_path
from rlm.log.writer import PartitionAppender, ProducerRecord, TopicConfig
from tests.clock import FakeClock

NOW = 1_700_000_000_000


def _records(n: int, ts: int = NOW, size: int = 100) -> list[ProducerRecord]:
    return [ProducerRecord(ts + i, f"k{i}".encode(), b"x" * size) for i in range(n)]


def test_offsets_are_assigned_contiguously(tmp_path: Path) -> None:
    appender = PartitionAppender(tmp_path / "t-0", clock=FakeClock(NOW))
    first = appender.append(_records(3))
    second = appender.append(_records(2))
    assert (first.base_offset, first.last_offset) == (0, 2)
    assert (second.base_offset, second.last_offset) == (3, 4)
    assert second.position > first.position
    appender.close()
    headers = list(PartitionDir(tmp_path / "t-0").segments()[0].headers())
    assert [(h.base_offset, h.last_offset) for h in headers] == [(0, 2), (3, 4)]


def test_log_append_time_never_goes_backwards(tmp_path: Path) -> None:
    clock = FakeClock(NOW)
    appender = PartitionAppender(
        tmp_path / "t-0", TopicConfig(timestamp_type=TimestampType.LOG_APPEND_TIME), clock=clock
    )
    a = appender.append(_records(1, ts=5))
    clock.now -= 10_000  # the wall clock steps back
    b = appender.append(_records(1, ts=5))
    clock.now += 20_000
    c = appender.append(_records(1, ts=5))
    assert a.log_append_time == NOW
    assert b.log_append_time == NOW
    assert c.log_append_time == NOW + 10_000
    appender.close()
    segment = PartitionDir(tmp_path / "t-0").segments()[0]
    stamps = [r.timestamp for h in segment.headers() for r in segment.read_records(h)]
    assert stamps == [NOW, NOW, NOW + 10_000]


@pytest.mark.parametrize(("offset_ms", "setting"), [(-7_200_000, "before"), (7_200_000, "after")])
def test_create_time_outside_the_allowed_difference_is_rejected(
    tmp_path: Path, offset_ms: int, setting: str
) -> None:
    config = TopicConfig(timestamp_before_max_ms=3_600_000, timestamp_after_max_ms=3_600_000)
    appender = PartitionAppender(tmp_path / "t-0", config, clock=FakeClock(NOW))
    with pytest.raises(InvalidRecordError, match=f"message.timestamp.{setting}.max.ms"):
        appender.append(_records(1, ts=NOW + offset_ms))
    assert appender.next_offset == 0
    appender.append(_records(1, ts=NOW + offset_ms // 4))
    assert appender.next_offset == 1


def test_rolls_by_segment_bytes_and_trims_indexes(tmp_path: Path) -> None:
    config = TopicConfig(segment_bytes=10_000, index_interval_bytes=1000)
    appender = PartitionAppender(tmp_path / "t-0", config, clock=FakeClock(NOW))
    for _ in range(40):
        appender.append(_records(5, size=200))
    appender.close()
    partition = PartitionDir(tmp_path / "t-0")
    segments = partition.segments()
    assert len(segments) > 3
    for segment in segments:
        assert segment.size() <= 10_000
        assert segment.index_path.stat().st_size % 8 == 0
        assert segment.index_path.stat().st_size == 8 * len(segment.offset_index())
    for previous, current in itertools.pairwise(segments):
        assert (tmp_path / "t-0" / segment_file_name(current.base_offset, ".snapshot")).exists()
        last = list(previous.headers())[-1]
        assert current.base_offset == last.next_offset
    assert verify_path(tmp_path / "t-0") == []


def test_rolls_by_segment_ms_from_the_first_batch_timestamp(tmp_path: Path) -> None:
    appender = PartitionAppender(tmp_path / "t-0", TopicConfig(segment_ms=60_000), clock=FakeClock(NOW))
    appender.append(_records(1, ts=NOW - 3_000_000))
    appender.append(_records(1, ts=NOW - 2_950_000))  # 50 s later: same segment
    appender.append(_records(1, ts=NOW - 2_930_000))  # 70 s after the first batch: roll
    appender.close()
    assert [s.base_offset for s in PartitionDir(tmp_path / "t-0").segments()] == [0, 2]


def test_rolls_when_the_offset_index_is_full(tmp_path: Path) -> None:
    config = TopicConfig(segment_index_bytes=3 * 8 + 4, index_interval_bytes=1)
    appender = PartitionAppender(tmp_path / "t-0", config, clock=FakeClock(NOW))
    for _ in range(10):
        appender.append(_records(1))
    appender.close()
    partition = PartitionDir(tmp_path / "t-0")
    assert len(partition.segments()) >= 3
    assert all(len(s.offset_index()) <= 3 for s in partition.segments())
    assert verify_path(tmp_path / "t-0") == []


def test_rolls_on_offset_overflow(tmp_path: Path) -> None:
    appender = PartitionAppender(tmp_path / "t-0", clock=FakeClock(NOW))
    appender.append(_records(1))
    appender.next_offset = INT32_MAX + 5  # offsets jumped (e.g. a compacted follower fetch)
    result = appender.append(_records(1))
    assert result.segment_base_offset == INT32_MAX + 5
    appender.close()


def test_final_time_index_entry_on_roll(tmp_path: Path) -> None:
    config = TopicConfig(segment_bytes=3000, index_interval_bytes=100_000)
    appender = PartitionAppender(tmp_path / "t-0", config, clock=FakeClock(NOW))
    appender.append(_records(3, ts=NOW - 100))
    appender.append(_records(3, ts=NOW - 500))
    appender.append(_records(20, ts=NOW))
    appender.close()
    first = PartitionDir(tmp_path / "t-0").segments()[0]
    assert list(first.time_index().entries()) == [(NOW - 98, 2)]


def test_aborted_transactions_go_to_the_transaction_index(tmp_path: Path) -> None:
    appender = PartitionAppender(tmp_path / "t-0", clock=FakeClock(NOW))
    appender.append(_records(2), producer_id=7, producer_epoch=1, base_sequence=0, transactional=True)
    appender.append(_records(1), producer_id=8, producer_epoch=0, base_sequence=0, transactional=True)
    appender.append(_records(2), producer_id=7, producer_epoch=1, base_sequence=2, transactional=True)
    appender.append_control(ControlType.ABORT, producer_id=7, producer_epoch=1, coordinator_epoch=3)
    appender.append_control(ControlType.COMMIT, producer_id=8, producer_epoch=0)
    appender.close()
    segment = PartitionDir(tmp_path / "t-0").segments()[0]
    expected = [AbortedTxn(7, 0, 5, 2)]  # producer 8's open transaction holds the LSO at 2
    assert list(segment.transaction_index().entries()) == expected
    rebuilt = rebuild_segment_indexes(segment)
    assert list(rebuilt.txn_index.entries()) == expected
    snapshot = read_snapshot(tmp_path / "t-0" / segment_file_name(7, ".snapshot"))
    assert {(e.producer_id, e.current_txn_first_offset) for e in snapshot} == {(7, -1), (8, -1)}


def test_appender_refuses_a_directory_with_segments(tmp_path: Path) -> None:
    PartitionAppender(tmp_path / "t-0", clock=FakeClock(NOW)).close()
    with pytest.raises(ConfigError, match="already holds segments"):
        PartitionAppender(tmp_path / "t-0", clock=FakeClock(NOW))


def test_log_dir_writer_writes_checkpoints(tmp_path: Path) -> None:
    clock = FakeClock(NOW)
    with LogDirWriter(tmp_path, clock=clock) as writer:
        writer.partition("orders", 0, leader_epoch=2).append(_records(4), codec=Codec.ZSTD)
        writer.partition("orders", 1, leader_epoch=5).append(_records(2))
    checkpoints = read_offset_checkpoint(tmp_path / "replication-offset-checkpoint")
    assert checkpoints == {("orders", 0): 4, ("orders", 1): 2}
    assert read_offset_checkpoint(tmp_path / "recovery-point-offset-checkpoint") == checkpoints
    assert read_leader_epoch_checkpoint(tmp_path / "orders-0" / "leader-epoch-checkpoint") == [
        EpochEntry(2, 0)
    ]
    topic_id = read_partition_metadata(tmp_path / "orders-0" / "partition.metadata")
    assert topic_id is not None and topic_id == read_partition_metadata(
        tmp_path / "orders-1" / "partition.metadata"
    )
    log_dir = LogDir(tmp_path)
    assert [p.tp for p in log_dir.partitions()] == [TopicPartition("orders", 0), TopicPartition("orders", 1)]
    assert log_dir.partition("orders", 0).log_end_offset() == 4


def test_live_append_indexes_equal_recovery(sample_logdir: tuple[Path, object]) -> None:
    """Every v2 segment of the sample has the indexes Kafka's recovery would rebuild.

    (An uncompressed legacy message set is appended as one chunk but recovered message by message,
    in Kafka as here, so those segments' indexes legitimately differ; verify covers them.)
    """
    root, _ = sample_logdir
    checked = 0
    for partition in LogDir(root).partitions():
        assert verify_path(partition.path) == []
        for segment in partition.segments():
            if any(h.magic < 2 for h in segment.headers()):
                continue
            rebuilt = rebuild_segment_indexes(segment)
            assert segment.index_path.read_bytes() == rebuilt.offset_index.to_bytes(), segment
            assert segment.time_index_path.read_bytes() == rebuilt.time_index.to_bytes(), segment
            checked += 1
    assert checked >= 8


def test_legacy_appends_start_no_leader_epoch_as_recovery_rebuilds(tmp_path: Path) -> None:
    """Legacy batches carry no leader epoch: the checkpoint written is the one recovery rebuilds
    from the .log, where only v2 batches start an epoch."""
    directory = tmp_path / "t-0"
    appender = PartitionAppender(directory, clock=FakeClock(NOW), leader_epoch=3)
    appender.append_legacy(_records(2), magic=1)
    appender.append_legacy(_records(1), magic=0, codec=Codec.GZIP)
    appender.append(_records(2))
    appender.leader_epoch = 4
    appender.append_legacy(_records(1), magic=1)
    appender.append_control(ControlType.COMMIT, producer_id=7, producer_epoch=0)
    appender.append(_records(1))
    appender.close()
    written = read_leader_epoch_checkpoint(directory / "leader-epoch-checkpoint")
    assert written == [EpochEntry(3, 3), EpochEntry(4, 6)]
    (segment,) = PartitionDir(directory).segments()
    assert rebuild_segment_indexes(segment).epochs == written


def test_an_abort_marker_without_data_is_no_aborted_transaction(tmp_path: Path) -> None:
    """A transaction that wrote nothing to the partition (a producer aborting before its first
    send landed, or a retried marker) ends with a marker alone: Kafka's ``ProducerAppendInfo``
    emits no completed transaction for it, so neither the broker's transaction index nor its
    recovery holds an entry, and a log dir the broker wrote so verifies clean."""
    appender = PartitionAppender(tmp_path / "t-0", clock=FakeClock(NOW))
    appender.append(_records(2), producer_id=7, producer_epoch=1, base_sequence=0, transactional=True)
    appender.append_control(ControlType.ABORT, producer_id=7, producer_epoch=1)
    appender.append_control(ControlType.ABORT, producer_id=7, producer_epoch=1)  # a retried marker
    appender.append_control(ControlType.ABORT, producer_id=9, producer_epoch=0)  # nothing written
    appender.close()
    segment = PartitionDir(tmp_path / "t-0").segments()[0]
    expected = [AbortedTxn(7, 0, 2, 3)]
    assert list(segment.transaction_index().entries()) == expected
    assert list(rebuild_segment_indexes(segment).txn_index.entries()) == expected
    assert verify_path(tmp_path / "t-0") == []
