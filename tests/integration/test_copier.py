"""The copier on real log directories, on SQLite + filesystem and on PostgreSQL + S3 over HTTP.

What a copy must produce (design: "The remote segment", "Copier"): one ``COPY_SEGMENT_FINISHED``
row per rolled segment below the high watermark, with the segment's offsets, its largest record
timestamp and the leader epochs of ``leader-epoch-checkpoint``; its ``.log`` stored byte for byte
and its indexes beside it. Nothing at or above the high watermark is copied, nothing twice.
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

from rlm.config import TopicSettings
from rlm.errors import StorageUnavailableError
from rlm.log.checkpoints import EpochEntry, epoch_for_offset, topic_id_to_uuid, write_leader_epoch_checkpoint
from rlm.log.logdir import LogDir, PartitionDir
from rlm.log.produce import ProduceSpec, produce
from rlm.log.segment import Segment
from rlm.log.snapshot import decode_snapshot
from rlm.metastore.model import (
    IndexType,
    LeaderEpochEntry,
    PendingUpload,
    RemoteSegment,
    SegmentState,
    TopicPartition,
)
from rlm.storage.delegate import DelegatingStorage
from rlm.storage.protocol import PutResult, PutSource, RemoteStorage
from rlm.storage.range_source import read_index
from rlm.storage.ratelimit import RateLimiter
from rlm.tiering.deletion import delete_segment
from rlm.tiering.leases import LeaseKeeper
from rlm.tiering.prepare import prepare_segment
from tests.clock import FakeClock
from tests.tiering_support import (
    BROKER_ID,
    Backend,
    SegmentPlan,
    Tiering,
    assert_invariants,
    eligible_segments,
    local_segment,
    make_backend,
    set_high_watermarks,
    set_log_start_offsets,
    tp_of,
    write_scripted_log_dir,
)

#: Two topics (CreateTime and LogAppendTime) of two partitions, with legacy v1 batches, every
#: codec, transactions and aborts; about seven 16 KiB segments per partition.
SPEC = ProduceSpec(
    topics=2,
    partitions=2,
    records=1500,
    segment_bytes=16 * 1024,
    max_batch_records=30,
    legacy_batches=4,
    seed=5,
)
TieringFactory = Callable[..., Tiering]


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    path = tmp_path / "logs"
    produce(path, SPEC)
    return path


@pytest.fixture
def sqlite_fs(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    return make_backend("sqlite-fs", request, tmp_path)


def _partition(log_dir: Path, topic: str, number: int) -> PartitionDir:
    return LogDir(log_dir).partition(topic, number)


def test_every_eligible_segment_is_tiered_with_its_metadata(
    backend: Backend,
    tiering_factory: TieringFactory,
    log_dir: Path,
) -> None:
    held_back = _partition(log_dir, "orders", 1)
    third = held_back.rolled_segments()[2]
    hw = third.base_offset + 5  # inside the third segment: it and what follows are not replicated
    # The high watermark is exclusive: a segment whose last offset is the high watermark is not
    # fully replicated.
    at_boundary = _partition(log_dir, "clicks", 1)
    boundary_hw = at_boundary.rolled_segments()[1].last_offset()
    assert boundary_hw is not None
    set_high_watermarks(log_dir, {tp_of(held_back): hw, tp_of(at_boundary): boundary_hw})
    tiering = tiering_factory(backend, log_dir)

    outcomes = tiering.copier().run_once()

    assert [o.error for o in outcomes] == [None] * 4
    for partition in tiering.partitions():
        tp = tp_of(partition)
        eligible = [local_segment(s) for s in eligible_segments(partition)]
        rows = tiering.finished(tp)
        assert len(eligible) == {tp_of(held_back): 2, tp_of(at_boundary): 1}.get(
            tp, len(partition.rolled_segments())
        )
        assert [(r.start_offset, r.end_offset) for r in rows] == [
            (s.base_offset, s.last_offset) for s in eligible
        ]
        assert {o.copied_segments for o in outcomes if o.topic_partition == tp} == {len(eligible)}
        checkpoint = partition.leader_epochs()
        topic_id = partition.topic_id()
        assert topic_id is not None
        for row, local in zip(rows, eligible, strict=True):
            segment = Segment(partition.path, local.base_offset)
            assert (
                row.max_timestamp_ms == local.max_timestamp_ms == segment.max_timestamp_and_offset().timestamp
            )
            assert row.size_bytes == local.size
            assert row.broker_id == BROKER_ID
            assert row.topic_id == topic_id_to_uuid(topic_id)
            assert row.txn_index_empty == (segment.transaction_index().to_bytes() == b"")
            # Legacy batches start no epoch: offsets written before the first epoch began take the
            # first epoch that began inside the segment (0 when none did).
            in_force = epoch_for_offset(checkpoint, row.start_offset)
            began = [e.epoch for e in checkpoint if row.start_offset < e.start_offset <= row.end_offset]
            first = in_force if in_force >= 0 else (began[0] if began else 0)
            assert row.leader_epochs[0] == LeaderEpochEntry(first, row.start_offset)
            for header in segment.headers():
                if header.magic >= 2:
                    assert _epoch_at(row, header.base_offset) == header.leader_epoch
            stored = tiering.storage.read_range(row.layout.log_key, 0, row.size_bytes + 1)
            assert stored == local.path.read_bytes()
    assert all(r.end_offset < hw for r in tiering.finished(tp_of(held_back)))
    assert_invariants(tiering.store, tiering.storage, [log_dir])

    before = {tp_of(p): tiering.segments(tp_of(p)) for p in tiering.partitions()}
    again = tiering.copier().run_once()
    assert [(o.copied_segments, o.error) for o in again] == [(0, None)] * 4
    assert {tp_of(p): tiering.segments(tp_of(p)) for p in tiering.partitions()} == before


def test_nothing_below_the_log_start_offset_is_copied(
    sqlite_fs: Backend,
    tiering_factory: TieringFactory,
    log_dir: Path,
) -> None:
    partition = _partition(log_dir, "orders", 0)
    segments = partition.rolled_segments()
    set_log_start_offsets(log_dir, {tp_of(partition): segments[2].base_offset + 3})  # DeleteRecords
    tiering = tiering_factory(sqlite_fs, log_dir)

    tiering.copier().run_once([partition])

    # The segment holding the log start offset goes whole: readers skip what lies below it.
    assert [r.start_offset for r in tiering.finished(tp_of(partition))] == [
        s.base_offset for s in segments[2:]
    ]


def _epoch_at(row: RemoteSegment, offset: int) -> int:
    return [e.epoch for e in row.leader_epochs if e.start_offset <= offset][-1]


def test_leader_epochs_of_each_segment_follow_the_checkpoint(
    sqlite_fs: Backend,
    tiering_factory: TieringFactory,
    tmp_path: Path,
) -> None:
    tp = TopicPartition("orders", 0)
    log_dir = tmp_path / "logs"
    ts = 1_700_000_000_000
    write_scripted_log_dir(
        log_dir,
        {
            tp: [
                SegmentPlan(40, ts, (1,), legacy=True),  # v1 messages: only the checkpoint knows epoch 1
                SegmentPlan(40, ts + 1000, (1, 2)),  # epoch 2 takes over at offset 60
                SegmentPlan(40, ts + 2000, (2,)),
                SegmentPlan(40, ts + 3000, (5, 7)),  # epoch 5 at the segment's first offset, 7 at 140
            ]
        },
    )
    partition = _partition(log_dir, "orders", 0)
    # Legacy batches carry no epoch, so the log starts epoch 1 at its first v2 batch; a broker that
    # led epoch 1 from offset 0 (an old one, writing v1) left it in the checkpoint.
    assert [tuple(e) for e in partition.leader_epochs()] == [(1, 40), (2, 60), (5, 120), (7, 140)]
    checkpoint = partition.path / "leader-epoch-checkpoint"
    write_leader_epoch_checkpoint(checkpoint, [EpochEntry(1, 0), *partition.leader_epochs()[1:]])
    assert [tuple(e) for e in partition.leader_epochs()] == [(1, 0), (2, 60), (5, 120), (7, 140)]
    tiering = tiering_factory(sqlite_fs, log_dir)

    tiering.copier().run_once()

    assert [r.leader_epochs for r in tiering.finished(tp)] == [
        (LeaderEpochEntry(1, 0),),
        (LeaderEpochEntry(1, 40), LeaderEpochEntry(2, 60)),
        (LeaderEpochEntry(2, 80),),
        (LeaderEpochEntry(5, 120), LeaderEpochEntry(7, 140)),
    ]


def _stash_from(partition: PartitionDir, base_offset: int, stash: Path) -> Callable[[], None]:
    """Move the partition's files from ``base_offset`` on aside; returns how to put them back."""
    stash.mkdir()
    moved = [f for f in partition.path.iterdir() if f.name[:20].isdigit() and int(f.name[:20]) >= base_offset]
    for f in moved:
        shutil.move(f, stash / f.name)

    def restore() -> None:
        for f in moved:
            shutil.move(stash / f.name, f)

    return restore


