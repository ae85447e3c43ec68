"""Retention of the remote tier: by time, by size and by log start offset (design: "Retention").

Partitions are scripted segment by segment (record count, largest timestamp), copied by the
copier, then retention runs with a fake clock. Pure rules (``breaching_segments``) are tested on
their own at the end.
"""

from __future__ import annotations

import dataclasses
import shutil
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest

from rlm.config import Settings, TopicSettings
from rlm.errors import StorageUnavailableError
from rlm.log.dirwriter import LogDirWriter
from rlm.log.logdir import LogDir, PartitionDir
from rlm.log.model import NO_TIMESTAMP
from rlm.log.writer import ProducerRecord, TopicConfig
from rlm.lookup.index_cache import RemoteIndexCache
from rlm.lookup.service import LookupService
from rlm.metastore.model import ObjectLayout, RemoteSegment, SegmentState, TopicPartition
from rlm.storage.delegate import DelegatingStorage
from rlm.storage.log_start import marker_key, read_marker
from rlm.storage.protocol import RemoteStorage
from rlm.tiering.leases import LeaseKeeper
from rlm.tiering.overview import Overview
from rlm.tiering.prepare import prepare_segment
from rlm.tiering.retention import breaching_segments, log_start_after
from rlm.timestamps import SpecialTimestamp
from tests.clock import FakeClock
from tests.metadata_support import segment
from tests.tiering_support import (
    BROKER_ID,
    WRITER_NOW_MS,
    Backend,
    SegmentPlan,
    Tiering,
    assert_invariants,
    make_backend,
    set_high_watermarks,
    set_log_start_offsets,
    write_scripted_log_dir,
)
from tests.unclean_election_support import spans, write_log

TP = TopicPartition("orders", 0)
NOW = 1_700_000_000_000
HOUR = 3_600_000
#: Max timestamps of the six segments: one hour apart, the last one an hour before NOW.
HOURLY = [NOW - (6 - i) * HOUR for i in range(6)]
TieringFactory = Callable[..., Tiering]


def _write(log_dir: Path, timestamps: list[int], records: int = 20) -> PartitionDir:
    write_scripted_log_dir(log_dir, {TP: [SegmentPlan(records, ts) for ts in timestamps]})
    return LogDir(log_dir).partition(TP.topic, TP.partition)


