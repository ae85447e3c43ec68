"""Two processes with one ``broker.id``: the newer takes the leases once, the older warns and waits.

Before incarnations, each process retook the lease the other had just taken at its next pass,
each take a new epoch, forever (the epoch went from 7 to 66 in 20 s with two idle copiers), and
each fenced the other's writes. A restarted sidecar must still fence its previous incarnation at
once.

Nor may two holders of one epoch both write: a PostgreSQL failover that lost the commit of a take
can hand the epoch out again, to another broker or another process of the same one. The holder
the store records writes; the other's copies and deletions are refused at their first write.
"""

from __future__ import annotations

import logging
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from rlm.config import TopicSettings
from rlm.errors import CorruptCheckpointError, StaleLeaseError
from rlm.log.logdir import LogDir
from rlm.log.produce import ProduceSpec, produce
from rlm.metastore.model import SegmentState, TopicPartition
from rlm.tiering.leases import LeaseKeeper
from tests.clock import FakeClock
from tests.metadata_support import counted_statements, grant_epoch_again, writes
from tests.tiering_support import (
    Backend,
    Tiering,
    assert_invariants,
    make_backend,
    set_high_watermarks,
    tp_of,
)

SPEC = ProduceSpec(topics=1, partitions=2, records=600, segment_bytes=12 * 1024, seed=4)
TP = TopicPartition("orders", 0)
TTL = 60_000
TieringFactory = Callable[..., Tiering]
#: Whom a failover handed the sidecar's epoch to again: another broker, or another process of its own.
TAKERS = [pytest.param(2, id="another-broker"), pytest.param(1, id="another-incarnation")]


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("leases") / "logs"
    produce(root, SPEC)
    return root


@pytest.fixture
def log_dir(pristine: Path, tmp_path: Path) -> Path:
    shutil.copytree(pristine, tmp_path / "logs")
    return tmp_path / "logs"


