"""Contract of ``swap_compacted`` for what is derived from the segment rows: after a swap that
replaces several segments, the offset tree, the remote log size and the searches over them are
what a rebuild from the rows gives; on SQLite and PostgreSQL."""

from __future__ import annotations

import uuid

import pytest

from metadata.store import SqlMetadataStore
from rlm.errors import DuplicateSegmentError, StaleLeaseError
from rlm.metastore import PartitionState, SegmentState
from rlm.metastore.compaction import CompactionOutput
from tests.metadata_support import TP, add_finished, segment, stored_tree

FINISHED = SegmentState.COPY_SEGMENT_FINISHED


def test_a_swap_of_segments_that_each_hold_one_maximum_keeps_the_tree_exact(store: SqlMetadataStore) -> None:
    # Alone in one tree bucket (start offsets 0-255): the first replaced segment holds its largest
    # max timestamp, the second its largest end offset, so that whichever leaves first, the
    # other still counts there when it does.
    first = segment(0, 9, 9_000, size_bytes=100)
    second = segment(10, 19, 5_000, size_bytes=200)
    kept = segment(300, 399, 7_000, size_bytes=300)
    add_finished(store, first, second, kept)
    lease = store.acquire_compaction_lease(TP, "job", 60_000)
    assert lease is not None
    compacted = segment(0, 19, 9_000, size_bytes=150)

    assert store.swap_compacted(
        lease, [compacted], [first.segment_id, second.segment_id], now_ms=1, delete_after_ms=2
    )

    finished = list(store.list_segments(TP, states=[FINISHED]))
    assert [(s.start_offset, s.end_offset) for s in finished] == [(0, 19), (300, 399)]
    assert store.max_timestamp(TP) == 9_000
    record = store.get_partition(TP)
    assert record is not None and record.remote_log_size_bytes == 450
    swapped = stored_tree(store)
    store.rebuild_summaries(TP)
    assert swapped == stored_tree(store)
    # The searches over the tree find the compacted segment and the one kept.
    found = store.first_segment_for_timestamp(TP, 8_000)
    assert found is not None and found.segment_id == compacted.segment_id
    later = store.first_segment_for_timestamp(TP, 6_000, from_offset=20)
    assert later is not None and later.segment_id == kept.segment_id
    held = store.segment_for_offset(TP, 15)
    assert held is not None and held.segment_id == compacted.segment_id


def test_a_swap_retried_after_it_committed_reports_it_done_and_changes_nothing(
    store: SqlMetadataStore,
) -> None:
    # A call whose commit was lost with the connection fails as retriable, and the contract
    # allows the retry. The job deletes the objects of outputs whose swap it is told failed: a
    # retry answering False would have it delete segments that are COPY_SEGMENT_FINISHED.
    first = segment(0, 9, 9_000, size_bytes=100)
    second = segment(10, 19, 5_000, size_bytes=200)
    add_finished(store, first, second)
    lease = store.acquire_compaction_lease(TP, "job", 60_000)
    assert lease is not None
    compacted = segment(0, 19, 9_000, size_bytes=150)
    replaced = [first.segment_id, second.segment_id]
    assert store.swap_compacted(lease, [compacted], replaced, now_ms=1, delete_after_ms=2)
    before = (list(store.list_segments(TP)), store.get_partition(TP), stored_tree(store))

    assert store.swap_compacted(lease, [compacted], replaced, now_ms=5, delete_after_ms=6)

    assert (list(store.list_segments(TP)), store.get_partition(TP), stored_tree(store)) == before


def test_a_swap_is_refused_when_a_replaced_segment_left_finished_otherwise(store: SqlMetadataStore) -> None:
    first = segment(0, 9, 9_000, size_bytes=100)
    second = segment(10, 19, 5_000, size_bytes=200)
    add_finished(store, first, second)
    store.update_segment_state(second.segment_id, SegmentState.DELETE_SEGMENT_STARTED, event_time_ms=3)
    lease = store.acquire_compaction_lease(TP, "job", 60_000)
    assert lease is not None
    compacted = segment(0, 19, 9_000, size_bytes=150)

    assert not store.swap_compacted(
        lease, [compacted], [first.segment_id, second.segment_id], now_ms=5, delete_after_ms=6
    )

    assert store.get_segment(compacted.segment_id) is None
    stored = store.get_segment(first.segment_id)
    assert stored is not None and stored.state is FINISHED


