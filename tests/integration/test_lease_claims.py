"""A copy lease moves to the replica whose log is ahead: two sidecars, each over its broker's log.

Leases are not tied to leadership. Broker 1's sidecar holds the lease; its broker goes down (its
log stops growing, the sidecar runs on) while broker 2, leading now, rolls segments past it.
Before claims, broker 1 renewed the lease forever and tiered nothing new, while broker 2's local
retention would delete what was never tiered. A replica behind the holder, or level with it,
must never take the lease from it.
"""

from __future__ import annotations

import logging
import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from metadata.store import SqlMetadataStore
from rlm.log.logdir import PARTITION_METADATA
from rlm.metastore.model import LogPosition, TopicPartition
from rlm.metrics import Metrics
from rlm.tiering.leases import CLAIMS_KEPT_TTLS, LeaseKeeper
from rlm.tiering.reach import Reach
from tests.clock import FakeClock
from tests.metadata_support import counted_statements, writes
from tests.tiering_support import (
    WRITER_NOW_MS,
    Backend,
    SegmentPlan,
    Tiering,
    assert_invariants,
    make_backend,
    write_scripted_log_dir,
)

TP = TopicPartition("orders", 0)
LABELS = {"topic": "orders", "partition": "0"}
TTL = 60_000  # the settings' default lease time to live
TieringFactory = Callable[..., Tiering]


def plans(*epochs: int, last_records: int = 10) -> list[SegmentPlan]:
    """One rolled segment of 10 records per epoch given (the last one of ``last_records``)."""
    return [
        SegmentPlan(
            records=last_records if i == len(epochs) - 1 else 10,
            max_timestamp_ms=WRITER_NOW_MS - 1000 + i,
            leader_epochs=(epoch,),
        )
        for i, epoch in enumerate(epochs)
    ]


def write_log(log_dir: Path, segments: list[SegmentPlan], *, active: int = 3, topic_of: Path) -> None:
    """Write a replica's log (the same records as the others' while the plans agree), with the
    topic id of the log in ``topic_of`` when there is one (every replica names its topic's)."""
    metadata = topic_of / f"{TP.topic}-{TP.partition}" / PARTITION_METADATA
    topic_id = metadata.read_bytes() if metadata.exists() else None
    if log_dir.exists():
        shutil.rmtree(log_dir)
    write_scripted_log_dir(log_dir, {TP: segments}, active_records=active, seed=7)
    if topic_id is not None:
        (log_dir / f"{TP.topic}-{TP.partition}" / PARTITION_METADATA).write_bytes(topic_id)


def passes(*sidecars: Tiering, rounds: int) -> None:
    """``rounds`` copier passes of each sidecar in turn, 5 s apart; none may fail."""
    clock = sidecars[0].clock
    for _ in range(rounds):
        clock.advance(5_000)
        for sidecar in sidecars:
            for outcome in sidecar.copier().run_once():
                assert outcome.error is None, outcome.error


def copied(tiering: Tiering) -> list[tuple[int, int, int]]:
    return [(s.start_offset, s.end_offset, s.broker_id) for s in tiering.finished(TP)]