def test_segments_rolled_later_are_copied_from_the_highest_copied_offset(
    sqlite_fs: Backend,
    tiering_factory: TieringFactory,
    tmp_path: Path,
) -> None:
    tp = TopicPartition("orders", 0)
    log_dir = tmp_path / "logs"
    write_scripted_log_dir(log_dir, {tp: [SegmentPlan(30, 1_700_000_000_000 + i) for i in range(6)]})
    partition = _partition(log_dir, "orders", 0)
    bases = [s.base_offset for s in partition.segments()]
    restore = _stash_from(partition, bases[3], tmp_path / "stash")  # segment 2 is the active one now
    tiering = tiering_factory(sqlite_fs, log_dir)

    tiering.copier().run_once()
    first = tiering.finished(tp)
    assert [r.start_offset for r in first] == bases[:2]
    # Retention removes both copies; they must never be copied again.
    for row in first:
        delete_segment(tiering.store, tiering.storage, row, now_ms=tiering.clock(), fence=None)
    restore()  # the broker rolled segment 2 and wrote 3 to 6 (6 is active)

    (outcome,) = tiering.copier().run_once()

    assert outcome.copied_segments == 4
    assert [r.start_offset for r in tiering.finished(tp)] == bases[2:6]
    assert tiering.store.highest_copied_offset(tp) == bases[6] - 1


