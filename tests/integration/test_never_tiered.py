"""Topics Kafka never tiers (``UnifiedLog.isRemoteLogEnabled``): its internal topics and its
remote log metadata topic are never copied, whatever ``remote.storage.enable`` says, and the KRaft
cluster metadata log (``__cluster_metadata-0``) is no topic at all: rlm neither copies nor serves it
(it holds the cluster's credentials), though ``rlm log verify`` of a log directory checks its bytes.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from rlm.cli import main
from rlm.config import TopicSettings
from rlm.log.logdir import LogDir
from rlm.metastore.model import TopicPartition
from tests.integration.test_topic_deletion import runtime
from tests.integration.test_topic_recreate_api import serving
from tests.tiering_support import (
    WRITER_NOW_MS,
    Backend,
    SegmentPlan,
    Tiering,
    make_backend,
    write_scripted_log_dir,
)

TieringFactory = Callable[..., Tiering]
ORDERS = TopicPartition("orders", 0)
OFFSETS = TopicPartition("__consumer_offsets", 0)
TRANSACTIONS = TopicPartition("__transaction_state", 1)
RLMM = TopicPartition("__remote_log_metadata", 0)
METADATA_LOG = TopicPartition("__cluster_metadata", 0)
EVERY = (ORDERS, OFFSETS, TRANSACTIONS, RLMM, METADATA_LOG)


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    """Three rolled segments in every partition, each below its high watermark, the cluster
    metadata log's too (a broker's checkpoint never names it: the worst case)."""
    path = tmp_path / "logs"
    plans = [SegmentPlan(records=10, max_timestamp_ms=WRITER_NOW_MS - 1000 + i) for i in range(3)]
    write_scripted_log_dir(path, {tp: plans for tp in EVERY}, seed=3)
    return path


def test_internal_topics_are_never_tiered_and_the_metadata_log_is_no_partition(
    backend: Backend, tiering_factory: TieringFactory, log_dir: Path
) -> None:
    enabled = TopicSettings(remote_storage_enable=True)
    tiering = tiering_factory(backend, log_dir, topic_overrides={tp.topic: enabled for tp in EVERY})

    outcomes = {o.topic_partition: o for o in tiering.copier().run_once()}
    tiering.retention().run_once()

    assert set(outcomes) == {ORDERS, OFFSETS, TRANSACTIONS, RLMM}
    assert outcomes[ORDERS].copied_segments == 3 and outcomes[ORDERS].skipped is None
    for tp in (OFFSETS, TRANSACTIONS):
        assert outcomes[tp].skipped == f"{tp.topic} is an internal topic, which Kafka never tiers"
    assert outcomes[RLMM].skipped == (
        "__remote_log_metadata is Kafka's remote log metadata topic, which Kafka never tiers"
    )
    for tp in (OFFSETS, TRANSACTIONS, RLMM, METADATA_LOG):
        assert outcomes.get(tp, outcomes[OFFSETS]).copied_segments == 0
        assert list(tiering.store.list_segments(tp)) == []
        assert tiering.store.get_partition(tp) is None  # not even leased
    keys = tiering.storage.list_keys("")
    assert keys and all(key.split("/")[1].startswith("orders-0-") for key in keys), keys
    assert [tp for tp in (p.tp for p in LogDir(log_dir).partitions())] == [
        OFFSETS,
        RLMM,
        TRANSACTIONS,
        ORDERS,
    ]


def test_the_metadata_log_is_neither_listed_nor_read_and_internal_topics_are_read_locally(
    tiering_factory: TieringFactory, log_dir: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    tiering = tiering_factory(make_backend("sqlite-fs", request, tmp_path), log_dir)
    tiering.copier().run_once()
    with runtime(tiering, tmp_path) as rt, serving(rt) as apis:
        topics = apis.rest.get("/v1/topics")
        metadata_log = "/v1/topics/__cluster_metadata/partitions/0"
        metadata = [
            apis.rest.get(f"{metadata_log}/offsets", params={"timestamp": "earliest"}),
            apis.rest.get(f"{metadata_log}/records", params={"offset": 0}),
            apis.rest.get(f"{metadata_log}/segments"),
        ]
        offsets_topic = "/v1/topics/__consumer_offsets/partitions/0"
        offsets = apis.rest.get(f"{offsets_topic}/offsets", params={"timestamp": "latest"})

    assert topics.status_code == 200, topics.text
    assert {t["name"] for t in topics.json()["topics"]} == {
        "orders",
        "__consumer_offsets",
        "__transaction_state",
        "__remote_log_metadata",
    }
    for answer in metadata:
        assert answer.status_code == 404, answer.text
        assert "__cluster_metadata-0" in answer.text
    # Kafka's clients may read its internal topics: rlm answers for their local logs.
    assert offsets.status_code == 200, offsets.text
    assert offsets.json()["offset"] == 33


def test_verifying_a_log_directory_checks_the_metadata_logs_bytes(
    log_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    segment = log_dir / "__cluster_metadata-0" / "00000000000000000000.log"
    data = bytearray(segment.read_bytes())
    data[80] ^= 0xFF  # inside the first batch's records: its CRC no longer matches
    segment.write_bytes(bytes(data))

    code = main(["log", "verify", str(log_dir)])
    out = "".join(capsys.readouterr())

    assert code == 1
    assert "__cluster_metadata-0" in out and "crc" in out.lower()
    assert "orders-0" not in out


def test_copies_of_an_internal_topic_an_earlier_version_made_are_still_retained(
    backend: Backend, tiering_factory: TieringFactory, log_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tiering = tiering_factory(
        backend, log_dir, topic_overrides={OFFSETS.topic: TopicSettings(retention_ms=3_600_000)}
    )
    with monkeypatch.context() as earlier:  # a copier that knew no never-tiered topics
        earlier.setattr("rlm.tiering.copier.never_tiered", lambda topic: None)
        (copied,) = tiering.copier().run_once([LogDir(log_dir).partition(OFFSETS.topic, 0)])
    assert copied.copied_segments == 3
    assert [o.copied_segments for o in tiering.copier().run_once()] == [0, 0, 0, 3]  # ORDERS only

    retained = {o.topic_partition: o for o in tiering.retention().run_once()}
    assert retained[OFFSETS].skipped is None and retained[OFFSETS].deleted_segments == 0
    tiering.clock.advance(WRITER_NOW_MS + 3_600_000 - tiering.clock())  # past retention.ms of them all
    retained = {o.topic_partition: o for o in tiering.retention().run_once()}

    assert retained[OFFSETS].deleted_segments == 3
    assert tiering.finished(OFFSETS) == []
    assert (
        retained[TRANSACTIONS].skipped == "__transaction_state is an internal topic, which Kafka never tiers"
    )
