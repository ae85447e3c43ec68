"""One metadata store, one Kafka cluster: a sidecar whose log directories are another cluster's
than the one that claimed the store tiers, retires and deletes nothing there."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pytest

from rlm.cli import main
from rlm.errors import ClusterMismatchError
from rlm.log.checkpoints import read_meta_properties, uuid_to_topic_id, write_meta_properties
from rlm.loops import BackgroundLoop
from tests.integration.test_removed_topics import cli_options
from tests.integration.test_topic_deletion import OTHER, TP, objects_of, write_topic
from tests.tiering_support import BROKER_ID, Backend, Tiering

TieringFactory = Callable[..., Tiering]


def set_cluster(log_dir: Path, cluster_id: str | None, node_id: int | None = None) -> None:
    """Rewrite the log directory's ``meta.properties`` with ``cluster_id`` (None: without one) and,
    when given, ``node_id``."""
    path = log_dir / "meta.properties"
    props = read_meta_properties(path)
    props.pop("cluster.id", None)
    if cluster_id is not None:
        props["cluster.id"] = cluster_id
    if node_id is not None:
        props["node.id"] = str(node_id)
    write_meta_properties(path, props)


@pytest.fixture
def two_clusters(
    backend: Backend, tiering_factory: TieringFactory, tmp_path: Path
) -> tuple[Tiering, Tiering]:
    """Cluster "prod"'s broker tiered topic ``orders`` into the store; cluster "staging"'s broker,
    also with a topic ``orders`` (another topic id), is pointed at the same store by mistake."""
    prod_dir, staging_dir = tmp_path / "prod", tmp_path / "staging"
    write_topic(prod_dir, 3, seed=1)
    write_topic(staging_dir, 4, seed=2)
    set_cluster(prod_dir, "prod-cluster-id")
    set_cluster(staging_dir, "staging-cluster-id", node_id=BROKER_ID + 1)
    prod = tiering_factory(backend, prod_dir)
    assert [o.copied_segments for o in prod.copier().run_once()] == [3, 3]
    prod.leases.release_all()
    staging = tiering_factory(backend, staging_dir, broker_id=BROKER_ID + 1, clock=prod.clock)
    return prod, staging


def test_another_clusters_sidecar_tiers_retires_and_deletes_nothing(
    two_clusters: tuple[Tiering, Tiering],
) -> None:
    prod, staging = two_clusters
    kept = {tp: prod.finished(tp) for tp in (TP, OTHER)}
    objects = set(prod.storage.list_keys(""))

    for job in (staging.copier().run_once, staging.retention().run_once):
        with pytest.raises(ClusterMismatchError) as raised:
            job()
        message = str(raised.value)
        assert "records the remote tier of Kafka cluster prod-cluster-id" in message
        assert "are cluster staging-cluster-id's: nothing is tiered or deleted" in message

    assert {tp: prod.finished(tp) for tp in (TP, OTHER)} == kept
    assert set(prod.storage.list_keys("")) == objects == objects_of(prod, TP) | objects_of(prod, OTHER)
    record = prod.store.get_partition(TP)
    assert record is not None and record.topic_id == kept[TP][0].topic_id  # not adopted
    # The store's own cluster goes on as before.
    assert [o.error for o in prod.copier().run_once()] == [None, None]


def test_log_directories_that_name_no_cluster_are_not_checked(two_clusters: tuple[Tiering, Tiering]) -> None:
    staging = two_clusters[1]
    set_cluster(staging.settings.log_dirs[0], None)  # a broker older than cluster.id

    outcomes = staging.copier().run_once()

    assert [o.error for o in outcomes] == [None, None]


def test_the_cli_and_the_loops_say_so_without_a_traceback(
    two_clusters: tuple[Tiering, Tiering],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    staging = two_clusters[1]
    options = cli_options(staging, staging.settings.log_dirs[0], monkeypatch)
    options[options.index("--broker-id") + 1] = str(BROKER_ID + 1)

    assert main(["copy", "--once", "--quiet", *options]) == 1
    err = capsys.readouterr().err
    assert "the metadata store records the remote tier of Kafka cluster prod-cluster-id" in err
    assert "Traceback" not in err

    errors: list[str] = []
    loop = BackgroundLoop("copier", staging.copier().run_once, 0.01, lambda: errors.append("copier"))
    with caplog.at_level(logging.ERROR, logger="rlm.loops"):
        loop.start()
        while not errors:
            loop._stop.wait(0.01)
        assert loop.stop(10)
    assert "copier pass failed: the metadata store records the remote tier" in caplog.text
    assert "Traceback" not in caplog.text


def test_a_store_upgraded_with_tiered_data_is_claimed_by_its_next_sidecar(
    backend: Backend, tiering_factory: TieringFactory, tmp_path: Path
) -> None:
    # The claim is recorded by a store's first pass: an upgraded store has none until then.
    log_dir = tmp_path / "logs"
    write_topic(log_dir, 2, seed=3)
    tiering = tiering_factory(backend, log_dir)
    tiering.copier().run_once()
    claim = tiering.store.claim_cluster("someone-else", 9)

    assert claim.cluster_id == "rlm-sample-cluster" and claim.broker_id == BROKER_ID


def test_delete_topic_refuses_to_delete_in_another_clusters_store(
    two_clusters: tuple[Tiering, Tiering], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The prod topic's id, read off GET /v1/topics, given to a staging sidecar's command.
    prod, staging = two_clusters
    kept = prod.finished(TP)
    prod_id = kept[0].topic_id
    assert prod_id is not None
    options = cli_options(staging, staging.settings.log_dirs[0], monkeypatch)
    options[options.index("--broker-id") + 1] = str(BROKER_ID + 1)

    code = main(["retention", "delete-topic", "orders", "--topic-id", uuid_to_topic_id(prod_id), *options])

    err = capsys.readouterr().err
    assert code == 1
    assert "the metadata store records the remote tier of Kafka cluster prod-cluster-id" in err
    assert prod.finished(TP) == kept