def test_max_timestamp_is_right_without_a_usable_time_index(
    sqlite_fs: Backend,
    tiering_factory: TieringFactory,
    log_dir: Path,
) -> None:
    partition = _partition(log_dir, "orders", 0)
    segments = partition.rolled_segments()
    expected = [local_segment(s).max_timestamp_ms for s in segments]
    segments[0].time_index_path.unlink()
    segments[1].time_index_path.write_bytes(b"\x7f\x13garbage that is no time index at all!!")
    segments[2].time_index_path.write_bytes(bytes(12 * 100))  # preallocated, nothing written
    segments[3].index_path.unlink()
    tiering = tiering_factory(sqlite_fs, log_dir)

    tiering.copier().run_once([partition])

    assert [r.max_timestamp_ms for r in tiering.finished(tp_of(partition))] == expected
    assert_invariants(tiering.store, tiering.storage, [log_dir], untiered=_all_but(log_dir, partition))


def _all_but(log_dir: Path, keep: PartitionDir) -> set[TopicPartition]:
    return {tp_of(p) for p in LogDir(log_dir).partitions()} - {tp_of(keep)}


def test_topic_with_remote_storage_disabled_is_not_tiered(
    sqlite_fs: Backend,
    tiering_factory: TieringFactory,
    log_dir: Path,
) -> None:
    tiering = tiering_factory(
        sqlite_fs,
        log_dir,
        topic_overrides={"clicks": TopicSettings(remote_storage_enable=False, retention_ms=-1)},
    )

    outcomes = tiering.copier().run_once()

    for outcome in outcomes:
        if outcome.topic_partition.topic == "clicks":
            assert outcome.skipped == "remote.storage.enable is false"
            assert tiering.segments(outcome.topic_partition) == []
        else:
            assert outcome.skipped is None
            assert outcome.copied_segments > 0
    assert not any(key.split("/")[1].startswith("clicks-") for key in tiering.storage.list_keys(""))


