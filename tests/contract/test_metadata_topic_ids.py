"""Contract of the topic id a partition's remote state belongs to, on SQLite and PostgreSQL.

A topic deleted and created again under the same name has a new id and offsets from 0 again: the
old topic's segments, highest copied offset, remote log start offset and skipped ranges must not
answer for it.
"""

from __future__ import annotations

import dataclasses
import uuid

import pytest
from sqlalchemy import insert, text

from metadata.engine import create_engine_for_url
from metadata.models import PartitionRow, SegmentRow
from metadata.rows import segment_values
from metadata.schema import upgrade
from metadata.store import SqlMetadataStore
from rlm.errors import OlderTopicIdError, RetiredTopicIdError, StaleLeaseError
from rlm.metastore import RemoteSegment, SegmentState, SkipKind, SkippedRange, TopicPartition
from tests.metadata_support import (
    TP,
    add_finished,
    segment,
    stored_tree,
)

OLD = uuid.UUID("11111111-1111-4111-8111-111111111111")
NEW = uuid.UUID("22222222-2222-4222-8222-222222222222")
STARTED = SegmentState.COPY_SEGMENT_STARTED
FINISHED = SegmentState.COPY_SEGMENT_FINISHED
DELETING = SegmentState.DELETE_SEGMENT_STARTED
DELETED = SegmentState.DELETE_SEGMENT_FINISHED


def of(
    topic_id: uuid.UUID | None,
    start: int,
    end: int,
    max_timestamp_ms: int = 1_000,
    *,
    epochs: tuple[tuple[int, int], ...] | None = None,
    tp: TopicPartition = TP,
) -> RemoteSegment:
    """A segment of ``tp`` copied from the topic with ``topic_id``."""
    return dataclasses.replace(segment(start, end, max_timestamp_ms, tp=tp, epochs=epochs), topic_id=topic_id)


def states(store: SqlMetadataStore) -> dict[uuid.UUID | None, list[SegmentState]]:
    found: dict[uuid.UUID | None, list[SegmentState]] = {}
    for listed in store.list_segments(TP):
        found.setdefault(listed.topic_id, []).append(listed.state)
    return found


def test_the_first_segment_names_the_partitions_topic(store: SqlMetadataStore) -> None:
    store.add_segment(of(OLD, 0, 9))
    record = store.get_partition(TP)
    assert record is not None and record.topic_id == OLD
    store.add_segment(of(None, 10, 19))  # a segment without an id changes nothing
    record = store.get_partition(TP)
    assert record is not None and record.topic_id == OLD


@pytest.mark.parametrize("first", [OLD, NEW])
def test_segments_of_two_topics_leave_the_id_to_the_broker(store: SqlMetadataStore, first: uuid.UUID) -> None:
    # rebuild-metadata over a bucket that still holds a deleted topic's objects beside those of
    # the topic created again under its name, in either order: the partition's id is unknown
    # until the broker's partition.metadata is adopted, which retires the deleted topic's.
    second = NEW if first == OLD else OLD
    add_finished(store, of(first, 0, 9 if first == NEW else 49), of(second, 0, 9 if second == NEW else 49))
    add_finished(store, of(first, 60, 69))  # another of the first id keeps it unknown
    record = store.get_partition(TP)
    assert record is not None and record.topic_id is None

    change = store.adopt_topic_id(TP, NEW, event_time_ms=5)

    assert (change.previous, change.reset) == (None, True)
    record = store.get_partition(TP)
    assert record is not None and record.topic_id == NEW
    new_end = 69 if first == NEW else 9
    assert record.highest_copied_offset == new_end  # not the deleted topic's 49 (or 69)
    assert states(store)[OLD] == [DELETING] * (2 if first == OLD else 1)
    assert all(state is FINISHED for state in states(store)[NEW])


def test_the_recorded_id_again_changes_nothing(store: SqlMetadataStore) -> None:
    add_finished(store, of(OLD, 0, 9, epochs=((3, 0),)))
    store.advance_log_start_offset(TP, 5)
    change = store.adopt_topic_id(TP, OLD, event_time_ms=7)
    assert (change.previous, change.retired, change.reset) == (OLD, 0, False)
    record = store.get_partition(TP)
    assert record is not None
    assert (record.highest_copied_offset, record.remote_log_start_offset) == (9, 5)
    assert store.segment_for_offset(TP, 5) is not None


