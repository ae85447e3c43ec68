"""Contract of replacing remote copies the broker's log diverged from, on SQLite and PostgreSQL."""

from __future__ import annotations

import dataclasses
import uuid

import pytest

from metadata.store import SqlMetadataStore
from rlm.errors import StaleLeaseError, StateConflictError
from rlm.metastore import SegmentState, SkipKind, SkippedRange
from tests.metadata_support import TP, add_finished, segment, stored_tree

OUT = "file:///exports/orders"


def test_copies_from_an_offset_on_are_retired_and_the_partition_counted_again(
    store: SqlMetadataStore,
) -> None:
    kept = segment(0, 99, 500, epochs=((4, 0),))
    old = segment(100, 180, 900, epochs=((5, 100),))
    takeover = segment(150, 250, 800, epochs=((6, 150),))
    add_finished(store, kept, old, takeover)
    store.add_skipped_range(SkippedRange(TP, 251, 260, SkipKind.OPERATOR, "bad segment", 1))
    copying = segment(261, 270, epochs=((6, 261),))
    store.add_segment(copying)
    store.record_export_offsets(OUT, {TP: 240})

    assert store.truncate_copies(TP, 100, event_time_ms=77) == 3

    states = {s.segment_id: (s.state, s.event_time_ms) for s in store.list_segments(TP)}
    for gone in (old, takeover, copying):
        assert states[gone.segment_id] == (SegmentState.DELETE_SEGMENT_STARTED, 77)
    assert states[kept.segment_id][0] is SegmentState.COPY_SEGMENT_FINISHED
    record = store.get_partition(TP)
    assert record is not None
    assert (record.highest_copied_offset, record.remote_log_size_bytes) == (99, kept.size_bytes)
    assert [store.highest_copied_offset(TP, leader_epoch=e) for e in (4, 5, 6)] == [99, -1, -1]
    assert store.segment_for_offset(TP, 120) is None
    assert store.max_timestamp(TP) == 500
    assert store.list_skipped_ranges(TP) == []
    assert store.export_offsets(OUT) == {TP: 100}
    assert store.first_segment_for_timestamp(TP, 600) is None

    # The broker's log is tiered again from 100 on.
    again = segment(100, 199, 950, epochs=((4, 100), (6, 120)))
    add_finished(store, again)
    found = store.segment_for_offset(TP, 120)
    assert found is not None and found.segment_id == again.segment_id
    assert store.highest_copied_offset(TP) == 199


def test_a_skipped_range_reaching_over_the_offset_is_cut_short(store: SqlMetadataStore) -> None:
    add_finished(store, segment(0, 9))
    store.add_skipped_range(SkippedRange(TP, 10, 29, SkipKind.OPERATOR, "bad segment", 1))
    add_finished(store, segment(30, 39))
    assert store.truncate_copies(TP, 20, event_time_ms=5) == 1
    assert [(s.start_offset, s.end_offset) for s in store.list_skipped_ranges(TP)] == [(10, 19)]
    assert store.highest_copied_offset(TP) == 9


def test_offsets_retention_deleted_below_the_truncation_stay_accounted_for(store: SqlMetadataStore) -> None:
    add_finished(store, segment(0, 99), segment(100, 199, epochs=((5, 100),)))
    store.advance_log_start_offset(TP, 100)
    first = next(s for s in store.list_segments(TP) if s.start_offset == 0)
    store.update_segment_state(first.segment_id, SegmentState.DELETE_SEGMENT_STARTED, event_time_ms=3)
    assert store.truncate_copies(TP, 100, event_time_ms=5) == 1
    record = store.get_partition(TP)
    assert record is not None
    # The copier resumes at 100, not at 0 below what retention deleted.
    assert (record.highest_copied_offset, record.remote_log_start_offset) == (99, 100)


def test_nothing_to_retire_changes_nothing(store: SqlMetadataStore) -> None:
    add_finished(store, segment(0, 99, epochs=((4, 0),)))
    store.record_export_offsets(OUT, {TP: 100})
    assert store.truncate_copies(TP, 100, event_time_ms=5) == 0
    record = store.get_partition(TP)
    assert record is not None and record.highest_copied_offset == 99
    assert store.export_offsets(OUT) == {TP: 100}


