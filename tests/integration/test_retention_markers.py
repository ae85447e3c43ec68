"""The remote log start markers retention writes (:mod:`rlm.storage.log_start`), read back by a
rebuilt metadata store: a marker counts for the topic it was written for only.

A topic deleted and created again under the same name is another topic (a new id); the deleted
topic's marker stays beside its (deleted) segments, under its own id. Read back as the new topic's
log start, it would hide the new topic's offsets below it, and retention would then delete the
new topic's segments wholly below it.

The marker's write is not fenced by the copy lease: a sidecar that advanced the log start, then
stalled past its lease, writes its lower value after the next holder moved the log start further
and deleted the segments in between. Read back, that marker would give a rebuilt store offsets no
object holds; the late writer must leave the marker at the store's value.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from metadata.store import SqlMetadataStore
from rlm.config import Settings, TopicSettings
from rlm.errors import StaleLeaseError
from rlm.log.checkpoints import topic_id_to_uuid
from rlm.log.logdir import LogDir
from rlm.metastore.model import RemoteSegment, SegmentState
from rlm.metrics import Metrics
from rlm.pipeline.rebuild.job import restore_log_starts
from rlm.storage.delegate import DelegatingStorage
from rlm.storage.filesystem import FilesystemStorage
from rlm.storage.log_start import marker_key, marker_partition, read_marker, write_marker
from rlm.storage.protocol import PutResult, PutSource, RemoteStorage
from rlm.tiering.leases import LeaseKeeper
from rlm.tiering.retention import mark_log_start
from rlm.tiering.topic_identity import adopt_local_topic_id
from tests.clock import FakeClock
from tests.metadata_support import TP, backend_url, open_store, segment
from tests.tiering_support import BROKER_ID, Backend, SegmentPlan, Tiering, write_scripted_log_dir

DELETED_TOPIC_ID = uuid.UUID("00000000-0000-4000-8000-00000000dead")
NOW = 1_700_000_000_000
HOUR = 3_600_000


@pytest.fixture
def sqlite_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SqlMetadataStore]:
    with open_store(backend_url("sqlite", request, tmp_path), FakeClock()) as store:
        yield store


@pytest.fixture
def fs_storage(tmp_path: Path) -> Iterator[FilesystemStorage]:
    storage = FilesystemStorage(tmp_path / "remote")
    yield storage
    storage.close()


def test_a_deleted_topics_marker_does_not_move_the_new_topics_log_start(
    sqlite_store: SqlMetadataStore, fs_storage: FilesystemStorage
) -> None:
    # The new topic's segments start at 10, where its retention moved its log start.
    row = segment(10, 99, state=SegmentState.COPY_SEGMENT_STARTED)
    sqlite_store.add_segment(row)
    sqlite_store.update_segment_state(row.segment_id, SegmentState.COPY_SEGMENT_FINISHED, event_time_ms=1)
    assert row.topic_id is not None and row.topic_id != DELETED_TOPIC_ID
    write_marker(fs_storage, TP, row.topic_id, 10)
    write_marker(fs_storage, TP, DELETED_TOPIC_ID, 5_000)  # the deleted topic's, higher
    markers = {key: tp for key in fs_storage.list_keys("") if (tp := marker_partition(key)) is not None}
    assert len(markers) == 2

    restore_log_starts(sqlite_store, fs_storage, markers, (), now_ms=NOW)

    record = sqlite_store.get_partition(TP)
    assert record is not None and record.topic_id == row.topic_id
    assert record.remote_log_start_offset == 10


def test_a_marker_is_not_given_another_topics_log_start(
    sqlite_store: SqlMetadataStore, fs_storage: FilesystemStorage
) -> None:
    sqlite_store.add_segment(segment(10, 99))  # the new topic's, whose log start retention moved to 500
    sqlite_store.advance_log_start_offset(TP, 500)

    # A pass over the deleted topic's segments that stalled until the new topic's advance.
    mark_log_start(sqlite_store, fs_storage, TP, DELETED_TOPIC_ID, 5)

    assert read_marker(fs_storage, marker_key(TP, DELETED_TOPIC_ID)) == 5


class StalledPut(DelegatingStorage):
    """Remote storage whose first write of ``key`` lands only after ``meanwhile`` ran, as the
    write of a sidecar stalled (a long GC pause, a slow store) between its advance and its put."""

    def __init__(self, inner: RemoteStorage, key: str, meanwhile: Callable[[], None]) -> None:
        super().__init__(inner)
        self.key = key
        self.meanwhile: Callable[[], None] | None = meanwhile

    def put_object(self, key: str, source: PutSource, **options: Any) -> PutResult:
        if key == self.key and self.meanwhile is not None:
            meanwhile, self.meanwhile = self.meanwhile, None
            meanwhile()
        return super().put_object(key, source, **options)


def _retaining(tiering: Tiering, hours: int) -> Settings:
    return tiering.settings.replace(topic_defaults=TopicSettings(retention_ms=hours * HOUR))


def test_a_marker_written_late_by_a_sidecar_that_lost_its_lease_ends_at_the_stores_log_start(
    backend: Backend,
    tiering_factory: Callable[..., Tiering],
    request: pytest.FixtureRequest,
    tmp_path: Path,
) -> None:
    log_dir = tmp_path / "logs"
    write_scripted_log_dir(log_dir, {TP: [SegmentPlan(20, NOW - hours * HOUR) for hours in (5, 3, 1)]})
    clock = FakeClock(NOW)
    stalled = tiering_factory(backend, log_dir, clock)
    successor = tiering_factory(backend, log_dir, clock, broker_id=BROKER_ID + 1)
    assert all(o.error is None for o in stalled.copier().run_once())
    rows = stalled.finished(TP)
    marker = marker_key(TP, rows[0].topic_id)

    def successor_takes_over() -> None:
        clock.advance(stalled.settings.remote_log_manager_lease_ttl_ms + 1)
        (outcome,) = successor.retention(settings=_retaining(successor, 2)).run_once()
        assert (outcome.error, outcome.deleted_segments) == (None, 2)

    # The stalled sidecar advances to the second segment, the successor then to the third.
    stalled.storage = StalledPut(stalled.storage, marker, successor_takes_over)
    (late,) = stalled.retention(settings=_retaining(stalled, 4)).run_once()

    assert isinstance(late.error, StaleLeaseError)  # fenced at its first delete, after the marker

    record = stalled.store.get_partition(TP)
    assert record is not None and record.remote_log_start_offset == rows[2].start_offset
    assert stalled.storage.object_size(rows[1].layout.log_key) is None  # its offsets are gone
    assert read_marker(stalled.storage, marker) == rows[2].start_offset
    (tmp_path / "rebuilt").mkdir()
    rebuilt = open_store(backend_url("sqlite", request, tmp_path / "rebuilt"), clock)
    try:
        restore_log_starts(rebuilt, stalled.storage, {marker: TP}, (), now_ms=NOW)
        restored = rebuilt.get_partition(TP)
        assert restored is not None and restored.remote_log_start_offset == rows[2].start_offset
    finally:
        rebuilt.close()


def _rebuilt_rows(store: SqlMetadataStore, *rows: RemoteSegment) -> None:
    """Rows as ``rlm spark rebuild-metadata`` writes them: finished."""
    for row in rows:
        store.add_segment(row)
        store.update_segment_state(row.segment_id, SegmentState.COPY_SEGMENT_FINISHED, event_time_ms=1)


def test_adopting_the_brokers_id_keeps_its_topics_own_log_start_from_its_marker(
    sqlite_store: SqlMetadataStore, fs_storage: FilesystemStorage, tmp_path: Path
) -> None:
    """A store rebuilt while a deleted topic's segments were still there beside its successor's:
    adopting the successor's id retires the deleted topic's, and the log start is the one the
    successor's retention had moved to (its marker), not none: its offsets below it stay gone."""
    write_scripted_log_dir(tmp_path / "logs", {TP: [SegmentPlan(10, NOW)]})
    partition = LogDir(tmp_path / "logs").partition(TP.topic, TP.partition)
    assert partition.topic_id() is not None
    new_id = topic_id_to_uuid(partition.topic_id() or "")
    # The new topic's retention moved its log start to 50, and died before deleting [0, 49].
    new = [dataclasses.replace(segment(s, s + 49), topic_id=new_id) for s in (0, 50)]
    old = dataclasses.replace(segment(150, 299), topic_id=DELETED_TOPIC_ID)  # not yet deleted
    _rebuilt_rows(sqlite_store, *new, old)
    write_marker(fs_storage, TP, new_id, 50)
    write_marker(fs_storage, TP, DELETED_TOPIC_ID, 150)
    markers = {key: tp for key in fs_storage.list_keys("") if (tp := marker_partition(key)) is not None}
    restore_log_starts(sqlite_store, fs_storage, markers, (), now_ms=NOW)
    leases = LeaseKeeper(sqlite_store, BROKER_ID, 60_000)
    lease = leases.hold(TP)
    assert lease is not None

    change = adopt_local_topic_id(
        sqlite_store, fs_storage, partition, lease, leases, now_ms=NOW, metrics=Metrics()
    )

    assert change is not None and change.reset and change.retired == 1
    record = sqlite_store.get_partition(TP)
    assert record is not None and record.topic_id == new_id
    assert record.remote_log_start_offset == 50


