"""A topic deleted and created again under the same name, on SQLite + filesystem and PostgreSQL + S3.

``kafka-topics --delete orders`` then ``--create orders``: the broker's partition directory is
replaced by one with a new topic id in ``partition.metadata`` and offsets from 0 again. Kafka keys
remote state by ``TopicIdPartition``: the deleted topic's remote segments are deleted, and the new
topic is tiered from its start. The copier and retention must not take the deleted topic's
highest copied offset, remote log start offset or segments for the new topic's.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import update

from metadata import SqlMetadataStore
from metadata.engine import create_engine_for_url
from metadata.models import SegmentRow
from rlm.errors import (
    CorruptCheckpointError,
    MetadataUnavailableError,
    RetiredTopicIdError,
    StaleLeaseError,
    StaleReplicaError,
    StorageUnavailableError,
)
from rlm.log.checkpoints import topic_id_to_uuid
from rlm.log.logdir import PARTITION_METADATA, LogDir, PartitionDir
from rlm.metastore.model import UNKNOWN_BROKER, Lease, SegmentState, TopicIdChange, TopicPartition
from rlm.storage.delegate import DelegatingStorage
from rlm.storage.description import RETIRED_KEY, TOPIC_DELETED, Retirement, read_retired
from rlm.storage.protocol import PutResult, PutSource, RemoteStorage
from rlm.tiering.leases import LeaseKeeper
from rlm.tiering.partition_deletion import delete_partition
from rlm.tiering.topic_identity import adopt_local_topic_id
from tests.retired_support import FailingMarks, SlowMarks, rebuilt_from_objects, retirements
from tests.tiering_support import (
    BROKER_ID,
    WRITER_NOW_MS,
    Backend,
    SegmentPlan,
    Tiering,
    assert_invariants,
    set_log_start_offsets,
    write_scripted_log_dir,
)

TP = TopicPartition("orders", 0)
LABELS = {"topic": "orders", "partition": "0"}
TieringFactory = Callable[..., Tiering]


def write_topic(log_dir: Path, segments: int, *, seed: int) -> PartitionDir:
    """Create topic ``orders`` (a new topic id) with ``segments`` rolled segments of 10 records."""
    plans = [SegmentPlan(records=10, max_timestamp_ms=WRITER_NOW_MS - 1000 + i) for i in range(segments)]
    write_scripted_log_dir(log_dir, {TP: plans}, seed=seed)
    return LogDir(log_dir).partition(TP.topic, TP.partition)


def recreate_topic(log_dir: Path, segments: int) -> PartitionDir:
    """``kafka-topics --delete`` then ``--create``: the broker's files are gone, new ones written."""
    shutil.rmtree(log_dir)
    return write_topic(log_dir, segments, seed=2)


def topic_uuid(partition: PartitionDir) -> object:
    text = partition.topic_id()
    assert text is not None
    return topic_id_to_uuid(text)


@pytest.fixture
def tiered(backend: Backend, tiering_factory: TieringFactory, tmp_path: Path) -> tuple[Tiering, Path]:
    """The old topic: 5 segments tiered, the first two deleted by retention (remote log start 20)."""
    log_dir = tmp_path / "logs"
    write_topic(log_dir, 5, seed=1)
    # Retention follows the broker's log start offset, as DeleteRecords moves it.
    tiering = tiering_factory(backend, log_dir, remote_log_start_offset_from_broker=True)
    assert [o.copied_segments for o in tiering.copier().run_once()] == [5]
    set_log_start_offsets(log_dir, {TP: 20})
    assert [o.deleted_segments for o in tiering.retention().run_once()] == [2]
    record = tiering.store.get_partition(TP)
    assert record is not None
    assert (record.highest_copied_offset, record.remote_log_start_offset) == (49, 20)
    return tiering, log_dir


