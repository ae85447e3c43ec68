"""Contract of the metadata store's segment operations, on SQLite and PostgreSQL."""

from __future__ import annotations

import dataclasses
import uuid

import pytest

from metadata.store import SqlMetadataStore
from rlm.errors import (
    DuplicateSegmentError,
    InvalidStateTransitionError,
    NotFoundError,
    StateConflictError,
)
from rlm.metastore import SegmentState, TopicPartition
from tests.metadata_support import TP, add_finished, segment

STARTED = SegmentState.COPY_SEGMENT_STARTED
FINISHED = SegmentState.COPY_SEGMENT_FINISHED
DELETE_STARTED = SegmentState.DELETE_SEGMENT_STARTED
DELETE_FINISHED = SegmentState.DELETE_SEGMENT_FINISHED
OTHER = TopicPartition("payments", 3)


def test_added_segment_reads_back_with_every_field(store: SqlMetadataStore) -> None:
    seg = segment(100, 199, 5_000, epochs=((3, 100), (5, 150)))
    store.add_segment(seg)
    assert store.get_segment(seg.segment_id) == seg
    no_topic_id = dataclasses.replace(segment(200, 299), topic_id=None, txn_index_empty=False)
    store.add_segment(no_topic_id)
    assert store.get_segment(no_topic_id.segment_id) == no_topic_id


def test_unknown_segment_and_partition_are_none_or_minus_one(store: SqlMetadataStore) -> None:
    assert store.get_segment(uuid.uuid4()) is None
    assert store.segment_for_offset(TP, 0) is None
    assert store.first_segment_for_timestamp(TP, 0) is None
    assert store.max_timestamp(TP) is None
    assert store.highest_copied_offset(TP) == -1
    assert store.highest_copied_offset(TP, leader_epoch=0) == -1
    assert store.remote_log_size(TP) == 0
    assert list(store.list_segments(TP)) == []
    with pytest.raises(NotFoundError, match="no remote segment"):
        store.update_segment_state(uuid.uuid4(), FINISHED, event_time_ms=1)


def test_adding_the_same_segment_again_is_a_no_op(store: SqlMetadataStore) -> None:
    seg = segment(0, 99)
    store.add_segment(seg)
    store.add_segment(seg)
    assert [s.segment_id for s in store.list_segments(TP)] == [seg.segment_id]


def test_adding_a_known_id_with_other_metadata_fails(store: SqlMetadataStore) -> None:
    seg = segment(0, 99)
    store.add_segment(seg)
    with pytest.raises(DuplicateSegmentError, match=str(seg.segment_id)):
        store.add_segment(dataclasses.replace(seg, end_offset=120))
    with pytest.raises(DuplicateSegmentError):
        store.add_segment(dataclasses.replace(seg, topic_partition=OTHER))
    assert store.get_segment(seg.segment_id) == seg


def test_a_segment_must_be_added_as_copy_started(store: SqlMetadataStore) -> None:
    for state in (FINISHED, DELETE_STARTED, DELETE_FINISHED):
        with pytest.raises(InvalidStateTransitionError, match=f"from no state to {state.value}"):
            store.add_segment(segment(0, 99, state=state))
    assert list(store.list_segments(TP)) == []


def test_state_walks_the_machine_and_a_repeat_is_a_no_op(store: SqlMetadataStore) -> None:
    seg = segment(0, 99)
    store.add_segment(seg)
    for state, event_time in [(FINISHED, 10), (DELETE_STARTED, 20), (DELETE_FINISHED, 30)]:
        update = store.update_segment_state(seg.segment_id, state, event_time_ms=event_time)
        assert update.changed
        assert update.segment == seg.with_state(state, event_time)
        repeat = store.update_segment_state(seg.segment_id, state, event_time_ms=event_time + 5)
        assert not repeat.changed
        assert repeat.segment.event_time_ms == event_time
        assert store.get_segment(seg.segment_id) == update.segment


def test_an_invalid_transition_names_both_states_and_changes_nothing(
    store: SqlMetadataStore,
) -> None:
    seg = segment(0, 99)
    add_finished(store, seg)
    with pytest.raises(InvalidStateTransitionError) as raised:
        store.update_segment_state(seg.segment_id, STARTED, event_time_ms=5)
    assert "from COPY_SEGMENT_FINISHED to COPY_SEGMENT_STARTED" in str(raised.value)
    store.update_segment_state(seg.segment_id, DELETE_STARTED, event_time_ms=6)
    with pytest.raises(InvalidStateTransitionError, match="DELETE_SEGMENT_STARTED to COPY_SEG"):
        store.update_segment_state(seg.segment_id, FINISHED, event_time_ms=7)
    stored = store.get_segment(seg.segment_id)
    assert stored is not None and stored.state is DELETE_STARTED