def test_copy_lag_metrics_count_what_is_not_tiered_yet(
    sqlite_fs: Backend,
    tiering_factory: TieringFactory,
    log_dir: Path,
) -> None:
    partition = _partition(log_dir, "orders", 0)
    set_high_watermarks(log_dir, {tp_of(partition): partition.rolled_segments()[4].base_offset})
    tiering = tiering_factory(sqlite_fs, log_dir)
    labels = {"topic": "orders", "partition": "0"}

    def lag() -> tuple[float | None, float | None]:
        return (
            tiering.registry.get_sample_value("rlm_copy_lag_segments", labels),
            tiering.registry.get_sample_value("rlm_copy_lag_bytes", labels),
        )

    seen: list[tuple[float | None, float | None]] = []
    sizes = [s.size() for s in partition.rolled_segments()[:4]]

    def watch(name: str) -> None:
        if name == "copy_started":
            seen.append(lag())

    tiering.copier(step=watch).run_once([partition])

    assert seen == [(4 - i, sum(sizes[i:])) for i in range(4)]
    assert lag() == (0, 0)
    assert tiering.registry.get_sample_value("rlm_copy_bytes_total", labels) == sum(sizes)
    assert tiering.registry.get_sample_value("rlm_copy_segments_total", labels) == 4

    set_high_watermarks(log_dir, {tp_of(partition): partition.log_end_offset()})  # replication caught up
    seen.clear()
    tiering.copier(step=watch).run_once([partition])
    rest = [s.size() for s in partition.rolled_segments()[4:]]
    assert seen[0] == (len(rest), sum(rest))
    assert lag() == (0, 0)


def test_a_sidecar_whose_lease_moved_away_exports_no_stale_gauges_of_the_partition(
    sqlite_fs: Backend,
    tiering_factory: TieringFactory,
    log_dir: Path,
) -> None:
    """Alerts take the highest value of a partition's gauges over the sidecars: a former holder's
    last lag or blocked flag would keep them firing while another broker tiers the partition."""
    partition = _partition(log_dir, "orders", 0)
    first = tiering_factory(sqlite_fs, log_dir)
    labels = {"topic": "orders", "partition": "0"}

    def stop_after_one(name: str) -> None:
        if name == "copy_finished" and len(first.finished(tp_of(partition))) == 1:
            raise StorageUnavailableError("the remote store went away")

    [failed] = first.copier(step=stop_after_one).run_once([partition])
    assert failed.error is not None
    assert (first.registry.get_sample_value("rlm_copy_lag_segments", labels) or 0) > 0
    first.leases.release_all()
    other = tiering_factory(sqlite_fs, log_dir, broker_id=BROKER_ID + 1, clock=first.clock)
    [taken] = other.copier().run_once([partition])
    assert taken.error is None and taken.copied_segments > 0

    [skipped] = first.copier().run_once([partition])

    assert skipped.skipped is not None and "lease is held by" in skipped.skipped
    for gauge in ("rlm_copy_lag_segments", "rlm_copy_lag_bytes", "rlm_copy_lag_seconds", "rlm_copy_blocked"):
        assert first.registry.get_sample_value(gauge, labels) is None, gauge
    assert other.registry.get_sample_value("rlm_copy_lag_segments", labels) == 0


def test_the_gauges_of_a_partition_moved_to_another_broker_go_with_it(
    sqlite_fs: Backend,
    tiering_factory: TieringFactory,
    log_dir: Path,
) -> None:
    gone = {"topic": "orders", "partition": "0"}
    kept = {"topic": "orders", "partition": "1"}
    tiering = tiering_factory(sqlite_fs, log_dir)
    partition = _partition(log_dir, "orders", 0)

    tiering.copier().run_once()
    assert tiering.registry.get_sample_value("rlm_copy_blocked", gone) == 0
    shutil.rmtree(partition.path)  # reassigned: the broker deleted its replica

    tiering.copier().run_once()

    for gauge in ("rlm_copy_lag_segments", "rlm_copy_lag_bytes", "rlm_copy_lag_seconds", "rlm_copy_blocked"):
        assert tiering.registry.get_sample_value(gauge, gone) is None, gauge
        assert tiering.registry.get_sample_value(gauge, kept) == 0, gauge


