"""Held records (issue 14 §3): records that compaction leaves as they are although they lie in the
compactable range (legacy batches, segments read only in part) survive for the rules. A tombstone
stays while a held record of its key does; a held transactional record keeps its marker.

Each topic of :func:`write_held_logs` is one case, compacted twice: once to stamp the tombstones
and markers, once past their delete horizon.
"""

from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from rlm.config import Settings
from rlm.log.dirwriter import LogDirWriter
from rlm.log.model import ControlType
from rlm.log.txnindex import AbortedTxn, TransactionIndex
from rlm.log.writer import ProducerRecord, TopicConfig
from rlm.metastore.model import IndexType, TopicPartition
from rlm.pipeline.compact.engine import Engine, InProcessEngine, segment_change
from rlm.pipeline.compact.job import CompactOptions, CompactReport, compact
from rlm.pipeline.compact.rewrite import Keep, RewriteParams
from rlm.pipeline.compact.rules import Decisions, Fact, Kind, decide
from rlm.pipeline.compact.segment import OutputPlan, write_output
from rlm.pipeline.spark.compact import SparkEngine
from rlm.pipeline.stage import run_in_process
from rlm.pipeline.storage import StorageSpec
from rlm.pipeline.transactions import attach_aborted, read_aborted
from rlm.remote_tier.read_plan import PartitionPlan, plan_partition
from rlm.storage.layout import IndexBlob
from tests.pipeline.compact.support import WRITTEN_AT, Survivor, assert_same_reports, compacting, survivors
from tests.pipeline.compact.test_rules import fact
from tests.pipeline.conftest import make_tier
from tests.pipeline.tiers import Tier

#: A v1 record of K, then a v2 tombstone of K.
LEGACY = TopicPartition("legacy", 0)
#: K=v1 in a first segment the remote log start offset cuts; K's tombstone in the next segment.
LOG_START = TopicPartition("log-start", 0)
#: An aborted record of K (producer 7) in a first segment the log start cuts; its ABORT marker
#: in the next segment.
ABORTED = TopicPartition("aborted", 0)
#: Timestamp strategy: a v1 record of K newer than a later v2 record of K (the v1 record wins).
LEGACY_WINS = TopicPartition("legacy-wins", 0)
CASES = (LEGACY, LOG_START, ABORTED, LEGACY_WINS)
#: The remote log start offset of the cases cutting their first segment.
LOG_START_OFFSET = 1
NOW = WRITTEN_AT + 3_600_000
#: Past the delete horizon the first run stamps (``delete.retention.ms`` = 1000).
LATER = NOW + 5_000
PID = 7


def write_held_logs(logs: Path) -> None:
    """The log of every case (see the constants above), each partition's segments ending with an
    active one."""
    clock_at = [WRITTEN_AT]

    def clock() -> int:
        clock_at[0] += 1
        return clock_at[0]

    txn: dict[str, Any] = {"producer_id": PID, "producer_epoch": 0}
    with LogDirWriter(logs, clock=clock, default_config=TopicConfig()) as writer:
        log = writer.partition(LEGACY.topic, 0)
        log.append_legacy([ProducerRecord(WRITTEN_AT, b"K", b"v1")], magic=1)  # 0
        log.roll()
        log.append([ProducerRecord(WRITTEN_AT, b"K", None)])  # 1
        log.append([ProducerRecord(WRITTEN_AT, b"other", b"x")])  # 2
        log.roll()
        log.append([ProducerRecord(WRITTEN_AT, b"tail", b"active")])

        log = writer.partition(LOG_START.topic, 0)
        log.append([ProducerRecord(WRITTEN_AT, b"gone", b"below the log start")])  # 0
        log.append([ProducerRecord(WRITTEN_AT, b"K", b"v1")])  # 1
        log.roll()
        log.append([ProducerRecord(WRITTEN_AT, b"K", None)])  # 2
        log.append([ProducerRecord(WRITTEN_AT, b"other", b"x")])  # 3
        log.roll()
        log.append([ProducerRecord(WRITTEN_AT, b"tail", b"active")])

        log = writer.partition(ABORTED.topic, 0)
        log.append([ProducerRecord(WRITTEN_AT, b"gone", b"below the log start")])  # 0
        log.append([ProducerRecord(WRITTEN_AT, b"K", b"aborted")], base_sequence=0, transactional=True, **txn)
        log.roll()
        log.append_control(ControlType.ABORT, **txn)  # 2
        log.append([ProducerRecord(WRITTEN_AT, b"other", b"x")])  # 3
        log.roll()
        log.append([ProducerRecord(WRITTEN_AT, b"tail", b"active")])

        log = writer.partition(LEGACY_WINS.topic, 0)
        log.append_legacy([ProducerRecord(WRITTEN_AT + 500, b"K", b"newest")], magic=1)  # 0
        log.roll()
        log.append([ProducerRecord(WRITTEN_AT, b"K", b"older")])  # 1
        log.append([ProducerRecord(WRITTEN_AT, b"other", b"x")])  # 2
        log.roll()
        log.append([ProducerRecord(WRITTEN_AT, b"tail", b"active")])


