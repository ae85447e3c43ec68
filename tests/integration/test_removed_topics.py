"""Retention deletes the remote log of the topics the cluster deleted, found in the broker's KRaft
metadata log (``RemoveTopicRecord``), once the removal is committed (below the latest snapshot)
and no sidecar held or claimed the partition's lease for ten lease times to live."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from uuid import UUID

import pytest

from rlm.cli import main
from rlm.log.checkpoints import uuid_to_topic_id, write_partition_metadata
from rlm.log.cluster_metadata import read_cluster_metadata
from rlm.metastore.model import PartitionState, TopicPartition
from rlm.tiering.retention import Retention
from tests.cluster_metadata_support import (
    MetadataLogWriter,
    batch_spans,
    config_record,
    remove_topic_record,
    topic_record,
)
from tests.integration.test_topic_deletion import OTHER, TP, objects_of, topic_uuid, write_topic
from tests.pipeline.tiers import AWS_ENV
from tests.tiering_support import (
    BROKER_ID,
    WRITER_NOW_MS,
    Backend,
    SegmentPlan,
    Tiering,
    write_scripted_log_dir,
)

TieringFactory = Callable[..., Tiering]
DELETED = PartitionState.DELETE_PARTITION_FINISHED


@pytest.fixture
def deleted(backend: Backend, tiering_factory: TieringFactory, tmp_path: Path) -> tuple[Tiering, Path, UUID]:
    """Topic ``orders`` tiered (5 segments a partition) beside topic ``clicks``, then ``orders``
    deleted: its directories are gone and its sidecar gave its leases back longer than ten lease
    times to live ago. The broker's metadata log has no word of it yet."""
    log_dir = tmp_path / "logs"
    partitions = write_topic(log_dir, 5, seed=1)
    tiering = tiering_factory(backend, log_dir)
    assert [o.copied_segments for o in tiering.copier().run_once()] == [5, 5]
    topic_id = topic_uuid(partitions[TP])
    for tp in (TP, OTHER):
        shutil.rmtree(partitions[tp].path)
    tiering.leases.release_all()
    idle(tiering)
    return tiering, log_dir, topic_id


def idle(tiering: Tiering) -> None:
    """Long enough that no sidecar held or claimed a lease within ten lease times to live."""
    tiering.clock.advance(10 * tiering.settings.remote_log_manager_lease_ttl_ms + 1)


def states(tiering: Tiering) -> dict[TopicPartition, PartitionState | None]:
    found = {tp: tiering.store.get_partition(tp) for tp in (TP, OTHER)}
    return {tp: (r.deletion_state if r is not None else None) for tp, r in found.items()}


def deleted_partitions(tiering: Tiering) -> float | None:
    return tiering.registry.get_sample_value("rlm_retention_deleted_partitions_total", {"topic": "orders"})


def test_a_committed_removal_deletes_the_topics_partitions_from_the_remote_tier(
    deleted: tuple[Tiering, Path, UUID],
) -> None:
    tiering, log_dir, topic_id = deleted
    clicks = TopicPartition("clicks", 0)
    with MetadataLogWriter(log_dir) as log:
        log.append(topic_record("orders", topic_id), topic_record("clicks", UUID(int=7)))  # 0-1
        log.append(remove_topic_record(topic_id))  # 2
        log.snapshot(3, [topic_record("clicks", UUID(int=7))])
    idle(tiering)

    tiering.retention().run_once()

    assert states(tiering) == {TP: DELETED, OTHER: DELETED}
    assert tiering.finished(TP) == [] and tiering.finished(OTHER) == []
    assert set(tiering.storage.list_keys("")) == set()
    assert deleted_partitions(tiering) == 2
    assert tiering.registry.get_sample_value("rlm_cluster_metadata_snapshot_end_offset") == 3
    assert tiering.registry.get_sample_value("rlm_cluster_metadata_unreadable") == 0
    assert tiering.store.get_partition(clicks) is None  # another topic: never touched
    # Again: deleted already, nothing more.
    assert [o.skipped for o in tiering.retention().removed_topics.run_once()] == []


