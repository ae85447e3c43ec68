"""The last stable offset from a partition's files: snapshots, markers, the HW rule and the cache."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlm.errors import CorruptRecordError
from rlm.log import v2
from rlm.log.checkpoints import write_offset_checkpoint
from rlm.log.files import segment_file_name
from rlm.log.logdir import LogDir, PartitionDir
from rlm.log.model import ControlType
from rlm.log.snapshot import ProducerStateEntry, read_snapshot, write_snapshot
from rlm.log.stable import (
    StableOffsetTracker,
    last_stable_offset,
    latest_snapshot,
    snapshot_offsets,
)
from rlm.log.writer import AppendResult, PartitionAppender, ProducerRecord, TopicConfig
from tests.clock import FakeClock

NOW = 1_700_000_000_000


class Log:
    """A partition being written, with shorthands for the batches these tests need."""

    def __init__(self, root: Path, config: TopicConfig | None = None) -> None:
        self.directory = root / "t-0"
        self.appender = PartitionAppender(self.directory, config or TopicConfig(), clock=FakeClock(NOW))
        self.rolled_at = 0
        self.open: dict[int, int] = {}
        """producer id → first offset of its open transaction, as the broker's state has it."""

    @property
    def end(self) -> int:
        return self.appender.next_offset

    def plain(self, n: int = 1) -> AppendResult:
        records = [ProducerRecord(NOW + i, b"k", b"v" * 20) for i in range(n)]
        return self.appender.append(records)

    def data(self, producer_id: int, n: int = 1) -> AppendResult:
        records = [ProducerRecord(NOW + i, b"k", b"t" * 20) for i in range(n)]
        result = self.appender.append(records, producer_id=producer_id, producer_epoch=0, transactional=True)
        self.open.setdefault(producer_id, result.base_offset)
        return result

    def commit(self, producer_id: int) -> AppendResult:
        self.open.pop(producer_id, None)
        return self.appender.append_control(ControlType.COMMIT, producer_id=producer_id, producer_epoch=0)

    def abort(self, producer_id: int) -> AppendResult:
        self.open.pop(producer_id, None)
        return self.appender.append_control(ControlType.ABORT, producer_id=producer_id, producer_epoch=0)

    def snapshot(self) -> None:
        """Write a producer snapshot at the log end without rolling (as a clean shutdown does)."""
        entries = [ProducerStateEntry(pid, 0, -1, -1, 0, NOW, -1, first) for pid, first in self.open.items()]
        write_snapshot(self.directory / segment_file_name(self.end, ".snapshot"), entries)

    def roll(self) -> None:
        """Roll (writing a producer snapshot at the log end) unless the active segment is empty."""
        if self.end > self.rolled_at:
            self.appender.roll()
            self.rolled_at = self.end

    def close(self) -> None:
        self.appender.close()

    def partition(self) -> PartitionDir:
        return PartitionDir(self.directory)


def brute_force_lso(directory: Path, high_watermark: int) -> int:
    """Kafka's definition over the whole log from offset 0, ignoring snapshots.

    Every transaction is listed with its first offset and its marker's offset; the unstable ones
    are those with no marker or a marker at or above the high watermark.
    """
    open_txns: dict[int, int] = {}
    completed: list[tuple[int, int]] = []
    for segment in PartitionDir(directory).segments():
        for header in segment.headers():
            if not header.is_transactional:
                continue
            pid = header.producer_id
            if not header.is_control:
                open_txns.setdefault(pid, header.base_offset)
                continue
            for record in segment.read_records(header):
                marker = v2.parse_control_record(record).type in (ControlType.COMMIT, ControlType.ABORT)
                if marker and pid in open_txns:
                    completed.append((open_txns.pop(pid), record.offset))
    unstable = list(open_txns.values()) + [first for first, marker in completed if marker >= high_watermark]
    return min([high_watermark, *unstable])


def check(log: Log, high_watermark: int, expected: int) -> None:
    """The fresh computation, a new tracker and the brute force all give ``expected``."""
    partition = log.partition()
    assert last_stable_offset(partition, high_watermark) == expected
    assert StableOffsetTracker().last_stable_offset(partition, high_watermark) == expected
    assert brute_force_lso(log.directory, high_watermark) == expected


# -- the rule --------------------------------------------------------------------------------


def test_no_transactions_lso_is_the_high_watermark(tmp_path: Path) -> None:
    log = Log(tmp_path)
    log.plain(3)
    log.appender.append([ProducerRecord(NOW, b"k", b"v")], producer_id=9, producer_epoch=0, base_sequence=0)
    log.plain(2)
    log.close()
    for hw in (0, 1, 3, 5, log.end):
        check(log, hw, hw)