def test_a_rebuilt_partition_of_two_topics_hides_no_segment_of_either_below_the_others_marker(
    sqlite_store: SqlMetadataStore, fs_storage: FilesystemStorage
) -> None:
    """Rows of a deleted topic not yet deleted beside its successor's leave the partition's id
    unknown until a sidecar adopts the broker's: each marker then says only that its own topic's
    offsets below it are gone, and must not hide the other topic's segments below it."""
    new_id = uuid.UUID("00000000-0000-4000-8000-0000000000ee")
    new = [dataclasses.replace(segment(s, s + 49), topic_id=new_id) for s in (0, 50)]
    old = dataclasses.replace(segment(150, 299), topic_id=DELETED_TOPIC_ID)
    _rebuilt_rows(sqlite_store, *new, old)
    write_marker(fs_storage, TP, new_id, 50)  # [0, 49] was being deleted
    write_marker(fs_storage, TP, DELETED_TOPIC_ID, 150)
    markers = {key: tp for key in fs_storage.list_keys("") if (tp := marker_partition(key)) is not None}

    restore_log_starts(sqlite_store, fs_storage, markers, (), now_ms=NOW)

    record = sqlite_store.get_partition(TP)
    assert record is not None and record.topic_id is None
    assert record.remote_log_start_offset == 50
