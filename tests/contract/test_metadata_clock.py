"""Leases and claims between sidecars whose hosts' clocks disagree (PostgreSQL: the database
server's clock is the one they are stamped and judged by, :mod:`metadata.db_clock`)."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterator

import pytest

from metadata.db_clock import DatabaseClock, wall_clock_ms
from metadata.engine import create_engine_for_url
from metadata.store import SqlMetadataStore
from rlm.metastore.model import LogPosition, TopicPartition
from rlm.tiering.leases import LeaseKeeper
from rlm.tiering.reach import Reach

pytestmark = pytest.mark.postgres

TTL_MS = 60_000
TOPIC_ID = uuid.UUID(int=7)


class HostClock:
    """A host's wall clock, ``skew_ms`` off the true time, moved on by :meth:`advance`."""

    def __init__(self, skew_ms: int) -> None:
        self.skew_ms = skew_ms
        self.moved_ms = 0

    def __call__(self) -> int:
        return wall_clock_ms() + self.skew_ms + self.moved_ms


@pytest.fixture
def stores(postgres_url: str) -> Iterator[Callable[[HostClock], SqlMetadataStore]]:
    opened: list[SqlMetadataStore] = []

    def open_on(host: HostClock) -> SqlMetadataStore:
        store = SqlMetadataStore(create_engine_for_url(postgres_url), clock=DatabaseClock(local=host))
        opened.append(store)
        return store

    yield open_on
    for store in opened:
        store.close()


def _tp() -> TopicPartition:
    return TopicPartition(f"skew-{uuid.uuid4().hex[:8]}", 0)


@pytest.mark.parametrize("behind_ms", [0, 30_000, 61_000, 3_600_000])
def test_a_leader_whose_host_clock_lags_still_takes_the_lease_from_a_stalled_holder(
    stores: Callable[[HostClock], SqlMetadataStore], behind_ms: int
) -> None:
    """Broker 1's sidecar holds the lease while its log stopped; broker 2, the new leader, claims
    it every pass. Judged by the hosts' clocks, claims a lease's time to live old or more looked
    stale to the holder, which never gave way, and nothing was tiered."""
    tp = _tp()
    holder_host, leader_host = HostClock(0), HostClock(-behind_ms)
    holder = LeaseKeeper(stores(holder_host), 1, TTL_MS)
    leader = LeaseKeeper(stores(leader_host), 2, TTL_MS)
    behind = Reach(LogPosition(TOPIC_ID, 4, 19), LogPosition(TOPIC_ID, 4, 22))
    ahead = Reach(LogPosition(TOPIC_ID, 5, 49), LogPosition(TOPIC_ID, 5, 55))
    assert holder.hold(tp, behind) is not None
    owners = []
    for _ in range(5):
        for host in (holder_host, leader_host):
            host.moved_ms += 10_000  # ten seconds between passes
        taken = leader.hold(tp, ahead)
        held = holder.hold(tp, behind)
        owners.append(2 if taken else 1 if held else None)
    assert owners[-1] == 2


@pytest.mark.parametrize("ahead_ms", [61_000, 3_600_000])
def test_a_sidecar_whose_host_clock_runs_ahead_takes_no_lease_with_time_left(
    stores: Callable[[HostClock], SqlMetadataStore], ahead_ms: int
) -> None:
    tp = _tp()
    first = stores(HostClock(0))
    second = stores(HostClock(ahead_ms))
    assert first.acquire_lease(tp, 1, TTL_MS) is not None

    assert second.acquire_lease(tp, 2, TTL_MS) is None
    lease = first.get_lease(tp)
    assert lease is not None and lease.owner == 1


def test_a_host_clock_far_off_the_database_is_logged_once(
    stores: Callable[[HostClock], SqlMetadataStore], caplog: pytest.LogCaptureFixture
) -> None:
    store = stores(HostClock(-90_000))
    with caplog.at_level(logging.WARNING, logger="rlm.metadata"):
        store.get_lease(_tp())
        store.get_lease(_tp())
    said = [r.getMessage() for r in caplog.records if "clock" in r.getMessage()]
    assert len(said) == 1 and "90.0 s behind the metadata database's" in said[0]
    offset = store.clock_offset_ms
    assert offset is not None and 89_000 <= offset <= 91_000