def test_a_recreated_topic_is_tiered_from_its_start_and_the_old_segments_are_deleted(
    tiered: tuple[Tiering, Path],
) -> None:
    tiering, log_dir = tiered
    old = tiering.finished(TP)
    new_partition = recreate_topic(log_dir, 3)
    new_id = topic_uuid(new_partition)
    assert new_id != old[0].topic_id

    outcome = tiering.copier().run_once()[0]

    assert outcome.error is None
    assert (outcome.copied_segments, outcome.cleaned_segments, outcome.lag_segments) == (3, 3, 0)
    finished = tiering.finished(TP)
    assert [(s.start_offset, s.end_offset, s.topic_id) for s in finished] == [
        (0, 9, new_id),
        (10, 19, new_id),
        (20, 29, new_id),
    ]
    for segment in old:
        retired = tiering.store.get_segment(segment.segment_id)
        assert retired is not None and retired.state is SegmentState.DELETE_SEGMENT_FINISHED
    record = tiering.store.get_partition(TP)
    assert record is not None and record.topic_id == new_id
    assert (record.highest_copied_offset, record.remote_log_start_offset) == (29, -1)
    assert tiering.store.list_skipped_ranges(TP) == []
    # Every new offset is tiered, and no object of the deleted topic is left.
    assert_invariants(tiering.store, tiering.storage, [log_dir])
    assert tiering.registry.get_sample_value("rlm_topic_id_changes_total", LABELS) == 1

    # The next passes find the id they recorded: nothing more is retired, retention keeps all.
    assert tiering.copier().run_once()[0].copied_segments == 0
    assert tiering.retention().run_once()[0].deleted_segments == 0
    assert tiering.finished(TP) == finished
    assert tiering.registry.get_sample_value("rlm_topic_id_changes_total", LABELS) == 1


def crash_at_topic_marks(step: str) -> None:
    if step == "topic_segments_marked":
        raise OSError("the sidecar died")


@pytest.mark.parametrize("loop", ["copier", "retention"])
def test_a_sidecar_that_dies_after_marking_the_deleted_topics_segments_leaves_them_out_of_a_rebuild(
    tiered: tuple[Tiering, Path],
    tiering_factory: TieringFactory,
    sqlite_template: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    loop: str,
) -> None:
    """The deleted topic's segments are marked retired before the store retires them. A store
    rebuilt from the objects while the sidecar is down never makes them rows beside the new
    topic's: a query tier, which has no partition.metadata to tell the topics apart, would
    answer the new topic's offsets with the deleted topic's records."""
    tiering, log_dir = tiered
    old = tiering.finished(TP)
    new_id = topic_uuid(recreate_topic(log_dir, 3))
    run = tiering.copier if loop == "copier" else tiering.retention

    assert isinstance(run(step=crash_at_topic_marks).run_once()[0].error, OSError)

    assert tiering.finished(TP) == old  # marked only: the store still holds them
    marked = Retirement(tiering.clock(), TOPIC_DELETED)
    assert retirements(tiering, TP) == {s.start_offset: marked for s in old}
    rebuilt, report = rebuilt_from_objects(
        tiering, tiering_factory, log_dir, sqlite_template, tmp_path / "rebuilt", monkeypatch
    )
    assert rebuilt.finished(TP) == []
    assert sorted(o.reason.split(": ", 1)[1] for o in report.orphans) == [
        f"segment {s.segment_id} was retired at {tiering.clock()} (epoch ms): its topic was deleted "
        "(the partition holds a topic created again under its name)"
        for s in sorted(old, key=lambda s: str(s.segment_id))
    ]
    assert all(o.deletable and not o.deleted for o in report.orphans)

    # The sidecar's own store: the next pass retires them, deletes them and tiers the new topic.
    outcome = tiering.copier().run_once()[0]
    assert (outcome.error, outcome.cleaned_segments, outcome.copied_segments) == (None, 3, 3)
    assert [(s.start_offset, s.topic_id) for s in tiering.finished(TP)] == [
        (0, new_id),
        (10, new_id),
        (20, new_id),
    ]
    assert_invariants(tiering.store, tiering.storage, [log_dir])
    # The rebuilt store's copier tiers the new topic from its start as well.
    assert rebuilt.copier().run_once()[0].copied_segments == 3
    assert [s.start_offset for s in rebuilt.finished(TP)] == [0, 10, 20]


def test_a_deleted_topics_segments_whose_objects_cannot_be_marked_retired_are_not_retired(
    tiered: tuple[Tiering, Path],
) -> None:
    tiering, log_dir = tiered
    old = tiering.finished(TP)
    recreate_topic(log_dir, 3)
    storage = tiering.storage
    tiering.storage = FailingMarks(storage)

    outcome = tiering.copier().run_once()[0]

    assert isinstance(outcome.error, StorageUnavailableError) and "throttled" in str(outcome.error)
    assert tiering.finished(TP) == old
    record = tiering.store.get_partition(TP)
    assert record is not None and record.topic_id == old[0].topic_id
    tiering.storage = storage
    assert tiering.copier().run_once()[0].copied_segments == 3
    assert_invariants(tiering.store, tiering.storage, [log_dir])