@pytest.mark.parametrize("new_leader", [(4, 4, 5, 5, 5), (4, 4, 4, 4, 4)], ids=["elected", "same-epoch"])
def test_a_holder_whose_broker_is_down_gives_the_lease_up_to_the_leader_ahead_of_it(
    backend: Backend,
    tiering_factory: TieringFactory,
    tmp_path: Path,
    new_leader: tuple[int, ...],
    caplog: pytest.LogCaptureFixture,
) -> None:
    one, two = tmp_path / "broker-1", tmp_path / "broker-2"
    write_log(one, plans(4, 4), topic_of=one)
    write_log(two, plans(4, 4), topic_of=one)
    clock = FakeClock()
    first = tiering_factory(backend, one, clock)
    second = tiering_factory(backend, two, clock, broker_id=2)
    passes(first, second, rounds=2)  # level logs: broker 1 keeps the lease it took first
    held = first.store.get_lease(TP)
    assert held is not None and held.owner == 1
    assert copied(first) == [(0, 9, 1), (10, 19, 1)]

    # Broker 1 goes down; broker 2 leads and rolls segments past broker 1's log end.
    write_log(two, plans(*new_leader), topic_of=one)
    with caplog.at_level(logging.WARNING, logger="rlm.leases"):
        passes(first, second, rounds=3)

    lease = first.store.get_lease(TP)
    assert lease is not None and lease.owner == 2 and lease.epoch == held.epoch + 1
    assert copied(first) == [(0, 9, 1), (10, 19, 1), (20, 29, 2), (30, 39, 2), (40, 49, 2)]
    assert_invariants(second.store, second.storage, [two])
    assert first.registry.get_sample_value("rlm_lease_yields_total", LABELS) == 1
    assert second.registry.get_sample_value("rlm_lease_yields_total", LABELS) is None
    (warning,) = [r.getMessage() for r in caplog.records]
    assert warning.startswith("orders-0: broker 2's log is ahead of this broker's")
    assert f"up to offset 49 of leader epoch {new_leader[-1]}" in warning
    assert "ends at offset 22 of leader epoch 4" in warning
    # Broker 1 now claims the lease in turn, from behind: it stays with broker 2.
    (claim,) = first.store.lease_claims(TP, max_age_ms=TTL)
    assert (claim.broker_id, claim.position.leader_epoch, claim.position.offset) == (1, 4, 19)
    assert [o.skipped for o in first.copier().run_once()] == ["the copy lease is held by broker 2"]


@pytest.mark.parametrize(
    ("holder", "other", "other_active", "claimed"),
    [
        pytest.param(plans(4, 4, 4, 4, 4), plans(4, 4), 3, (4, 19), id="a-follower-behind"),
        # The follower rolled a segment the holder has not rolled yet, of records the holder holds:
        # what it could tier leads, and the holder tiers them once it rolls too.
        pytest.param(
            plans(4, 4, 4), plans(4, 4, 4, 4, last_records=3), 0, (4, 32), id="a-follower-rolled-first"
        ),
        # The old leader's replica, back before it truncated its log: more offsets, an older epoch.
        pytest.param(
            plans(4, 4, 5, 5), plans(4, 4, 4, 4, 4, 4), 3, (4, 59), id="an-old-leader-not-truncated"
        ),
    ],
)
def test_a_replica_not_ahead_of_the_holder_claims_the_lease_but_never_takes_it(
    tiering_factory: TieringFactory,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    holder: list[SegmentPlan],
    other: list[SegmentPlan],
    other_active: int,
    claimed: tuple[int, int],
) -> None:
    backend = make_backend("sqlite-fs", request, tmp_path)
    one, two = tmp_path / "broker-1", tmp_path / "broker-2"
    write_log(one, holder, topic_of=one)
    write_log(two, other, active=other_active, topic_of=one)
    clock = FakeClock()
    first = tiering_factory(backend, one, clock)
    second = tiering_factory(backend, two, clock, broker_id=2)
    assert first.copier().run_once()[0].copied_segments == len(holder)
    held = first.store.get_lease(TP)
    assert held is not None

    passes(second, first, rounds=5)

    lease = first.store.get_lease(TP)
    assert lease is not None and (lease.owner, lease.epoch) == (1, held.epoch)
    (claim,) = first.store.lease_claims(TP, max_age_ms=TTL)
    assert (claim.broker_id, claim.position.leader_epoch, claim.position.offset) == (2, *claimed)
    assert [o.skipped for o in second.copier().run_once()] == ["the copy lease is held by broker 1"]
    assert first.registry.get_sample_value("rlm_lease_yields_total", LABELS) is None
    assert {broker for _, _, broker in copied(first)} == {1}