def test_a_new_topic_id_retires_the_old_topics_remote_state(store: SqlMetadataStore) -> None:
    add_finished(store, of(OLD, 0, 9, 500, epochs=((3, 0),)), of(OLD, 10, 19, 600, epochs=((3, 10),)))
    store.add_segment(of(OLD, 20, 29))  # a copy under way when the topic was deleted
    store.advance_log_start_offset(TP, 10)
    store.add_skipped_range(SkippedRange(TP, 30, 39, SkipKind.OPERATOR, "bad segment", 1))
    store.update_segment_state(
        next(store.list_segments(TP)).segment_id, DELETING, event_time_ms=2
    )  # retention had started on the first one

    change = store.adopt_topic_id(TP, NEW, event_time_ms=99)

    assert (change.previous, change.retired, change.reset) == (OLD, 2, True)
    assert states(store) == {OLD: [DELETING, DELETING, DELETING]}
    assert [s.event_time_ms for s in store.list_segments(TP)][1:] == [99, 99]
    record = store.get_partition(TP)
    assert record is not None and record.topic_id == NEW
    assert (record.highest_copied_offset, record.remote_log_start_offset) == (-1, -1)
    assert record.remote_log_size_bytes == 0
    assert store.highest_copied_offset(TP, leader_epoch=3) == -1
    assert store.list_skipped_ranges(TP) == []
    assert store.segment_for_offset(TP, 5) is None
    assert store.first_segment_for_timestamp(TP, 0) is None
    assert store.max_timestamp(TP) is None
    assert stored_tree(store) == {}
    summary = store.remote_tier_summaries([TP])[TP]
    assert (summary.first_offset, summary.max_timestamp, summary.record.topic_id) == (None, None, NEW)

    # The new topic is tiered from its offset 0 on, and only its segments answer.
    fresh = of(NEW, 0, 4, 700, epochs=((0, 0),))
    add_finished(store, fresh)
    assert store.highest_copied_offset(TP) == 4
    found = store.segment_for_offset(TP, 3)
    assert found is not None and found.segment_id == fresh.segment_id
    assert store.highest_copied_offset(TP, leader_epoch=3) == -1


def test_adopting_an_id_keeps_segments_copied_without_one(store: SqlMetadataStore) -> None:
    # A broker without partition.metadata: no id anywhere; a newer one writes it.
    add_finished(store, of(None, 0, 9))
    change = store.adopt_topic_id(TP, NEW, event_time_ms=5)
    assert (change.previous, change.retired, change.reset) == (None, 0, False)
    record = store.get_partition(TP)
    assert record is not None and (record.topic_id, record.highest_copied_offset) == (NEW, 9)
    assert states(store) == {None: [FINISHED]}


def test_adopting_an_id_retires_live_segments_of_other_ids(store: SqlMetadataStore) -> None:
    # What a partition the topic's re-creation reached before ids were recorded looks like.
    add_finished(store, of(OLD, 0, 49), of(NEW, 50, 59))
    with store.engine.begin() as conn:
        conn.exec_driver_sql("UPDATE rlm_partition SET topic_id = NULL")
    change = store.adopt_topic_id(TP, NEW, event_time_ms=5)
    assert (change.previous, change.retired, change.reset) == (None, 1, True)
    assert states(store) == {OLD: [DELETING], NEW: [FINISHED]}
    record = store.get_partition(TP)
    assert record is not None and record.highest_copied_offset == 59
    assert store.segment_for_offset(TP, 10) is None