def test_marking_the_deleted_topics_segments_keeps_the_lease_by_renewing_it_between_marks(
    tiered: tuple[Tiering, Path],
) -> None:
    tiering, log_dir = tiered
    recreate_topic(log_dir, 3)
    slow = SlowMarks(tiering, TP)
    tiering.storage = slow

    outcome = tiering.copier().run_once()[0]

    assert (outcome.error, outcome.cleaned_segments, outcome.copied_segments) == (None, 3, 3)
    assert slow.refused == [True, True, True]


def test_retention_does_not_apply_the_deleted_topics_log_start_to_the_new_topic(
    tiered: tuple[Tiering, Path],
) -> None:
    tiering, log_dir = tiered
    recreate_topic(log_dir, 3)

    outcome = tiering.retention().run_once()[0]  # before the copier's next pass

    assert outcome.error is None
    assert outcome.log_start_offset == -1
    assert tiering.finished(TP) == []
    assert {s.state for s in tiering.segments(TP)} == {SegmentState.DELETE_SEGMENT_FINISHED}
    assert tiering.copier().run_once()[0].copied_segments == 3
    assert tiering.retention().run_once()[0].deleted_segments == 0
    assert [s.start_offset for s in tiering.finished(TP)] == [0, 10, 20]
    assert_invariants(tiering.store, tiering.storage, [log_dir])


def stale_replica(
    tiered: tuple[Tiering, Path], tiering_factory: TieringFactory, tmp_path: Path
) -> tuple[Tiering, Path]:
    """Broker 2 was down while the topic was deleted and created again: its log dir still holds
    the deleted topic's replica (and id) when its sidecar finds the copy lease free, the new
    topic's 3 segments tiered. Returns broker 2's harness and log dir."""
    tiering, log_dir = tiered
    stale_dir = tmp_path / "stale-logs"
    shutil.copytree(log_dir, stale_dir)
    recreate_topic(log_dir, 3)
    assert tiering.copier().run_once()[0].copied_segments == 3
    tiering.leases.release_all()  # the live replica's sidecar restarts
    return tiering_factory(tiering.backend, stale_dir, broker_id=BROKER_ID + 1), stale_dir


def test_a_stale_replica_of_the_deleted_topic_retires_nothing_and_leaves_the_lease(
    tiered: tuple[Tiering, Path], tiering_factory: TieringFactory, tmp_path: Path
) -> None:
    tiering, log_dir = tiered
    stale, stale_dir = stale_replica(tiered, tiering_factory, tmp_path)
    stale_id = topic_uuid(LogDir(stale_dir).partition(TP.topic, TP.partition))
    new_id = topic_uuid(LogDir(log_dir).partition(TP.topic, TP.partition))
    live = tiering.finished(TP)
    keys = sorted(tiering.storage.list_keys(""))

    copied = stale.copier().run_once()[0]
    retained = stale.retention().run_once()[0]

    for outcome in (copied, retained):
        assert isinstance(outcome.error, RetiredTopicIdError)
        message = str(outcome.error)
        assert str(stale_dir / TP.topic) in message and "stale replica" in message
        assert (outcome.error.topic_id, outcome.error.successor) == (stale_id, new_id)
    assert stale.store.get_lease(TP) is None  # given back: the live replica's sidecar takes it
    assert tiering.finished(TP) == live
    assert sorted(tiering.storage.list_keys("")) == keys
    record = tiering.store.get_partition(TP)
    assert record is not None and (record.topic_id, record.highest_copied_offset) == (new_id, 29)
    assert stale.registry.get_sample_value("rlm_topic_id_changes_total", LABELS) is None

    resumed = tiering.copier().run_once()[0]  # the live replica's sidecar takes the lease again
    assert (resumed.error, resumed.skipped) == (None, None)
    lease = tiering.store.get_lease(TP)
    assert lease is not None and lease.owner == BROKER_ID
    assert_invariants(tiering.store, tiering.storage, [log_dir])


