"""Contract of the claims on copy leases, on SQLite and PostgreSQL."""

from __future__ import annotations

import uuid

from metadata.store import SqlMetadataStore
from rlm.metastore import LeaseClaim, LogPosition, TopicPartition
from tests.clock import FakeClock
from tests.metadata_support import TP, counted_statements, writes

TTL = 30_000
TOPIC_ID = uuid.UUID("6d5b1c2e-0f4a-4c59-9b5e-0123456789ab")


def test_a_claim_is_recorded_per_broker_and_replaced_by_the_next(
    store: SqlMetadataStore, clock: FakeClock[int]
) -> None:
    assert store.lease_claims(TP, max_age_ms=TTL) == []  # a partition the store never saw
    store.claim_lease(TP, 2, LogPosition(TOPIC_ID, 4, 19))
    first = clock.now
    clock.advance(1_000)
    store.claim_lease(TP, 3, LogPosition(None, -1, -1))
    clock.advance(1_000)
    store.claim_lease(TP, 2, LogPosition(TOPIC_ID, 5, 49))  # its next pass replaces its claim
    store.claim_lease(TopicPartition("other", 0), 2, LogPosition(None, 0, 0))

    assert store.lease_claims(TP, max_age_ms=TTL) == [
        LeaseClaim(TP, 2, LogPosition(TOPIC_ID, 5, 49), first + 2_000),
        LeaseClaim(TP, 3, LogPosition(None, -1, -1), first + 1_000),
    ]


def test_claims_as_old_as_the_age_asked_for_are_left_out(
    store: SqlMetadataStore, clock: FakeClock[int]
) -> None:
    store.claim_lease(TP, 2, LogPosition(TOPIC_ID, 4, 19))
    clock.advance(10_000)
    store.claim_lease(TP, 3, LogPosition(TOPIC_ID, 4, 29))
    clock.advance(TTL - 10_000 - 1)
    assert [c.broker_id for c in store.lease_claims(TP, max_age_ms=TTL)] == [2, 3]
    clock.advance(1)
    assert [c.broker_id for c in store.lease_claims(TP, max_age_ms=TTL)] == [3]
    clock.advance(10_000)
    assert store.lease_claims(TP, max_age_ms=TTL) == []


def test_a_claim_grants_nothing_and_taking_the_lease_withdraws_the_takers_claim_only(
    store: SqlMetadataStore,
) -> None:
    held = store.acquire_lease(TP, owner=1, ttl_ms=TTL)
    assert held is not None
    store.claim_lease(TP, 2, LogPosition(TOPIC_ID, 9, 1_000))
    store.claim_lease(TP, 3, LogPosition(TOPIC_ID, 4, 19))
    assert store.get_lease(TP) == held
    assert store.acquire_lease(TP, owner=2, ttl_ms=TTL) is None  # still broker 1's
    assert [c.broker_id for c in store.lease_claims(TP, max_age_ms=TTL)] == [2, 3]

    assert store.release_lease(held)
    taken = store.acquire_lease(TP, owner=2, ttl_ms=TTL)

    assert taken is not None and taken.epoch == held.epoch + 1
    assert [c.broker_id for c in store.lease_claims(TP, max_age_ms=TTL)] == [3]


def test_a_claim_may_forget_the_claims_long_past(store: SqlMetadataStore, clock: FakeClock[int]) -> None:
    store.claim_lease(TP, 2, LogPosition(TOPIC_ID, 4, 19))  # a broker removed since
    store.claim_lease(TopicPartition("other", 0), 2, LogPosition(TOPIC_ID, 4, 19))
    clock.advance(5_000)
    store.claim_lease(TP, 4, LogPosition(TOPIC_ID, 4, 19))
    clock.advance(10 * TTL - 5_000)
    store.claim_lease(TP, 3, LogPosition(TOPIC_ID, 4, 29), forget_after_ms=10 * TTL)
    assert [c.broker_id for c in store.lease_claims(TP, max_age_ms=100 * TTL)] == [2, 3, 4]  # not older yet
    clock.advance(1)
    store.claim_lease(TP, 3, LogPosition(TOPIC_ID, 4, 39), forget_after_ms=10 * TTL)

    assert [c.broker_id for c in store.lease_claims(TP, max_age_ms=100 * TTL)] == [3, 4]
    # Only that partition's claims: the other partition's are forgotten by claims on it.
    assert [c.broker_id for c in store.lease_claims(TopicPartition("other", 0), max_age_ms=100 * TTL)] == [2]


def test_a_claim_of_the_same_position_is_written_again_only_once_as_old_as_asked(
    store: SqlMetadataStore, clock: FakeClock[int]
) -> None:
    refresh = TTL // 2
    position = LogPosition(TOPIC_ID, 4, 19)
    assert store.claim_lease(TP, 2, position, refresh_after_ms=refresh)
    first = clock.now
    clock.advance(refresh - 1)
    with counted_statements(store) as statements:
        assert not store.claim_lease(TP, 2, position, refresh_after_ms=refresh, forget_after_ms=1)
    assert statements and writes(statements) == []
    assert store.lease_claims(TP, max_age_ms=TTL) == [LeaseClaim(TP, 2, position, first)]

    assert store.claim_lease(TP, 3, position, refresh_after_ms=refresh)  # another broker's is its own
    moved = LogPosition(TOPIC_ID, 4, 29)  # a segment rolled: written at once
    assert store.claim_lease(TP, 2, moved, refresh_after_ms=refresh)
    assert store.lease_claims(TP, max_age_ms=TTL)[0] == LeaseClaim(TP, 2, moved, clock.now)
    clock.advance(refresh)  # as old as asked: written again, and it stays younger than a TTL
    assert store.claim_lease(TP, 2, moved, refresh_after_ms=refresh)
    assert store.lease_claims(TP, max_age_ms=TTL)[0] == LeaseClaim(TP, 2, moved, clock.now)
    assert not store.claim_lease(TP, 2, moved, refresh_after_ms=refresh)