@pytest.mark.parametrize("recorded", [True, False], ids=["recorded", "named-by-segments"])
def test_a_retired_id_is_never_adopted_again(store: SqlMetadataStore, recorded: bool) -> None:
    # A broker that was down while the topic was deleted and created again comes back with the
    # deleted topic's log (and id): its sidecar must not retire the live topic's segments.
    add_finished(store, of(OLD, 0, 49))
    if not recorded:  # the store had not learned the old id, only its segments name it
        with store.engine.begin() as conn:
            conn.exec_driver_sql("UPDATE rlm_partition SET topic_id = NULL")
    assert store.adopt_topic_id(TP, NEW, event_time_ms=99).reset
    add_finished(store, of(NEW, 0, 4))

    with pytest.raises(RetiredTopicIdError) as raised:
        store.adopt_topic_id(TP, OLD, event_time_ms=200)

    error = raised.value
    assert (error.topic_id, error.successor, error.retired_at_ms) == (OLD, NEW, 99)
    assert f"{TP.topic}-{TP.partition}" in str(error)
    assert states(store) == {OLD: [DELETING], NEW: [FINISHED]}
    record = store.get_partition(TP)
    assert record is not None and (record.topic_id, record.highest_copied_offset) == (NEW, 4)
    found = store.segment_for_offset(TP, 3)
    assert found is not None and found.topic_id == NEW
    # The live id is still confirmed, and a third topic (NEW deleted in turn) is adopted.
    assert not store.adopt_topic_id(TP, NEW, event_time_ms=201).reset
    third = uuid.UUID("33333333-3333-4333-8333-333333333333")
    assert store.adopt_topic_id(TP, third, event_time_ms=300).retired == 1
    with pytest.raises(RetiredTopicIdError) as raised:
        store.adopt_topic_id(TP, NEW, event_time_ms=301)
    assert (raised.value.successor, raised.value.retired_at_ms) == (third, 300)


def test_an_id_replaced_before_anything_of_it_was_tiered_is_not_retired(store: SqlMetadataStore) -> None:
    # The live topic's sidecar adopted its id and tiered nothing yet; a stale replica's sidecar
    # then adopted the deleted topic's id. Nothing was retired: the live id may come back.
    store.adopt_topic_id(TP, NEW, event_time_ms=1)
    assert store.adopt_topic_id(TP, OLD, event_time_ms=2).retired == 0
    change = store.adopt_topic_id(TP, NEW, event_time_ms=3)
    assert (change.previous, change.retired) == (OLD, 0)
    record = store.get_partition(TP)
    assert record is not None and record.topic_id == NEW


def test_an_id_written_before_the_segments_it_would_retire_is_refused(store: SqlMetadataStore) -> None:
    # A stale replica of a topic never tiered: its partition.metadata predates the live topic's
    # first copy (event time 1_700_000_000_000) by more than the clock skew allowed.
    add_finished(store, of(NEW, 0, 9))
    first_copied = next(store.list_segments(TP)).event_time_ms
    with pytest.raises(OlderTopicIdError) as raised:
        store.adopt_topic_id(TP, OLD, event_time_ms=5, written_ms=first_copied - 61_000)
    assert (raised.value.topic_id, raised.value.other, raised.value.first_copied_ms) == (
        OLD,
        NEW,
        first_copied,
    )
    assert states(store) == {NEW: [FINISHED]}
    # Within the skew, or written after the copy (a topic created again), the id is adopted.
    change = store.adopt_topic_id(TP, OLD, event_time_ms=5, written_ms=first_copied - 60_000)
    assert (change.previous, change.retired) == (NEW, 1)


def test_a_stale_lease_cannot_adopt_an_id(store: SqlMetadataStore) -> None:
    lease = store.acquire_lease(TP, owner=1, ttl_ms=30_000)
    assert lease is not None
    add_finished(store, of(OLD, 0, 9))
    store.acquire_lease(TP, owner=1, ttl_ms=30_000)  # a restart: a newer epoch
    for topic_id in (OLD, NEW):
        with pytest.raises(StaleLeaseError):
            store.adopt_topic_id(TP, topic_id, event_time_ms=5, fence=lease)
    record = store.get_partition(TP)
    assert record is not None and (record.topic_id, record.highest_copied_offset) == (OLD, 9)
    assert states(store) == {OLD: [FINISHED]}


def live_ids(store: SqlMetadataStore) -> set[uuid.UUID]:
    return {s.segment_id for s in store.list_segments(TP, states=(STARTED, FINISHED))}