@pytest.fixture
def sqlite_fs(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    return make_backend("sqlite-fs", request, tmp_path)


def _tiered(factory: TieringFactory, pair: Backend, log_dir: Path, **changes: object) -> Tiering:
    """A harness at NOW whose copier has tiered every eligible segment (``changes`` to its settings)."""
    tiering = factory(pair, log_dir, FakeClock(NOW), **changes)
    assert all(o.error is None for o in tiering.copier().run_once())
    return tiering


def with_topic(settings: Settings, *, retention_ms: int = -1, retention_bytes: int = -1) -> Settings:
    """``settings`` with these retention settings for every topic."""
    topic = TopicSettings(retention_ms=retention_ms, retention_bytes=retention_bytes)
    return settings.replace(topic_defaults=topic)


def _states(tiering: Tiering) -> list[SegmentState]:
    return [r.state for r in tiering.segments(TP)]


def _objects_of(row: RemoteSegment) -> list[str]:
    return [row.layout.log_key, row.layout.index_key]


def test_time_retention_deletes_segments_whose_max_timestamp_expired(
    backend: Backend,
    tiering_factory: TieringFactory,
    tmp_path: Path,
) -> None:
    log_dir = tmp_path / "logs"
    _write(log_dir, HOURLY)
    tiering = _tiered(tiering_factory, backend, log_dir)
    rows = tiering.finished(TP)
    overview = Overview(tiering.store, (LogDir(log_dir),))
    # Before any retention, the remote tier starts at its first segment.
    assert [p.remote_log_start_offset for p in overview.partitions(TP.topic)] == [rows[0].start_offset]
    # Segments 0-2 have a max timestamp ≤ NOW - 4h: 6h, 5h and exactly 4h old.
    retention = tiering.retention(settings=with_topic(tiering.settings, retention_ms=4 * HOUR))

    (outcome,) = retention.run_once()

    assert (outcome.error, outcome.deleted_segments) == (None, 3)
    assert outcome.deleted_bytes == sum(r.size_bytes for r in rows[:3])
    assert (
        _states(tiering)
        == [SegmentState.DELETE_SEGMENT_FINISHED] * 3 + [SegmentState.COPY_SEGMENT_FINISHED] * 3
    )
    record = tiering.store.get_partition(TP)
    assert (
        record is not None
        and record.remote_log_start_offset == rows[3].start_offset == outcome.log_start_offset
    )
    assert [p.remote_log_start_offset for p in overview.partitions(TP.topic)] == [rows[3].start_offset]
    keys = set(tiering.storage.list_keys(""))
    assert not keys & {k for r in rows[:3] for k in _objects_of(r)}
    # The segments left, and the marker saying where the log starts (for a rebuilt store).
    marker = marker_key(TP, rows[0].topic_id)
    assert keys == {k for r in rows[3:] for k in _objects_of(r)} | {marker}
    assert read_marker(tiering.storage, marker) == rows[3].start_offset
    labels = {"topic": "orders", "partition": "0"}
    assert tiering.registry.get_sample_value("rlm_retention_deleted_segments_total", labels) == 3
    assert tiering.registry.get_sample_value("rlm_remote_log_size_bytes", labels) == sum(
        r.size_bytes for r in rows[3:]
    )
    assert_invariants(tiering.store, tiering.storage, [log_dir])

    tiering.clock.advance(HOUR)  # segment 3 expires too
    (later,) = retention.run_once()
    assert later.deleted_segments == 1


def test_segments_whose_records_have_no_timestamp_stay_for_retention_ms_after_they_were_tiered(
    sqlite_fs: Backend,
    tiering_factory: TieringFactory,
    tmp_path: Path,
) -> None:
    log_dir = tmp_path / "logs"
    writer = LogDirWriter(log_dir, clock=lambda: NOW, default_config=TopicConfig(segment_bytes=1 << 30))
    appender = writer.partition(TP.topic, TP.partition, leader_epoch=0)
    for _ in range(3):  # records written with timestamp -1, as the broker keeps them under CreateTime
        appender.append([ProducerRecord(NO_TIMESTAMP, b"k", b"v" * 100) for _ in range(5)])
        appender.roll()
    appender.append([ProducerRecord(NOW, b"k", b"v")])
    writer.close({})
    tiering = _tiered(tiering_factory, sqlite_fs, log_dir)
    rows = tiering.finished(TP)
    assert [r.max_timestamp_ms for r in rows] == [NO_TIMESTAMP] * 3  # the row says what the records say
    retention = tiering.retention(settings=with_topic(tiering.settings, retention_ms=2 * HOUR))

    tiering.clock.advance(HOUR)
    (outcome,) = retention.run_once()
    assert (outcome.error, outcome.deleted_segments) == (None, 0)
    assert _states(tiering) == [SegmentState.COPY_SEGMENT_FINISHED] * 3

    tiering.clock.advance(HOUR)  # two hours since they were tiered
    (later,) = retention.run_once()
    assert (later.error, later.deleted_segments) == (None, 3)


def test_retention_stops_at_the_first_segment_that_does_not_breach(
    sqlite_fs: Backend,
    tiering_factory: TieringFactory,
    tmp_path: Path,
) -> None:
    log_dir = tmp_path / "logs"
    # Segment 1 holds a late record (a timestamp an hour newer than its neighbours').
    _write(log_dir, [NOW - 6 * HOUR, NOW - HOUR // 2, NOW - 5 * HOUR, NOW - 5 * HOUR])
    tiering = _tiered(tiering_factory, sqlite_fs, log_dir)

    (outcome,) = tiering.retention(settings=with_topic(tiering.settings, retention_ms=HOUR)).run_once()

    assert outcome.deleted_segments == 1
    assert _states(tiering)[:2] == [SegmentState.DELETE_SEGMENT_FINISHED, SegmentState.COPY_SEGMENT_FINISHED]


def _four_of_five_tiered(
    pair: Backend, tiering_factory: TieringFactory, log_dir: Path
) -> tuple[Tiering, PartitionDir, list[RemoteSegment]]:
    """Five rolled segments an hour old, the first four tiered (segment 4 is not replicated yet)."""
    partition = _write(log_dir, [NOW - HOUR] * 5)
    set_high_watermarks(log_dir, {TP: partition.segments()[4].base_offset})
    tiering = _tiered(tiering_factory, pair, log_dir)
    return tiering, partition, tiering.finished(TP)


def test_size_retention_counts_local_only_bytes_and_never_started_copies(
    sqlite_fs: Backend,
    tiering_factory: TieringFactory,
    tmp_path: Path,
) -> None:
    log_dir = tmp_path / "logs"
    tiering, partition, rows = _four_of_five_tiered(sqlite_fs, tiering_factory, log_dir)
    segments = partition.segments()
    assert len(rows) == 4
    remote = sum(r.size_bytes for r in rows)
    local_only = segments[4].size() + segments[5].size()
    # Segment 4 is being copied: its STARTED row says it is huge, and must count for nothing.
    lease = tiering.leases.hold(TP)
    assert lease is not None
    prepared = prepare_segment(partition, segments[4], broker_id=BROKER_ID, now_ms=NOW, epochs=[])
    in_flight = dataclasses.replace(prepared.remote, size_bytes=10**12)
    tiering.store.add_segment(in_flight, fence=lease)

    exactly_full = with_topic(tiering.settings, retention_bytes=remote + local_only)
    (untouched,) = tiering.retention(settings=exactly_full).run_once()

    assert untouched.deleted_segments == 0
    # Over by segment 0 and 100 bytes: only segment 0 can go without going under the limit.
    # Without the local-only bytes the partition would not be over at all.
    over = rows[0].size_bytes + 100
    assert local_only > over
    (outcome,) = tiering.retention(
        settings=with_topic(tiering.settings, retention_bytes=remote + local_only - over)
    ).run_once()

    assert outcome.deleted_segments == 1
    assert _states(tiering) == [
        SegmentState.DELETE_SEGMENT_FINISHED,
        *[SegmentState.COPY_SEGMENT_FINISHED] * 3,
        SegmentState.COPY_SEGMENT_STARTED,
    ]


def test_size_retention_counts_nothing_for_a_local_segment_the_broker_deleted_after_the_listing(
    sqlite_fs: Backend,
    tiering_factory: TieringFactory,
    tmp_path: Path,
) -> None:
    """The broker deletes a segment (its own retention) between retention's listing of the local
    segments and its read of their sizes: the segment is gone, not an error."""
    log_dir = tmp_path / "logs"
    tiering, partition, rows = _four_of_five_tiered(sqlite_fs, tiering_factory, log_dir)
    segments = partition.segments()
    listed = LogDir(log_dir).partition(TP.topic, TP.partition).pinned()
    assert len(listed.segments()) == 6
    segments[4].log_path.rename(segments[4].log_path.with_name(segments[4].log_path.name + ".deleted"))
    over = rows[0].size_bytes + 100  # over the limit by segment 0 and 100 bytes, without segment 4
    limit = sum(r.size_bytes for r in rows) + segments[5].size() - over

    (outcome,) = tiering.retention(settings=with_topic(tiering.settings, retention_bytes=limit)).run_once(
        [listed]
    )

    assert (outcome.error, outcome.deleted_segments) == (None, 1)
    assert _states(tiering)[:2] == [SegmentState.DELETE_SEGMENT_FINISHED, SegmentState.COPY_SEGMENT_FINISHED]


def test_size_retention_counts_a_local_segment_starting_at_the_highest_tiered_offset_as_kafka_does(
    backend: Backend,
    tiering_factory: TieringFactory,
    tmp_path: Path,
) -> None:
    """A replica that rolls at offsets of its own holds the lease after the one that tiered 0..39:
    its segment starting at 39 holds 39..48, 40..48 never tiered. Kafka counts every segment from the
    highest tiered offset on as local-only (``UnifiedLog.onlyLocalLogSegmentsSize``)."""
    log_dir = tmp_path / "logs"
    write_log(log_dir, 4, 4, 4, 4)
    tiering = tiering_factory(backend, log_dir, FakeClock(WRITER_NOW_MS))
    assert tiering.copier().run_once()[0].error is None
    assert [s[:2] for s in spans(tiering)] == [(0, 9), (10, 19), (20, 29), (30, 39)]
    write_log(log_dir, 4, 4, 4, (9, 4), 4, 4)  # segments from 0, 10, 20, 30, 39, 49 and 59
    segments = LogDir(log_dir).partition(TP.topic, TP.partition).segments()
    assert segments[4].base_offset == 39
    remote = sum(r.size_bytes for r in tiering.finished(TP))
    local_only = sum(s.size() for s in segments[4:])
    over = tiering.finished(TP)[0].size_bytes + 1  # segment 0 goes, the rest stays over the limit
    limit = with_topic(tiering.settings, retention_bytes=remote + local_only - over)

    (outcome,) = tiering.retention(settings=limit).run_once()

    assert (outcome.error, outcome.deleted_segments) == (None, 1)


def test_log_start_offset_retention_deletes_segments_wholly_below_it(
    sqlite_fs: Backend,
    tiering_factory: TieringFactory,
    tmp_path: Path,
) -> None:
    log_dir = tmp_path / "logs"
    partition = _write(log_dir, HOURLY)
    tiering = _tiered(tiering_factory, sqlite_fs, log_dir, remote_log_start_offset_from_broker=True)
    bases = [s.base_offset for s in partition.segments()]
    set_log_start_offsets(log_dir, {TP: bases[3] + 2})  # DeleteRecords up to the middle of segment 3

    (outcome,) = tiering.retention().run_once()

    assert outcome.deleted_segments == 3
    assert outcome.log_start_offset == bases[3]
    assert _states(tiering)[3:] == [SegmentState.COPY_SEGMENT_FINISHED] * 3
    assert_invariants(tiering.store, tiering.storage, [log_dir])


def test_the_log_start_offset_the_broker_checkpointed_deletes_nothing_unless_asked(
    backend: Backend,
    tiering_factory: TieringFactory,
    tmp_path: Path,
) -> None:
    # A follower checkpoints the leader's log start offset, which the leader's local retention
    # moved: inside the follower's segment 4, as replicas roll at offsets of their own.
    log_dir = tmp_path / "logs"
    partition = _write(log_dir, HOURLY)
    tiering = _tiered(tiering_factory, backend, log_dir)
    bases = [s.base_offset for s in partition.segments()]
    set_log_start_offsets(log_dir, {TP: bases[4] + 5})
    week = with_topic(tiering.settings, retention_ms=7 * 24 * HOUR)

    (outcome,) = tiering.retention(settings=week).run_once()

    assert (outcome.error, outcome.deleted_segments) == (None, 0)
    assert outcome.log_start_offset == 0  # the remote tier answers from its first segment
    assert _states(tiering) == [SegmentState.COPY_SEGMENT_FINISHED] * 6
    record = tiering.store.get_partition(TP)
    assert record is not None and record.remote_log_start_offset == -1  # never advanced

    honoured = week.replace(remote_log_start_offset_from_broker=True)
    (asked,) = tiering.retention(settings=honoured).run_once()
    assert (asked.error, asked.deleted_segments) == (None, 4)


def test_remote_log_start_offset_advances_before_anything_is_deleted(
    sqlite_fs: Backend,
    tiering_factory: TieringFactory,
    tmp_path: Path,
) -> None:
    log_dir = tmp_path / "logs"
    partition = _write(log_dir, HOURLY)
    tiering = _tiered(tiering_factory, sqlite_fs, log_dir, remote_log_start_offset_from_broker=True)
    rows = tiering.finished(TP)
    set_log_start_offsets(log_dir, {TP: partition.segments()[2].base_offset})
    steps: list[str] = []
    at_advance: list[tuple[int, list[SegmentState], set[str]]] = []

    def watch(name: str) -> None:
        steps.append(name)
        if name == "log_start_advanced":
            record = tiering.store.get_partition(TP)
            assert record is not None
            at_advance.append(
                (record.remote_log_start_offset, _states(tiering), set(tiering.storage.list_keys("")))
            )

    tiering.retention(step=watch).run_once()

    assert at_advance == [
        (
            rows[2].start_offset,
            [SegmentState.COPY_SEGMENT_FINISHED] * 6,
            {k for r in rows for k in _objects_of(r)} | {marker_key(TP, rows[0].topic_id)},
        )
    ]
    assert steps == [
        "log_start_advanced",
        *["delete_started", "log_deleted", "indexes_deleted", "delete_finished"] * 2,
    ]


def test_segments_below_an_advanced_remote_log_start_are_deleted_even_if_retention_changed(
    sqlite_fs: Backend,
    tiering_factory: TieringFactory,
    tmp_path: Path,
) -> None:
    log_dir = tmp_path / "logs"
    _write(log_dir, HOURLY)
    tiering = _tiered(tiering_factory, sqlite_fs, log_dir)

    def die(name: str) -> None:
        if name == "log_start_advanced":
            raise SystemExit("the sidecar stopped here")

    expiring = tiering.retention(settings=with_topic(tiering.settings, retention_ms=4 * HOUR), step=die)
    with pytest.raises(SystemExit):
        expiring.enforce(LogDir(log_dir).partition(TP.topic, TP.partition))
    # Restarted with retention turned off: the segments below the remote log start offset are
    # unreadable already, so they go anyway.
    (outcome,) = tiering.retention().run_once()

    assert outcome.deleted_segments == 3
    assert_invariants(tiering.store, tiering.storage, [log_dir])


class FailingDeletes(DelegatingStorage):
    """Remote storage whose deletes fail ``times`` times."""

    def __init__(self, inner: RemoteStorage, times: int) -> None:
        super().__init__(inner)
        self.left = times

    def delete_objects(self, keys: Iterable[str]) -> None:
        if self.left > 0:
            self.left -= 1
            raise StorageUnavailableError("delete: service unavailable")
        super().delete_objects(keys)


def test_a_delete_left_started_is_retried(
    sqlite_fs: Backend,
    tiering_factory: TieringFactory,
    tmp_path: Path,
) -> None:
    log_dir = tmp_path / "logs"
    _write(log_dir, HOURLY)
    tiering = _tiered(tiering_factory, sqlite_fs, log_dir)
    rows = tiering.finished(TP)
    tiering.storage = FailingDeletes(tiering.storage, times=1)
    expire_two = with_topic(tiering.settings, retention_ms=5 * HOUR)

    (failed,) = tiering.retention(settings=expire_two).run_once()

    assert isinstance(failed.error, StorageUnavailableError)
    assert _states(tiering)[0] is SegmentState.DELETE_SEGMENT_STARTED
    assert set(_objects_of(rows[0])) <= set(tiering.storage.list_keys(""))

    (retried,) = tiering.retention().run_once()  # retention is off now: only what was under way

    assert retried.error is None
    # Segment 0 is retried; segment 1 never started deleting, but it is below the remote log
    # start offset that the failed pass had advanced, so it goes too.
    assert _states(tiering)[:3] == [
        SegmentState.DELETE_SEGMENT_FINISHED,
        SegmentState.DELETE_SEGMENT_FINISHED,
        SegmentState.COPY_SEGMENT_FINISHED,
    ]
    assert not set(_objects_of(rows[0])) & set(tiering.storage.list_keys(""))
    assert_invariants(tiering.store, tiering.storage, [log_dir])


def test_a_segment_a_compaction_replaced_meanwhile_keeps_its_objects_until_its_delete_delay(
    sqlite_fs: Backend,
    tiering_factory: TieringFactory,
    tmp_path: Path,
) -> None:
    """Retention picked segment 0 before a compaction swap replaced it: the swap gave lookups and
    fetches that picked it too until ``delete_after_ms`` to read it, and retention leaves it so."""
    log_dir = tmp_path / "logs"
    _write(log_dir, HOURLY)
    tiering = _tiered(tiering_factory, sqlite_fs, log_dir)
    rows = tiering.finished(TP)
    delay = 5 * 60_000

    def compacted_meanwhile(name: str) -> None:
        if name != "log_start_advanced":
            return
        lease = tiering.store.acquire_compaction_lease(TP, "job", 60_000)
        assert lease is not None
        output_id = uuid.uuid4()
        output = dataclasses.replace(
            rows[0],
            segment_id=output_id,
            state=SegmentState.COPY_SEGMENT_STARTED,
            layout=ObjectLayout(f"{output_id}.log", f"{output_id}.indexes", rows[0].layout.index_ranges),
        )
        swapped = tiering.store.swap_compacted(
            lease, [output], [rows[0].segment_id], now_ms=NOW, delete_after_ms=NOW + delay
        )
        assert swapped

    compact_delete = TopicSettings(cleanup_policy="compact,delete", retention_ms=4 * HOUR, retention_bytes=-1)
    settings = tiering.settings.replace(topic_defaults=compact_delete)
    (outcome,) = tiering.retention(settings=settings, step=compacted_meanwhile).run_once()

    assert (outcome.error, outcome.deleted_segments) == (None, 2)  # segments 1 and 2
    replaced = tiering.store.get_segment(rows[0].segment_id)
    assert replaced is not None and replaced.state is SegmentState.DELETE_SEGMENT_STARTED
    assert set(_objects_of(rows[0])) <= set(tiering.storage.list_keys(""))

    tiering.clock.advance(delay)
    (later,) = tiering.retention(settings=settings).run_once()
    assert later.error is None
    replaced = tiering.store.get_segment(rows[0].segment_id)
    assert replaced is not None and replaced.state is SegmentState.DELETE_SEGMENT_FINISHED
    assert not set(_objects_of(rows[0])) & set(tiering.storage.list_keys(""))


def test_a_segment_being_copied_is_never_deleted(
    sqlite_fs: Backend,
    tiering_factory: TieringFactory,
    tmp_path: Path,
) -> None:
    log_dir = tmp_path / "logs"
    partition = _write(log_dir, HOURLY)
    tiering = tiering_factory(sqlite_fs, log_dir, FakeClock(NOW))
    everything = tiering.retention(settings=with_topic(tiering.settings, retention_ms=0))
    outcomes = []
    last_base = partition.rolled_segments()[-1].base_offset

    def retention_meanwhile(name: str) -> None:
        # While the last segment's .log is up but its copy is not finished, retention runs.
        if name == "log_uploaded" and tiering.segments(TP, SegmentState.COPY_SEGMENT_STARTED)[
            0
        ].start_offset == (last_base):
            outcomes.extend(everything.run_once())

    tiering.copier(step=retention_meanwhile).run_once()

    assert [o.deleted_segments for o in outcomes] == [5]
    assert _states(tiering) == [SegmentState.DELETE_SEGMENT_FINISHED] * 5 + [
        SegmentState.COPY_SEGMENT_FINISHED
    ]
    assert_invariants(tiering.store, tiering.storage, [log_dir])


def test_only_the_lease_holder_enforces_retention(
    sqlite_fs: Backend,
    tiering_factory: TieringFactory,
    tmp_path: Path,
) -> None:
    log_dir = tmp_path / "logs"
    _write(log_dir, HOURLY)
    tiering = _tiered(tiering_factory, sqlite_fs, log_dir)
    tiering.leases.release_all()
    other = LeaseKeeper(tiering.store, BROKER_ID + 1, 60_000)
    assert other.hold(TP) is not None

    (outcome,) = tiering.retention(settings=with_topic(tiering.settings, retention_ms=0)).run_once()

    assert outcome.skipped == f"the copy lease is held by broker {BROKER_ID + 1}"
    assert set(_states(tiering)) == {SegmentState.COPY_SEGMENT_FINISHED}


@pytest.mark.parametrize("moved", ["lease", "replica"])
def test_a_sidecar_that_no_longer_enforces_a_partition_stops_exporting_its_remote_log_size(
    sqlite_fs: Backend,
    tiering_factory: TieringFactory,
    tmp_path: Path,
    moved: str,
) -> None:
    """The dashboard takes the highest size of a partition over the sidecars: a former holder's
    last size would hide what the holder's retention deleted since (or a deleted topic's size)."""
    log_dir = tmp_path / "logs"
    partition = _write(log_dir, HOURLY)
    tiering = _tiered(tiering_factory, sqlite_fs, log_dir)
    (kept,) = tiering.retention().run_once()
    assert kept.error is None and (_remote_log_size(tiering) or 0) > 0
    if moved == "lease":  # another broker's sidecar holds it now
        tiering.leases.release_all()
        assert LeaseKeeper(tiering.store, BROKER_ID + 1, 60_000).hold(TP) is not None
    else:  # reassigned: the broker deleted its replica
        shutil.rmtree(partition.path)

    outcomes = tiering.retention().run_once()

    if moved == "lease":
        assert [o.skipped for o in outcomes] == [f"the copy lease is held by broker {BROKER_ID + 1}"]
    else:
        assert outcomes == []
    assert _remote_log_size(tiering) is None


def _remote_log_size(tiering: Tiering) -> float | None:
    """``rlm_remote_log_size_bytes`` of ``TP`` as this sidecar exports it (None: not exported)."""
    return tiering.registry.get_sample_value(
        "rlm_remote_log_size_bytes", {"topic": TP.topic, "partition": str(TP.partition)}
    )


# -- breaching_segments: the rules alone --------------------------------------------------------


def _finished(*spec: tuple[int, int, int]) -> list[RemoteSegment]:
    """Finished segments of (start, end, max timestamp), 100 bytes each."""
    return [
        segment(start, end, ts, size_bytes=100, state=SegmentState.COPY_SEGMENT_FINISHED)
        for start, end, ts in spec
    ]


SEGMENTS = _finished((0, 9, 1_000), (10, 19, 2_000), (20, 29, 3_000), (30, 39, 4_000))


def _breaching(
    segments: list[RemoteSegment] = SEGMENTS,
    *,
    retention_ms: int = -1,
    retention_bytes: int = -1,
    now_ms: int = 10_000,
    local_only_bytes: int = 0,
    log_start_offset: int | None = None,
) -> list[int]:
    chosen = breaching_segments(
        segments,
        TopicSettings(retention_ms=retention_ms, retention_bytes=retention_bytes),
        now_ms=now_ms,
        local_only_bytes=local_only_bytes,
        log_start_offset=log_start_offset,
    )
    return [s.start_offset for s in chosen]


def test_nothing_breaches_when_retention_is_off() -> None:
    assert _breaching(now_ms=10**15, log_start_offset=None) == []
    assert _breaching([]) == []


def test_time_breach_includes_the_boundary() -> None:
    assert _breaching(retention_ms=8_000, now_ms=10_000) == [0, 10]  # 2_000 ≤ 10_000 - 8_000
    assert _breaching(retention_ms=8_001, now_ms=10_000) == [0]


def test_time_breach_stops_at_the_first_segment_that_does_not_breach() -> None:
    late = _finished((0, 9, 1_000), (10, 19, 9_000), (20, 29, 1_000))
    assert _breaching(late, retention_ms=5_000, now_ms=10_000) == [0]


def test_size_breach_deletes_oldest_while_the_rest_stays_at_or_over_the_limit() -> None:
    assert _breaching(retention_bytes=400) == []
    assert _breaching(retention_bytes=399) == []  # deleting 100 bytes would go under 399
    assert _breaching(retention_bytes=300) == [0]
    assert _breaching(retention_bytes=150) == [0, 10]
    assert _breaching(retention_bytes=0) == [0, 10, 20, 30]


def test_size_breach_counts_local_only_bytes() -> None:
    assert _breaching(retention_bytes=400, local_only_bytes=250) == [0, 10]


def test_segments_deleted_for_another_reason_count_toward_the_size_limit() -> None:
    mixed = [
        dataclasses.replace(SEGMENTS[0], size_bytes=150),
        dataclasses.replace(SEGMENTS[1], size_bytes=50),
        *SEGMENTS[2:],
    ]
    # 400 bytes against a limit of 340: 60 too many. Segment 0 (150 bytes) goes by time or by the
    # log start offset; the partition is then under the limit, so segment 1 (50 bytes) must stay.
    assert _breaching(mixed, retention_bytes=340, retention_ms=8_500, now_ms=10_000) == [0]
    assert _breaching(mixed, retention_bytes=340, log_start_offset=10) == [0]
    assert _breaching(mixed, retention_bytes=240) == [0]  # 160 too many: segment 0 goes, 10 remain


def test_log_start_offset_breach_is_for_segments_wholly_below_it() -> None:
    assert _breaching(log_start_offset=20) == [0, 10]
    assert _breaching(log_start_offset=25) == [0, 10]  # segment 20-29 still holds 25-29
    assert _breaching(log_start_offset=0) == []


def test_the_log_start_passes_a_deleted_segment_unless_a_kept_copy_holds_other_records_there() -> None:
    gone = segment(0, 29, epochs=((4, 0), (5, 20)))
    # A takeover's copy of the same records from 10: they go with the deleted segment, as in Kafka.
    assert log_start_after([gone], [segment(10, 49, epochs=((4, 10), (5, 20)))]) == 30
    # A copy of the broker's log from 25 on, where the deleted segment holds epoch 5's records.
    diverged = segment(25, 49, epochs=((6, 25),))
    assert log_start_after([gone], [diverged]) == 25
    assert log_start_after([gone], [segment(22, 49, epochs=((5, 22), (6, 27)))]) == 27
    assert log_start_after([gone], [diverged], floor=27) == 27  # below it the log is deleted
    assert log_start_after([gone], [segment(30, 49, epochs=((6, 30),))]) == 30


def test_rows_of_long_deleted_segments_are_purged_and_the_highest_copied_offset_stays(
    backend: Backend,
    tiering_factory: TieringFactory,
    tmp_path: Path,
) -> None:
    log_dir = tmp_path / "logs"
    _write(log_dir, HOURLY)
    tiering = _tiered(tiering_factory, backend, log_dir)
    rows = tiering.finished(TP)
    highest = tiering.store.highest_copied_offset(TP)
    by_epoch = tiering.store.highest_copied_offset(TP, leader_epoch=0)
    settings = with_topic(tiering.settings, retention_ms=4 * HOUR).replace(
        remote_log_metadata_deleted_segments_retention_ms=2 * HOUR
    )
    retention = tiering.retention(settings=settings)
    (first,) = retention.run_once()  # segments 0-2 go at NOW; their rows stay for two hours
    assert (first.deleted_segments, first.purged_rows) == (3, 0)

    tiering.clock.advance(2 * HOUR + 1)
    (later,) = retention.run_once()  # segments 3 and 4 go; the rows of 0-2 are purged

    assert (later.deleted_segments, later.purged_rows) == (2, 3)
    left = tiering.segments(TP)
    assert [r.segment_id for r in left] == [r.segment_id for r in rows[3:]]
    assert [r.state for r in left] == [SegmentState.DELETE_SEGMENT_FINISHED] * 2 + [
        SegmentState.COPY_SEGMENT_FINISHED
    ]
    assert tiering.store.highest_copied_offset(TP) == highest
    assert tiering.store.highest_copied_offset(TP, leader_epoch=0) == by_epoch
    labels = {"topic": "orders", "partition": "0"}
    assert tiering.registry.get_sample_value("rlm_metadata_purged_segments_total", labels) == 3
    assert_invariants(tiering.store, tiering.storage, [log_dir])
    # Nothing is copied again: the copier resumes above the highest copied offset.
    assert [o.copied_segments for o in tiering.copier().run_once()] == [0]

    kept = tiering.retention(settings=settings.replace(remote_log_metadata_deleted_segments_retention_ms=-1))
    tiering.clock.advance(100 * HOUR)
    (forever,) = kept.run_once()
    assert forever.purged_rows == 0 and len(tiering.segments(TP)) == 3


def test_a_segment_without_timestamps_is_judged_by_when_it_was_tiered() -> None:
    # Records written with timestamp -1 (v0 messages, or v2 under CreateTime): no max timestamp.
    # Tiered at 9_000, the segment is 1_000 old at 10_000, however old -1 would make it.
    untimed = [dataclasses.replace(s, event_time_ms=9_000) for s in _finished((0, 9, -1), (10, 19, -1))]
    assert _breaching(untimed, retention_ms=5_000, now_ms=10_000) == []
    assert _breaching(untimed, retention_ms=1_000, now_ms=10_000) == [0, 10]
    assert _breaching(untimed, retention_ms=1_001, now_ms=10_000) == []
    # A timed segment still goes by its records, whenever it was tiered.
    mixed = [dataclasses.replace(SEGMENTS[0], event_time_ms=9_000), *untimed[1:]]
    assert _breaching(mixed, retention_ms=5_000, now_ms=10_000) == [0]


def test_a_compacted_topic_keeps_its_segments_whatever_retention_ms_and_bytes_say(
    sqlite_fs: Backend,
    tiering_factory: TieringFactory,
    tmp_path: Path,
) -> None:
    # cleanup.policy=compact without delete: like Kafka, neither time nor size retention applies
    # (retention.ms defaults to a week, which would empty the remote tier of every compacted topic).
    log_dir = tmp_path / "logs"
    _write(log_dir, HOURLY)
    tiering = _tiered(tiering_factory, sqlite_fs, log_dir)
    rows = tiering.finished(TP)
    compacted = TopicSettings(cleanup_policy="compact", retention_ms=HOUR, retention_bytes=0)
    settings = tiering.settings.replace(topic_overrides={TP.topic: compacted})

    (kept,) = tiering.retention(settings=settings).run_once()

    assert (kept.error, kept.deleted_segments) == (None, 0)
    assert _states(tiering) == [SegmentState.COPY_SEGMENT_FINISHED] * 6
    # The log start offset still applies, as for Kafka's compacted logs.
    tiering.store.advance_log_start_offset(TP, rows[2].start_offset)
    (below_start,) = tiering.retention(settings=settings).run_once()
    assert (below_start.error, below_start.deleted_segments) == (None, 2)
    # compact,delete keeps time and size retention.
    both = dataclasses.replace(compacted, cleanup_policy="compact,delete")
    (expired,) = tiering.retention(settings=settings.replace(topic_overrides={TP.topic: both})).run_once()
    assert (expired.error, expired.deleted_segments) == (None, 4)
    assert_invariants(tiering.store, tiering.storage, [log_dir])


def test_lookups_beside_retention_see_the_advanced_log_start_before_anything_is_deleted(
    sqlite_fs: Backend,
    tiering_factory: TieringFactory,
    tmp_path: Path,
) -> None:
    """In ``rlm serve`` lookups keep a partition's remote-tier view for a second: retention tells
    them the log start moved as soon as it did, so that no lookup answers an offset whose
    segment is being deleted."""
    log_dir = tmp_path / "logs"
    _write(log_dir, HOURLY)
    tiering = _tiered(tiering_factory, sqlite_fs, log_dir)
    rows = tiering.finished(TP)
    for local in LogDir(log_dir).partition(TP.topic, TP.partition).segments()[:4]:
        local.log_path.unlink()  # the broker's local retention
    cache = RemoteIndexCache(tmp_path / "cache", tiering.storage, tiering.metrics)
    lookups = LookupService(tiering.store, tiering.storage, cache, (log_dir,), clock=FakeClock(100.0))
    assert lookups.find(TP, SpecialTimestamp.EARLIEST).offset == 0  # the view is read and kept
    earliest_at_advance: list[int] = []

    def watch(name: str) -> None:
        if name == "log_start_advanced":
            earliest_at_advance.append(lookups.find(TP, SpecialTimestamp.EARLIEST).offset)

    retention = tiering.retention(settings=with_topic(tiering.settings, retention_ms=4 * HOUR), step=watch)
    retention.on_change = lookups.invalidate
    (outcome,) = retention.run_once()

    cache.close()

    assert outcome.deleted_segments == 3
    assert earliest_at_advance == [rows[3].start_offset]