def test_a_stale_lease_cannot_truncate(store: SqlMetadataStore) -> None:
    lease = store.acquire_lease(TP, owner=1, ttl_ms=30_000)
    assert lease is not None
    add_finished(store, segment(0, 99))
    store.acquire_lease(TP, owner=1, ttl_ms=30_000)  # a restart: a newer epoch
    with pytest.raises(StaleLeaseError):
        store.truncate_copies(TP, 0, event_time_ms=5, fence=lease)
    assert store.highest_copied_offset(TP) == 99
    assert [s.state for s in store.list_segments(TP)] == [SegmentState.COPY_SEGMENT_FINISHED]


def test_an_export_planned_before_a_truncation_is_held_below_it(store: SqlMetadataStore) -> None:
    add_finished(store, segment(0, 99, epochs=((4, 0),)), segment(100, 199, epochs=((5, 100),)))
    planned = store.get_partition(TP)
    assert planned is not None and planned.lineage == 0

    assert store.truncate_copies(TP, 100, event_time_ms=5) == 1
    after = store.get_partition(TP)
    assert after is not None and after.lineage == 1

    # The run planned at lineage 0 and exported the old leader's 100-199: held at 100.
    assert store.record_export_offsets(OUT, {TP: 200}, lineages={TP: planned.lineage}) == {TP: 100}
    assert store.export_offsets(OUT) == {TP: 100}
    # No lineage given (a manifest written before lineages were): planned before every truncation.
    assert store.record_export_offsets(OUT, {TP: 200}) == {TP: 100}
    assert store.export_offsets(OUT) == {TP: 100}
    # Below the truncation nothing is held.
    assert store.record_export_offsets(OUT, {TP: 80}, lineages={TP: 0}) == {}
    assert store.export_offsets(OUT) == {TP: 100}

    # The broker's records are tiered again and a run planned now exports them.
    add_finished(store, segment(100, 149, epochs=((6, 100),)))
    assert store.record_export_offsets(OUT, {TP: 150}, lineages={TP: after.lineage}) == {}
    assert store.export_offsets(OUT) == {TP: 150}


def test_an_export_is_held_below_the_lowest_truncation_since_it_planned(store: SqlMetadataStore) -> None:
    add_finished(store, segment(0, 99), segment(100, 199), segment(200, 299))
    assert store.truncate_copies(TP, 100, event_time_ms=5) == 2  # lineage 1
    add_finished(store, segment(100, 199), segment(200, 249))
    assert store.truncate_copies(TP, 200, event_time_ms=6) == 1  # lineage 2
    assert store.truncate_copies(TP, 300, event_time_ms=7) == 0  # nothing retired: no lineage
    record = store.get_partition(TP)
    assert record is not None and record.lineage == 2

    assert store.record_export_offsets("file:///a", {TP: 300}, lineages={TP: 0}) == {TP: 100}
    assert store.record_export_offsets("file:///b", {TP: 300}, lineages={TP: 1}) == {TP: 200}
    assert store.record_export_offsets("file:///c", {TP: 300}, lineages={TP: 2}) == {}
    assert [store.export_offsets(o) for o in ("file:///a", "file:///b", "file:///c")] == [
        {TP: 100},
        {TP: 200},
        {TP: 300},
    ]