@pytest.mark.parametrize("case", ["recorded", "without-ids", "two-topics", "new-partition"])
def test_what_adopting_an_id_would_retire_is_listed_first_and_changes_nothing(
    store: SqlMetadataStore, case: str
) -> None:
    # The copier marks these segments' objects retired before it adopts the id.
    if case == "recorded":
        add_finished(store, of(OLD, 0, 9), of(OLD, 10, 19), of(None, 20, 29))
        store.add_segment(of(OLD, 30, 39))  # a copy under way when the topic was deleted
    elif case == "without-ids":  # copied from a broker without partition.metadata: kept
        add_finished(store, of(None, 0, 9))
    elif case == "two-topics":  # rebuilt from both topics' objects: the id is unknown
        add_finished(store, of(OLD, 0, 49), of(NEW, 0, 9), of(None, 50, 59))
    before = list(store.list_segments(TP))
    live = live_ids(store)

    listed = store.topic_id_retirees(TP, NEW)

    assert listed is not None
    assert list(store.list_segments(TP)) == before
    assert [s.start_offset for s in listed] == sorted(s.start_offset for s in listed)
    assert store.topic_id_retirees(TP, NEW) == listed
    change = store.adopt_topic_id(TP, NEW, event_time_ms=99)
    assert {s.segment_id for s in listed} == live - live_ids(store)
    assert change.retired == len(listed)
    assert {s.topic_id for s in listed} <= {OLD, None}
    assert store.topic_id_retirees(TP, NEW) is None  # recorded now: adopting it changes nothing


def test_what_a_refused_id_would_retire_is_refused_alike(store: SqlMetadataStore) -> None:
    add_finished(store, of(OLD, 0, 49))
    store.adopt_topic_id(TP, NEW, event_time_ms=99)
    add_finished(store, of(NEW, 0, 9))
    first_copied = min(s.event_time_ms for s in store.list_segments(TP, states=(FINISHED,)))
    with pytest.raises(RetiredTopicIdError, match="was retired at 99 ms"):
        store.topic_id_retirees(TP, OLD)
    third = uuid.UUID("33333333-3333-4333-8333-333333333333")
    with pytest.raises(OlderTopicIdError):
        store.topic_id_retirees(TP, third, written_ms=first_copied - 61_000)
    lease = store.acquire_lease(TP, owner=1, ttl_ms=30_000)
    assert lease is not None
    store.acquire_lease(TP, owner=1, ttl_ms=30_000)  # a restart: a newer epoch
    with pytest.raises(StaleLeaseError):
        store.topic_id_retirees(TP, third, fence=lease)
    assert states(store) == {OLD: [DELETING], NEW: [FINISHED]}


def test_the_migration_fills_in_the_id_its_segments_agree_on(empty_url: str) -> None:
    upgrade(empty_url, "0005")
    engine = create_engine_for_url(empty_url, pooled=False)
    try:
        with engine.begin() as conn:
            for partition, ids in [(0, (OLD, OLD)), (1, (OLD, NEW)), (2, (None,))]:
                partition_id = conn.execute(
                    text("INSERT INTO rlm_partition (topic, partition) VALUES ('orders', :p) RETURNING id"),
                    {"p": partition},
                ).scalar_one()
                for n, topic_id in enumerate(ids):
                    values = segment_values(of(topic_id, 10 * n, 10 * n + 9), partition_id)
                    conn.execute(insert(SegmentRow).values(values))
    finally:
        engine.dispose()
    upgrade(empty_url)
    with SqlMetadataStore.open(empty_url) as store:
        found = [store.get_partition(TopicPartition(TP.topic, p)) for p in range(3)]
        assert [record.topic_id if record else "missing" for record in found] == [OLD, None, None]


def test_the_migration_remembers_the_ids_already_retired(empty_url: str) -> None:
    upgrade(empty_url, "0007")
    engine = create_engine_for_url(empty_url, pooled=False)
    try:
        with engine.begin() as conn:
            partition_id = conn.execute(
                insert(PartitionRow)
                .values(topic="orders", partition=0, topic_id=NEW)
                .returning(PartitionRow.id)
            ).scalar_one()
            rows = [
                dataclasses.replace(of(OLD, 0, 9), state=DELETED, event_time_ms=40),
                dataclasses.replace(of(OLD, 10, 19), state=DELETING, event_time_ms=42),
                of(NEW, 0, 9),
            ]
            for row in rows:
                conn.execute(insert(SegmentRow).values(segment_values(row, partition_id)))
    finally:
        engine.dispose()
    upgrade(empty_url)
    with SqlMetadataStore.open(empty_url) as store:
        with pytest.raises(RetiredTopicIdError) as raised:
            store.adopt_topic_id(TP, OLD, event_time_ms=50)
        assert (raised.value.successor, raised.value.retired_at_ms) == (NEW, 42)
        assert states(store)[NEW] == [STARTED]
