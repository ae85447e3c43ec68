"""Contract of partition state, copy leases and lease fencing, on SQLite and PostgreSQL."""

from __future__ import annotations

import dataclasses
import uuid

import pytest

from metadata.store import SqlMetadataStore
from rlm.errors import InvalidStateTransitionError, StaleLeaseError, StateConflictError
from rlm.metastore import Lease, PartitionState, SegmentState, TopicPartition
from tests.clock import FakeClock
from tests.metadata_support import TP, counted_statements, segment, writes

MARKED = PartitionState.DELETE_PARTITION_MARKED
STARTED = PartitionState.DELETE_PARTITION_STARTED
FINISHED = PartitionState.DELETE_PARTITION_FINISHED
TTL = 30_000


def test_a_new_partition_has_defaults(store: SqlMetadataStore) -> None:
    assert store.get_partition(TP) is None
    store.add_segment(segment(0, 9))
    record = store.get_partition(TP)
    assert record is not None
    assert (record.remote_log_start_offset, record.highest_copied_offset) == (-1, -1)
    assert (record.remote_log_size_bytes, record.deletion_state) == (0, None)


def test_log_start_offset_only_advances(store: SqlMetadataStore) -> None:
    assert store.advance_log_start_offset(TP, 100) == 100
    assert store.advance_log_start_offset(TP, 50) == 100
    assert store.advance_log_start_offset(TP, 250) == 250
    record = store.get_partition(TP)
    assert record is not None and record.remote_log_start_offset == 250


def test_partition_deletion_walks_marked_started_finished(store: SqlMetadataStore) -> None:
    for state, when in [(MARKED, 1), (MARKED, 2), (STARTED, 3), (FINISHED, 4), (FINISHED, 5)]:
        updated = store.update_partition_state(TP, state, event_time_ms=when)
        assert updated.deletion_state is state
    record = store.get_partition(TP)
    assert record is not None and record.deletion_event_time_ms == 4


@pytest.mark.parametrize(
    ("path", "bad", "named"),
    [
        ((), STARTED, "from no deletion state to DELETE_PARTITION_STARTED"),
        ((MARKED,), FINISHED, "from DELETE_PARTITION_MARKED to DELETE_PARTITION_FINISHED"),
        ((MARKED, STARTED), MARKED, "from DELETE_PARTITION_STARTED to DELETE_PARTITION_MARKED"),
    ],
)
def test_an_invalid_partition_transition_names_both_states(
    store: SqlMetadataStore,
    path: tuple[PartitionState, ...],
    bad: PartitionState,
    named: str,
) -> None:
    for state in path:
        store.update_partition_state(TP, state, event_time_ms=1)
    with pytest.raises(InvalidStateTransitionError, match=named):
        store.update_partition_state(TP, bad, event_time_ms=2)
    record = store.get_partition(TP)
    if path:
        assert record is not None and record.deletion_state is path[-1]
    else:
        assert record is None  # the failed call rolled back the partition it would have created


def test_no_segment_is_added_to_a_partition_being_deleted(store: SqlMetadataStore) -> None:
    store.update_partition_state(TP, MARKED, event_time_ms=1)
    with pytest.raises(StateConflictError, match="DELETE_PARTITION_MARKED"):
        store.add_segment(segment(0, 9))
    assert list(store.list_segments(TP)) == []


def test_list_partitions_by_deletion_state(store: SqlMetadataStore) -> None:
    others = [TopicPartition("b", 1), TopicPartition("a", 2), TopicPartition("a", 0)]
    for tp in others:
        store.advance_log_start_offset(tp, 0)
    store.update_partition_state(others[1], MARKED, event_time_ms=1)
    listed = [r.topic_partition for r in store.list_partitions()]
    assert listed == sorted(others)
    marked = [r.topic_partition for r in store.list_partitions(deletion_state=MARKED)]
    assert marked == [others[1]]


