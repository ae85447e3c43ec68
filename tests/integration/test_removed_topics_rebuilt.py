"""Retention deletes a deleted topic's remote log from a store rebuilt from the objects while the
topic's segments lay beside those of the topic created again under its name (the partition's id
unknown until a sidecar adopts the broker's): once the cluster deleted both topics, no sidecar
will, and Kafka deletes a deleted topic's remote segments."""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Callable
from pathlib import Path
from uuid import UUID

import pytest

from rlm.cli import main
from rlm.log.checkpoints import uuid_to_topic_id
from rlm.metastore.model import PartitionState
from tests.cluster_metadata_support import MetadataLogWriter, remove_topic_record, topic_record
from tests.integration.test_removed_topics import cli_options
from tests.integration.test_topic_deletion import OTHER, TP, topic_uuid, write_topic
from tests.metadata_support import sqlite_copy
from tests.retired_support import rebuilt_from_objects
from tests.tiering_support import Backend, Tiering

TieringFactory = Callable[..., Tiering]


@pytest.fixture
def rebuilt(
    backend: Backend,
    tiering_factory: TieringFactory,
    sqlite_template: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[Tiering, Path, UUID, UUID]:
    """Topic ``orders`` tiered (5 segments a partition), its store lost, the topic created again
    and tiered (3 segments a partition) into a new store, then a store rebuilt from the objects:
    each partition holds both topics' segments and records no topic id. Then the topic's
    directories are gone and no sidecar held a lease for ten lease times to live."""
    log_dir = tmp_path / "logs"
    old_id = topic_uuid(write_topic(log_dir, 5, seed=1)[TP])
    old = tiering_factory(backend, log_dir)
    assert [o.copied_segments for o in old.copier().run_once()] == [5, 5]
    shutil.rmtree(log_dir)
    new_id = topic_uuid(write_topic(log_dir, 3, seed=2)[TP])
    (tmp_path / "fresh").mkdir()
    fresh = dataclasses.replace(backend, metadata_url=sqlite_copy(sqlite_template, tmp_path / "fresh"))
    new = tiering_factory(fresh, log_dir, clock=old.clock)
    assert [o.copied_segments for o in new.copier().run_once()] == [3, 3]
    new.leases.release_all()
    harness, _ = rebuilt_from_objects(
        new, tiering_factory, log_dir, sqlite_template, tmp_path / "rebuilt", monkeypatch
    )
    for tp in (TP, OTHER):
        record = harness.store.get_partition(tp)
        assert record is not None and record.topic_id is None
        assert {s.topic_id for s in harness.finished(tp)} == {old_id, new_id}
    shutil.rmtree(log_dir)
    log_dir.mkdir()
    harness.clock.advance(10 * harness.settings.remote_log_manager_lease_ttl_ms + 1)
    return harness, log_dir, old_id, new_id


def remove_both(log_dir: Path, old_id: UUID, new_id: UUID) -> None:
    """The broker's metadata log: both topics created and deleted, the removals committed."""
    with MetadataLogWriter(log_dir) as log:
        log.append(topic_record("orders", old_id), remove_topic_record(old_id))  # 0-1
        log.append(topic_record("orders", new_id), remove_topic_record(new_id))  # 2-3
        log.snapshot(4, [])


def test_a_rebuilt_partition_of_two_deleted_topics_is_deleted_from_the_remote_tier(
    rebuilt: tuple[Tiering, Path, UUID, UUID],
) -> None:
    tiering, log_dir, old_id, new_id = rebuilt
    remove_both(log_dir, old_id, new_id)

    tiering.retention().run_once()

    for tp in (TP, OTHER):
        record = tiering.store.get_partition(tp)
        assert record is not None and record.deletion_state is PartitionState.DELETE_PARTITION_FINISHED
        assert tiering.finished(tp) == []
    assert set(tiering.storage.list_keys("")) == set()


def test_a_rebuilt_partition_of_a_deleted_topic_and_a_live_one_is_left_to_the_adopting_sidecar(
    rebuilt: tuple[Tiering, Path, UUID, UUID],
) -> None:
    tiering, log_dir, old_id, new_id = rebuilt
    before = set(tiering.storage.list_keys(""))
    with MetadataLogWriter(log_dir) as log:
        log.append(topic_record("orders", old_id), remove_topic_record(old_id))  # 0-1
        log.append(topic_record("orders", new_id))  # 2
        log.snapshot(3, [topic_record("orders", new_id)])

    assert tiering.retention().removed_topics.run_once() == []

    for tp in (TP, OTHER):
        record = tiering.store.get_partition(tp)
        assert record is not None and record.deletion_state is None
        assert {s.topic_id for s in tiering.finished(tp)} == {old_id, new_id}
    assert set(tiering.storage.list_keys("")) == before


def test_rlm_retention_delete_topic_given_both_ids_deletes_a_rebuilt_partition_of_two_topics(
    rebuilt: tuple[Tiering, Path, UUID, UUID],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without a KRaft metadata log (ZooKeeper-era brokers) the operator's command is the only way."""
    tiering, log_dir, old_id, new_id = rebuilt
    options = cli_options(tiering, log_dir, monkeypatch)
    command = ["retention", "delete-topic", "orders", *options, "--topic-id", uuid_to_topic_id(old_id)]

    assert main(command) == 1  # one id: the partitions hold another topic's segments too
    assert "records no topic id" in capsys.readouterr().err
    assert all(len(tiering.finished(tp)) == 8 for tp in (TP, OTHER))

    assert main([*command, "--topic-id", uuid_to_topic_id(new_id)]) == 0

    for tp in (TP, OTHER):
        record = tiering.store.get_partition(tp)
        assert record is not None and record.deletion_state is PartitionState.DELETE_PARTITION_FINISHED
    assert set(tiering.storage.list_keys("")) == set()


def test_a_deletion_of_a_rebuilt_partition_of_two_topics_that_died_is_finished_by_the_next_pass(
    rebuilt: tuple[Tiering, Path, UUID, UUID],
) -> None:
    tiering, log_dir, old_id, new_id = rebuilt
    remove_both(log_dir, old_id, new_id)
    started: list[str] = []

    def die_deleting_the_last_segment(step: str) -> None:
        if step == "delete_started":
            started.append(step)
            if len(started) == 8:  # the last of the first partition's: none of its segments is live
                raise OSError("the sidecar died")

    tiering.retention(step=die_deleting_the_last_segment).run_once()
    record = tiering.store.get_partition(TP)
    assert record is not None and record.deletion_state is PartitionState.DELETE_PARTITION_STARTED

    tiering.retention().run_once()

    for tp in (TP, OTHER):
        record = tiering.store.get_partition(tp)
        assert record is not None and record.deletion_state is PartitionState.DELETE_PARTITION_FINISHED
    assert set(tiering.storage.list_keys("")) == set()