def test_each_segment_a_topic_deletion_deletes_is_reported_for_the_index_cache(
    deleted: tuple[Tiering, Path, UUID],
) -> None:
    tiering, log_dir, topic_id = deleted
    with MetadataLogWriter(log_dir) as log:
        log.append(topic_record("orders", topic_id))  # 0
        log.append(remove_topic_record(topic_id))  # 1
        log.snapshot(2, [])
    idle(tiering)
    live = {s.segment_id for tp in (TP, OTHER) for s in tiering.finished(tp)}
    retention = tiering.retention()
    reported: list[UUID] = []
    retention.on_deleted = lambda segment: reported.append(segment.segment_id)

    retention.run_once()

    assert states(tiering) == {TP: DELETED, OTHER: DELETED}
    assert len(live) == 10 and sorted(reported) == sorted(live)


def test_a_removal_past_the_latest_snapshot_waits_for_the_next_snapshot(
    deleted: tuple[Tiering, Path, UUID],
) -> None:
    tiering, log_dir, topic_id = deleted
    log = MetadataLogWriter(log_dir)
    log.append(topic_record("orders", topic_id))  # 0
    log.snapshot(1, [topic_record("orders", topic_id)])
    log.append(remove_topic_record(topic_id))  # 1: past the quorum's high watermark, perhaps
    idle(tiering)
    retention = tiering.retention()
    before = objects_of(tiering, TP) | objects_of(tiering, OTHER)

    retention.run_once()
    retention.run_once()

    assert states(tiering) == {TP: None, OTHER: None}
    assert set(tiering.storage.list_keys("")) == before
    assert deleted_partitions(tiering) is None

    # The broker's next snapshot covers it: the same retention (its read of the log kept) sees it.
    log.snapshot(2, [])
    log.close()
    retention.run_once()

    assert states(tiering) == {TP: DELETED, OTHER: DELETED}
    assert set(tiering.storage.list_keys("")) == set()


def test_each_refresh_reads_what_the_log_appended_since_without_a_new_snapshot(
    deleted: tuple[Tiering, Path, UUID],
) -> None:
    tiering, log_dir, topic_id = deleted
    removed_topics = tiering.retention().removed_topics
    with MetadataLogWriter(log_dir) as log:
        log.append(topic_record("orders", topic_id))  # 0
        log.snapshot(1, [topic_record("orders", topic_id)])
        first = removed_topics.refresh()
        assert first is not None and first.configs == {}
        log.append(config_record("orders", "retention.ms", "-1"))  # 1
        read = removed_topics.refresh()
        assert read is not None and read.configs == {"orders": {"retention.ms": "-1"}}
        log.append(remove_topic_record(topic_id))  # 2: pending
        read = removed_topics.refresh()
    assert read == read_cluster_metadata(log.path)
    assert not read.removals[uuid_to_topic_id(topic_id)].committed
    assert removed_topics.run_once(refresh=False) == []  # pending: nothing deleted


def test_a_partition_whose_lease_a_sidecar_held_lately_waits(
    deleted: tuple[Tiering, Path, UUID], tiering_factory: TieringFactory
) -> None:
    tiering, log_dir, topic_id = deleted
    with MetadataLogWriter(log_dir) as log:
        log.append(topic_record("orders", topic_id), remove_topic_record(topic_id))
        log.snapshot(2, [])
    # A sidecar that died holding the lease of orders-0.
    other = tiering_factory(tiering.backend, log_dir, broker_id=BROKER_ID + 1, clock=tiering.clock)
    assert other.leases.hold(TP) is not None

    outcomes = {o.topic_partition: o for o in tiering.retention().removed_topics.run_once()}

    waiting = outcomes[TP].skipped
    assert outcomes[TP].run_again and waiting is not None
    assert "broker 2's sidecar held its copy lease until" in waiting
    assert outcomes[OTHER].skipped is None and outcomes[OTHER].deleted_segments == 5
    assert states(tiering) == {TP: None, OTHER: DELETED}
    tiering.clock.advance(tiering.settings.remote_log_manager_lease_ttl_ms + 1)  # expired, lately
    tiering.retention().run_once()
    assert states(tiering) == {TP: None, OTHER: DELETED}
    idle(tiering)
    tiering.retention().run_once()
    assert states(tiering) == {TP: DELETED, OTHER: DELETED}


