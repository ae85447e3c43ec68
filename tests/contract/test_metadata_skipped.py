"""The store's contract for skipped ranges, the purge of deleted segments and lease incarnations,
on SQLite and PostgreSQL."""

from __future__ import annotations

import uuid

import pytest

from metadata.store import SqlMetadataStore
from rlm.errors import InvalidSkipRangeError, StaleLeaseError, StateConflictError
from rlm.metastore.model import PartitionState, SegmentState, SkipKind, SkippedRange, TopicPartition
from tests.clock import FakeClock
from tests.metadata_support import TP, add_finished, segment

TTL = 30_000
DELETED = SegmentState.DELETE_SEGMENT_FINISHED


def _skip(start: int, end: int, kind: SkipKind = SkipKind.OPERATOR, tp: TopicPartition = TP) -> SkippedRange:
    return SkippedRange(tp, start, end, kind, f"offsets {start}..{end} are gone", 1_700_000_000_000)


def test_skipped_ranges_are_listed_in_offset_order_per_partition(store: SqlMetadataStore) -> None:
    other = TopicPartition("orders", 1)
    assert store.list_skipped_ranges(TP) == []
    later, earlier = _skip(500, 599), _skip(100, 199, SkipKind.NOT_IN_LOCAL_LOG)
    assert store.add_skipped_range(later) == later
    store.add_skipped_range(earlier)
    store.add_skipped_range(_skip(0, 9, tp=other))
    assert store.list_skipped_ranges(TP) == [earlier, later]
    assert store.list_skipped_ranges(other) == [_skip(0, 9, tp=other)]
    assert store.list_skipped_ranges(TopicPartition("unknown", 0)) == []


def test_recording_a_range_again_is_a_no_op(store: SqlMetadataStore) -> None:
    first = _skip(100, 199)
    store.add_skipped_range(first)
    retried = SkippedRange(TP, 100, 199, SkipKind.OPERATOR, "said again, in other words", 1_800_000_000_000)
    assert store.add_skipped_range(retried) == first
    assert store.list_skipped_ranges(TP) == [first]


def test_recording_a_range_again_after_the_copier_moved_past_it_is_a_no_op(store: SqlMetadataStore) -> None:
    # An operator's skip whose commit was lost: the copier, unblocked, copies on above it and
    # retention raises the remote log start before the retry arrives. The retry must not be told
    # the skip failed (the message would have the operator skip offsets the copier needs).
    skipped = _skip(100, 199)
    store.add_skipped_range(skipped)
    add_finished(store, segment(200, 299), segment(300, 399))
    store.advance_log_start_offset(TP, 300)

    assert store.add_skipped_range(skipped) == skipped

    assert store.list_skipped_ranges(TP) == [skipped]


def test_ranges_overlapping_tiered_data_or_another_skip_are_refused(store: SqlMetadataStore) -> None:
    add_finished(store, segment(0, 99), segment(100, 199))
    store.add_skipped_range(_skip(300, 399))
    with pytest.raises(InvalidSkipRangeError, match=r"offsets up to 199 were copied.*from offset 200 on"):
        store.add_skipped_range(_skip(150, 250))
    with pytest.raises(InvalidSkipRangeError, match=r"offsets 300..399 were skipped already"):
        store.add_skipped_range(_skip(250, 300))
    with pytest.raises(InvalidSkipRangeError, match=r"offsets 300..399 were skipped already"):
        store.add_skipped_range(_skip(300, 399, SkipKind.NOT_IN_LOCAL_LOG))
    copying = segment(200, 249)
    store.add_segment(copying)
    with pytest.raises(InvalidSkipRangeError, match=r"a copy of offsets 200..249 is under way"):
        store.add_skipped_range(_skip(240, 260))
    store.add_skipped_range(_skip(250, 299))
    assert [(s.start_offset, s.end_offset) for s in store.list_skipped_ranges(TP)] == [(250, 299), (300, 399)]


def test_ranges_below_the_remote_log_start_or_of_a_deleted_partition_are_refused(
    store: SqlMetadataStore,
) -> None:
    store.advance_log_start_offset(TP, 1000)
    with pytest.raises(InvalidSkipRangeError, match="the remote log starts at offset 1000"):
        store.add_skipped_range(_skip(900, 1100))
    store.update_partition_state(TP, PartitionState.DELETE_PARTITION_MARKED, event_time_ms=1)
    with pytest.raises(StateConflictError, match="DELETE_PARTITION_MARKED"):
        store.add_skipped_range(_skip(2000, 2100))
    assert store.list_skipped_ranges(TP) == []


def test_skipping_is_fenced_by_the_lease(store: SqlMetadataStore, clock: FakeClock[int]) -> None:
    old = store.acquire_lease(TP, owner=1, ttl_ms=TTL)
    assert old is not None
    clock.advance(TTL)
    assert store.acquire_lease(TP, owner=2, ttl_ms=TTL) is not None
    with pytest.raises(StaleLeaseError):
        store.add_skipped_range(_skip(0, 9), fence=old)
    assert store.list_skipped_ranges(TP) == []