def test_acquire_renew_release_and_takeover(store: SqlMetadataStore, clock: FakeClock[int]) -> None:
    first = store.acquire_lease(TP, owner=1, ttl_ms=TTL)
    assert first == Lease(TP, owner=1, epoch=1, expires_at_ms=clock.now + TTL)
    assert store.get_lease(TP) == first
    assert store.acquire_lease(TP, owner=2, ttl_ms=TTL) is None
    clock.advance(TTL - 1)
    renewed = store.renew_lease(first, TTL)
    assert (renewed.epoch, renewed.expires_at_ms) == (1, clock.now + TTL)
    clock.advance(TTL - 1)
    assert store.acquire_lease(TP, owner=2, ttl_ms=TTL) is None
    clock.advance(1)
    taken = store.acquire_lease(TP, owner=2, ttl_ms=TTL)  # expired: broker 2 takes over
    assert taken is not None and (taken.owner, taken.epoch) == (2, 2)
    with pytest.raises(StaleLeaseError, match="epoch 1 is stale.*epoch 2 and held by broker 2"):
        store.renew_lease(renewed, TTL)
    assert not store.release_lease(renewed)
    assert store.release_lease(taken)
    assert not store.release_lease(taken)
    assert store.get_lease(TP) is None
    again = store.acquire_lease(TP, owner=1, ttl_ms=TTL)
    assert again is not None and again.epoch == 3


def test_a_released_lease_says_when_it_was_given_up(store: SqlMetadataStore, clock: FakeClock[int]) -> None:
    # Deleting a deleted topic waits while a sidecar held its lease lately (partition_deletion):
    # one that gave the lease back (a clean shutdown, a rolling restart) held it until then.
    assert store.lease_released_at_ms(TP) is None  # never held
    held = store.acquire_lease(TP, owner=1, ttl_ms=TTL)
    assert held is not None
    assert store.lease_released_at_ms(TP) is None  # held: get_lease says until when
    clock.advance(1_000)
    assert store.release_lease(held)
    assert store.get_lease(TP) is None
    assert store.lease_released_at_ms(TP) == clock.now
    clock.advance(1_000)
    assert not store.release_lease(held)  # not current: the time stays
    assert store.lease_released_at_ms(TP) == clock.now - 1_000

    # Free to take at once, by any broker, and the epoch keeps growing.
    taken = store.acquire_lease(TP, owner=2, ttl_ms=TTL)
    assert taken is not None and taken.epoch == held.epoch + 1
    assert store.lease_released_at_ms(TP) is None
    # A lease released after it expired was held until it expired.
    clock.advance(TTL * 2)
    assert store.release_lease(taken)
    assert store.lease_released_at_ms(TP) == taken.expires_at_ms
    assert store.lease_released_at_ms(TopicPartition("payments", 3)) is None  # unknown partition


def test_a_lease_another_holds_is_refused_by_a_read_alone(
    store: SqlMetadataStore, clock: FakeClock[int]
) -> None:
    # Sidecars not holding a partition's lease ask for it at every pass: a refusal writes nothing
    # and locks nothing (no commit, no wait behind the holder's writes).
    mine, other = uuid.uuid4(), uuid.uuid4()
    held = store.acquire_lease(TP, owner=1, ttl_ms=TTL, incarnation=mine)
    assert held is not None
    clock.advance(TTL - 1)
    with counted_statements(store) as statements:
        assert store.acquire_lease(TP, owner=2, ttl_ms=TTL) is None
        assert (
            store.acquire_lease(TP, owner=1, ttl_ms=TTL, incarnation=other, replace_own_incarnation=False)
            is None
        )
    assert statements and writes(statements) == []
    assert store.get_lease(TP) == held

    clock.advance(1)  # expired: the same call takes it
    with counted_statements(store) as statements:
        taken = store.acquire_lease(TP, owner=2, ttl_ms=TTL)
    assert taken is not None and (taken.owner, taken.epoch) == (2, held.epoch + 1)
    assert writes(statements)


