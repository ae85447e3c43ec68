"""What compaction leaves of producers: their sequence and epoch, and their transactions' bounds,
as Kafka's cleaner leaves them (``LogCleaner``'s ``isBatchLastRecordOfProducer`` and
``CleanedTransactionMetadata``).

A broker (or rlm, without a producer snapshot: :mod:`rlm.remote_tier.stable`) rebuilds producer state
by reading the batches' headers: each producer's last data batch gives its sequence and epoch, a
transactional batch opens its producer's transaction and a marker closes it. So compaction must
leave no batch saying what the log did not say, keep each producer's last data batch (empty when
its records go) and keep a transaction's marker while a batch of the transaction stays.

Each topic of :func:`write_producer_logs` is one case, compacted at :data:`NOW` (stamping the
horizons) and again after them.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from kafka.record import MemoryRecords
from pyspark.sql import SparkSession

from rlm.config import Settings
from rlm.log.batches import parse_header
from rlm.log.dirwriter import LogDirWriter
from rlm.log.model import ControlType
from rlm.log.recovery import TransactionTracker, track_transactions
from rlm.log.writer import ProducerRecord, TopicConfig
from rlm.metastore.model import TopicPartition
from rlm.pipeline.compact.engine import Engine, InProcessEngine
from rlm.pipeline.compact.job import CompactOptions, CompactReport, compact
from rlm.pipeline.spark.compact import SparkEngine
from rlm.pipeline.storage import StorageSpec
from tests.pipeline.compact.support import WRITTEN_AT, assert_same_reports, compacting
from tests.pipeline.conftest import make_tier
from tests.pipeline.tiers import Tier, copy_eligible
from tests.tiering_support import set_high_watermarks

#: Producer 7 commits K=a (0, 1); K=a is written again (2); producer 7 then opens a transaction
#: (3) whose marker is not tiered. Segment [0, 1] loses every batch once the marker's horizon
#: passes.
EMPTIED = TopicPartition("emptied", 0)
#: Producer 7's only transaction: K=a committed (0, 1); K=a is written again (2), K=b (3).
LAST_DATA = TopicPartition("last-data", 0)
#: Producer 7's data batches went before the tier's start (retention): its COMMIT marker (0) is
#: its only batch; K=a is written (1) and written again (2).
MARKER_ONLY = TopicPartition("marker-only", 0)
CASES = (EMPTIED, LAST_DATA, MARKER_ONLY)
PID, EPOCH = 7, 3
NOW = WRITTEN_AT + 3_600_000
#: ``delete.retention.ms`` of the cases: each run after the first is past the horizons it stamped.
RETENTION = 1000
RUNS = (NOW, NOW + 5 * RETENTION, NOW + 10 * RETENTION)


def write_producer_logs(logs: Path) -> None:
    """The log of every case (see the constants above), each ending with an active segment."""
    txn: dict[str, Any] = {"producer_id": PID, "producer_epoch": EPOCH}
    with LogDirWriter(logs, clock=lambda: WRITTEN_AT, default_config=TopicConfig()) as writer:
        log = writer.partition(EMPTIED.topic, 0)
        log.append([ProducerRecord(WRITTEN_AT, b"a", b"1")], base_sequence=0, transactional=True, **txn)
        log.append_control(ControlType.COMMIT, **txn)  # 1
        log.roll()
        log.append([ProducerRecord(WRITTEN_AT, b"a", b"2")])  # 2
        log.append([ProducerRecord(WRITTEN_AT, b"c", b"open")], base_sequence=1, transactional=True, **txn)
        log.roll()
        log.append([ProducerRecord(WRITTEN_AT, b"tail", b"active")])  # 4

        log = writer.partition(LAST_DATA.topic, 0)
        log.append(
            [ProducerRecord(WRITTEN_AT, b"a", b"1"), ProducerRecord(WRITTEN_AT, b"x", None)],
            base_sequence=0,
            transactional=True,
            **txn,
        )  # 0, 1
        log.append_control(ControlType.COMMIT, **txn)  # 2
        log.roll()
        log.append([ProducerRecord(WRITTEN_AT, b"a", b"2"), ProducerRecord(WRITTEN_AT, b"x", b"3")])  # 3, 4
        log.append([ProducerRecord(WRITTEN_AT, b"b", b"4")])  # 5
        log.roll()
        log.append([ProducerRecord(WRITTEN_AT, b"tail", b"active")])  # 6

        log = writer.partition(MARKER_ONLY.topic, 0)
        log.append_control(ControlType.COMMIT, **txn)  # 0
        log.append([ProducerRecord(WRITTEN_AT, b"a", b"1")])  # 1
        log.roll()
        log.append([ProducerRecord(WRITTEN_AT, b"a", b"2")])  # 2
        log.roll()
        log.append([ProducerRecord(WRITTEN_AT, b"tail", b"active")])  # 3


def producer_settings(settings: Settings) -> Settings:
    base = compacting(settings, delete_retention_ms=RETENTION).topic("users")
    return settings.replace(topic_overrides={tp.topic: dataclasses.replace(base) for tp in CASES})


def compact_once(tier: Tier, settings: Settings, now: int, spark: SparkSession | None) -> CompactReport:
    """One compaction of ``tier`` at ``now`` (on Spark when given ``spark``, by the reference
    otherwise)."""
    spec = StorageSpec.from_settings(settings)
    engine: Engine = InProcessEngine(spec) if spark is None else SparkEngine(spark, spec, progress=False)
    storage = tier.open_storage()
    try:
        with tier.open_store() as store:
            return compact(store, storage, spec, engine, settings, CompactOptions(), now_ms=now)
    finally:
        storage.close()


def compact_runs(tier: Tier, spark: SparkSession | None = None) -> list[CompactReport]:
    """Compact the cases at each of :data:`RUNS` (on Spark when given ``spark``, by the reference
    otherwise)."""
    settings = producer_settings(tier.settings)
    reports = []
    for now in RUNS:
        reports.append(compact_once(tier, settings, now, spark))
    return reports


@pytest.fixture
def compacted(request: pytest.FixtureRequest, tmp_path: Path) -> Tier:
    """The cases compacted at each of :data:`RUNS` by the reference."""
    tier = make_tier("sqlite-fs", request, tmp_path, write_producer_logs)
    for report in compact_runs(tier):
        assert not report.failed, report.to_json()
    return tier


class Batch(NamedTuple):
    """A batch of the remote tier as kafka-python reads it."""

    base_offset: int
    last_offset: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    transactional: bool
    control: bool
    records: int


def tier_logs(tier: Tier, tp: TopicPartition) -> list[bytes]:
    """The ``.log`` bytes of the partition's finished segments, in offset order."""
    storage = tier.open_storage()
    try:
        return [storage.read_range(r.layout.log_key, 0, r.size_bytes) for r in tier.finished(tp)]
    finally:
        storage.close()