def test_a_trimmed_copy_replaces_the_diverged_one_and_the_copies_after_it_are_retired(
    store: SqlMetadataStore,
) -> None:
    first = segment(0, 99, 500, epochs=((4, 0),))
    diverged = segment(100, 199, 900, epochs=((4, 100), (5, 150)), size_bytes=2_000)
    after = segment(200, 299, 950, epochs=((5, 200),))
    add_finished(store, first, diverged, after)
    store.record_export_offsets(OUT, {TP: 300})
    trimmed = dataclasses.replace(
        segment(100, 139, 700, epochs=((4, 100),), size_bytes=800), event_time_ms=123
    )
    store.add_segment(trimmed)

    assert store.trim_copies(TP, diverged.segment_id, trimmed.segment_id, 140, event_time_ms=77) == 2

    states = {s.segment_id: (s.state, s.event_time_ms) for s in store.list_segments(TP)}
    assert states[trimmed.segment_id] == (SegmentState.COPY_SEGMENT_FINISHED, 123)  # its age kept
    for gone in (diverged, after):
        assert states[gone.segment_id] == (SegmentState.DELETE_SEGMENT_STARTED, 77)
    record = store.get_partition(TP)
    assert record is not None
    assert (record.highest_copied_offset, record.remote_log_size_bytes) == (139, 1_800)
    assert record.lineage == 1
    assert [store.highest_copied_offset(TP, leader_epoch=e) for e in (4, 5)] == [139, -1]
    found = store.segment_for_offset(TP, 120)
    assert found is not None and found.segment_id == trimmed.segment_id
    assert store.segment_for_offset(TP, 140) is None
    assert store.max_timestamp(TP) == 700
    assert store.export_offsets(OUT) == {TP: 140}


def test_a_trim_of_copies_not_as_described_changes_nothing(store: SqlMetadataStore) -> None:
    diverged = segment(100, 199, epochs=((5, 100),))
    add_finished(store, diverged)
    longer = segment(100, 199)
    elsewhere = segment(110, 139)
    store.add_segment(longer)
    store.add_segment(elsewhere)
    shorter = segment(100, 139)
    store.add_segment(shorter)
    for kept, replacement, cut in (
        (diverged.segment_id, longer.segment_id, 150),  # not below the kept copy's end
        (diverged.segment_id, elsewhere.segment_id, 140),  # not where it starts
        (longer.segment_id, elsewhere.segment_id, 140),  # the kept one is not finished
        (diverged.segment_id, uuid.uuid4(), 140),
        (diverged.segment_id, shorter.segment_id, 141),  # a hole between it and the cut
        (diverged.segment_id, shorter.segment_id, 100),  # nothing of it below the cut
    ):
        with pytest.raises(StateConflictError):
            store.trim_copies(TP, kept, replacement, cut, event_time_ms=5)
    assert store.highest_copied_offset(TP) == 199
    states = {s.segment_id: s.state for s in store.list_segments(TP)}
    assert states[diverged.segment_id] is SegmentState.COPY_SEGMENT_FINISHED
    assert states[longer.segment_id] is SegmentState.COPY_SEGMENT_STARTED
    record = store.get_partition(TP)
    assert record is not None and record.lineage == 0


def test_a_stale_lease_cannot_trim(store: SqlMetadataStore) -> None:
    lease = store.acquire_lease(TP, owner=1, ttl_ms=30_000)
    assert lease is not None
    diverged = segment(0, 99)
    add_finished(store, diverged)
    trimmed = segment(0, 49)
    store.add_segment(trimmed)
    store.acquire_lease(TP, owner=1, ttl_ms=30_000)  # a restart: a newer epoch
    with pytest.raises(StaleLeaseError):
        store.trim_copies(TP, diverged.segment_id, trimmed.segment_id, 50, event_time_ms=5, fence=lease)
    assert store.highest_copied_offset(TP) == 99


def test_a_trimmed_copy_may_reach_past_the_offset_the_copies_are_retired_from(
    store: SqlMetadataStore,
) -> None:
    diverged = segment(100, 199, epochs=((5, 100),))
    add_finished(store, diverged)
    store.record_export_offsets(OUT, {TP: 200})
    reaching = segment(100, 149, epochs=((5, 100),))  # its last batch holds 140..149
    store.add_segment(reaching)

    assert store.trim_copies(TP, diverged.segment_id, reaching.segment_id, 140, event_time_ms=5) == 1

    # The broker's log is tiered again from 140: its copy from there overlaps the trimmed one.
    assert store.highest_copied_offset(TP) == 149
    assert store.export_offsets(OUT) == {TP: 140}
    assert store.record_export_offsets(OUT, {TP: 200}, lineages={TP: 0}) == {TP: 140}