def test_the_topic_created_again_keeps_its_remote_log(
    backend: Backend, tiering_factory: TieringFactory, tmp_path: Path
) -> None:
    log_dir = tmp_path / "logs"
    first = topic_uuid(write_topic(log_dir, 3, seed=1)[TP])
    tiering = tiering_factory(backend, log_dir)
    tiering.copier().run_once()
    shutil.rmtree(log_dir)
    second = topic_uuid(write_topic(log_dir, 4, seed=2)[TP])  # created again: a new id
    assert second != first
    tiering.copier().run_once()  # adopts the new id: the deleted topic's segments retired
    with MetadataLogWriter(log_dir) as log:
        log.append(topic_record("orders", first), remove_topic_record(first), topic_record("orders", second))
        log.snapshot(3, [topic_record("orders", second)])
    tiering.leases.release_all()
    idle(tiering)
    kept = {tp: tiering.finished(tp) for tp in (TP, OTHER)}

    assert tiering.retention().removed_topics.run_once() == []
    assert states(tiering) == {TP: None, OTHER: None}
    assert {tp: tiering.finished(tp) for tp in (TP, OTHER)} == kept
    assert all(len(segments) == 4 for segments in kept.values())


def test_a_partition_this_broker_still_holds_is_left_for_a_later_pass(
    backend: Backend, tiering_factory: TieringFactory, tmp_path: Path
) -> None:
    # The controller committed the removal; the broker has not deleted its directories yet.
    log_dir = tmp_path / "logs"
    partitions = write_topic(log_dir, 3, seed=1)
    topic_id = topic_uuid(partitions[TP])
    tiering = tiering_factory(backend, log_dir)
    tiering.copier().run_once()
    tiering.leases.release_all()
    with MetadataLogWriter(log_dir) as log:
        log.append(topic_record("orders", topic_id), remove_topic_record(topic_id))
        log.snapshot(2, [])
    idle(tiering)

    outcomes = tiering.retention().removed_topics.run_once()

    assert [o.run_again for o in outcomes] == [True, True]
    assert all(o.skipped and "the topic is not deleted on this broker" in o.skipped for o in outcomes)
    assert states(tiering) == {TP: None, OTHER: None}
    assert tiering.registry.get_sample_value("rlm_loop_errors_total", {"loop": "retention"}) in (None, 0.0)
    for tp in (TP, OTHER):
        shutil.rmtree(partitions[tp].path)
    tiering.retention().run_once()
    assert states(tiering) == {TP: DELETED, OTHER: DELETED}