def test_a_renewal_soon_after_the_last_is_a_read_alone(
    store: SqlMetadataStore, clock: FakeClock[int]
) -> None:
    # The copier and retention renew at every pass, the copier between segments too: a renewal
    # within refresh_after_ms of the last writes nothing, and the lease keeps the expiry it has.
    held = store.acquire_lease(TP, owner=1, ttl_ms=TTL)
    assert held is not None
    clock.advance(TTL // 4 - 1)
    with counted_statements(store) as statements:
        kept = store.renew_lease(held, TTL, refresh_after_ms=TTL // 4)
    assert statements and writes(statements) == []
    assert kept == held == store.get_lease(TP)

    clock.advance(1)  # as old as refresh_after_ms: written again
    with counted_statements(store) as statements:
        renewed = store.renew_lease(held, TTL, refresh_after_ms=TTL // 4)
    assert writes(statements)
    assert renewed.expires_at_ms == clock.now + TTL and store.get_lease(TP) == renewed

    # A lease taken over since is refused however recent its renewal.
    clock.advance(TTL)
    taken = store.acquire_lease(TP, owner=2, ttl_ms=TTL)
    assert taken is not None
    with pytest.raises(StaleLeaseError, match="held by broker 2"):
        store.renew_lease(renewed, TTL, refresh_after_ms=TTL)
    # So is a lease renewed recently by another incarnation's epoch: the epoch decides.
    assert store.renew_lease(taken, TTL, refresh_after_ms=TTL) == taken


def test_an_expired_lease_not_taken_over_can_be_renewed(
    store: SqlMetadataStore, clock: FakeClock[int]
) -> None:
    lease = store.acquire_lease(TP, owner=1, ttl_ms=TTL)
    assert lease is not None
    clock.advance(TTL * 3)
    assert store.get_lease(TP) == lease
    assert store.renew_lease(lease, TTL).expires_at_ms == clock.now + TTL


def test_the_same_owner_reacquiring_fences_its_previous_incarnation(
    store: SqlMetadataStore,
) -> None:
    old = store.acquire_lease(TP, owner=1, ttl_ms=TTL)
    new = store.acquire_lease(TP, owner=1, ttl_ms=TTL)
    assert old is not None and new is not None and new.epoch == old.epoch + 1
    with pytest.raises(StaleLeaseError):
        store.add_segment(segment(0, 9), fence=old)


def test_lease_epochs_are_per_partition(store: SqlMetadataStore) -> None:
    other = TopicPartition("orders", 1)
    a = store.acquire_lease(TP, owner=1, ttl_ms=TTL)
    b = store.acquire_lease(other, owner=2, ttl_ms=TTL)
    assert a is not None and b is not None and a.epoch == b.epoch == 1
    with pytest.raises(ValueError, match="positive"):
        store.acquire_lease(TP, owner=1, ttl_ms=0)


def test_every_write_with_a_stale_epoch_fails_and_changes_nothing(
    store: SqlMetadataStore, clock: FakeClock[int]
) -> None:
    old = store.acquire_lease(TP, owner=1, ttl_ms=TTL)
    assert old is not None
    seg = segment(0, 99)
    store.add_segment(seg, fence=old)
    clock.advance(TTL)
    new = store.acquire_lease(TP, owner=2, ttl_ms=TTL)
    assert new is not None

    stale = r"lease epoch 1 is stale, the lease is at epoch 2 and held by broker 2"
    with pytest.raises(StaleLeaseError, match=stale):
        store.add_segment(segment(100, 199), fence=old)
    with pytest.raises(StaleLeaseError, match=stale):
        store.update_segment_state(
            seg.segment_id,
            SegmentState.COPY_SEGMENT_FINISHED,
            event_time_ms=1,
            fence=old,
        )
    with pytest.raises(StaleLeaseError, match=stale):
        store.advance_log_start_offset(TP, 50, fence=old)
    with pytest.raises(StaleLeaseError, match=stale):
        store.update_partition_state(TP, MARKED, event_time_ms=1, fence=old)

    assert [s.segment_id for s in store.list_segments(TP)] == [seg.segment_id]
    stored = store.get_segment(seg.segment_id)
    assert stored is not None and stored.state is SegmentState.COPY_SEGMENT_STARTED
    record = store.get_partition(TP)
    assert record is not None
    assert (record.remote_log_start_offset, record.deletion_state) == (-1, None)

    update = store.update_segment_state(
        seg.segment_id, SegmentState.COPY_SEGMENT_FINISHED, event_time_ms=1, fence=new
    )
    assert update.changed


def test_writes_after_a_release_are_fenced(store: SqlMetadataStore) -> None:
    lease = store.acquire_lease(TP, owner=1, ttl_ms=TTL)
    assert lease is not None and store.release_lease(lease)
    with pytest.raises(StaleLeaseError, match="not held by anyone"):
        store.add_segment(segment(0, 9), fence=lease)
    with pytest.raises(StaleLeaseError):
        store.add_segment(segment(0, 9), fence=dataclasses.replace(lease, epoch=0))