def test_a_bad_range_cannot_even_be_built() -> None:
    for start, end in ((-1, 5), (10, 9), (0, 2**63)):
        with pytest.raises(ValueError, match="bad offset range"):
            _skip(start, end)
    with pytest.raises(ValueError, match="needs a reason"):
        SkippedRange(TP, 0, 1, SkipKind.OPERATOR, "  ", 0)
    with pytest.raises(ValueError, match="at most 1000"):
        SkippedRange(TP, 0, 1, SkipKind.OPERATOR, "x" * 1001, 0)


# -- purging rows of deleted segments -----------------------------------------------------------


def _delete(store: SqlMetadataStore, seg_id: uuid.UUID, at_ms: int) -> None:
    store.update_segment_state(seg_id, SegmentState.DELETE_SEGMENT_STARTED, event_time_ms=at_ms)
    store.update_segment_state(seg_id, DELETED, event_time_ms=at_ms)


def test_purging_forgets_old_deleted_rows_and_keeps_the_highest_copied_offsets(
    store: SqlMetadataStore,
) -> None:
    segments = [segment(i * 100, i * 100 + 99, epochs=((i, i * 100),)) for i in range(5)]
    add_finished(store, *segments)
    _delete(store, segments[0].segment_id, 1_000)
    _delete(store, segments[1].segment_id, 2_000)
    _delete(store, segments[4].segment_id, 3_000)  # the highest: its offset must not be lost
    before = (store.highest_copied_offset(TP), store.highest_copied_offset(TP, leader_epoch=4))
    assert before == (499, 499)

    assert store.purge_deleted_segments(TP, deleted_before_ms=2_500, limit=1) == 1
    assert store.purge_deleted_segments(TP, deleted_before_ms=2_500) == 1
    assert store.purge_deleted_segments(TP, deleted_before_ms=2_500) == 0

    left = {s.segment_id: s.state for s in store.list_segments(TP)}
    assert set(left) == {s.segment_id for s in segments[2:]}
    assert left[segments[4].segment_id] is DELETED
    assert store.get_segment(segments[0].segment_id) is None
    assert list(store.list_segments(TP, leader_epoch=0)) == []
    assert (store.highest_copied_offset(TP), store.highest_copied_offset(TP, leader_epoch=4)) == before
    assert store.purge_deleted_segments(TP, deleted_before_ms=3_001) == 1
    store.rebuild_summaries(TP)  # a repair recomputes from rows: the offsets still do not fall
    assert (store.highest_copied_offset(TP), store.highest_copied_offset(TP, leader_epoch=4)) == before
    assert store.highest_copied_offset(TP, leader_epoch=1) == 199
    record = store.get_partition(TP)
    assert record is not None and record.remote_log_size_bytes == 2 * 1_000
    assert store.purge_deleted_segments(TopicPartition("unknown", 0), deleted_before_ms=10**15) == 0
    assert store.get_partition(TopicPartition("unknown", 0)) is None


def test_purging_is_fenced_by_the_lease(store: SqlMetadataStore, clock: FakeClock[int]) -> None:
    seg = segment(0, 9)
    add_finished(store, seg)
    _delete(store, seg.segment_id, 1)
    old = store.acquire_lease(TP, owner=1, ttl_ms=TTL)
    assert old is not None
    clock.advance(TTL)
    assert store.acquire_lease(TP, owner=2, ttl_ms=TTL) is not None
    with pytest.raises(StaleLeaseError):
        store.purge_deleted_segments(TP, deleted_before_ms=10, fence=old)
    assert store.get_segment(seg.segment_id) is not None


# -- lease incarnations -------------------------------------------------------------------------


def test_another_incarnation_of_the_owner_takes_over_unless_told_to_wait(
    store: SqlMetadataStore, clock: FakeClock[int]
) -> None:
    first, second = uuid.uuid4(), uuid.uuid4()
    held = store.acquire_lease(TP, owner=1, ttl_ms=TTL, incarnation=first)
    assert held is not None and held.incarnation == first
    assert store.get_lease(TP) == held
    assert store.renew_lease(held, TTL).incarnation == first
    # A process waiting for the other incarnation's lease gets nothing and changes nothing.
    assert (
        store.acquire_lease(TP, owner=1, ttl_ms=TTL, incarnation=second, replace_own_incarnation=False)
        is None
    )
    assert store.get_lease(TP) == store.renew_lease(held, TTL)
    # The same incarnation may always take its own lease again.
    again = store.acquire_lease(TP, owner=1, ttl_ms=TTL, incarnation=first, replace_own_incarnation=False)
    assert again is not None and again.epoch == held.epoch + 1
    # A restart (a new incarnation) takes over at once and fences the previous one.
    restarted = store.acquire_lease(TP, owner=1, ttl_ms=TTL, incarnation=second)
    assert restarted is not None and restarted.epoch == again.epoch + 1 and restarted.incarnation == second
    with pytest.raises(StaleLeaseError):
        store.add_segment(segment(0, 9), fence=again)
    # Once it expires, the waiting incarnation takes it.
    clock.advance(TTL)
    taken = store.acquire_lease(TP, owner=1, ttl_ms=TTL, incarnation=first, replace_own_incarnation=False)
    assert taken is not None and taken.incarnation == first
    assert store.release_lease(taken)
    assert store.get_lease(TP) is None
    free = store.acquire_lease(TP, owner=1, ttl_ms=TTL, incarnation=second, replace_own_incarnation=False)
    assert free is not None and free.incarnation == second