def batches(tier: Tier, tp: TopicPartition) -> list[Batch]:
    out = []
    for data in tier_logs(tier, tp):
        memory = MemoryRecords(data)
        while (b := memory.next_batch()) is not None:
            last = b.base_offset + b.last_offset_delta
            out.append(
                Batch(
                    b.base_offset,
                    last,
                    b.producer_id,
                    b.producer_epoch,
                    b.base_sequence,
                    b.is_transactional,
                    b.is_control_batch,
                    len(list(b)),
                )
            )
    return out


def open_after_scan(tier: Tier, tp: TopicPartition) -> dict[int, int]:
    """The transactions open at the end of the tier, found as a broker's recovery (and rlm without
    a producer snapshot) finds them: every batch's header, in order, from offset 0."""
    tracker = TransactionTracker()
    for data in tier_logs(tier, tp):
        pos = 0
        while pos < len(data):
            header = parse_header(data, pos)
            track_transactions(header, tracker, data[pos : pos + header.size], tp.topic)
            pos += header.size
    return tracker.ongoing


def test_an_output_that_loses_every_batch_opens_no_transaction(compacted: Tier) -> None:
    got = batches(compacted, EMPTIED)
    placeholder = [b for b in got if b.last_offset == 1]
    assert placeholder, got  # the range [0, 1] is still covered
    # it holds nothing and stands for no producer: the batch it replaces went
    assert [(b.records, b.producer_id, b.transactional, b.control) for b in placeholder] == [
        (0, -1, False, False)
    ]
    # producer 7's open transaction starts at 3, not at the placeholder
    assert open_after_scan(compacted, EMPTIED) == {PID: 3}


def test_a_producers_last_data_batch_stays_empty_with_its_marker(compacted: Tier) -> None:
    got = batches(compacted, LAST_DATA)
    # K=a and x went from batch [0, 1]; it stays, empty, with the producer's sequence and epoch
    assert Batch(0, 1, PID, EPOCH, 0, True, False, 0) in got
    # its transaction's marker stays while it does: without it the batch would open a transaction
    assert [b for b in got if b.control] == [Batch(2, 2, PID, EPOCH, -1, True, True, 1)]
    assert open_after_scan(compacted, LAST_DATA) == {}


def test_a_producer_with_no_data_batch_keeps_its_last_marker_past_its_horizon(compacted: Tier) -> None:
    got = batches(compacted, MARKER_ONLY)
    # the marker is the only batch left with the producer's epoch, which fences its older
    # incarnations: it stays (Kafka's cleaner keeps it, emptied), while K=a's first value goes
    assert [b for b in got if b.producer_id == PID] == [Batch(0, 0, PID, EPOCH, -1, True, True, 1)]
    assert [(b.base_offset, b.records) for b in got if b.producer_id != PID] == [(2, 1)]
    assert open_after_scan(compacted, MARKER_ONLY) == {}