def held_settings(settings: Settings) -> Settings:
    """Every case's topic compacted, tombstones kept 1 s past their stamp."""
    base = compacting(settings, delete_retention_ms=1000).topic("users")
    overrides = {tp.topic: base for tp in CASES}
    overrides[LEGACY_WINS.topic] = dataclasses.replace(base, compaction_strategy="timestamp")
    return settings.replace(topic_overrides=overrides)


def held_tier(request: pytest.FixtureRequest, directory: Path) -> Tier:
    tier = make_tier("sqlite-fs", request, directory, write_held_logs)
    with tier.open_store() as store:
        for tp in (LOG_START, ABORTED):
            store.advance_log_start_offset(tp, LOG_START_OFFSET)
    return tier


def compact_twice(tier: Tier, spark: SparkSession | None = None) -> list[CompactReport]:
    """Compact the cases at :data:`NOW`, then past the horizon (on Spark when given ``spark``, by
    the reference otherwise)."""
    settings = held_settings(tier.settings)
    spec = StorageSpec.from_settings(settings)
    reports = []
    for now in (NOW, LATER):
        engine: Engine = InProcessEngine(spec) if spark is None else SparkEngine(spark, spec, progress=False)
        storage = tier.open_storage()
        try:
            with tier.open_store() as store:
                reports.append(compact(store, storage, spec, engine, settings, CompactOptions(), now_ms=now))
        finally:
            storage.close()
    return reports


def _plan(tier: Tier, tp: TopicPartition) -> PartitionPlan:
    with tier.open_store() as store:
        record = store.get_partition(tp)
        assert record is not None
        return plan_partition(store, record)


def readable(tier: Tier, tp: TopicPartition) -> list[Survivor]:
    """What a reader of the partition gets: the records from the remote log start offset on."""
    start = LOG_START_OFFSET if tp in (LOG_START, ABORTED) else 0
    return [s for s in survivors(tier, tp) if s.offset >= start]


def aborted_entries(tier: Tier, tp: TopicPartition) -> list[AbortedTxn]:
    """The entries of the partition's transaction indexes."""
    plan = _plan(tier, tp)
    storage = tier.open_storage()
    try:
        return [t for s in plan.segments for t in read_aborted(storage, s)]
    finally:
        storage.close()


@pytest.fixture
def compacted(request: pytest.FixtureRequest, tmp_path: Path) -> Tier:
    """The cases compacted twice by the reference."""
    tier = held_tier(request, tmp_path)
    for report in compact_twice(tier):
        assert not report.failed, report.to_json()
    return tier


# -- end to end (the reference) -------------------------------------------------------------------


def test_a_tombstone_stays_while_a_legacy_record_of_its_key_does(compacted: Tier) -> None:
    got = [(s.offset, s.key, s.value) for s in readable(compacted, LEGACY)]
    # without the tombstone K would read v1 again
    assert got == [(0, b"K", b"v1"), (1, b"K", None), (2, b"other", b"x")]


def test_a_tombstone_stays_while_a_record_of_its_key_in_a_segment_read_in_part_does(
    compacted: Tier,
) -> None:
    got = [(s.offset, s.key, s.value) for s in readable(compacted, LOG_START)]
    assert got == [(1, b"K", b"v1"), (2, b"K", None), (3, b"other", b"x")]


def test_an_aborted_record_in_a_segment_read_in_part_keeps_its_marker(compacted: Tier) -> None:
    got = [(s.offset, s.key, s.control) for s in readable(compacted, ABORTED)]
    assert got == [(1, b"K", False), (2, b"\x00\x00\x00\x00", True), (3, b"other", False)]
    # read_committed readers still leave the aborted record out
    assert AbortedTxn(PID, 1, 2, 3) in aborted_entries(compacted, ABORTED)