def test_a_stale_replica_of_a_topic_never_tiered_retires_nothing(
    backend: Backend, tiering_factory: TieringFactory, tmp_path: Path
) -> None:
    # The deleted topic was never tiered (it rolled no segment): the store never saw its id. Its
    # stale replica's partition.metadata is older than the live topic's first copy.
    stale_dir, log_dir = tmp_path / "stale-logs", tmp_path / "logs"
    write_topic(stale_dir, 2, seed=3)
    live_partition = write_topic(log_dir, 3, seed=1)
    tiering = tiering_factory(backend, log_dir)
    assert tiering.copier().run_once()[0].copied_segments == 3
    live = tiering.finished(TP)
    tiering.leases.release_all()
    metadata = stale_dir / f"{TP.topic}-{TP.partition}" / PARTITION_METADATA
    written_ms = min(s.event_time_ms for s in live) - 3_600_000  # an hour before the first copy
    os.utime(metadata, ns=(written_ms * 1_000_000, written_ms * 1_000_000))
    stale = tiering_factory(backend, stale_dir, broker_id=BROKER_ID + 1, clock=tiering.clock)

    errors = [stale.copier().run_once()[0].error, stale.retention().run_once()[0].error]

    for error in errors:
        assert isinstance(error, StaleReplicaError) and not isinstance(error, RetiredTopicIdError)
        assert str(metadata) in str(error) and "stale replica" in str(error)
    assert stale.store.get_lease(TP) is None
    assert tiering.finished(TP) == live
    record = tiering.store.get_partition(TP)
    assert record is not None and record.topic_id == topic_uuid(live_partition)
    resumed = tiering.copier().run_once()[0]
    assert (resumed.error, resumed.skipped) == (None, None)
    assert_invariants(tiering.store, tiering.storage, [log_dir])


def test_segments_rebuilt_without_a_description_do_not_make_a_new_topic_stale(
    tiered: tuple[Tiering, Path],
) -> None:
    # rebuild-metadata restored the deleted topic's rows from objects without a description (no
    # broker, no copy time: the rebuild's time) after the topic was created again.
    tiering, log_dir = tiered
    rebuilt_ms = time.time_ns() // 1_000_000 + 86_400_000
    with tiering.store.engine.begin() as conn:
        conn.execute(update(SegmentRow).values(broker_id=UNKNOWN_BROKER, event_time_ms=rebuilt_ms))
    new_partition = recreate_topic(log_dir, 3)

    outcome = tiering.copier().run_once()[0]

    assert (outcome.error, outcome.copied_segments) == (None, 3)
    record = tiering.store.get_partition(TP)
    assert record is not None and record.topic_id == topic_uuid(new_partition)


class ReleaseFailingStore(SqlMetadataStore):
    """The real store, except that giving a lease back fails."""

    def release_lease(self, lease: Lease) -> bool:
        raise MetadataUnavailableError("the metadata database did not answer", kind="timeout")


def test_a_stale_replica_whose_lease_release_fails_still_says_it_is_stale(
    tiered: tuple[Tiering, Path], tiering_factory: TieringFactory, tmp_path: Path
) -> None:
    tiering, _ = tiered
    stale, _ = stale_replica(tiered, tiering_factory, tmp_path)
    live = tiering.finished(TP)
    failing = ReleaseFailingStore(create_engine_for_url(tiering.backend.metadata_url), clock=stale.clock)
    stale.leases = LeaseKeeper(failing, BROKER_ID + 1, stale.settings.remote_log_manager_lease_ttl_ms)
    try:
        copied = stale.copier().run_once()[0]
        retained = stale.retention().run_once()[0]
    finally:
        failing.close()

    for outcome in (copied, retained):
        assert isinstance(outcome.error, RetiredTopicIdError)
        assert "stale replica" in str(outcome.error)
    assert tiering.finished(TP) == live


def test_a_corrupt_partition_metadata_is_an_error_naming_it_and_deletes_nothing(
    tiered: tuple[Tiering, Path],
) -> None:
    tiering, log_dir = tiered
    old = tiering.finished(TP)
    keys_before = sorted(tiering.storage.list_keys(""))
    partition = recreate_topic(log_dir, 3)
    metadata = partition.path / PARTITION_METADATA
    metadata.write_text("version: 0\ntopic_id: not-an-id")

    copied = tiering.copier().run_once()[0]
    retained = tiering.retention().run_once()[0]

    for outcome in (copied, retained):
        assert isinstance(outcome.error, CorruptCheckpointError)
        assert str(metadata) in str(outcome.error)
    assert tiering.finished(TP) == old
    assert sorted(tiering.storage.list_keys("")) == keys_before
    record = tiering.store.get_partition(TP)
    assert record is not None
    assert (record.topic_id, record.highest_copied_offset, record.remote_log_start_offset) == (
        old[0].topic_id,
        49,
        20,
    )