def test_expected_state_is_compare_and_set(store: SqlMetadataStore) -> None:
    seg = segment(0, 99)
    add_finished(store, seg)
    # A cleanup pass for abandoned copies must not delete a segment that has since finished.
    with pytest.raises(StateConflictError, match="is COPY_SEGMENT_FINISHED, not COPY_SEGMENT_STARTED"):
        store.update_segment_state(seg.segment_id, DELETE_STARTED, event_time_ms=1, expected=STARTED)
    update = store.update_segment_state(seg.segment_id, DELETE_STARTED, event_time_ms=1, expected=FINISHED)
    assert update.changed
    again = store.update_segment_state(seg.segment_id, DELETE_STARTED, event_time_ms=1, expected=FINISHED)
    assert not again.changed


def test_segment_for_offset_finds_the_finished_segment_holding_it(store: SqlMetadataStore) -> None:
    first, second, later = segment(0, 99), segment(100, 199), segment(300, 399)
    add_finished(store, first, second, later)
    store.add_segment(segment(400, 499))  # copy started: not readable yet
    cases = {0: first, 99: first, 100: second, 199: second, 300: later, 399: later}
    for offset, expected in cases.items():
        assert store.segment_for_offset(TP, offset) == store.get_segment(expected.segment_id)
    for missing in (200, 299, 400, 450, 10**12, -1):
        assert store.segment_for_offset(TP, missing) is None
    assert store.segment_for_offset(OTHER, 50) is None
    store.update_segment_state(second.segment_id, DELETE_STARTED, event_time_ms=1)
    assert store.segment_for_offset(TP, 150) is None


def test_segment_for_offset_with_overlaps_prefers_the_last_in_offset_order(
    store: SqlMetadataStore,
) -> None:
    outer, inner, after = segment(0, 199), segment(50, 99), segment(150, 300)
    add_finished(store, outer, inner, after)
    found = {offset: store.segment_for_offset(TP, offset) for offset in (10, 60, 120, 160, 250)}
    ids = {offset: seg.segment_id if seg else None for offset, seg in found.items()}
    assert ids == {
        10: outer.segment_id,
        60: inner.segment_id,
        120: outer.segment_id,  # the inner segment ends before 120
        160: after.segment_id,
        250: after.segment_id,
    }


def test_segment_for_offset_within_a_leader_epoch(store: SqlMetadataStore) -> None:
    seg = segment(0, 99, epochs=((1, 0), (2, 40), (4, 70)))
    add_finished(store, seg)
    assert store.segment_for_offset(TP, 39, leader_epoch=1) is not None
    assert store.segment_for_offset(TP, 40, leader_epoch=1) is None
    assert store.segment_for_offset(TP, 40, leader_epoch=2) is not None
    assert store.segment_for_offset(TP, 99, leader_epoch=4) is not None
    assert store.segment_for_offset(TP, 50, leader_epoch=3) is None


def test_max_timestamp_covers_finished_segments_only(store: SqlMetadataStore) -> None:
    early_spike = segment(0, 99, 9_000)
    add_finished(store, early_spike, segment(100, 199, 2_000), segment(200, 299, 3_000))
    store.add_segment(segment(300, 399, 50_000))
    assert store.max_timestamp(TP) == 9_000
    store.update_segment_state(early_spike.segment_id, DELETE_STARTED, event_time_ms=1)
    assert store.max_timestamp(TP) == 3_000
    assert store.max_timestamp(OTHER) is None


def test_first_segment_for_timestamp_with_unordered_timestamps(store: SqlMetadataStore) -> None:
    segs = [segment(i * 100, i * 100 + 99, ts) for i, ts in enumerate([500, 900, 300, 700, 1_000])]
    add_finished(store, *segs)

    def start_of(timestamp: int, from_offset: int = 0) -> int | None:
        found = store.first_segment_for_timestamp(TP, timestamp, from_offset=from_offset)
        return None if found is None else found.start_offset

    assert start_of(0) == 0
    assert start_of(600) == 100
    assert start_of(950) == 400
    assert start_of(1_001) is None
    assert start_of(600, from_offset=150) == 100  # segment 100-199 still holds offset 150
    assert start_of(600, from_offset=200) == 300
    assert start_of(0, from_offset=499) == 400
    assert start_of(0, from_offset=500) is None
    store.update_segment_state(segs[1].segment_id, DELETE_STARTED, event_time_ms=1)
    assert start_of(600) == 300