def test_a_legacy_record_competes_for_its_key(compacted: Tier) -> None:
    got = [(s.offset, s.key, s.value) for s in readable(compacted, LEGACY_WINS)]
    assert got == [(0, b"K", b"newest"), (2, b"other", b"x")]  # the older v2 record of K goes


# -- the rules ------------------------------------------------------------------------------------


def held_change(facts: list[Fact], decisions: Decisions) -> tuple[int, int]:
    change = segment_change([f for f in facts if f.held], decisions)
    return change.removed, change.stamped


def test_held_records_are_neither_kept_nor_removed_and_hold_their_key() -> None:
    facts = [
        fact(1, b"K", held=True),
        fact(2, b"K", tombstone=True, horizon_passed=True),
        fact(3, b"other"),
    ]
    decided = decide(facts, last=3)
    assert decided.kept == {2, 3}
    assert held_change(facts, decided) == (0, 0)  # the held segment does not change
    legacy = [fact(0, b"K", kind=Kind.LEGACY), *facts[1:]]
    assert decide(legacy, last=3).kept == {2, 3}
    gone = [fact(1, b"K"), *facts[1:]]
    assert decide(gone, last=3).kept == {3}  # a record that is rewritten goes, and the tombstone


def test_a_held_winner_is_not_listed_and_its_losers_go() -> None:
    facts = [fact(0, b"K", kind=Kind.LEGACY, order=(500, 0, 0)), fact(1, b"K", order=(100, 0, 1)), fact(2)]
    assert decide(facts, last=2).kept == {2}


def test_a_held_transactional_record_keeps_its_marker() -> None:
    txn: dict[str, Any] = {"producer_id": PID, "transactional": True}
    facts = [
        fact(1, b"K", aborted=True, held=True, **txn),
        fact(2, None, kind=Kind.CONTROL, horizon_passed=True, **txn),
        fact(3, b"other"),
        # the producer's next transaction: its last data batch is not the aborted one
        fact(4, b"next", **txn),
        fact(5, None, kind=Kind.CONTROL, **txn),
    ]
    decided = decide(facts, last=5)
    assert decided.kept == {2, 3, 4, 5} and not decided.empty_markers
    facts[0] = fact(1, b"K", aborted=True, **txn)
    assert decide(facts, last=5).kept == {3, 4, 5}


# -- the transaction index of an output whose start state is unknown ------------------------------


def test_an_output_without_a_snapshot_at_its_start_keeps_an_abort_entry_reaching_below_it(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    # The later of two overlapping copies starts where no copy ends: no producer snapshot there.
    tier = held_tier(request, tmp_path)
    spec = StorageSpec.from_settings(tier.settings)
    (plan,) = attach_aborted([_plan(tier, ABORTED)], spec, run_in_process)
    later = dataclasses.replace(plan.segments[1], previous_snapshot=None)
    assert AbortedTxn(PID, 1, 2, 3) in later.aborted  # what the copied index said
    output = OutputPlan((later,), uuid.uuid4(), RewriteParams(NOW, 1000))
    keep = Keep(3, frozenset({2, 3}), frozenset(), frozenset())
    storage = tier.open_storage()
    try:
        row = write_output(storage, output, keep, now_ms=NOW).row
        size = storage.object_size(row.layout.index_key) or 0
        blob = IndexBlob(storage.read_range(row.layout.index_key, 0, size), row.layout.index_ranges)
    finally:
        storage.close()
    index = TransactionIndex.from_bytes(row.start_offset, blob.extract(IndexType.TRANSACTION) or b"")
    assert [e.first_offset for e in index.entries()] == [1]  # not the marker's own offset


# -- Spark ----------------------------------------------------------------------------------------


@pytest.mark.usefixtures("aws_env")
def test_spark_keeps_what_the_reference_keeps_of_held_records(
    spark: SparkSession, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    reference = held_tier(request, tmp_path / "reference")
    on_spark = held_tier(request, tmp_path / "spark")
    expected = compact_twice(reference)
    got = compact_twice(on_spark, spark)
    assert_same_reports(got, expected)
    for tp in CASES:
        assert survivors(on_spark, tp) == survivors(reference, tp), tp
        assert aborted_entries(on_spark, tp) == aborted_entries(reference, tp), tp
    assert (1, b"K", None) in [(s.offset, s.key, s.value) for s in survivors(on_spark, LEGACY)]
    assert (2, b"K", None) in [(s.offset, s.key, s.value) for s in survivors(on_spark, LOG_START)]
    assert AbortedTxn(PID, 1, 2, 3) in aborted_entries(on_spark, ABORTED)
