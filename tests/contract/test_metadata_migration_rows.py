"""Migrations of databases that hold rows, on SQLite and PostgreSQL: going down to an older
revision and up again keeps what both revisions have."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import func, select, text

from metadata.engine import create_engine_for_url
from metadata.models import PendingUploadRow, SegmentEpochRow
from metadata.schema import downgrade, upgrade
from metadata.store import SqlMetadataStore
from rlm.errors import MetadataError
from rlm.metastore import PendingUpload, SegmentState, TopicPartition
from tests.metadata_support import (
    TP,
    add_finished,
    segment,
)


def counts(url: str) -> tuple[int, int]:
    """Rows of ``rlm_segment_epoch`` and of ``rlm_pending_upload``."""
    engine = create_engine_for_url(url, pooled=False)
    try:
        with engine.connect() as conn:
            epochs = conn.execute(select(func.count()).select_from(SegmentEpochRow)).scalar_one()
            uploads = conn.execute(select(func.count()).select_from(PendingUploadRow)).scalar_one()
            return int(epochs), int(uploads)
    finally:
        engine.dispose()


@pytest.mark.parametrize("revision", ["0005", "0003"])
def test_going_down_and_up_again_keeps_segments_their_epochs_and_uploads(
    empty_url: str, revision: str
) -> None:
    upgrade(empty_url)
    finished = segment(0, 99, epochs=((0, 0), (1, 50)))
    copying = segment(100, 199, epochs=((1, 100),))
    upload = PendingUpload("3f/orders-0/00000000000000000100-seg.log", "upload-1")
    with SqlMetadataStore.open(empty_url) as store:
        add_finished(store, finished)
        store.add_segment(copying)
        store.add_pending_upload(copying.segment_id, upload)
    assert counts(empty_url) == (3, 1)

    downgrade(empty_url, revision)
    assert counts(empty_url) == (3, 1)
    upgrade(empty_url)

    with SqlMetadataStore.open(empty_url) as store:
        assert [s.segment_id for s in store.list_segments(TP, leader_epoch=1)] == [
            finished.segment_id,
            copying.segment_id,
        ]
        assert store.pending_uploads(copying.segment_id) == [upload]
        assert store.highest_copied_offset(TP, leader_epoch=0) == 49
        assert store.remote_log_size(TP) == finished.size_bytes
        stored = store.get_segment(copying.segment_id)
        assert stored is not None and stored.state is SegmentState.COPY_SEGMENT_STARTED


def test_ledger_rows_recorded_before_topic_ids_count_until_the_topic_is_created_again(empty_url: str) -> None:
    old, new = uuid.UUID(int=1), uuid.UUID(int=2)
    upgrade(empty_url, "0006")
    engine = create_engine_for_url(empty_url, pooled=False)
    try:
        with engine.begin() as conn:
            for output, partition, next_offset in [
                ("file:///a", 0, 10_000),
                ("file:///b", 0, 7),
                ("file:///a", 1, 5),
            ]:
                conn.execute(
                    text(
                        "INSERT INTO rlm_export_offset (output, topic, partition, next_offset, updated_ms) "
                        "VALUES (:output, 'orders', :partition, :next_offset, 1)"
                    ),
                    {"output": output, "partition": partition, "next_offset": next_offset},
                )
    finally:
        engine.dispose()
    upgrade(empty_url)

    other = TopicPartition(TP.topic, 1)
    with SqlMetadataStore.open(empty_url) as store:
        assert store.export_offsets("file:///a") == {TP: 10_000, other: 5}
        store.adopt_topic_id(TP, old, event_time_ms=1)  # the id learned: the rows are its topic's
        assert store.export_offsets("file:///a") == {TP: 10_000, other: 5}
        store.adopt_topic_id(TP, new, event_time_ms=2)  # the topic deleted and created again
        assert store.export_offsets("file:///a") == {other: 5}
        assert store.export_offsets("file:///b") == {}
        store.record_export_offsets("file:///a", {TP: 40})
    downgrade(empty_url, "0006")
    upgrade(empty_url)
    with SqlMetadataStore.open(empty_url) as store:
        assert store.export_offsets("file:///a") == {TP: 40, other: 5}


@pytest.mark.parametrize("revision", ["0008", "0007"])
def test_going_below_the_lineages_is_refused_once_copies_were_replaced(empty_url: str, revision: str) -> None:
    # Dropping the truncations would let an export planned before one commit past it once the
    # lineages, counted from 0 again, are upgraded back.
    upgrade(empty_url)
    with SqlMetadataStore.open(empty_url) as store:
        add_finished(store, segment(0, 99), segment(100, 199))
        assert store.truncate_copies(TP, 100, event_time_ms=5) == 1
    with pytest.raises(MetadataError, match=r"rlm_copy_truncation"):
        downgrade(empty_url, revision)
    with SqlMetadataStore.open(empty_url) as store:  # still at head, the lineage kept
        record = store.get_partition(TP)
        assert record is not None and record.lineage == 1
        assert store.record_export_offsets("file:///a", {TP: 200}, lineages={TP: 0}) == {TP: 100}


def test_going_below_the_retired_topic_ids_is_refused_once_one_was_retired(empty_url: str) -> None:
    # Dropping them would let a stale replica's partition.metadata adopt a deleted topic's id again
    # and retire the live topic's copies.
    old, new = uuid.UUID(int=1), uuid.UUID(int=2)
    upgrade(empty_url)
    with SqlMetadataStore.open(empty_url) as store:
        store.adopt_topic_id(TP, old, event_time_ms=1)
        add_finished(store, segment(0, 99))
        store.adopt_topic_id(TP, new, event_time_ms=2)  # retires the old topic's copies
    with pytest.raises(MetadataError, match=r"rlm_retired_topic_id"):
        downgrade(empty_url, "0007")