def test_one_ongoing_transaction_holds_the_lso_at_its_first_offset(tmp_path: Path) -> None:
    log = Log(tmp_path)
    log.plain(3)  # 0-2
    assert log.data(7, 2).base_offset == 3  # 3-4 opens the transaction
    log.plain(1)  # 5
    log.data(7, 1)  # 6, same transaction
    log.plain(1)  # 7
    log.close()
    check(log, log.end, 3)
    check(log, 6, 3)
    check(log, 4, 3)
    check(log, 3, 3)  # the transaction starts at the high watermark: nothing below it is unstable
    check(log, 2, 2)


@pytest.mark.parametrize("end", ["commit", "abort"])
def test_a_settled_transaction_is_stable(tmp_path: Path, end: str) -> None:
    log = Log(tmp_path)
    log.plain(2)  # 0-1
    log.data(4, 3)  # 2-4
    marker = log.commit(4) if end == "commit" else log.abort(4)
    assert marker.base_offset == 5
    log.plain(2)  # 6-7
    log.close()
    check(log, log.end, log.end)
    check(log, 6, 6)  # the marker at 5 is below the high watermark


def test_a_marker_at_or_above_the_high_watermark_leaves_the_transaction_unstable(tmp_path: Path) -> None:
    log = Log(tmp_path)
    log.data(1, 2)  # 0-1
    log.plain(1)  # 2
    log.commit(1)  # 3
    log.plain(1)  # 4
    log.close()
    check(log, 3, 0)  # marker == high watermark
    check(log, 4, 4)  # marker just below it
    check(log, 2, 0)
    tracker = StableOffsetTracker()
    partition = log.partition()
    assert [tracker.last_stable_offset(partition, hw) for hw in (2, 3, 4, 5)] == [0, 0, 4, 5]


def test_interleaved_producers_the_earliest_first_offset_wins(tmp_path: Path) -> None:
    log = Log(tmp_path)
    log.plain(1)  # 0
    log.data(10)  # 1: producer 10 opens
    log.data(20, 2)  # 2-3: producer 20 opens
    log.data(10)  # 4
    log.data(30)  # 5: producer 30 opens
    log.data(20)  # 6
    log.commit(10)  # 7
    log.abort(20)  # 8
    log.plain(1)  # 9
    log.commit(30)  # 10
    log.plain(1)  # 11
    log.close()
    check(log, 7, 1)  # all three open below 7
    check(log, 8, 2)  # producer 10 settled at 7
    check(log, 9, 5)  # producer 20 aborted at 8
    check(log, 10, 5)
    check(log, 11, 11)
    check(log, log.end, log.end)


def test_a_marker_without_an_open_transaction_changes_nothing(tmp_path: Path) -> None:
    log = Log(tmp_path)
    log.data(1)  # 0
    log.commit(2)  # 1: producer 2 has no transaction
    log.plain(1)  # 2
    log.close()
    check(log, log.end, 0)


def test_legacy_and_idempotent_batches_are_skipped(tmp_path: Path) -> None:
    log = Log(tmp_path)
    log.appender.append_legacy([ProducerRecord(NOW, b"k", b"v")] * 3, magic=1)  # 0-2
    log.appender.append_legacy([ProducerRecord(NOW, b"k", b"v")] * 2, magic=0)  # 3-4
    log.appender.append([ProducerRecord(NOW, b"k", b"v")], producer_id=3, producer_epoch=0, base_sequence=0)
    log.data(3)  # 6
    log.close()
    check(log, log.end, 6)
    check(log, 6, 6)
    check(log, 4, 4)