def test_without_partition_metadata_the_remote_state_is_kept(tiered: tuple[Tiering, Path]) -> None:
    # A broker that writes no partition.metadata: nothing tells topics apart, so nothing changes.
    tiering, log_dir = tiered
    old = tiering.finished(TP)
    partition = LogDir(log_dir).partition(TP.topic, TP.partition)
    (partition.path / PARTITION_METADATA).unlink()

    assert tiering.copier().run_once()[0].error is None
    assert tiering.retention().run_once()[0].error is None

    assert tiering.finished(TP) == old
    record = tiering.store.get_partition(TP)
    assert record is not None
    assert (record.topic_id, record.highest_copied_offset, record.remote_log_start_offset) == (
        old[0].topic_id,
        49,
        20,
    )
    assert tiering.registry.get_sample_value("rlm_topic_id_changes_total", LABELS) is None


def test_a_partition_tiered_without_an_id_adopts_the_one_the_broker_writes(
    backend: Backend, tiering_factory: TieringFactory, tmp_path: Path
) -> None:
    log_dir = tmp_path / "logs"
    partition = write_topic(log_dir, 3, seed=1)
    metadata = partition.path / PARTITION_METADATA
    written = metadata.read_bytes()
    metadata.unlink()
    tiering = tiering_factory(backend, log_dir)
    assert tiering.copier().run_once()[0].copied_segments == 3
    record = tiering.store.get_partition(TP)
    assert record is not None and record.topic_id is None

    metadata.write_bytes(written)  # a broker upgraded to one that writes it
    outcome = tiering.copier().run_once()[0]

    assert (outcome.error, outcome.cleaned_segments) == (None, 0)
    record = tiering.store.get_partition(TP)
    assert record is not None
    assert (record.topic_id, record.highest_copied_offset) == (topic_uuid(partition), 29)
    assert [s.topic_id for s in tiering.finished(TP)] == [None, None, None]
    assert tiering.registry.get_sample_value("rlm_topic_id_changes_total", LABELS) is None


def adopt(
    tiering: Tiering, partition: PartitionDir, lease: Lease, storage: RemoteStorage
) -> TopicIdChange | None:
    """What the copier does first in a pass: adopt the broker's topic id of ``partition``."""
    clock, metrics = tiering.clock(), tiering.metrics
    return adopt_local_topic_id(
        tiering.store, storage, partition, lease, tiering.leases, now_ms=clock, metrics=metrics
    )


class TakenOverAtFirstMark(DelegatingStorage):
    """``tiering``'s storage, where marking the first segment retired takes longer than the lease:
    meanwhile ``takeover`` runs (another sidecar takes the lease, acts, and gives it back)."""

    def __init__(self, tiering: Tiering, takeover: Callable[[], None]) -> None:
        super().__init__(tiering.storage)
        self.takeover: Callable[[], None] | None = takeover

    def put_object(self, key: str, source: PutSource, **kwargs: Any) -> PutResult:
        result = self.inner.put_object(key, source, **kwargs)
        if RETIRED_KEY in (kwargs.get("metadata") or {}) and self.takeover is not None:
            takeover, self.takeover = self.takeover, None
            takeover()
        return result


def test_a_lease_taken_anew_while_marking_retires_no_segment_left_unmarked(
    tiered: tuple[Tiering, Path], tiering_factory: TieringFactory, tmp_path: Path
) -> None:
    """While the live replica's sidecar marks the deleted topic's segments, its lease expires; the
    stale replica's sidecar (broker 2, whose log of the deleted topic is one segment further)
    takes it, tiers that segment and gives the lease back. Every segment the live sidecar then
    retires is marked first: one retired unmarked would come back in a store rebuilt from the
    objects before they are deleted, answering the new topic's offsets with the deleted topic's."""
    tiering, log_dir = tiered
    stale_dir = tmp_path / "stale-logs"
    write_topic(stale_dir, 6, seed=1)  # the records tiered, and one segment more
    shutil.copy2(
        log_dir / f"{TP.topic}-{TP.partition}" / PARTITION_METADATA, stale_dir / f"{TP.topic}-{TP.partition}"
    )
    partition = recreate_topic(log_dir, 3)
    stale = tiering_factory(tiering.backend, stale_dir, broker_id=BROKER_ID + 1, clock=tiering.clock)

    def takeover() -> None:
        tiering.clock.advance(tiering.settings.remote_log_manager_lease_ttl_ms + 1)
        assert stale.copier().run_once()[0].copied_segments == 1
        stale.leases.release_all()

    lease = tiering.leases.hold(TP)
    assert lease is not None
    storage = TakenOverAtFirstMark(tiering, takeover)
    with pytest.raises(StaleLeaseError, match="taken over while the deleted topic's segments"):
        adopt(tiering, partition, lease, storage)

    retiring = [s for s in tiering.segments(TP) if s.state is SegmentState.DELETE_SEGMENT_STARTED]
    unmarked = [
        s.start_offset
        for s in retiring
        if read_retired(tiering.storage.object_metadata(s.layout.index_key) or {}) is None
    ]
    assert unmarked == []
    # The next pass marks and retires every segment of the deleted topic, and tiers the new one.
    outcome = tiering.copier().run_once()[0]
    assert (outcome.error, outcome.cleaned_segments, outcome.copied_segments) == (None, 4, 3)
    assert [s.start_offset for s in tiering.finished(TP)] == [0, 10, 20]