def test_a_swap_into_a_partition_being_deleted_is_refused_and_a_committed_one_is_told_done(
    store: SqlMetadataStore,
) -> None:
    # The deletion lists the partition's segments once it is DELETE_PARTITION_MARKED: a swap
    # committed after would leave its outputs behind it.
    first, second = segment(0, 9, 9_000, size_bytes=100), segment(10, 19, 5_000, size_bytes=200)
    add_finished(store, first, second)
    lease = store.acquire_compaction_lease(TP, "job", 60_000)
    assert lease is not None
    earlier = segment(0, 9, 9_000, size_bytes=50)
    assert store.swap_compacted(lease, [earlier], [first.segment_id], now_ms=1, delete_after_ms=2)
    store.update_partition_state(TP, PartitionState.DELETE_PARTITION_MARKED, event_time_ms=3)
    before = (list(store.list_segments(TP)), store.get_partition(TP), stored_tree(store))
    compacted = segment(10, 19, 5_000, size_bytes=150)

    assert not store.swap_compacted(lease, [compacted], [second.segment_id], now_ms=5, delete_after_ms=6)

    assert (list(store.list_segments(TP)), store.get_partition(TP), stored_tree(store)) == before
    # The retry of the swap that committed before the deletion began: done, keep its objects.
    assert store.swap_compacted(lease, [earlier], [first.segment_id], now_ms=7, delete_after_ms=8)
    assert (list(store.list_segments(TP)), store.get_partition(TP), stored_tree(store)) == before


def test_recording_outputs_again_is_a_no_op_and_other_keys_under_a_recorded_id_are_refused(
    store: SqlMetadataStore,
) -> None:
    # A retry of a call whose commit was lost records nothing twice and fails nothing.
    lease = store.acquire_compaction_lease(TP, "job", 60_000)
    assert lease is not None
    outputs = [
        CompactionOutput(uuid.uuid4(), f"out-{n}.log", f"out-{n}.indexes", lease.epoch, 7) for n in range(2)
    ]
    store.add_compaction_outputs(lease, outputs)

    store.add_compaction_outputs(lease, outputs)

    assert sorted(store.compaction_outputs(TP)) == sorted(outputs)
    moved = outputs[0]._replace(log_key="elsewhere.log")
    with pytest.raises(DuplicateSegmentError, match=str(moved.segment_id)):
        store.add_compaction_outputs(lease, [moved])
    assert sorted(store.compaction_outputs(TP)) == sorted(outputs)


def test_a_swap_retried_after_it_committed_and_the_lease_moved_on_still_reports_it_done(
    store: SqlMetadataStore,
) -> None:
    # Told StaleLeaseError, the job would delete the outputs' objects: they are finished segments.
    first, second = segment(0, 9, size_bytes=100), segment(10, 19, size_bytes=200)
    add_finished(store, first, second)
    lease = store.acquire_compaction_lease(TP, "job", 60_000)
    assert lease is not None
    compacted = segment(0, 19, size_bytes=150)
    replaced = [first.segment_id, second.segment_id]
    assert store.swap_compacted(lease, [compacted], replaced, now_ms=1, delete_after_ms=2)
    assert store.release_compaction_lease(lease)
    assert store.acquire_compaction_lease(TP, "next-job", 60_000) is not None

    assert store.swap_compacted(lease, [compacted], replaced, now_ms=5, delete_after_ms=6)

    with pytest.raises(StaleLeaseError):
        store.swap_compacted(lease, [segment(0, 19)], replaced, now_ms=5, delete_after_ms=6)