class RecordingRateLimiter(RateLimiter):
    """A rate limiter on a fake clock that records what passes and how long it made callers wait."""

    def __init__(self, rate_bytes_per_s: float) -> None:
        self.clock = FakeClock(0.0)
        self.acquired: list[int] = []
        super().__init__(rate_bytes_per_s, clock=self.clock, sleep=self.clock.sleep)

    def acquire(self, amount: int) -> None:
        self.acquired.append(amount)
        super().acquire(amount)


def test_copy_lag_seconds_is_the_wait_of_the_oldest_untiered_segment(
    sqlite_fs: Backend,
    tiering_factory: TieringFactory,
    log_dir: Path,
) -> None:
    partition = _partition(log_dir, "orders", 0)
    rolled = partition.rolled_segments()[:4]
    set_high_watermarks(log_dir, {tp_of(partition): partition.rolled_segments()[4].base_offset})
    tiering = tiering_factory(sqlite_fs, log_dir)
    now_s = tiering.clock() / 1000
    for i, segment in enumerate(rolled):  # rolled 400, 300, 200 and 100 s before the clock's now
        written = now_s - 100 * (4 - i)
        os.utime(segment.path(".log"), (written, written))
    labels = {"topic": "orders", "partition": "0"}
    seen: list[float | None] = []

    def watch(name: str) -> None:
        if name == "copy_started":
            seen.append(tiering.registry.get_sample_value("rlm_copy_lag_seconds", labels))

    tiering.copier(step=watch).run_once([partition])

    assert seen == [400, 300, 200, 100]
    assert tiering.registry.get_sample_value("rlm_copy_lag_seconds", labels) == 0


def test_upload_rate_limit_throttles_every_log_byte(
    backend: Backend,
    tiering_factory: TieringFactory,
    log_dir: Path,
) -> None:
    rate = 50_000
    assert tiering_factory(backend, log_dir).copier().rate_limiter is None
    limited = tiering_factory(backend, log_dir, remote_log_manager_copy_max_bytes_per_second=rate)
    default_limiter = limited.copier().rate_limiter
    assert default_limiter is not None and default_limiter.rate_bytes_per_s == rate
    limiter = RecordingRateLimiter(rate)

    outcomes = limited.copier(rate_limiter=limiter).run_once()

    copied = sum(o.copied_bytes for o in outcomes)
    logs = sum(s.size() for p in limited.partitions() for s in eligible_segments(p))
    assert copied == logs
    assert sum(limiter.acquired) == logs
    # A full bucket of one second's worth, then the rate: the waits add up to what exceeds the burst.
    assert sum(limiter.clock.slept) == pytest.approx((logs - rate) / rate)