def test_a_copy_over_a_kept_one_finishes_and_counts_as_replacing_it_from_its_start(
    store: SqlMetadataStore,
) -> None:
    kept = segment(100, 149, epochs=((5, 100),))  # its last batch holds 140..149
    add_finished(store, segment(0, 99), kept)
    store.record_export_offsets(OUT, {TP: 150})
    over = segment(140, 199, epochs=((6, 140),))
    store.add_segment(over)

    store.finish_overlay(TP, over.segment_id, event_time_ms=7)

    found = store.get_segment(over.segment_id)
    assert found is not None and (found.state, found.event_time_ms) == (SegmentState.COPY_SEGMENT_FINISHED, 7)
    assert store.highest_copied_offset(TP) == 199
    assert store.highest_copied_offset(TP, leader_epoch=6) == 199
    record = store.get_partition(TP)
    assert record is not None and record.lineage == 1
    # An export of the kept copy's records from 140 is done again; one planned before is held there.
    assert store.export_offsets(OUT) == {TP: 140}
    assert store.record_export_offsets(OUT, {TP: 150}, lineages={TP: 0}) == {TP: 140}
    assert store.record_export_offsets(OUT, {TP: 200}, lineages={TP: 1}) == {}


def test_a_copy_over_nothing_or_not_started_does_not_finish_so(store: SqlMetadataStore) -> None:
    add_finished(store, segment(0, 99))
    past = segment(100, 199)  # starts inside no finished copy
    store.add_segment(past)
    finished = segment(200, 249)
    add_finished(store, finished)
    before = store.get_partition(TP)

    for segment_id in (past.segment_id, finished.segment_id, uuid.uuid4()):
        with pytest.raises(StateConflictError):
            store.finish_overlay(TP, segment_id, event_time_ms=7)

    assert store.get_partition(TP) == before
    found = store.get_segment(past.segment_id)
    assert found is not None and found.state is SegmentState.COPY_SEGMENT_STARTED


def test_a_stale_lease_cannot_finish_a_copy_over_a_kept_one(store: SqlMetadataStore) -> None:
    lease = store.acquire_lease(TP, owner=1, ttl_ms=30_000)
    assert lease is not None
    add_finished(store, segment(0, 99))
    over = segment(50, 149)
    store.add_segment(over)
    store.acquire_lease(TP, owner=1, ttl_ms=30_000)  # a restart: a newer epoch
    with pytest.raises(StaleLeaseError):
        store.finish_overlay(TP, over.segment_id, event_time_ms=7, fence=lease)
    found = store.get_segment(over.segment_id)
    assert found is not None and found.state is SegmentState.COPY_SEGMENT_STARTED


def test_a_copy_over_a_kept_one_lowers_no_highest_offset_of_a_leader_epoch(store: SqlMetadataStore) -> None:
    # Retention deleted the copies of epoch 3: its offsets were copied all the same, and a copy
    # finishing over a kept one retires nothing, so no epoch's highest copied offset falls.
    gone = segment(0, 99, epochs=((3, 0),))
    kept = segment(100, 149, epochs=((5, 100),))
    add_finished(store, gone, kept)
    store.advance_log_start_offset(TP, 100)
    for state in (SegmentState.DELETE_SEGMENT_STARTED, SegmentState.DELETE_SEGMENT_FINISHED):
        store.update_segment_state(gone.segment_id, state, event_time_ms=5)
    over = segment(140, 199, epochs=((6, 140),))
    store.add_segment(over)

    store.finish_overlay(TP, over.segment_id, event_time_ms=7)

    assert store.highest_copied_offset(TP, leader_epoch=3) == 99
    assert store.highest_copied_offset(TP, leader_epoch=5) == 149
    assert store.highest_copied_offset(TP, leader_epoch=6) == 199
    record, tree = store.get_partition(TP), stored_tree(store)
    store.rebuild_summaries(TP)  # the figures are what the segment rows say
    assert (store.get_partition(TP), stored_tree(store)) == (record, tree)