@pytest.fixture
def sqlite_fs(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    return make_backend("sqlite-fs", request, tmp_path)


def test_two_keepers_of_one_broker_id_do_not_take_the_lease_from_each_other(
    sqlite_fs: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock()
    store = sqlite_fs.open_store(clock)
    try:
        older, newer = LeaseKeeper(store, 1, TTL), LeaseKeeper(store, 1, TTL)
        first = older.hold(TP)
        assert first is not None
        taken = newer.hold(TP)  # a new process: it takes over at once, as a restart must
        assert taken is not None and taken.epoch == first.epoch + 1 and taken.incarnation == newer.incarnation
        with caplog.at_level(logging.WARNING, logger="rlm.leases"):
            for _ in range(20):  # idle passes of both, interleaved
                clock.advance(1_000)
                assert older.hold(TP) is None
                renewed = newer.hold(TP)
                assert renewed is not None and renewed.epoch == taken.epoch
        lease = store.get_lease(TP)
        assert lease is not None and lease.epoch == taken.epoch  # one take, not one per pass
        warnings = [r.getMessage() for r in caplog.records]
        assert len(warnings) == 1
        assert f"another process with broker.id 1 (incarnation {newer.incarnation}) took" in warnings[0]
        assert "two sidecars run with broker.id 1" in warnings[0]
        assert older.holder(TP) == f"another process with broker.id 1 (incarnation {newer.incarnation})"

        newer.release_all()  # the newer one stops: the older takes the partition back at once
        back = older.hold(TP)
        assert back is not None and back.incarnation == older.incarnation

        crashed = LeaseKeeper(store, 1, TTL)  # yet another process takes it, then dies
        dead = crashed.hold(TP)
        assert dead is not None
        assert older.hold(TP) is None
        clock.advance(TTL)  # its lease expires: the older one takes over
        resumed = older.hold(TP)
        assert resumed is not None and resumed.epoch == dead.epoch + 1
    finally:
        store.close()


def test_two_copiers_of_one_broker_id_tier_everything_once_with_one_takeover(
    sqlite_fs: Backend,
    tiering_factory: TieringFactory,
    log_dir: Path,
) -> None:
    clock = FakeClock()
    first, second = tiering_factory(sqlite_fs, log_dir, clock), tiering_factory(sqlite_fs, log_dir, clock)
    partitions = LogDir(log_dir).partitions()
    set_high_watermarks(log_dir, {tp_of(p): p.rolled_segments()[1].base_offset for p in partitions})
    assert [o.copied_segments for o in first.copier().run_once()] == [1, 1]
    epochs = {tp_of(p): first.store.get_lease(tp_of(p)).epoch for p in partitions}  # type: ignore[union-attr]

    set_high_watermarks(log_dir, {tp_of(p): p.log_end_offset() for p in partitions})
    for _ in range(5):
        clock.advance(5_000)
        for tiering in (second, first):
            for outcome in tiering.copier().run_once():
                assert outcome.error is None, outcome.error

    for partition in partitions:
        tp = tp_of(partition)
        assert second.store.get_lease(tp).epoch == epochs[tp] + 1  # type: ignore[union-attr]
    assert_invariants(first.store, first.storage, [log_dir])
    skipped = first.copier().run_once()
    assert all(o.skipped is not None and "another process with broker.id 1" in o.skipped for o in skipped)


def test_a_holder_writes_its_lease_once_a_third_of_its_time_to_live(sqlite_fs: Backend) -> None:
    # The copier and retention each renew at the start of every pass, the copier between the
    # segments of a backlog too: renewals sooner than a third of the lease's time to live after
    # the last write are reads.
    clock = FakeClock()
    store = sqlite_fs.open_store(clock)
    keeper = LeaseKeeper(store, 1, TTL)
    taken = keeper.hold(TP)
    assert taken is not None
    renewals = []
    for _ in range(8):
        clock.advance(TTL // 12)
        with counted_statements(store) as statements:
            lease = keeper.hold(TP)
        assert lease is not None and lease.epoch == taken.epoch
        assert lease.expires_at_ms - clock.now >= TTL * 2 // 3, "at least 2/3 of the time to live left"
        renewals.append(bool(writes(statements)))
    assert renewals == [False, False, False, True] * 2
    assert store.get_lease(TP) == lease


def test_a_sidecar_that_cannot_read_its_brokers_partition_files_gives_its_lease_up_at_once(
    sqlite_fs: Backend,
    tiering_factory: TieringFactory,
    log_dir: Path,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock()
    replica = tmp_path / "replica"  # broker 2's copy of the same log
    shutil.copytree(log_dir, replica)
    first = tiering_factory(sqlite_fs, log_dir, clock)
    second = tiering_factory(sqlite_fs, replica, clock, broker_id=2)
    assert all(o.error is None for o in first.copier().run_once())
    checkpoint = LogDir(log_dir).partition(TP.topic, TP.partition).path / "leader-epoch-checkpoint"
    checkpoint.write_text("0\n1\nnot an entry\n")

    with caplog.at_level(logging.WARNING, logger="rlm.leases"):
        errors = [first.copier().run_once()[0].error, first.retention().run_once()[0].error]

    for error in errors:
        assert isinstance(error, CorruptCheckpointError) and str(checkpoint) in str(error)
    assert first.store.get_lease(TP) is None  # given up, not left to expire
    given_up = [r.getMessage() for r in caplog.records if "the copy lease is given up" in r.getMessage()]
    assert len(given_up) == 1 and str(checkpoint) in given_up[0]
    # Broker 2's sidecar takes the partition at its next pass, without waiting for a time to live.
    taken = second.copier().run_once()[0]
    assert taken.error is None and taken.skipped is None
    lease = second.store.get_lease(TP)
    assert lease is not None and lease.owner == 2
    assert isinstance(first.copier().run_once()[0].error, CorruptCheckpointError)
    assert second.store.get_lease(TP) == lease


@pytest.mark.parametrize("taker", TAKERS)
def test_a_copier_whose_epoch_a_failover_handed_out_again_cannot_finish_a_copy(
    sqlite_fs: Backend, tiering_factory: TieringFactory, log_dir: Path, taker: int
) -> None:
    tiering = tiering_factory(sqlite_fs, log_dir)
    partition = LogDir(log_dir).partition(TP.topic, TP.partition)
    granted: list[str] = []

    def failover(name: str) -> None:
        # The first copy is recorded; then the promoted standby hands the same epoch out again.
        if name == "copy_started" and not granted:
            grant_epoch_again(tiering.store, TP, taker, uuid.uuid4())
            granted.append(name)

    outcome = tiering.copier(step=failover).copy_partition(partition)

    assert isinstance(outcome.error, StaleLeaseError), outcome
    assert "the epoch was handed out twice" in str(outcome.error)
    assert outcome.copied_segments == 0
    # The copy stays started, for the holder's cleanup: nothing of it is finished.
    assert [s.state for s in tiering.segments(TP)] == [SegmentState.COPY_SEGMENT_STARTED]


@pytest.mark.parametrize("taker", TAKERS)
def test_retention_whose_epoch_a_failover_handed_out_again_deletes_nothing(
    sqlite_fs: Backend, tiering_factory: TieringFactory, log_dir: Path, taker: int
) -> None:
    tiering = tiering_factory(sqlite_fs, log_dir)
    partition = LogDir(log_dir).partition(TP.topic, TP.partition)
    copied = tiering.copier().copy_partition(partition)
    assert copied.error is None and copied.copied_segments
    finished = tiering.finished(TP)
    everything = tiering.settings.replace(topic_defaults=TopicSettings(retention_ms=-1, retention_bytes=0))

    def failover(name: str) -> None:
        # Retention advanced the remote log start; the standby then hands its epoch out again.
        if name == "log_start_advanced":
            grant_epoch_again(tiering.store, TP, taker, uuid.uuid4())

    outcome = tiering.retention(step=failover, settings=everything).enforce(partition)

    assert isinstance(outcome.error, StaleLeaseError), outcome
    assert "the epoch was handed out twice" in str(outcome.error)
    assert tiering.finished(TP) == finished


def test_a_process_whose_epoch_a_failover_gave_another_process_of_its_broker_leaves_it_the_lease(
    sqlite_fs: Backend,
) -> None:
    # As after a restart: the other process of its broker id holds the lease, and retaking it
    # would start a new epoch at every pass of each.
    clock = FakeClock()
    store = sqlite_fs.open_store(clock)
    try:
        keeper = LeaseKeeper(store, 1, TTL)
        held = keeper.hold(TP)
        assert held is not None
        other = uuid.uuid4()
        grant_epoch_again(store, TP, 1, other)
        theirs = store.get_lease(TP)
        assert theirs is not None and theirs.epoch == held.epoch

        assert keeper.hold(TP) is None  # its renewal is refused: it yields
        clock.advance(TTL // 2)
        assert keeper.hold(TP) is None  # and does not take the lease back at its next pass

        assert store.get_lease(TP) == theirs  # not taken back: the same epoch, the other's
        assert keeper.holder(TP) == f"another process with broker.id 1 (incarnation {other})"
    finally:
        store.close()


def test_a_copier_whose_lease_was_taken_and_given_back_between_two_segments_copies_nothing_twice(
    sqlite_fs: Backend, tiering_factory: TieringFactory, log_dir: Path
) -> None:
    """Another process of the broker (``rlm copy --once``, say) takes the lease over while the
    copier is between two segments of its backlog, tiers the rest and stops, giving the lease up:
    the copier's plan is stale, and the rest is tiered once."""
    clock = FakeClock()
    first, second = tiering_factory(sqlite_fs, log_dir, clock), tiering_factory(sqlite_fs, log_dir, clock)
    partition = LogDir(log_dir).partition(TP.topic, TP.partition)
    assert len(partition.rolled_segments()) >= 3
    taken: list[str] = []

    def takeover(name: str) -> None:
        if name == "copy_finished" and not taken:
            taken.append(name)
            (other,) = [o for o in second.copier().run_once() if o.topic_partition == TP]
            assert other.error is None and other.copied_segments > 0
            second.leases.release_all()

    outcome = first.copier(step=takeover).copy_partition(partition)

    assert outcome.error is None and outcome.copied_segments == 1
    starts = [s.start_offset for s in first.finished(TP)]
    assert len(starts) == len(set(starts)) == len(partition.rolled_segments())
    assert_invariants(first.store, first.storage, [log_dir], untiered=[TopicPartition("orders", 1)])