def test_the_metadata_log_is_read_from_metadata_log_dir_and_the_deletion_can_be_turned_off(
    deleted: tuple[Tiering, Path, UUID], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tiering, _, topic_id = deleted
    elsewhere = tmp_path / "metadata"
    with MetadataLogWriter(elsewhere) as log:
        log.append(topic_record("orders", topic_id), remove_topic_record(topic_id))
        log.snapshot(2, [])
    idle(tiering)

    def retention(**changes: object) -> Retention:
        return tiering.retention(settings=tiering.settings.replace(**changes))

    retention().run_once()  # the log directories hold no metadata log
    with caplog.at_level("WARNING", logger="rlm.retention"):
        unmounted = retention(metadata_log_dir=tmp_path / "not-mounted")
        unmounted.run_once()
        unmounted.run_once()
    assert caplog.text.count("holds no KRaft metadata log (__cluster_metadata-0)") == 1
    retention(metadata_log_dir=elsewhere, remote_log_delete_removed_topics=False).run_once()
    assert states(tiering) == {TP: None, OTHER: None}

    retention(metadata_log_dir=elsewhere).run_once()
    assert states(tiering) == {TP: DELETED, OTHER: DELETED}


def test_a_metadata_log_it_cannot_read_deletes_nothing_and_says_so(
    deleted: tuple[Tiering, Path, UUID], caplog: pytest.LogCaptureFixture
) -> None:
    tiering, log_dir, topic_id = deleted
    with MetadataLogWriter(log_dir) as log:
        log.append(topic_record("orders", topic_id))  # 0
        log.append(remove_topic_record(topic_id))  # 1
        log.roll()
        log.append(topic_record("clicks", UUID(int=7)))  # 2
        log.snapshot(3, [topic_record("clicks", UUID(int=7))])
    segment = log_dir / "__cluster_metadata-0" / "00000000000000000000.log"
    _, (position, size) = batch_spans(segment)
    data = bytearray(segment.read_bytes())
    data[position + size - 1] ^= 0xFF  # the removal's batch no longer matches its CRC
    segment.write_bytes(bytes(data))
    idle(tiering)

    with caplog.at_level("WARNING", logger="rlm.retention"):
        tiering.retention().run_once()
        tiering.retention().run_once()

    assert states(tiering) == {TP: None, OTHER: None}
    assert caplog.text.count("could not be read") == 2  # once for each retention (each reads it)
    assert tiering.registry.get_sample_value("rlm_cluster_metadata_unreadable") == 1
    assert tiering.registry.get_sample_value("rlm_cluster_metadata_snapshot_end_offset") == 3


def cli_options(tiering: Tiering, log_dir: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The command line options of a sidecar over ``tiering``'s backends and ``log_dir``."""
    settings = tiering.settings
    options = ["--log-dirs", str(log_dir), "--broker-id", str(BROKER_ID)]
    options += ["--metadata-url", settings.metadata_url, "--remote-url", settings.remote_url]
    if settings.s3_endpoint_url is not None:
        monkeypatch.setenv("RLM_S3_ENDPOINT_URL", settings.s3_endpoint_url)
        for name, value in AWS_ENV.items():  # moto takes any
            monkeypatch.setenv(name, value)
    return options


def test_rlm_retention_once_says_what_it_deleted_of_a_deleted_topic(
    deleted: tuple[Tiering, Path, UUID], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    tiering, log_dir, topic_id = deleted
    with MetadataLogWriter(log_dir) as log:
        log.append(topic_record("orders", topic_id), remove_topic_record(topic_id))
        log.snapshot(2, [])
    options = cli_options(tiering, log_dir, monkeypatch)

    assert main(["retention", "--once", *options]) == 0

    out = capsys.readouterr().out
    sizes = {tp: sum(s.size_bytes for s in tiering.store.list_segments(tp)) for tp in (TP, OTHER)}
    for tp in (TP, OTHER):
        said = f"{tp}: its topic was deleted: deleted 5 segments ({sizes[tp]} bytes) and the partition"
        assert said in out, out
    assert states(tiering) == {TP: DELETED, OTHER: DELETED}


def test_a_deleted_topic_found_done_is_looked_at_again_with_the_next_snapshot(
    deleted: tuple[Tiering, Path, UUID], tiering_factory: TieringFactory, tmp_path: Path
) -> None:
    tiering, log_dir, topic_id = deleted
    log = MetadataLogWriter(log_dir)
    log.append(topic_record("orders", topic_id), remove_topic_record(topic_id))
    log.snapshot(2, [])
    removed = tiering.retention().removed_topics
    assert {o.topic_partition for o in removed.run_once()} == {TP, OTHER}
    # A lagging broker, down while the topic was deleted, tiers a partition of it on its return.
    lagging_dir = tmp_path / "lagging"
    late = TopicPartition("orders", 2)
    plans = [SegmentPlan(records=10, max_timestamp_ms=WRITER_NOW_MS - 1000)] * 2
    write_scripted_log_dir(lagging_dir, {late: plans}, seed=4)
    write_partition_metadata(lagging_dir / "orders-2" / "partition.metadata", uuid_to_topic_id(topic_id))
    lagging = tiering_factory(tiering.backend, lagging_dir, broker_id=BROKER_ID + 1, clock=tiering.clock)
    assert [o.copied_segments for o in lagging.copier().run_once()] == [2]
    lagging.leases.release_all()
    idle(tiering)  # its sidecar gave the lease back long enough ago

    assert removed.run_once() == []  # the topic was done with: not looked at until the log changes
    assert len(tiering.finished(late)) == 2

    log.snapshot(2, [], epoch=2)  # the broker's next snapshot
    log.close()
    assert [(o.topic_partition, o.deleted_segments) for o in removed.run_once()] == [(late, 2)]
    assert tiering.finished(late) == []


def test_rlm_retention_removed_topics_lists_what_the_metadata_log_says_and_the_remote_tier_holds(
    deleted: tuple[Tiering, Path, UUID], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    tiering, log_dir, topic_id = deleted
    options = cli_options(tiering, log_dir, monkeypatch)
    assert main(["retention", "removed-topics", *options]) == 0
    assert "no KRaft metadata log (__cluster_metadata-0) in " in capsys.readouterr().out

    log = MetadataLogWriter(log_dir)
    log.append(topic_record("orders", topic_id), topic_record("clicks", UUID(int=7)))  # 0-1
    log.append(remove_topic_record(UUID(int=7)))  # 2
    log.snapshot(3, [topic_record("orders", topic_id)])
    log.append(remove_topic_record(topic_id))  # 3: pending
    assert main(["retention", "removed-topics", *options]) == 0
    ids = uuid_to_topic_id(topic_id), uuid_to_topic_id(UUID(int=7))
    assert capsys.readouterr().out.splitlines()[1:] == [
        f"clicks {ids[1]}: removed at offset 2, committed; partitions: none in the remote tier",
        f"orders {ids[0]}: removed at offset 3, pending (waits for the broker's next snapshot); "
        "partitions: orders-0 live, orders-1 live",
    ]

    log.snapshot(4, [])
    log.close()
    tiering.retention().run_once()
    assert main(["retention", "removed-topics", *options]) == 0
    out = capsys.readouterr().out.splitlines()
    said = "__cluster_metadata-0: latest snapshot ends at offset 4, read to offset 4, 0 parts unreadable"
    assert out[0].endswith(said)
    assert out[2] == (
        f"orders {ids[0]}: removed at offset 3, committed; "
        "partitions: orders-0 DELETE_PARTITION_FINISHED, orders-1 DELETE_PARTITION_FINISHED"
    )


def test_rlm_retention_delete_topic_refuses_a_topic_the_metadata_log_holds_live(
    deleted: tuple[Tiering, Path, UUID], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # All of the topic's sidecars are down (their leases idle): the operator gives its id by mistake.
    tiering, log_dir, topic_id = deleted
    options = cli_options(tiering, log_dir, monkeypatch)
    command = ["retention", "delete-topic", "orders", "--topic-id", uuid_to_topic_id(topic_id), *options]
    log = MetadataLogWriter(log_dir)
    log.append(topic_record("orders", topic_id))  # 0: live, not even in a snapshot yet

    assert main([*command, "--dry-run"]) == 1
    assert main(command) == 1

    err = capsys.readouterr().err
    refusal = f"the broker's KRaft metadata log holds topic 'orders' under id {uuid_to_topic_id(topic_id)}"
    assert err.count(refusal) == 4, err
    assert states(tiering) == {TP: None, OTHER: None}
    assert len(tiering.finished(TP)) == 5

    log.append(remove_topic_record(topic_id))  # 1: deleted, not committed yet: the operator may go on
    log.close()
    assert main(command) == 0
    assert states(tiering) == {TP: DELETED, OTHER: DELETED}