def test_a_deletion_whose_lease_was_taken_anew_while_marking_leaves_the_topic_created_again_alone(
    tiered: tuple[Tiering, Path],
) -> None:
    """``rlm retention delete-topic`` of the deleted topic stalls past its lease while it marks the
    segments; meanwhile the topic created again is tiered to the deleted one's offsets by its
    sidecar, which adopted the new id and gave the lease back. The deletion must not go on with
    the new topic's partition: its log start past them would hide them, and retention delete them."""
    tiering, log_dir = tiered
    old_id = tiering.finished(TP)[0].topic_id
    assert old_id is not None
    ttl_ms = tiering.settings.remote_log_manager_lease_ttl_ms
    tiering.leases.release_all()
    tiering.clock.advance(10 * ttl_ms + 1)
    new_id = topic_uuid(recreate_topic(log_dir, 5))

    def takeover() -> None:
        tiering.clock.advance(ttl_ms + 1)
        outcome = tiering.copier().run_once()[0]
        assert (outcome.error, outcome.copied_segments) == (None, 5)
        tiering.leases.release_all()

    operator = LeaseKeeper(tiering.store, BROKER_ID + 1, ttl_ms)
    with pytest.raises(StaleLeaseError, match="taken over"):
        delete_partition(
            tiering.store,
            TakenOverAtFirstMark(tiering, takeover),
            operator,
            TP,
            old_id,
            clock=tiering.clock,
            idle_ms=10 * ttl_ms,
        )

    record = tiering.store.get_partition(TP)
    assert record is not None and record.topic_id == new_id
    assert (record.remote_log_start_offset, record.deletion_state) == (-1, None)
    assert tiering.retention().run_once()[0].deleted_segments == 0
    assert [s.start_offset for s in tiering.finished(TP)] == [0, 10, 20, 30, 40]
    assert_invariants(tiering.store, tiering.storage, [log_dir])


def test_a_stale_replica_of_a_deleted_topic_whose_segments_retention_deleted_tiers_nothing(
    backend: Backend, tiering_factory: TieringFactory, tmp_path: Path
) -> None:
    log_dir, stale_dir = tmp_path / "logs", tmp_path / "stale-logs"
    write_topic(log_dir, 5, seed=1)
    write_topic(stale_dir, 6, seed=1)  # broker 2's replica of it, one segment further
    metadata = f"{TP.topic}-{TP.partition}/{PARTITION_METADATA}"
    shutil.copy2(log_dir / metadata, stale_dir / metadata)
    tiering = tiering_factory(backend, log_dir, remote_log_start_offset_from_broker=True)
    assert tiering.copier().run_once()[0].copied_segments == 5
    set_log_start_offsets(log_dir, {TP: 50})
    assert tiering.retention().run_once()[0].deleted_segments == 5  # nothing of it left remote
    partition = recreate_topic(log_dir, 3)
    lease = tiering.leases.hold(TP)
    assert lease is not None
    change = adopt(tiering, partition, lease, tiering.storage)
    assert change is not None and change.reset
    tiering.leases.release_all()  # the live replica's sidecar restarts before it tiered anything
    stale = tiering_factory(backend, stale_dir, broker_id=BROKER_ID + 1, clock=tiering.clock)

    outcome = stale.copier().run_once()[0]

    assert isinstance(outcome.error, RetiredTopicIdError)  # the deleted topic's id, retired
    assert tiering.finished(TP) == []
    assert tiering.copier().run_once()[0].copied_segments == 3  # the live replica's sidecar
    assert [s.topic_id for s in tiering.finished(TP)] == [topic_uuid(partition)] * 3
