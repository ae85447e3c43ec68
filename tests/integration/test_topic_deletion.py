"""A deleted topic's partitions deleted from the remote tier (``rlm retention delete-topic``), on
SQLite + filesystem and PostgreSQL + S3.

``kafka-topics --delete orders`` removes the brokers' directories of the topic; Kafka deletes its
remote segments too. rlm cannot tell a deleted topic from a partition that moved to another broker
by its directory, so the operator names the deleted topic's id, and rlm deletes the partitions the
store records under it, and nothing else.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from uuid import UUID

import pytest
from prometheus_client import CollectorRegistry

from api.gen.rlm.v1 import rlm_pb2 as pb
from rlm.bootstrap import Runtime, build_runtime
from rlm.cli import main
from rlm.errors import NotFoundError, StateConflictError
from rlm.log.checkpoints import topic_id_to_uuid, uuid_to_topic_id
from rlm.log.logdir import PARTITION_METADATA, LogDir, PartitionDir
from rlm.metastore.model import LogPosition, PartitionState, SegmentState, TopicPartition
from rlm.storage.description import TOPIC_DELETED, Retirement
from rlm.storage.log_start import marker_key, read_marker
from rlm.tiering.deletion import Step, no_step
from rlm.tiering.overview import Overview
from rlm.tiering.partition_deletion import PartitionDeletion, delete_partition
from tests.integration.test_topic_recreate_api import serving
from tests.pipeline.tiers import AWS_ENV
from tests.retired_support import rebuilt_from_objects, retirements
from tests.tiering_support import (
    BROKER_ID,
    WRITER_NOW_MS,
    Backend,
    SegmentPlan,
    Tiering,
    assert_invariants,
    set_log_start_offsets,
    write_scripted_log_dir,
)

TP = TopicPartition("orders", 0)
OTHER = TopicPartition("orders", 1)
TieringFactory = Callable[..., Tiering]
FINISHED = SegmentState.DELETE_SEGMENT_FINISHED
#: How long ago a sidecar may have held a partition's lease at most, for :func:`delete` to go on.
IDLE_MS = 600_000


def write_topic(log_dir: Path, segments: int, *, seed: int) -> dict[TopicPartition, PartitionDir]:
    """Create topic ``orders`` (a new topic id), two partitions of ``segments`` rolled segments."""
    plans = [SegmentPlan(records=10, max_timestamp_ms=WRITER_NOW_MS - 1000 + i) for i in range(segments)]
    write_scripted_log_dir(log_dir, {TP: plans, OTHER: plans}, seed=seed)
    return {tp: LogDir(log_dir).partition(tp.topic, tp.partition) for tp in (TP, OTHER)}


def topic_uuid(partition: PartitionDir) -> UUID:
    text = partition.topic_id()
    assert text is not None
    return topic_id_to_uuid(text)


@pytest.fixture
def deleted(backend: Backend, tiering_factory: TieringFactory, tmp_path: Path) -> tuple[Tiering, Path, UUID]:
    """Topic ``orders`` tiered (5 segments a partition), then deleted: its directories are gone,
    and its sidecar gave the leases back longer than the idle time ago."""
    log_dir = tmp_path / "logs"
    partitions = write_topic(log_dir, 5, seed=1)
    tiering = tiering_factory(backend, log_dir)
    assert [o.copied_segments for o in tiering.copier().run_once()] == [5, 5]
    topic_id = topic_uuid(partitions[TP])
    assert topic_uuid(partitions[OTHER]) == topic_id
    shutil.rmtree(log_dir)
    log_dir.mkdir()
    tiering.leases.release_all()
    tiering.clock.advance(IDLE_MS + 1)
    return tiering, log_dir, topic_id


def delete(
    tiering: Tiering,
    tp: TopicPartition,
    topic_id: UUID,
    *,
    step: Step = no_step,
    dry_run: bool = False,
    idle_ms: int = IDLE_MS,
) -> PartitionDeletion:
    return delete_partition(
        tiering.store,
        tiering.storage,
        tiering.leases,
        tp,
        topic_id,
        clock=tiering.clock,
        log_dirs=tiering.settings.log_dirs,
        step=step,
        dry_run=dry_run,
        idle_ms=idle_ms,
    )


@contextlib.contextmanager
def runtime(tiering: Tiering, directory: Path) -> Iterator[Runtime]:
    """rlm's components over ``tiering``'s store and storage, its index cache in ``directory``."""
    settings = tiering.settings.replace(remote_log_index_cache_dir=directory / "index-cache")
    rt = build_runtime(settings, registry=CollectorRegistry(), storage=tiering.storage)
    try:
        yield rt
    finally:
        rt.close()


def objects_of(tiering: Tiering, tp: TopicPartition) -> set[str]:
    return {key for s in tiering.finished(tp) for key in (s.layout.log_key, s.layout.index_key)}


def crash_at(name: str) -> Callable[[str], None]:
    def step(done: str) -> None:
        if done == name:
            raise OSError("the process died")

    return step


def test_a_deleted_topics_partitions_are_deleted_from_the_remote_tier(
    deleted: tuple[Tiering, Path, UUID], tmp_path: Path
) -> None:
    tiering, _, topic_id = deleted
    sizes = {tp: sum(s.size_bytes for s in tiering.finished(tp)) for tp in (TP, OTHER)}
    assert set(tiering.storage.list_keys("")) == objects_of(tiering, TP) | objects_of(tiering, OTHER)

    outcome = delete(tiering, TP, topic_id)

    assert outcome == PartitionDeletion(TP, 5, sizes[TP])
    assert tiering.finished(TP) == []
    assert {s.state for s in tiering.store.list_segments(TP)} == {FINISHED}
    record = tiering.store.get_partition(TP)
    assert record is not None and record.deletion_state is PartitionState.DELETE_PARTITION_FINISHED
    assert tiering.store.get_lease(TP) is None  # given back
    # Nothing of the partition is left on the remote tier; the other partition is untouched.
    assert set(tiering.storage.list_keys("")) == objects_of(tiering, OTHER)
    assert len(tiering.finished(OTHER)) == 5

    listed = Overview(tiering.store, ()).partitions("orders")
    assert [(p.partition, p.deletion_state, p.tiered_segments, p.remote_topic_id) for p in listed] == [
        (0, "DELETE_PARTITION_FINISHED", 0, topic_id),
        (1, None, 5, topic_id),
    ]

    # Reads of the deleted partition find nothing; the other still answers from the remote tier.
    with runtime(tiering, tmp_path) as rt:
        with pytest.raises(NotFoundError, match="unknown topic-partition orders-0"):
            rt.lookup.find(TP, WRITER_NOW_MS - 1000)
        assert rt.lookup.find(OTHER, WRITER_NOW_MS - 1000).tier == "remote"

    # Run again: nothing more to do.
    again = delete(tiering, TP, topic_id)
    assert again.skipped is not None and "deleted already" in again.skipped
    assert not again.run_again


def test_a_partition_recorded_under_another_topic_id_is_refused(deleted: tuple[Tiering, Path, UUID]) -> None:
    tiering, _, topic_id = deleted
    other_id = UUID(int=topic_id.int ^ 1)
    before = tiering.finished(TP)

    with pytest.raises(StateConflictError, match="it is another topic of that name") as raised:
        delete(tiering, TP, other_id)

    assert uuid_to_topic_id(topic_id) in str(raised.value) and uuid_to_topic_id(other_id) in str(raised.value)
    assert tiering.finished(TP) == before
    record = tiering.store.get_partition(TP)
    assert record is not None and record.deletion_state is None


def test_a_partition_the_broker_still_holds_is_refused(
    backend: Backend, tiering_factory: TieringFactory, tmp_path: Path
) -> None:
    log_dir = tmp_path / "logs"
    partitions = write_topic(log_dir, 3, seed=1)
    tiering = tiering_factory(backend, log_dir)
    tiering.copier().run_once()
    before = tiering.finished(TP)

    with pytest.raises(StateConflictError, match="the topic is not deleted on this broker"):
        delete(tiering, TP, topic_uuid(partitions[TP]))

    assert tiering.finished(TP) == before
    assert tiering.copier().run_once()[0].error is None


def test_a_partition_the_broker_holds_with_no_partition_metadata_is_refused(
    backend: Backend, tiering_factory: TieringFactory, tmp_path: Path
) -> None:
    """A broker before Kafka 2.8 writes no partition.metadata: the topic it holds under the name
    may be the one named, so nothing of it is deleted."""
    log_dir = tmp_path / "logs"
    partitions = write_topic(log_dir, 3, seed=1)
    tiering = tiering_factory(backend, log_dir)
    tiering.copier().run_once()
    before = tiering.finished(TP)
    topic_id = topic_uuid(partitions[TP])
    (partitions[TP].path / PARTITION_METADATA).unlink()

    for dry_run in (True, False):
        with pytest.raises(StateConflictError, match="no partition.metadata to tell its topic id"):
            delete(tiering, TP, topic_id, dry_run=dry_run)

    assert tiering.finished(TP) == before


def test_a_partition_whose_lease_a_sidecar_held_lately_waits_until_none_has_for_the_idle_time(
    deleted: tuple[Tiering, Path, UUID], tiering_factory: TieringFactory
) -> None:
    # The live topic's id given by mistake, on a broker that does not hold the partition: the
    # sidecar of the broker that does renews the lease every pass.
    tiering, log_dir, topic_id = deleted
    other = tiering_factory(tiering.backend, log_dir, broker_id=BROKER_ID + 1, clock=tiering.clock)
    held = other.leases.hold(TP)
    assert held is not None
    before = tiering.finished(TP)

    outcome = delete(tiering, TP, topic_id)

    assert outcome.run_again and outcome.skipped is not None
    assert f"broker 2's sidecar held its copy lease until {held.expires_at_ms}" in outcome.skipped
    # It stopped renewing: the lease expired, but only lately.
    tiering.clock.advance(tiering.settings.remote_log_manager_lease_ttl_ms + 1)
    assert delete(tiering, TP, topic_id).run_again
    assert delete(tiering, TP, topic_id, dry_run=True).run_again
    assert tiering.finished(TP) == before
    tiering.clock.advance(IDLE_MS)
    assert delete(tiering, TP, topic_id).deleted_segments == 5


def test_a_partition_whose_lease_a_sidecar_gave_back_lately_waits_until_the_idle_time_passed(
    deleted: tuple[Tiering, Path, UUID], tiering_factory: TieringFactory
) -> None:
    # The live topic's id given by mistake just after a rolling restart: the sidecar of the broker
    # that holds the partition gave its lease back when it stopped, and takes it again once started.
    tiering, log_dir, topic_id = deleted
    other = tiering_factory(tiering.backend, log_dir, broker_id=BROKER_ID + 1, clock=tiering.clock)
    assert other.leases.hold(TP) is not None
    tiering.clock.advance(1_000)
    other.leases.release_all()
    assert tiering.store.get_lease(TP) is None
    before = tiering.finished(TP)

    outcome = delete(tiering, TP, topic_id)

    assert outcome.run_again and outcome.skipped is not None
    assert f"a sidecar gave its copy lease back at {tiering.clock()} (epoch ms)" in outcome.skipped
    tiering.clock.advance(IDLE_MS - 1)
    assert delete(tiering, TP, topic_id).run_again
    assert delete(tiering, TP, topic_id, dry_run=True).run_again
    assert tiering.finished(TP) == before
    tiering.clock.advance(1)
    assert delete(tiering, TP, topic_id).deleted_segments == 5


def test_a_partition_a_sidecar_claimed_lately_waits_until_none_has_for_the_idle_time(
    deleted: tuple[Tiering, Path, UUID],
) -> None:
    # A follower's sidecar claims the lease while another holds it, and goes on claiming.
    tiering, _, topic_id = deleted
    tiering.store.claim_lease(TP, BROKER_ID + 2, LogPosition(topic_id, 0, 49))

    outcome = delete(tiering, TP, topic_id, idle_ms=120_000)

    assert outcome.run_again and outcome.skipped is not None
    assert "broker 3's sidecar claimed its copy lease at" in outcome.skipped
    tiering.clock.advance(120_001)
    assert delete(tiering, TP, topic_id, idle_ms=120_000).deleted_segments == 5


@pytest.mark.parametrize("crash", ["segments_marked", "partition_deletion_started", "delete_started"])
def test_a_deletion_that_died_is_finished_by_the_next_run_and_a_rebuild_brings_nothing_back(
    deleted: tuple[Tiering, Path, UUID],
    tiering_factory: TieringFactory,
    sqlite_template: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    crash: str,
) -> None:
    tiering, log_dir, topic_id = deleted
    finished = tiering.finished(TP)

    with pytest.raises(OSError, match="the process died"):
        delete(tiering, TP, topic_id, step=crash_at(crash))

    assert tiering.store.get_lease(TP) is None  # given back all the same
    left = [s for s in finished if tiering.storage.object_size(s.layout.index_key) is not None]
    assert left  # the crash left objects
    marks = {s.start_offset: Retirement(tiering.clock(), TOPIC_DELETED) for s in left}
    if crash == "segments_marked":
        assert retirements(tiering, TP) == marks
    # A store rebuilt from the objects now holds nothing of the deleted partition.
    rebuilt, report = rebuilt_from_objects(
        tiering, tiering_factory, log_dir, sqlite_template, tmp_path / "rebuilt", monkeypatch
    )
    assert rebuilt.finished(TP) == []
    assert len(rebuilt.finished(OTHER)) == 5
    deleted_topic = [o for o in report.orphans if "its topic was deleted" in o.reason]
    assert len(deleted_topic) == len(left)

    assert delete(tiering, TP, topic_id).skipped is None
    assert tiering.finished(TP) == []
    assert set(tiering.storage.list_keys("")) == objects_of(tiering, OTHER)


def test_the_topic_created_again_is_tiered_from_its_start(deleted: tuple[Tiering, Path, UUID]) -> None:
    tiering, log_dir, topic_id = deleted
    for tp in (TP, OTHER):
        delete(tiering, tp, topic_id)
    shutil.rmtree(log_dir)
    partitions = write_topic(log_dir, 3, seed=2)
    new_id = topic_uuid(partitions[TP])

    outcomes = tiering.copier().run_once()

    assert [(o.error, o.copied_segments) for o in outcomes] == [(None, 3), (None, 3)]
    for tp in (TP, OTHER):
        record = tiering.store.get_partition(tp)
        assert record is not None and (record.topic_id, record.deletion_state) == (new_id, None)
        assert [(s.start_offset, s.topic_id) for s in tiering.finished(tp)] == [
            (o, new_id) for o in (0, 10, 20)
        ]
    assert_invariants(tiering.store, tiering.storage, [log_dir])


def test_rlm_retention_delete_topic_deletes_every_partition_of_the_topic(
    deleted: tuple[Tiering, Path, UUID], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    tiering, log_dir, topic_id = deleted
    settings = tiering.settings
    options = ["--log-dirs", str(log_dir), "--broker-id", str(BROKER_ID)]
    options += ["--metadata-url", settings.metadata_url]
    options += ["--remote-url", settings.remote_url]
    if settings.s3_endpoint_url is not None:
        monkeypatch.setenv("RLM_S3_ENDPOINT_URL", settings.s3_endpoint_url)
        for name, value in AWS_ENV.items():  # moto takes any
            monkeypatch.setenv(name, value)
    command = ["retention", "delete-topic", "orders", *options]

    assert main([*command, "--topic-id", "not-an-id"]) == 1
    assert "--topic-id 'not-an-id' is not a Kafka topic id" in capsys.readouterr().err
    assert main([*command, "--topic-id", uuid_to_topic_id(UUID(int=7))]) == 1
    assert capsys.readouterr().err.count("it is another topic of that name") == 2
    keys = sorted(tiering.storage.list_keys(""))
    assert main([*command, "--topic-id", uuid_to_topic_id(topic_id), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "orders-0: would delete 5 segments" in out and "orders-1: would delete 5 segments" in out
    assert sorted(tiering.storage.list_keys("")) == keys
    assert all(r.deletion_state is None for r in tiering.store.list_partitions())
    assert main([*command, "--topic-id", uuid_to_topic_id(topic_id)]) == 0
    out = capsys.readouterr().out
    assert "orders-0: deleted 5 segments" in out and "orders-1: deleted 5 segments" in out
    assert list(tiering.storage.list_keys("")) == []
    assert (
        main(["retention", "delete-topic", "payments", *options, "--topic-id", "AAAAAAAAAAAAAAAAAAAAAQ"]) == 1
    )
    assert "no partition of topic 'payments'" in capsys.readouterr().err


def test_retention_forgets_a_deleted_partitions_rows_once_kept_long_enough(
    deleted: tuple[Tiering, Path, UUID],
) -> None:
    tiering, _, topic_id = deleted
    delete(tiering, TP, topic_id)
    kept_ms = tiering.settings.remote_log_metadata_deleted_segments_retention_ms
    assert kept_ms > 0

    assert tiering.retention().purge_deleted_partitions() == 0  # kept a while
    tiering.clock.advance(kept_ms + 1)
    tiering.retention().run_once()  # a pass over the (now empty) log directories purges them too

    assert list(tiering.store.list_segments(TP)) == []
    assert (
        tiering.registry.get_sample_value(
            "rlm_metadata_purged_segments_total", {"topic": "orders", "partition": "0"}
        )
        == 5
    )
    assert len(tiering.finished(OTHER)) == 5
    record = tiering.store.get_partition(TP)
    assert record is not None and record.deletion_state is PartitionState.DELETE_PARTITION_FINISHED


def test_rest_and_grpc_show_the_deleted_partition_and_its_topic_id_and_read_nothing_of_it(
    deleted: tuple[Tiering, Path, UUID], tmp_path: Path
) -> None:
    tiering, _, topic_id = deleted
    delete(tiering, TP, topic_id)
    with runtime(tiering, tmp_path) as rt, serving(rt) as apis:
        answer = apis.rest.get("/v1/topics", params={"topic": "orders"})
        assert answer.status_code == 200, answer.text
        (topic,) = answer.json()["topics"]
        rest = {p["partition"]: (p["deletion_state"], p["remote_topic_id"]) for p in topic["partitions"]}
        listed = apis.grpc.ListPartitions(pb.ListPartitionsRequest(topic="orders"), timeout=30).partitions
        grpc_view = {p.partition: (p.deletion_state, p.remote_topic_id) for p in listed}
        offsets = apis.rest.get("/v1/topics/orders/partitions/0/offsets", params={"timestamp": "earliest"})
        other = apis.rest.get("/v1/topics/orders/partitions/1/offsets", params={"timestamp": "earliest"})

    text = uuid_to_topic_id(topic_id)
    assert rest == {0: ("DELETE_PARTITION_FINISHED", text), 1: (None, text)}
    assert grpc_view == {0: ("DELETE_PARTITION_FINISHED", text), 1: ("", text)}
    assert offsets.status_code == 404, offsets.text
    assert "unknown topic-partition orders-0" in offsets.text
    assert other.status_code == 200 and other.json()["offset"] == 0


class _AdoptedMeanwhile:
    """The deletion's lease keeper; just before the deletion takes the lease, ``meanwhile`` runs
    (another sidecar holds the lease, does its pass and gives the lease back)."""

    def __init__(self, tiering: Tiering, meanwhile: Callable[[], object]) -> None:
        self.leases = tiering.leases
        self.meanwhile: Callable[[], object] | None = meanwhile

    def hold(self, tp: TopicPartition) -> object:
        run, self.meanwhile = self.meanwhile, None
        if run is not None:
            run()
        return self.leases.hold(tp)

    def __getattr__(self, name: str) -> object:
        return getattr(self.leases, name)


def test_a_deletion_run_again_leaves_the_topic_created_again_meanwhile(
    deleted: tuple[Tiering, Path, UUID],
) -> None:
    tiering, log_dir, topic_id = deleted
    with pytest.raises(OSError, match="the process died"):
        delete(tiering, TP, topic_id, step=crash_at("partition_marked"))
    shutil.rmtree(log_dir)
    write_topic(log_dir, 3, seed=2)

    def created_again_and_tiered() -> None:
        assert [o.copied_segments for o in tiering.copier().run_once()] == [3, 3]
        tiering.leases.release_all()  # a rolling restart

    # The run again reads the partition's record (the deleted topic's, marked) before the topic
    # created again is tiered, and takes the lease after.
    leases = _AdoptedMeanwhile(tiering, created_again_and_tiered)
    with pytest.raises(StateConflictError, match="it is another topic of that name"):
        delete_partition(
            tiering.store,
            tiering.storage,
            leases,  # type: ignore[arg-type]
            TP,
            topic_id,
            clock=tiering.clock,
            log_dirs=tiering.settings.log_dirs,
            idle_ms=IDLE_MS,
        )

    record = tiering.store.get_partition(TP)
    assert record is not None and record.deletion_state is None and record.topic_id != topic_id
    assert [s.start_offset for s in tiering.finished(TP)] == [0, 10, 20]
    assert tiering.store.get_lease(TP) is None


@pytest.fixture
def rebuilding(
    tiering_factory: TieringFactory, sqlite_template: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Callable[[Tiering, Path], Tiering]:
    """Rebuilds a harness's store from its objects into a new SQLite store: the harness on it."""

    def rebuilt(tiering: Tiering, log_dir: Path) -> Tiering:
        directory = tmp_path / "rebuilt"
        harness, _ = rebuilt_from_objects(
            tiering, tiering_factory, log_dir, sqlite_template, directory, monkeypatch
        )
        return harness

    return rebuilt