def test_the_sample_log_directory(sample_logdir: tuple[Path, object]) -> None:
    """Realistic logs (legacy prefix, codecs, rolls with snapshots, commits and aborts)."""
    root, _ = sample_logdir
    tracker = StableOffsetTracker()
    checked = 0
    for partition in LogDir(root).partitions():
        end = partition.log_end_offset()
        assert snapshot_offsets(partition.path)
        for hw in sorted({0, 1, end // 3, end // 2, end - 1, end}):
            expected = brute_force_lso(partition.path, hw)
            assert last_stable_offset(partition, hw) == expected
            assert tracker.last_stable_offset(partition, hw) == expected
            checked += 1
        assert partition.high_watermark() == end
    assert checked >= 20
    assert tracker.stats.resumed > 0


# -- producer snapshots ----------------------------------------------------------------------


def test_a_transaction_begun_before_the_snapshot_comes_from_it(tmp_path: Path) -> None:
    log = Log(tmp_path)
    log.plain(2)  # 0-1
    log.data(5, 2)  # 2-3: producer 5 opens
    log.data(6)  # 4: producer 6 opens
    log.commit(6)  # 5
    log.roll()  # snapshot at 6
    log.plain(3)  # 6-8
    log.data(7)  # 9
    log.commit(7)  # 10
    log.close()
    snapshot = read_snapshot(log.directory / segment_file_name(6, ".snapshot"))
    assert {e.producer_id: e.current_txn_first_offset for e in snapshot} == {5: 2, 6: -1}
    check(log, log.end, 2)

    # Retention deletes the first segment: only the snapshot knows where producer 5 began.
    for suffix in (".log", ".index", ".timeindex"):
        (log.directory / segment_file_name(0, suffix)).unlink()
    partition = log.partition()
    assert [s.base_offset for s in partition.segments()] == [6]
    assert last_stable_offset(partition, log.end) == 2
    assert StableOffsetTracker().last_stable_offset(partition, log.end) == 2
    assert last_stable_offset(partition, 9) == 2

    # Kafka raises the first unstable offset to the log start offset.
    write_offset_checkpoint(tmp_path / "log-start-offset-checkpoint", {("t", 0): 6})
    partition = log.partition()
    assert last_stable_offset(partition, log.end) == 6
    assert StableOffsetTracker().last_stable_offset(partition, log.end) == 6
    assert last_stable_offset(partition, 5) == 5


def test_the_snapshot_is_read_rather_than_the_log_before_it(tmp_path: Path) -> None:
    log = Log(tmp_path)
    log.data(5, 3)  # 0-2
    log.roll()  # snapshot at 3 says producer 5's transaction began at 0
    log.plain(2)  # 3-4
    log.close()
    check(log, log.end, 0)
    path = log.directory / segment_file_name(3, ".snapshot")
    (entry,) = read_snapshot(path)
    write_snapshot(path, [entry._replace(current_txn_first_offset=1)])
    # A scan from offset 0 would find 0; the snapshot at 3 is what the broker loads (the one at
    # the log end, 5, written on close, is above the high watermark 4).
    assert last_stable_offset(log.partition(), 4) == 1
    assert StableOffsetTracker().last_stable_offset(log.partition(), 4) == 1
    assert last_stable_offset(log.partition(), log.end) == 0
    assert latest_snapshot(log.directory, log.end) is not None


def test_a_snapshot_above_the_high_watermark_is_not_used(tmp_path: Path) -> None:
    log = Log(tmp_path)
    log.data(1, 2)  # 0-1
    log.commit(1)  # 2
    log.roll()  # snapshot at 3: no open transaction
    log.plain(2)  # 3-4
    log.close()
    assert read_snapshot(log.directory / segment_file_name(3, ".snapshot"))[0].current_txn_first_offset == -1
    check(log, 2, 0)  # the marker at 2 is not below the high watermark
    check(log, 3, 3)  # the snapshot at 3 is at the high watermark and can be used
    assert snapshot_offsets(log.directory) == [3, 5]
    assert latest_snapshot(log.directory, 2) is None
    assert latest_snapshot(log.directory, 4) == (3, {})


def test_a_corrupt_snapshot_falls_back_to_the_previous_one(tmp_path: Path) -> None:
    log = Log(tmp_path)
    log.data(1)  # 0
    log.roll()  # snapshot at 1: producer 1 open since 0
    log.data(2)  # 1
    log.roll()  # snapshot at 2
    log.plain(1)  # 2
    log.close()
    assert snapshot_offsets(log.directory) == [1, 2, 3]  # the last one written on close
    (log.directory / segment_file_name(2, ".snapshot")).write_bytes(b"\x00\x01garbage")
    snapshot = latest_snapshot(log.directory, 2)
    assert snapshot is not None
    assert snapshot.offset == 1
    assert snapshot.ongoing == {1: 0}
    check(log, 2, 0)
    check(log, log.end, 0)


def test_a_snapshot_in_the_middle_of_a_segment(tmp_path: Path) -> None:
    log = Log(tmp_path, TopicConfig(index_interval_bytes=1))
    for _ in range(5):
        log.plain(2)  # 0-9
    log.data(4)  # 10
    log.plain(1)  # 11
    log.snapshot()  # at 12: producer 4 open since 10
    log.commit(4)  # 12
    log.plain(1)  # 13
    log.data(8)  # 14
    log.close()  # snapshot at 15: producer 8 open since 14, the index has entries
    partition = log.partition()
    assert len(partition.segments()[0].offset_index()) > 3
    check(log, 12, 10)
    check(log, 13, 13)
    check(log, log.end, 14)


def test_batches_before_a_mid_segment_snapshot_are_not_applied_again(tmp_path: Path) -> None:
    log = Log(tmp_path)  # index entries every 4096 bytes: the scan starts at position 0
    log.data(4)  # 0
    log.commit(4)  # 1
    log.data(4)  # 2: producer 4's next transaction
    log.plain(1)  # 3
    check(log, log.end, 2)
    # The snapshot at 3 is taken as the state up to 3 even where the batches before it disagree
    # (applying them again would end up with a transaction opened at 2).
    entries = [ProducerStateEntry(4, 0, -1, 2, 0, NOW, -1, 1)]
    write_snapshot(log.directory / segment_file_name(3, ".snapshot"), entries)
    partition = log.partition()
    assert [s.base_offset for s in partition.segments()] == [0]
    assert last_stable_offset(partition, log.end) == 1
    assert StableOffsetTracker().last_stable_offset(partition, log.end) == 1


# -- the tracker -----------------------------------------------------------------------------


def test_appends_after_a_cached_call_are_scanned_incrementally(tmp_path: Path) -> None:
    log = Log(tmp_path)
    partition = log.partition()
    tracker = StableOffsetTracker()
    log.plain(2)  # 0-1
    log.data(1)  # 2
    assert tracker.last_stable_offset(partition, log.end) == 2
    assert tracker.stats.full_scans == 1
    assert tracker.last_stable_offset(partition, log.end) == 2
    assert tracker.stats.hits == 1

    log.data(2)  # 3
    log.commit(1)  # 4
    hw = log.end
    assert tracker.last_stable_offset(partition, hw) == 3 == last_stable_offset(partition, hw)
    log.commit(2)  # 5: above the high watermark the tracker was asked for
    assert tracker.last_stable_offset(partition, hw) == 3
    assert tracker.last_stable_offset(partition, log.end) == log.end == last_stable_offset(partition, log.end)

    log.roll()
    log.data(3, 2)  # 6-7
    log.plain(1)  # 8
    assert tracker.last_stable_offset(partition, log.end) == 6 == brute_force_lso(log.directory, log.end)
    log.abort(3)  # 9
    assert tracker.last_stable_offset(partition, log.end) == log.end
    assert tracker.stats.full_scans == 1
    assert tracker.stats.resumed >= 5

    # The high watermark going back needs a new scan.
    assert tracker.last_stable_offset(partition, 8) == 6 == brute_force_lso(log.directory, 8)
    assert tracker.stats.full_scans == 2
    log.close()
    assert tracker.last_stable_offset(partition, log.end) == log.end


def test_a_truncated_log_is_scanned_again(tmp_path: Path) -> None:
    log = Log(tmp_path)
    log.data(1)  # 0
    marker = log.commit(1)  # 1
    partition = log.partition()
    tracker = StableOffsetTracker()
    assert tracker.last_stable_offset(partition, 2) == 2
    active = partition.segments()[-1].log_path
    os.truncate(active, marker.position)  # the marker is gone: the transaction is open again
    assert tracker.last_stable_offset(partition, 2) == 0
    assert tracker.stats.full_scans == 2


def test_a_rewritten_batch_of_the_same_size_is_noticed(tmp_path: Path) -> None:
    log = Log(tmp_path)
    log.data(1)  # 0
    log.data(2)  # 1
    marker = log.commit(1)  # 2
    partition = log.partition()
    tracker = StableOffsetTracker()
    assert tracker.last_stable_offset(partition, 3) == 1
    active = partition.segments()[-1].log_path
    before = active.stat()
    # A new leader's log: the marker at 2 now ends producer 2's transaction instead.
    replacement = v2.encode_control_batch(
        2, ControlType.ABORT, producer_id=2, producer_epoch=0, timestamp=NOW, leader_epoch=0
    )
    with open(active, "r+b") as f:
        f.seek(marker.position)
        f.write(replacement)
    os.utime(active, ns=(before.st_atime_ns, before.st_mtime_ns + 10_000_000))
    assert active.stat().st_size == before.st_size
    assert tracker.last_stable_offset(partition, 3) == 0 == brute_force_lso(log.directory, 3)
    assert tracker.stats.full_scans == 2


def test_the_tracker_keeps_partitions_apart(tmp_path: Path) -> None:
    one, two = Log(tmp_path / "a"), Log(tmp_path / "b")
    one.data(1)
    two.plain(3)
    two.data(1)
    tracker = StableOffsetTracker()
    assert tracker.last_stable_offset(one.partition(), 5) == 0
    assert tracker.last_stable_offset(two.partition(), 5) == 3
    assert len(tracker) == 2
    tracker.forget(one.partition())
    assert len(tracker) == 1
    tracker.clear()
    assert len(tracker) == 0


def test_an_empty_partition(tmp_path: Path) -> None:
    (tmp_path / "t-0").mkdir()
    partition = PartitionDir(tmp_path / "t-0")
    assert last_stable_offset(partition, 0) == 0
    assert StableOffsetTracker().last_stable_offset(partition, 7) == 7


# -- corruption ------------------------------------------------------------------------------


def test_a_corrupt_marker_names_the_file_and_position(tmp_path: Path) -> None:
    log = Log(tmp_path)
    log.data(1)
    marker = log.commit(1)  # not closed: no snapshot at the log end to start from
    path = log.directory / segment_file_name(0, ".log")
    data = bytearray(path.read_bytes())
    data[marker.position + 70] ^= 0xFF  # inside the record, covered by the CRC
    path.write_bytes(bytes(data))
    tracker = StableOffsetTracker()
    for compute in (last_stable_offset, tracker.last_stable_offset):
        with pytest.raises(CorruptRecordError) as info:
            compute(log.partition(), log.end)
        assert info.value.path == str(path)
        assert info.value.position == marker.position
    # Below the marker the log is fine, and a failed scan kept no state.
    assert tracker.last_stable_offset(log.partition(), 1) == 0


def test_a_corrupt_batch_size_names_the_file_and_position(tmp_path: Path) -> None:
    log = Log(tmp_path)
    log.plain(1)
    second = log.data(1)
    path = log.directory / segment_file_name(0, ".log")
    data = bytearray(path.read_bytes())
    data[second.position + 8 : second.position + 12] = (3).to_bytes(4, "big")
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptRecordError) as info:
        last_stable_offset(log.partition(), log.end)
    assert info.value.path == str(path)
    assert info.value.position == second.position


# -- property --------------------------------------------------------------------------------

PRODUCERS = st.integers(1, 4)
OPS = st.one_of(
    st.tuples(st.just("data"), PRODUCERS, st.integers(1, 3)),
    st.tuples(st.just("commit"), PRODUCERS, st.just(0)),
    st.tuples(st.just("abort"), PRODUCERS, st.just(0)),
    st.tuples(st.just("plain"), st.just(0), st.integers(1, 3)),
    st.tuples(st.just("roll"), st.just(0), st.just(0)),
    st.tuples(st.just("snapshot"), st.just(0), st.just(0)),
)


def _apply(log: Log, ops: list[tuple[str, int, int]]) -> None:
    for kind, pid, n in ops:
        if kind == "data":
            log.data(pid, n)
        elif kind == "commit":
            log.commit(pid)
        elif kind == "abort":
            log.abort(pid)
        elif kind == "plain":
            log.plain(n)
        elif kind == "snapshot":
            log.snapshot()
        else:
            log.roll()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    first=st.lists(OPS, max_size=25),
    second=st.lists(OPS, max_size=25),
    fractions=st.lists(st.floats(0, 1), min_size=3, max_size=3),
)
def test_matches_a_brute_force_scan(
    first: list[tuple[str, int, int]], second: list[tuple[str, int, int]], fractions: list[float]
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        log = Log(Path(tmp))
        tracker = StableOffsetTracker()
        partition = log.partition()
        _apply(log, first)
        hw = round(fractions[0] * log.end)
        expected = brute_force_lso(log.directory, hw)
        assert tracker.last_stable_offset(partition, hw) == expected
        assert last_stable_offset(partition, hw) == expected

        _apply(log, second)
        for fraction in fractions[1:]:
            hw = round(fraction * log.end)
            expected = brute_force_lso(log.directory, hw)
            assert tracker.last_stable_offset(partition, hw) == expected
            assert last_stable_offset(partition, hw) == expected
        assert tracker.last_stable_offset(partition, log.end) == brute_force_lso(log.directory, log.end)

        log.close()
        for hw in (0, log.end // 2, log.end):
            assert tracker.last_stable_offset(partition, hw) == brute_force_lso(log.directory, hw)
