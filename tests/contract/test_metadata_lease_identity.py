"""Contract of the lease fence: a write is refused unless it carries the partition's lease as a
whole (its epoch, its broker and that broker's process), on SQLite and PostgreSQL.

A PostgreSQL failover that loses committed transactions (asynchronous replication) can hand one
epoch out twice: to another broker, or to another process of the same broker. The tests record
the second take straight into the partition's row (:func:`tests.metadata_support.grant_epoch_again`),
as the promoted standby has it; the first holder still carries the epoch it was given.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest

from metadata.store import SqlMetadataStore
from rlm.errors import StaleLeaseError
from rlm.metastore import (
    Lease,
    PartitionState,
    PendingUpload,
    RemoteSegment,
    SegmentState,
    SkipKind,
    SkippedRange,
    TopicPartition,
)
from tests.metadata_support import TP, grant_epoch_again, segment

TTL = 30_000
MINE = uuid.UUID("00000000-0000-4000-8000-000000000001")
THEIRS = uuid.UUID("00000000-0000-4000-8000-000000000002")
NEW_TOPIC_ID = uuid.UUID("00000000-0000-4000-8000-0000000000aa")
FINISHED = SegmentState.COPY_SEGMENT_FINISHED

Write = Callable[[SqlMetadataStore, Lease, RemoteSegment, RemoteSegment], object]
"""A fenced write, given the store, the lease to write under, a finished and a started segment."""

WRITES: dict[str, Write] = {
    "add_segment": lambda store, fence, _done, _going: store.add_segment(segment(200, 299), fence=fence),
    "update_segment_state": lambda store, fence, _done, going: store.update_segment_state(
        going.segment_id, FINISHED, event_time_ms=5, fence=fence
    ),
    "add_pending_upload": lambda store, fence, _done, going: store.add_pending_upload(
        going.segment_id, PendingUpload(going.layout.log_key, "upload-1"), fence=fence
    ),
    "advance_log_start_offset": lambda store, fence, _done, _going: store.advance_log_start_offset(
        TP, 50, fence=fence
    ),
    "update_partition_state": lambda store, fence, _done, _going: store.update_partition_state(
        TP, PartitionState.DELETE_PARTITION_MARKED, event_time_ms=5, fence=fence
    ),
    "adopt_topic_id": lambda store, fence, _done, _going: store.adopt_topic_id(
        TP, NEW_TOPIC_ID, event_time_ms=5, fence=fence
    ),
    "adopt_the_recorded_topic_id": lambda store, fence, done, _going: store.adopt_topic_id(
        TP, done.topic_id or NEW_TOPIC_ID, event_time_ms=5, fence=fence
    ),
    "topic_id_retirees": lambda store, fence, _done, _going: store.topic_id_retirees(
        TP, NEW_TOPIC_ID, fence=fence
    ),
    "truncate_copies": lambda store, fence, _done, _going: store.truncate_copies(
        TP, 0, event_time_ms=5, fence=fence
    ),
    "trim_copies": lambda store, fence, done, going: store.trim_copies(
        TP, done.segment_id, going.segment_id, 50, event_time_ms=5, fence=fence
    ),
    "finish_overlay": lambda store, fence, _done, going: store.finish_overlay(
        TP, going.segment_id, event_time_ms=5, fence=fence
    ),
    "add_skipped_range": lambda store, fence, _done, _going: store.add_skipped_range(
        SkippedRange(TP, 300, 399, SkipKind.OPERATOR, "offsets 300..399 are gone", 5), fence=fence
    ),
    "purge_deleted_segments": lambda store, fence, _done, _going: store.purge_deleted_segments(
        TP, deleted_before_ms=2**62, fence=fence
    ),
}

#: Who the failover handed the writer's epoch to, and what the refusal then says.
TAKERS = {
    "another-broker": (
        2,
        THEIRS,
        "lease epoch 1 is broker 2's, not broker 1's: the epoch was handed out twice",
    ),
    "another-incarnation": (
        1,
        THEIRS,
        f"lease epoch 1 of broker 1 is held by its incarnation {THEIRS}, not by incarnation {MINE}",
    ),
}


def _tiered(store: SqlMetadataStore) -> tuple[Lease, RemoteSegment, RemoteSegment]:
    """Broker 1's lease (process ``MINE``), a finished copy and one under way, written under it."""
    lease = store.acquire_lease(TP, owner=1, ttl_ms=TTL, incarnation=MINE)
    assert lease is not None and lease.epoch == 1
    done, going = segment(0, 99), segment(100, 199)
    store.add_segment(done, fence=lease)
    store.update_segment_state(done.segment_id, FINISHED, event_time_ms=2, fence=lease)
    store.add_segment(going, fence=lease)
    return lease, done, going