def test_a_claim_ahead_counts_while_it_is_younger_than_the_lease_ttl(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    clock = FakeClock()
    store = make_backend("sqlite-fs", request, tmp_path).open_store(clock)
    registry = CollectorRegistry()
    keeper = LeaseKeeper(store, 1, TTL, metrics=Metrics(registry))
    topic_id = uuid.uuid4()
    mine = Reach(LogPosition(topic_id, 4, 19), LogPosition(topic_id, 4, 22))
    ahead = LogPosition(topic_id, 4, 29)
    try:
        taken = keeper.hold(TP, mine)
        assert taken is not None
        store.claim_lease(TP, 2, ahead)
        clock.advance(TTL)  # broker 2 stopped claiming: its claim is too old to count
        renewed = keeper.hold(TP, mine)
        assert renewed is not None and renewed.epoch == taken.epoch
        store.claim_lease(TP, 3, LogPosition(uuid.uuid4(), 9, 99))  # a deleted topic's replica
        store.claim_lease(TP, 2, LogPosition(topic_id, 4, 22))  # level with the holder's log
        assert keeper.hold(TP, mine) is not None

        store.claim_lease(TP, 2, ahead)
        assert keeper.hold(TP, mine) is None  # given up
        assert store.get_lease(TP) is None
        assert registry.get_sample_value("rlm_lease_yields_total", LABELS) == 1
        assert keeper.hold(TP) is None  # nor taken back by a renewal within a pass
        assert keeper.hold(TP, mine) is None
        assert keeper.holder(TP) == "nobody (this broker leaves it to broker 2, whose log is ahead)"

        clock.advance(TTL)  # broker 2 never took it: its claim grows old, broker 1 takes it back
        again = keeper.hold(TP, mine)
        assert again is not None and again.epoch == taken.epoch + 1
        assert keeper.holder(TP) == "broker 1"
    finally:
        store.close()


@pytest.fixture
def clocked_store(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[SqlMetadataStore, FakeClock[int]]]:
    """A SQLite store whose leases and claims age by the clock beside it."""
    clock = FakeClock()
    store = make_backend("sqlite-fs", request, tmp_path).open_store(clock)
    try:
        yield store, clock
    finally:
        store.close()


def keeper(store: SqlMetadataStore, broker_id: int) -> LeaseKeeper:
    return LeaseKeeper(store, broker_id, TTL, metrics=Metrics(CollectorRegistry()))


def test_a_sidecar_claiming_a_lease_forgets_the_claims_of_brokers_gone_long_since(
    clocked_store: tuple[SqlMetadataStore, FakeClock[int]],
) -> None:
    store, clock = clocked_store
    holder, follower = keeper(store, 1), keeper(store, 3)
    topic_id = uuid.uuid4()
    level = Reach(LogPosition(topic_id, 4, 19), LogPosition(topic_id, 4, 22))
    assert holder.hold(TP, level) is not None
    store.claim_lease(TP, 2, LogPosition(topic_id, 4, 19))  # broker 2, removed from the cluster since
    for _ in range(2 * CLAIMS_KEPT_TTLS):
        clock.advance(TTL // 2)
        assert holder.hold(TP, level) is not None
        assert follower.hold(TP, level) is None  # claims, at each pass
    assert [c.broker_id for c in store.lease_claims(TP, max_age_ms=100 * TTL)] == [2, 3]
    clock.advance(TTL // 2)
    follower.hold(TP, level)
    assert [c.broker_id for c in store.lease_claims(TP, max_age_ms=100 * TTL)] == [3]


def test_a_follower_asking_at_every_pass_writes_only_to_keep_its_claim_live(
    clocked_store: tuple[SqlMetadataStore, FakeClock[int]],
) -> None:
    store, clock = clocked_store
    holder, follower = keeper(store, 1), keeper(store, 2)
    topic_id = uuid.uuid4()
    leader = Reach(LogPosition(topic_id, 4, 39), LogPosition(topic_id, 4, 42))
    level = Reach(LogPosition(topic_id, 4, 19), LogPosition(topic_id, 4, 22))
    pass_ms = TTL // 4  # the copier's and retention's passes, each asking for the lease

    def asks(reach: Reach) -> int:
        """The statements of one pass of the follower that write, after it was refused."""
        clock.advance(pass_ms)
        assert holder.hold(TP, leader) is not None
        with counted_statements(store) as statements:
            assert follower.hold(TP, reach) is None
        (claim,) = store.lease_claims(TP, max_age_ms=TTL)  # live at every pass of the holder
        assert (claim.broker_id, claim.position) == (2, reach.tierable)
        return len(writes(statements))

    written = [asks(level) for _ in range(8)]
    # The first claim, then one each half a TTL: never the lease's lock.
    assert [bool(n) for n in written] == [True, False, True, False, True, False, True, False]
    rolled = Reach(LogPosition(topic_id, 4, 29), LogPosition(topic_id, 4, 31))
    assert asks(rolled) > 0  # a new position is claimed at once
    assert asks(rolled) == 0