def test_a_deleted_topics_marker_alone_does_not_hide_or_delete_the_new_topics_segments(
    backend: Backend,
    tiering_factory: TieringFactory,
    rebuilding: Callable[[Tiering, Path], Tiering],
    tmp_path: Path,
) -> None:
    """A deletion that died after marking the segments leaves the deleted topic's log start
    marker; a store rebuilt before the topic created again tiered anything must not give that
    offset to the new topic, whose segments it would hide and retention would delete."""
    log_dir = tmp_path / "logs"
    partitions = write_topic(log_dir, 5, seed=1)
    old_id = topic_uuid(partitions[TP])
    tiering = tiering_factory(backend, log_dir)
    assert [o.copied_segments for o in tiering.copier().run_once()] == [5, 5]
    set_log_start_offsets(log_dir, {TP: 20})  # DeleteRecords: the first two segments go
    by_broker = tiering.settings.replace(remote_log_start_offset_from_broker=True)
    assert [o.deleted_segments for o in tiering.retention(settings=by_broker).run_once()] == [2, 0]
    assert read_marker(tiering.storage, marker_key(TP, old_id)) == 20
    shutil.rmtree(log_dir)
    log_dir.mkdir()
    tiering.leases.release_all()
    tiering.clock.advance(IDLE_MS + 1)
    with pytest.raises(OSError, match="the process died"):
        delete(tiering, TP, old_id, step=crash_at("segments_marked"))

    rebuilt = rebuilding(tiering, log_dir)
    assert rebuilt.finished(TP) == []
    # The topic is created again; its sidecar tiers it into the rebuilt store.
    shutil.rmtree(log_dir)
    new_id = topic_uuid(write_topic(log_dir, 3, seed=2)[TP])
    assert [(o.error, o.copied_segments) for o in rebuilt.copier().run_once()] == [(None, 3), (None, 3)]

    assert all(o.error is None for o in rebuilt.retention().run_once())
    assert [(s.start_offset, s.topic_id) for s in rebuilt.finished(TP)] == [(o, new_id) for o in (0, 10, 20)]
    record = rebuilt.store.get_partition(TP)
    assert record is not None and (record.topic_id, record.remote_log_start_offset) == (new_id, -1)
