"""A broker with several log directories, one of which fails or holds a partition another one
holds too, on SQLite + filesystem and PostgreSQL + S3.

Kafka goes on with the log directories it can still use when one fails, and its local retention
goes on deleting segments in them: one log directory that cannot be read must not stop the
others' tiering, nor make retention or the deletion of deleted topics believe the broker no longer
holds what it may hold there. A partition found in two log directories (a move between them left
unfinished) is neither copied nor expired until one holds it.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from rlm.cli import main
from rlm.errors import LogDirsOfflineError, PartitionUnavailableError
from rlm.log.logdir import LogDir
from rlm.lookup.index_cache import RemoteIndexCache
from rlm.lookup.service import LookupService
from rlm.metastore.model import PartitionState, TopicPartition
from rlm.tiering.overview import Overview
from rlm.timestamps import SpecialTimestamp
from tests.cluster_metadata_support import MetadataLogWriter, remove_topic_record, topic_record
from tests.integration.test_topic_deletion import topic_uuid
from tests.tiering_support import (
    WRITER_NOW_MS,
    Backend,
    SegmentPlan,
    Tiering,
    assert_invariants,
    set_high_watermarks,
    write_scripted_log_dir,
)

TieringFactory = Callable[..., Tiering]
ORDERS = TopicPartition("orders", 0)
CLICKS = TopicPartition("clicks", 0)
SEGMENTS = 3


def _plans(count: int) -> list[SegmentPlan]:
    return [SegmentPlan(records=10, max_timestamp_ms=WRITER_NOW_MS - 1000 + i) for i in range(count)]


def write_partitions(log_dir: Path, *tps: TopicPartition, seed: int = 1) -> None:
    """``SEGMENTS`` rolled segments, below the high watermark, in each of ``tps``."""
    write_scripted_log_dir(log_dir, {tp: _plans(SEGMENTS) for tp in tps}, seed=seed)


def offline_gauge(tiering: Tiering, log_dir: Path) -> float | None:
    return tiering.registry.get_sample_value("rlm_log_dir_offline", {"log_dir": str(log_dir)})


def break_meta_properties(log_dir: Path) -> None:
    """A ``meta.properties`` that cannot be read: a malformed ``\\uxxxx`` escape."""
    (log_dir / "meta.properties").write_text("version=1\nnode.id=1\ncluster.id=\\u12\n", "latin-1")


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    """``orders-0`` in the first log directory, ``clicks-0`` in the second."""
    first, second = tmp_path / "logs1", tmp_path / "logs2"
    write_partitions(first, ORDERS, seed=1)
    write_partitions(second, CLICKS, seed=2)
    return first, second


def test_a_missing_log_directory_stops_no_other_ones_tiering(
    backend: Backend,
    tiering_factory: TieringFactory,
    dirs: tuple[Path, Path],
    caplog: pytest.LogCaptureFixture,
) -> None:
    first, second = dirs
    shutil.rmtree(second)  # the disk is gone; the broker goes on with the first
    tiering = tiering_factory(backend, first, log_dirs=(first, second))

    with caplog.at_level(logging.WARNING, logger="rlm.log_dirs"):
        outcomes = tiering.copier().run_once()
        retention = tiering.retention().run_once()

    assert [(o.topic_partition, o.copied_segments, o.error) for o in outcomes] == [(ORDERS, SEGMENTS, None)]
    assert [(o.topic_partition, o.error) for o in retention] == [(ORDERS, None)]
    assert len(tiering.finished(ORDERS)) == SEGMENTS
    assert_invariants(tiering.store, tiering.storage, [first])
    assert (offline_gauge(tiering, first), offline_gauge(tiering, second)) == (0, 1)
    warnings = [r.getMessage() for r in caplog.records if r.name == "rlm.log_dirs"]
    # Once per kind of pass, not once per pass.
    assert warnings == [
        f"log directory {second} does not exist; its partitions are not tiered until it can be read",
        f"log directory {second} does not exist; its partitions are not expired until it can be read",
    ]

    # The disk is back: its partitions are tiered at the next pass.
    write_partitions(second, CLICKS, seed=2)
    outcomes = tiering.copier().run_once()
    assert [(o.topic_partition, o.copied_segments) for o in outcomes] == [(CLICKS, SEGMENTS), (ORDERS, 0)]
    assert offline_gauge(tiering, second) == 0
    assert_invariants(tiering.store, tiering.storage, [first, second])


def test_a_log_directory_whose_meta_properties_cannot_be_read_is_offline(
    backend: Backend, tiering_factory: TieringFactory, dirs: tuple[Path, Path]
) -> None:
    first, second = dirs
    break_meta_properties(second)
    tiering = tiering_factory(backend, first, log_dirs=(first, second))

    outcomes = tiering.copier().run_once()  # the cluster guard passes it over, as the listing

    assert [(o.topic_partition, o.copied_segments) for o in outcomes] == [(ORDERS, SEGMENTS)]
    assert tiering.store.get_partition(CLICKS) is None  # which cluster's it is cannot be told
    assert offline_gauge(tiering, second) == 1
    assert [o.topic_partition for o in tiering.retention().run_once()] == [ORDERS]


def test_when_no_log_directory_can_be_read_the_pass_fails_naming_each(
    backend: Backend, tiering_factory: TieringFactory, dirs: tuple[Path, Path]
) -> None:
    first, second = dirs
    break_meta_properties(first)
    shutil.rmtree(second)
    tiering = tiering_factory(backend, first, log_dirs=(first, second))

    for job in (tiering.copier().run_once, tiering.retention().run_once):
        with pytest.raises(LogDirsOfflineError) as raised:
            job()
        message = str(raised.value)
        assert f"log directory {first} is offline: cannot read {first / 'meta.properties'}" in message
        assert f"log directory {second} does not exist" in message
    assert tiering.store.get_partition(ORDERS) is None
    assert (offline_gauge(tiering, first), offline_gauge(tiering, second)) == (1, 1)


def test_copy_once_tiers_the_other_log_directories_and_exits_1_naming_the_failed_one(
    tmp_path: Path,
    dirs: tuple[Path, Path],
    sqlite_template: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    first, second = dirs
    shutil.rmtree(second)
    db = tmp_path / "meta.db"
    shutil.copyfile(sqlite_template, db)
    remote = tmp_path / "remote"
    remote.mkdir()
    settings = [
        *("--log-dirs", f"{first},{second}", "--metadata-url", f"sqlite:///{db}"),
        *("--remote-url", remote.as_uri()),
    ]

    code = main(["copy", "--once", "--quiet", *settings])
    out, err = capsys.readouterr()

    assert code == 1
    assert f"orders-0: copied {SEGMENTS} segments" in out
    assert f"rlm: error: log directory {second} does not exist; its partitions were not tiered" in err

    code = main(["retention", "--once", *settings])
    out, err = capsys.readouterr()
    assert code == 1
    assert "orders-0: deleted 0 segments" in out
    assert f"rlm: error: log directory {second} does not exist; its partitions were not expired" in err

    write_partitions(second, CLICKS, seed=2)
    assert main(["copy", "--once", "--quiet", *settings]) == 0
    assert f"clicks-0: copied {SEGMENTS} segments" in capsys.readouterr().out


def test_a_deleted_topic_is_not_deleted_while_a_log_directory_cannot_be_read(
    backend: Backend, tiering_factory: TieringFactory, dirs: tuple[Path, Path]
) -> None:
    first, second = dirs
    topic_id = topic_uuid(LogDir(first).partition(ORDERS.topic, ORDERS.partition))
    tiering = tiering_factory(backend, first, log_dirs=(first, second))
    tiering.copier().run_once()
    tiering.leases.release_all()
    # orders is deleted and its removal committed; the broker's second disk fails meanwhile.
    shutil.rmtree(first / "orders-0")
    with MetadataLogWriter(first) as log:
        log.append(topic_record("orders", topic_id), remove_topic_record(topic_id))
        log.snapshot(2, [])
    moved = second.rename(second.with_name("logs2-failed"))
    tiering.clock.advance(10 * tiering.settings.remote_log_manager_lease_ttl_ms + 1)

    retention = tiering.retention()
    passed = {o.topic_partition: o for o in retention.run_once()}
    (outcome,) = retention.removed_topics.run_once()  # on its own: the same

    for skipped in (passed[ORDERS].skipped, outcome.skipped):
        assert skipped is not None
        assert f"cannot be told, log directory {second} does not exist; nothing was deleted" in skipped
    assert not passed[ORDERS].partition_deleted and outcome.run_again
    record = tiering.store.get_partition(ORDERS)
    assert record is not None and record.deletion_state is None
    assert len(tiering.finished(ORDERS)) == SEGMENTS

    moved.rename(second)  # it can be read again, and does not hold orders-0: deleted
    tiering.retention().run_once()
    record = tiering.store.get_partition(ORDERS)
    assert record is not None and record.deletion_state is PartitionState.DELETE_PARTITION_FINISHED
    assert tiering.finished(ORDERS) == []


# -- a partition in two log directories ----------------------------------------------------------


@pytest.fixture
def duplicated(dirs: tuple[Path, Path]) -> tuple[Path, Path]:
    """``orders-0`` in both log directories: a move from the first to the second renamed the
    future directory into place, and the broker stopped before the first was renamed ``-delete``."""
    first, second = dirs
    shutil.copytree(first / "orders-0", second / "orders-0")
    hw = LogDir(first).partition(ORDERS.topic, ORDERS.partition).high_watermark()
    assert hw is not None
    set_high_watermarks(second, {ORDERS: hw})
    return first, second


def test_a_partition_in_two_log_directories_is_neither_copied_nor_expired(
    backend: Backend,
    tiering_factory: TieringFactory,
    duplicated: tuple[Path, Path],
    caplog: pytest.LogCaptureFixture,
) -> None:
    first, second = duplicated
    tiering = tiering_factory(
        backend, first, log_dirs=(first, second), remote_log_manager_copier_thread_pool_size=4
    )

    with caplog.at_level(logging.WARNING, logger="rlm.log_dirs"):
        copied = {o.topic_partition: o for o in tiering.copier().run_once()}
        expired = {o.topic_partition: o for o in tiering.retention().run_once()}

    both = f"found in 2 log directories ({first / 'orders-0'} and {second / 'orders-0'})"
    for outcome in (copied[ORDERS], expired[ORDERS]):
        assert outcome.skipped is not None and both in outcome.skipped
        assert outcome.error is None
    assert copied[CLICKS].copied_segments == SEGMENTS
    assert tiering.segments(ORDERS) == [] and tiering.store.get_partition(ORDERS) is None
    warnings = [r.getMessage() for r in caplog.records if r.name == "rlm.log_dirs"]
    assert len(warnings) == 2 and all(w.startswith(f"orders-0: {both}") for w in warnings)

    # The broker finishes the move: the source becomes orders-0.<id>-delete. Tiered once.
    (first / "orders-0").rename(first / "orders-0.4b1c2e0f-delete")
    copier = tiering.copier()
    (outcome,) = [o for o in copier.run_once() if o.topic_partition == ORDERS]
    assert (outcome.copied_segments, outcome.skipped) == (SEGMENTS, None)
    assert len(tiering.finished(ORDERS)) == SEGMENTS
    assert_invariants(tiering.store, tiering.storage, [first, second])


def test_the_partitions_overview_passes_over_a_missing_log_directory_and_reads_the_first_of_two(
    backend: Backend, tiering_factory: TieringFactory, duplicated: tuple[Path, Path], tmp_path: Path
) -> None:
    first, second = duplicated
    set_high_watermarks(second, {ORDERS: 5})
    tiering = tiering_factory(backend, first)
    overview = Overview(tiering.store, tuple(LogDir(d) for d in (second, first, tmp_path / "logs3")))

    partitions = {(p.topic, p.partition): p for p in overview.partitions()}

    assert set(partitions) == {("orders", 0), ("clicks", 0)}
    # As lookups read it: the log directory listed first.
    assert partitions[("orders", 0)].high_watermark == 5


def test_lookups_of_a_partition_that_may_be_in_an_unreadable_log_directory_fail_retriably(
    backend: Backend, tiering_factory: TieringFactory, dirs: tuple[Path, Path], tmp_path: Path
) -> None:
    """Answered from the remote tier alone, LATEST and any timestamp past the tiered records gave
    "no such offset" while the broker still had them: a consumer takes that for an answer."""
    first, second = dirs
    tiering = tiering_factory(backend, first, log_dirs=(first, second))
    assert all(o.error is None for o in tiering.copier().run_once())
    lookups = LookupService(
        tiering.store,
        tiering.storage,
        RemoteIndexCache(tmp_path / "cache", tiering.storage, tiering.metrics),
        (first, second),
    )
    tiered_latest = lookups.find(CLICKS, SpecialTimestamp.LATEST)
    assert tiered_latest.offset > 0 and tiered_latest.tier == "local"
    second.rename(tmp_path / "moved")  # the disk is gone

    for asked in (SpecialTimestamp.LATEST, SpecialTimestamp.MAX_TIMESTAMP, WRITER_NOW_MS):
        with pytest.raises(PartitionUnavailableError, match=f"{CLICKS} is in none of the log dir") as raised:
            lookups.find(CLICKS, asked)
        assert raised.value.retriable and str(second) in str(raised.value)
    assert lookups.find(ORDERS, SpecialTimestamp.LATEST).tier == "local"  # the first one answers

    (tmp_path / "moved").rename(second)
    assert lookups.find(CLICKS, SpecialTimestamp.LATEST) == tiered_latest