def _everything(store: SqlMetadataStore, going: RemoteSegment) -> object:
    """All that the writes above could change."""
    return (
        list(store.list_segments(TP)),
        store.get_partition(TP),
        store.list_skipped_ranges(TP),
        store.pending_uploads(going.segment_id),
        store.get_lease(TP),
    )


@pytest.mark.parametrize("taker", TAKERS)
@pytest.mark.parametrize("write", WRITES)
def test_a_write_under_an_epoch_handed_out_again_is_refused_and_changes_nothing(
    store: SqlMetadataStore, write: str, taker: str
) -> None:
    lease, done, going = _tiered(store)
    owner, incarnation, named = TAKERS[taker]
    grant_epoch_again(store, TP, owner, incarnation)
    before = _everything(store, going)

    with pytest.raises(StaleLeaseError, match=named):
        WRITES[write](store, lease, done, going)

    assert _everything(store, going) == before


@pytest.mark.parametrize("taker", TAKERS)
def test_the_holder_the_partition_records_writes_under_the_epoch_handed_out_again(
    store: SqlMetadataStore, taker: str
) -> None:
    _, done, going = _tiered(store)
    owner, incarnation, _ = TAKERS[taker]
    grant_epoch_again(store, TP, owner, incarnation)
    theirs = store.get_lease(TP)
    assert theirs is not None and (theirs.owner, theirs.epoch, theirs.incarnation) == (owner, 1, incarnation)

    store.add_segment(segment(200, 299), fence=theirs)
    assert store.update_segment_state(going.segment_id, FINISHED, event_time_ms=5, fence=theirs).changed
    assert store.advance_log_start_offset(TP, 100, fence=theirs) == 100
    assert store.truncate_copies(TP, 100, event_time_ms=6, fence=theirs) == 2
    assert [s.segment_id for s in store.list_segments(TP, states=[FINISHED])] == [done.segment_id]


def test_a_lease_without_an_incarnation_is_refused_where_the_epoch_went_to_a_process_with_one(
    store: SqlMetadataStore,
) -> None:
    lease = store.acquire_lease(TP, owner=1, ttl_ms=TTL)
    assert lease is not None and lease.incarnation is None
    store.add_segment(segment(0, 99), fence=lease)  # no incarnation on either side: the same lease
    grant_epoch_again(store, TP, 1, THEIRS)

    with pytest.raises(StaleLeaseError, match=f"held by its incarnation {THEIRS}, not by incarnation None"):
        store.add_segment(segment(100, 199), fence=lease)


def test_the_lease_of_another_partition_fences_nothing_here(store: SqlMetadataStore) -> None:
    # Epochs are per partition: both leases are broker 1's process MINE's, at epoch 1.
    other = TopicPartition(TP.topic, TP.partition + 1)
    here = store.acquire_lease(TP, owner=1, ttl_ms=TTL, incarnation=MINE)
    there = store.acquire_lease(other, owner=1, ttl_ms=TTL, incarnation=MINE)
    assert here is not None and there is not None and here.epoch == there.epoch

    with pytest.raises(StaleLeaseError, match=f"the lease is {other}'s, not {TP}'s"):
        store.add_segment(segment(0, 99), fence=there)
    assert list(store.list_segments(TP)) == []
    store.add_segment(segment(0, 99), fence=here)


def test_a_lease_whose_epoch_went_to_another_incarnation_is_neither_renewed_nor_released(
    store: SqlMetadataStore,
) -> None:
    lease = store.acquire_lease(TP, owner=1, ttl_ms=TTL, incarnation=MINE)
    assert lease is not None
    grant_epoch_again(store, TP, 1, THEIRS)
    theirs = store.get_lease(TP)

    named = f"held by its incarnation {THEIRS}, not by incarnation {MINE}"
    with pytest.raises(StaleLeaseError, match=named):
        store.renew_lease(lease, TTL, refresh_after_ms=TTL)  # renewed just now: found by a read
    with pytest.raises(StaleLeaseError, match=named):
        store.renew_lease(lease, TTL)
    assert not store.release_lease(lease)
    assert store.get_lease(TP) == theirs