class FailingPuts(DelegatingStorage):
    """Remote storage whose puts of keys ending with ``suffix`` fail ``times`` times."""

    def __init__(self, inner: RemoteStorage, suffix: str, times: int) -> None:
        super().__init__(inner)
        self.suffix = suffix
        self.left = times

    def put_object(
        self,
        key: str,
        source: PutSource,
        *,
        size: int | None = None,
        crc32c: int | None = None,
        rate_limiter: RateLimiter | None = None,
        on_upload: Callable[[PendingUpload], None] | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> PutResult:
        if key.endswith(self.suffix) and self.left > 0:
            self.left -= 1
            raise StorageUnavailableError(f"put {key}: throttled", key=key)
        return super().put_object(
            key,
            source,
            size=size,
            crc32c=crc32c,
            rate_limiter=rate_limiter,
            on_upload=on_upload,
            metadata=metadata,
        )


def test_a_failed_copy_deletes_its_upload_and_is_retried(
    sqlite_fs: Backend,
    tiering_factory: TieringFactory,
    log_dir: Path,
) -> None:
    partition = _partition(log_dir, "orders", 0)
    tiering = tiering_factory(sqlite_fs, log_dir)
    tiering.storage = FailingPuts(tiering.storage, ".indexes", times=1)

    (outcome,) = tiering.copier().run_once([partition])

    assert isinstance(outcome.error, StorageUnavailableError)
    (abandoned,) = tiering.segments(tp_of(partition))
    assert abandoned.state is SegmentState.DELETE_SEGMENT_FINISHED
    assert list(tiering.storage.list_keys("")) == []  # the .log that did go up was deleted
    assert (
        tiering.registry.get_sample_value("rlm_copy_errors_total", {"topic": "orders", "partition": "0"}) == 1
    )

    (outcome,) = tiering.copier().run_once([partition])

    assert outcome.error is None
    assert outcome.copied_segments == len(eligible_segments(partition))
    assert_invariants(tiering.store, tiering.storage, [log_dir], untiered=_all_but(log_dir, partition))


def test_cleanup_removes_copies_a_crashed_incarnation_left_started(
    sqlite_fs: Backend,
    tiering_factory: TieringFactory,
    log_dir: Path,
) -> None:
    partition = _partition(log_dir, "orders", 0)
    tp = tp_of(partition)
    tiering = tiering_factory(sqlite_fs, log_dir)
    # The previous incarnation of this sidecar took the lease, recorded two copies and uploaded
    # the .log of one of them, then died.
    lease = LeaseKeeper(tiering.store, BROKER_ID, 60_000).hold(tp)
    assert lease is not None
    segments = partition.rolled_segments()
    for segment in segments[:2]:
        prepared = prepare_segment(
            partition, segment, broker_id=BROKER_ID, now_ms=1, epochs=partition.leader_epochs()
        )
        tiering.store.add_segment(prepared.remote, fence=lease)
    crashed = tiering.segments(tp)
    tiering.storage.put_object(crashed[0].layout.log_key, segments[0].log_path)

    (outcome,) = tiering.copier().run_once([partition])

    assert outcome.cleaned_segments == 2
    assert {tiering.store.get_segment(r.segment_id).state for r in crashed} == {  # type: ignore[union-attr]
        SegmentState.DELETE_SEGMENT_FINISHED
    }
    assert outcome.copied_segments == len(eligible_segments(partition))
    assert_invariants(tiering.store, tiering.storage, [log_dir], untiered=_all_but(log_dir, partition))


def test_loops_taking_one_lease_at_once_share_one_epoch(
    sqlite_fs: Backend,
    tiering_factory: TieringFactory,
    log_dir: Path,
) -> None:
    # The copier and retention loops of one sidecar ask for a partition's lease at the same time
    # (both start together): a second take would start a new epoch and fence the first's writes.
    tiering = tiering_factory(sqlite_fs, log_dir)
    keeper = LeaseKeeper(tiering.store, BROKER_ID, 60_000)
    tp = TopicPartition("orders", 0)
    start = threading.Barrier(8)
    taken: list[int | None] = []

    def take() -> None:
        start.wait()
        lease = keeper.hold(tp)
        taken.append(lease.epoch if lease is not None else None)

    threads = [threading.Thread(target=take) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(taken) == 8 and None not in taken
    assert len(set(taken)) == 1, taken
    lease = tiering.store.get_lease(tp)
    assert lease is not None and lease.epoch == taken[0]


def test_a_producer_snapshot_the_broker_is_still_writing_is_not_tiered(
    sqlite_fs: Backend, tiering_factory: TieringFactory, log_dir: Path
) -> None:
    """The broker creates the next segment's file before it writes the producer snapshot named
    after it, in place (not renamed into place): for a moment the snapshot holds only its first
    bytes. A copy made then must not store those bytes as the segment's snapshot: they are no
    snapshot, and the copy keeps them for good (a verification reports them corrupt, a reader of
    the tier's open transactions passes over them)."""
    partition = _partition(log_dir, "orders", 0)
    second = partition.rolled_segments()[1]
    snapshot = second.path(".snapshot")
    whole = snapshot.read_bytes()
    assert len(whole) > 10
    snapshot.write_bytes(whole[:10])  # the header written, the entries not yet
    tiering = tiering_factory(sqlite_fs, log_dir)

    outcomes = tiering.copier().run_once()

    assert [o.error for o in outcomes] == [None] * 4
    first = next(r for r in tiering.finished(tp_of(partition)) if r.end_offset + 1 == second.base_offset)
    stored = read_index(tiering.storage, first.layout, IndexType.PRODUCER_SNAPSHOT)
    if stored is not None:
        decode_snapshot(stored)
    assert_invariants(tiering.store, tiering.storage, [log_dir])