def test_first_segment_for_timestamp_with_a_straddling_overlap(store: SqlMetadataStore) -> None:
    old, new = segment(0, 199, 800), segment(150, 299, 600)
    add_finished(store, old, new)
    found = store.first_segment_for_timestamp(TP, 500, from_offset=180)
    assert found is not None and found.segment_id == old.segment_id
    found = store.first_segment_for_timestamp(TP, 500, from_offset=200)
    assert found is not None and found.segment_id == new.segment_id
    found = store.first_segment_for_timestamp(TP, 700, from_offset=180)
    assert found is not None and found.segment_id == old.segment_id


def test_lookups_across_the_levels_of_the_offset_tree(store: SqlMetadataStore) -> None:
    # Start offsets in different 256-, 65536- and 2^24-offset ranges, so that each lookup must
    # choose between candidates found at several levels of the tree.
    a, b, c = segment(0, 2**25, 10), segment(300, 2**25, 20), segment(69_000, 2**25, 30)
    d, e = segment(2**24 + 5, 2**24 + 10, 40), segment(2**40, 2**40 + 999, 5)
    f = segment(2**62, 2**62 + 7, 50)
    add_finished(store, a, b, c, d, e, f)

    def holding(offset: int) -> uuid.UUID | None:
        found = store.segment_for_offset(TP, offset)
        return None if found is None else found.segment_id

    def first(timestamp: int, offset: int) -> uuid.UUID | None:
        found = store.first_segment_for_timestamp(TP, timestamp, from_offset=offset)
        return None if found is None else found.segment_id

    assert holding(70_000) == c.segment_id
    assert holding(2**24 + 7) == d.segment_id
    assert holding(2**24 + 100) == c.segment_id
    assert holding(299) == a.segment_id
    assert holding(2**40 + 999) == e.segment_id
    assert holding(2**40 + 1000) is None
    assert holding(2**62 + 7) == f.segment_id
    assert first(25, 10) == c.segment_id
    assert first(35, 10) == d.segment_id
    assert first(45, 0) == f.segment_id
    assert first(15, 1_000) == b.segment_id
    assert first(0, 2**25 + 1) == e.segment_id
    assert first(51, 0) is None
    assert store.max_timestamp(TP) == 50


def test_highest_copied_offset_per_partition_and_epoch_never_falls(
    store: SqlMetadataStore,
) -> None:
    first = segment(0, 99, epochs=((0, 0), (1, 60)))
    second = segment(100, 199, epochs=((1, 100), (2, 180)))
    add_finished(store, first, second)
    store.add_segment(segment(200, 299, epochs=((2, 200),)))  # not finished: not counted
    assert store.highest_copied_offset(TP) == 199
    assert store.highest_copied_offset(TP, leader_epoch=0) == 59
    assert store.highest_copied_offset(TP, leader_epoch=1) == 179
    assert store.highest_copied_offset(TP, leader_epoch=2) == 199
    assert store.highest_copied_offset(TP, leader_epoch=3) == -1
    for seg in (first, second):
        store.update_segment_state(seg.segment_id, DELETE_STARTED, event_time_ms=1)
    assert store.highest_copied_offset(TP) == 199
    assert store.highest_copied_offset(TP, leader_epoch=1) == 179


def test_remote_log_size_counts_finished_segments(store: SqlMetadataStore) -> None:
    a, b = segment(0, 99, size_bytes=1_000), segment(100, 199, size_bytes=250)
    add_finished(store, a, b)
    store.add_segment(segment(200, 299, size_bytes=4_000))
    assert store.remote_log_size(TP) == 1_250
    store.update_segment_state(a.segment_id, DELETE_STARTED, event_time_ms=1)
    assert store.remote_log_size(TP) == 250
    store.update_segment_state(a.segment_id, DELETE_FINISHED, event_time_ms=2)
    assert store.remote_log_size(TP) == 250


def test_list_segments_in_offset_order_with_filters(store: SqlMetadataStore) -> None:
    segs = [segment(i * 10, i * 10 + 9, epochs=((i // 4, i * 10),)) for i in range(10)]
    for seg in reversed(segs):
        store.add_segment(seg)
    for seg in segs[::2]:
        store.update_segment_state(seg.segment_id, FINISHED, event_time_ms=1)
    store.update_segment_state(segs[4].segment_id, DELETE_STARTED, event_time_ms=2)
    store.add_segment(segment(0, 50, tp=OTHER))

    def starts(**filters: object) -> list[int]:
        return [s.start_offset for s in store.list_segments(TP, **filters)]  # type: ignore[arg-type]

    assert starts() == list(range(0, 100, 10))
    assert starts(states=[FINISHED]) == [0, 20, 60, 80]
    assert starts(states=[STARTED, DELETE_STARTED]) == [10, 30, 40, 50, 70, 90]
    assert starts(leader_epoch=1) == [40, 50, 60, 70]
    assert starts(leader_epoch=1, states=[FINISHED]) == [60]
    assert starts(states=[]) == []