#: Producer 7 commits K=a (0, 1), K=a is written again (2) | later tiered: producer 7 commits K=b
#: (3, 4), K=b is written again (5). Its last data batch is 0, then 3.
SUPERSEDED = TopicPartition("superseded", 0)
#: The high watermark the partition is first tiered at, then the one at which the rest is.
FIRST_TIERED, ALL_TIERED = 3, 6


def write_superseded_log(logs: Path) -> None:
    txn: dict[str, Any] = {"producer_id": PID, "producer_epoch": EPOCH, "transactional": True}
    with LogDirWriter(logs, clock=lambda: WRITTEN_AT, default_config=TopicConfig()) as writer:
        log = writer.partition(SUPERSEDED.topic, 0)
        log.append([ProducerRecord(WRITTEN_AT, b"a", b"1")], base_sequence=0, **txn)  # 0
        log.append_control(ControlType.COMMIT, producer_id=PID, producer_epoch=EPOCH)  # 1
        log.roll()
        log.append([ProducerRecord(WRITTEN_AT, b"a", b"2")])  # 2
        log.roll()
        log.append([ProducerRecord(WRITTEN_AT, b"b", b"3")], base_sequence=1, **txn)  # 3
        log.append_control(ControlType.COMMIT, producer_id=PID, producer_epoch=EPOCH)  # 4
        log.roll()
        log.append([ProducerRecord(WRITTEN_AT, b"b", b"4")])  # 5
        log.roll()
        log.append([ProducerRecord(WRITTEN_AT, b"tail", b"active")])  # 6
    set_high_watermarks(logs, {SUPERSEDED: FIRST_TIERED})


def superseded_runs(tier: Tier, spark: SparkSession | None = None) -> list[CompactReport]:
    """Compact :data:`SUPERSEDED` at the first of :data:`RUNS`, tier the rest of it, compact it at
    the others and once more (on Spark when given ``spark``, by the reference otherwise)."""
    settings = producer_settings(tier.settings)
    settings = settings.replace(topic_overrides={SUPERSEDED.topic: settings.topic(EMPTIED.topic)})
    reports = []
    for n, now in enumerate((*RUNS, RUNS[-1] + 1)):
        if n == 1:
            set_high_watermarks(settings.log_dirs[0], {SUPERSEDED: ALL_TIERED})
            assert sum(o.copied_segments for o in copy_eligible(tier)) == 2
        reports.append(compact_once(tier, settings, now, spark))
        assert not reports[-1].failed, reports[-1].to_json()
        if n == 0:
            assert Batch(0, 0, PID, EPOCH, 0, True, False, 0) in batches(tier, SUPERSEDED)
    return reports


def test_an_empty_batch_that_is_no_longer_its_producers_last_goes_with_its_marker(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    tier = make_tier("sqlite-fs", request, tmp_path, write_superseded_log)
    reports = superseded_runs(tier)
    # Kafka's cleaner drops an empty batch once a later one holds its producer's state
    # (BatchRetention.DELETE_EMPTY); its transaction's marker then goes after its horizon
    assert [b for b in batches(tier, SUPERSEDED) if b.producer_id == PID] == [
        Batch(3, 3, PID, EPOCH, 1, True, False, 0),
        Batch(4, 4, PID, EPOCH, -1, True, True, 1),
    ]
    assert open_after_scan(tier, SUPERSEDED) == {}
    assert {p.status for p in reports[-1].partitions} == {"unchanged"}  # the last run changes nothing


@pytest.mark.usefixtures("aws_env")
def test_spark_keeps_what_the_reference_keeps_of_producers(
    spark: SparkSession, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    reference = make_tier("sqlite-fs", request, tmp_path / "reference", write_producer_logs)
    on_spark = make_tier("sqlite-fs", request, tmp_path / "spark", write_producer_logs)
    expected = compact_runs(reference)
    got = compact_runs(on_spark, spark)
    assert_same_reports(got, expected)
    for tp in CASES:
        assert batches(on_spark, tp) == batches(reference, tp), tp
    assert Batch(0, 1, PID, EPOCH, 0, True, False, 0) in batches(on_spark, LAST_DATA)
    assert open_after_scan(on_spark, LAST_DATA) == {}
    reference = make_tier("sqlite-fs", request, tmp_path / "superseded-reference", write_superseded_log)
    on_spark = make_tier("sqlite-fs", request, tmp_path / "superseded-spark", write_superseded_log)
    expected, got = superseded_runs(reference), superseded_runs(on_spark, spark)
    assert [[(p.status, p.counts) for p in r.partitions] for r in got] == [
        [(p.status, p.counts) for p in r.partitions] for r in expected
    ]
    assert batches(on_spark, SUPERSEDED) == batches(reference, SUPERSEDED)
