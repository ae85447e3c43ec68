"""``verify --deep`` after compaction: what compaction writes verifies, damage still does not.

A compaction's output keeps its first input's start offset and its last input's end offset whatever
survives (as Kafka's cleaner does), and its last input's producer snapshot: its batches may start
above the row's start and end below its end, and the snapshot may name a transaction whose batches
or marker went. Each case here is compacted by the real job (the reference engine in process; one
on Spark) and verified by the real job; a copy of the copier's with a batch missing, and an output
whose batches or snapshot say what the row's range does not allow, are still reported.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
from pyspark.sql import SparkSession

from rlm.log.byte_source import BytesSource, iter_headers
from rlm.log.dirwriter import LogDirWriter
from rlm.log.model import ControlType
from rlm.log.snapshot import decode_snapshot, encode_snapshot
from rlm.log.writer import PartitionAppender, ProducerRecord, TopicConfig
from rlm.metastore.model import IndexType, LeaderEpochEntry, TopicPartition
from rlm.pipeline.compact.engine import InProcessEngine
from rlm.pipeline.compact.job import CompactOptions, CompactReport, compact
from rlm.pipeline.spark.compact import SparkEngine
from rlm.pipeline.spark.stage import collect_stage
from rlm.pipeline.stage import Collect, run_in_process
from rlm.pipeline.storage import StorageSpec
from rlm.pipeline.verify.job import VerifyOptions, VerifyReport, verify
from rlm.pipeline.verify.problems import Problem, ProblemKind
from rlm.pipeline.verify.segment import check_segment
from rlm.remote_tier.read_plan import SegmentSummary, plan_partition, select_partitions
from rlm.storage.description import COMPACTION_KEY, PENDING, read_compaction
from rlm.storage.filesystem import META_SUFFIX
from rlm.storage.protocol import RemoteStorage
from tests.pipeline.compact.support import TOPIC, WRITTEN_AT, compacting, write_keyed_log
from tests.pipeline.compact.test_producer_state import (
    RUNS,
    compact_runs,
    superseded_runs,
    write_producer_logs,
    write_superseded_log,
)
from tests.pipeline.conftest import make_tier
from tests.pipeline.tiers import Tier

NOW = WRITTEN_AT + 3_600_000
TP = TopicPartition(TOPIC, 0)
PID = 5
TXN: dict[str, Any] = {"producer_id": PID, "producer_epoch": 0}
#: The smallest ``segment.bytes``: every input of a compaction is an output of its own.
SMALLEST_SEGMENT = 14


def _compact(
    tier: Tier, now_ms: int = NOW, *, spark: SparkSession | None = None, **topic: object
) -> CompactReport:
    settings = compacting(tier.settings, **topic)
    spec = StorageSpec.from_settings(settings)
    engine = InProcessEngine(spec) if spark is None else SparkEngine(spark, spec, progress=False)
    storage = tier.open_storage()
    try:
        with tier.open_store() as store:
            report = compact(store, storage, spec, engine, settings, CompactOptions(), now_ms=now_ms)
    finally:
        storage.close()
    assert not report.failed, report.to_json()
    return report


def _verify(tier: Tier, now_ms: int, collect: Collect = run_in_process) -> VerifyReport:
    storage = tier.open_storage()
    try:
        with tier.open_store() as store:
            spec = StorageSpec.from_settings(tier.settings)
            return verify(store, storage, spec, collect, VerifyOptions(deep=True), now_ms=now_ms)
    finally:
        storage.close()


def _assert_healthy(tier: Tier, now_ms: int = NOW, collect: Collect = run_in_process) -> VerifyReport:
    report = _verify(tier, now_ms, collect)
    assert report.problems == [], [str(p) for p in report.problems]
    assert report.healthy
    return report


def _summaries(tier: Tier, tp: TopicPartition = TP) -> list[SegmentSummary]:
    with tier.open_store() as store:
        (record,) = [r for r in select_partitions(store) if r.topic_partition == tp]
        return list(plan_partition(store, record).segments)


def _batch_range(storage: RemoteStorage, summary: SegmentSummary) -> tuple[int, int]:
    """The first offset of the segment's first batch and the last of its last."""
    headers = list(
        iter_headers(BytesSource(storage.read_range(summary.log_key, 0, summary.segment.size_bytes)))
    )
    return headers[0].base_offset, headers[-1].last_offset


def _compacted(tier: Tier, tp: TopicPartition = TP) -> list[tuple[SegmentSummary, tuple[int, int]]]:
    """The partition's compaction outputs, each with its batches' offset range."""
    storage = tier.open_storage()
    try:
        return [
            (s, _batch_range(storage, s))
            for s in _summaries(tier, tp)
            if read_compaction(storage.object_metadata(s.index_key) or {}) is not None
        ]
    finally:
        storage.close()


def _narrower(outputs: list[tuple[SegmentSummary, tuple[int, int]]]) -> list[SegmentSummary]:
    """The outputs whose batches do not reach the row's start or end offset."""
    return [
        s for s, (first, last) in outputs if first > s.segment.start_offset or last < s.segment.end_offset
    ]


def _check(tier: Tier, summary: SegmentSummary) -> list[Problem]:
    storage = tier.open_storage()
    try:
        return check_segment(storage, summary, deep=True).problems
    finally:
        storage.close()


def _messages(problems: list[Problem], kind: ProblemKind) -> list[str]:
    return [p.message for p in problems if p.kind is kind]


def _partition(write: Callable[[PartitionAppender], None]) -> Callable[[Path], None]:
    """A log directory of ``users-0`` as ``write`` appends it (rolled where it rolls), then an active
    segment."""

    def write_logs(logs: Path) -> None:
        config = TopicConfig(index_interval_bytes=100)
        with LogDirWriter(logs, clock=lambda: WRITTEN_AT, default_config=config) as writer:
            log = writer.partition(TOPIC, 0)
            write(log)
            log.append([ProducerRecord(WRITTEN_AT, b"tail", b"active")])
            log.roll()
            log.append([ProducerRecord(WRITTEN_AT, b"tail", b"never tiered")])

    return write_logs


def _record(key: bytes, value: bytes) -> list[ProducerRecord]:
    return [ProducerRecord(WRITTEN_AT, key, value)]


def _marker_in_next_segment(log: PartitionAppender) -> None:
    """Producer 5's transaction begins at the end of [0, 1] (K=k at 1, written again at 3), its
    COMMIT is the first batch of the next segment."""
    log.append(_record(b"a", b"1"))  # 0
    log.append(_record(b"k", b"txn"), base_sequence=0, transactional=True, **TXN)  # 1
    log.roll()
    log.append_control(ControlType.COMMIT, **TXN)  # 2
    log.append(_record(b"k", b"2"))  # 3
    log.append(_record(b"z", b"z"), base_sequence=1, transactional=True, **TXN)  # 4
    log.append_control(ControlType.COMMIT, **TXN)  # 5
    log.roll()


def _first_batch_of_open_transaction_goes(log: PartitionAppender) -> None:
    """Producer 5's transaction (K=k at 1, K=m at 2) is open at the end of [0, 2]; K=k is
    written again at 4."""
    log.append(_record(b"a", b"1"))  # 0
    log.append(_record(b"k", b"txn"), base_sequence=0, transactional=True, **TXN)  # 1
    log.append(_record(b"m", b"txn"), base_sequence=1, transactional=True, **TXN)  # 2
    log.roll()
    log.append_control(ControlType.COMMIT, **TXN)  # 3
    log.append(_record(b"k", b"2"))  # 4
    log.append(_record(b"z", b"z"), base_sequence=2, transactional=True, **TXN)  # 5
    log.append_control(ControlType.COMMIT, **TXN)  # 6
    log.roll()


def _marker_goes_after_its_horizon(log: PartitionAppender) -> None:
    """Producer 5's transaction (K=k at 1) is open at the end of [0, 1], K=k is written again at
    2 and its COMMIT (3) follows in [2, 4]: once the transaction is empty and the marker's horizon
    passed the marker goes, and [2, 4] closes no transaction its start state opens."""
    log.append(_record(b"a", b"1"))  # 0
    log.append(_record(b"k", b"txn"), base_sequence=0, transactional=True, **TXN)  # 1
    log.roll()
    log.append(_record(b"k", b"2"))  # 2
    log.append_control(ControlType.COMMIT, **TXN)  # 3
    log.append(_record(b"q", b"q"))  # 4
    log.roll()
    log.append(_record(b"z", b"z"), base_sequence=1, transactional=True, **TXN)  # 5
    log.append_control(ControlType.COMMIT, **TXN)  # 6
    log.roll()


@pytest.mark.parametrize("strategy", ["offset", "timestamp", "header"])
def test_compacted_random_logs_verify_healthy(
    strategy: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    tier = make_tier("sqlite-fs", request, tmp_path, functools.partial(write_keyed_log, seed=5))
    _assert_healthy(tier)
    report = _compact(tier, compaction_strategy=strategy)
    assert {p.status for p in report.partitions} == {"compacted"}
    # outputs whose batches no longer reach the row's range are among those verified
    assert _narrower(_compacted(tier)), strategy
    _assert_healthy(tier)
    _compact(tier, NOW + 86_400_000 + 1, compaction_strategy=strategy)  # past the tombstones' horizon
    _assert_healthy(tier, NOW + 86_400_000 + 1)


@pytest.mark.parametrize(
    ("write", "runs", "outputs"),
    [
        (_marker_in_next_segment, 1, [((0, 1), (0, 0)), ((2, 5), (2, 5))]),
        (_first_batch_of_open_transaction_goes, 1, [((0, 2), (0, 2))]),
        (_marker_goes_after_its_horizon, 3, [((0, 1), (0, 0)), ((2, 4), (2, 4))]),
    ],
    ids=["marker-in-next-segment", "first-batch-of-open-transaction-goes", "marker-goes-after-horizon"],
)
def test_transactions_spanning_segments_verify_healthy(
    write: Callable[[PartitionAppender], None],
    runs: int,
    outputs: list[tuple[tuple[int, int], tuple[int, int]]],
    request: pytest.FixtureRequest,
    tmp_path: Path,
) -> None:
    tier = make_tier("sqlite-fs", request, tmp_path, _partition(write))
    _assert_healthy(tier)
    for n in range(runs):
        _compact(tier, NOW + n * 10_000, delete_retention_ms=1000, segment_bytes=SMALLEST_SEGMENT)
    # (the row's offsets, the batches') of each output
    got = [((s.segment.start_offset, s.segment.end_offset), batches) for s, batches in _compacted(tier)]
    assert got == outputs
    _assert_healthy(tier, NOW + runs * 10_000)


def test_outputs_left_by_producers_verify_healthy(request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """Producers' last data batches kept empty, markers kept past their horizon, and an output
    that lost every batch (a header-only batch at its last offset stands for its range)."""
    tier = make_tier("sqlite-fs", request, tmp_path / "producers", write_producer_logs)
    for report in compact_runs(tier):
        assert not report.failed, report.to_json()
    emptied = _compacted(tier, TopicPartition("emptied", 0))
    assert [(s.segment.start_offset, s.segment.end_offset, r) for s, r in emptied] == [(0, 1, (1, 1))]
    _assert_healthy(tier, RUNS[-1])
    tier = make_tier("sqlite-fs", request, tmp_path / "superseded", write_superseded_log)
    superseded_runs(tier)
    _assert_healthy(tier, RUNS[-1] + 1)


def test_a_copied_segment_missing_its_first_or_last_batch_is_reported(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    tier = make_tier("sqlite-fs", request, tmp_path, functools.partial(write_keyed_log, seed=5))
    first, second = _summaries(tier)[1:3]
    storage = tier.open_storage()
    try:
        data = storage.read_range(first.log_key, 0, first.segment.size_bytes)
        second_batch = list(iter_headers(BytesSource(data)))[1]
        storage.put_object(first.log_key, data[second_batch.position :])
        data = storage.read_range(second.log_key, 0, second.segment.size_bytes)
        before_last = list(iter_headers(BytesSource(data)))[-2]
        storage.put_object(second.log_key, data[: before_last.position + before_last.size])
    finally:
        storage.close()
    assert _messages(_check(tier, first), ProblemKind.OFFSET_RANGE) == [
        f"the first batch starts at offset {second_batch.base_offset}, "
        f"the row's start offset is {first.segment.start_offset}"
    ]
    assert _messages(_check(tier, second), ProblemKind.OFFSET_RANGE) == [
        f"the last batch ends at offset {before_last.last_offset}, "
        f"the row's end offset is {second.segment.end_offset}"
    ]


def test_an_output_whose_batches_lie_outside_its_row_is_reported(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    tier = make_tier("sqlite-fs", request, tmp_path, functools.partial(write_keyed_log, seed=5))
    _compact(tier)
    summary, (first, last) = _compacted(tier)[0]
    row = summary.segment
    assert _check(tier, summary) == []
    short = dataclasses.replace(summary, segment=dataclasses.replace(row, end_offset=last - 1))
    assert _messages(_check(tier, short), ProblemKind.OFFSET_RANGE) == [
        f"the last batch ends at offset {last}, after the row's end offset {last - 1}"
    ]
    epochs = (LeaderEpochEntry(row.leader_epochs[0].epoch, first + 1), *row.leader_epochs[1:])
    late = dataclasses.replace(
        summary, segment=dataclasses.replace(row, start_offset=first + 1, leader_epochs=epochs)
    )
    assert f"the first batch starts at offset {first}, before the row's start offset {first + 1}" in (
        _messages(_check(tier, late), ProblemKind.OFFSET_RANGE)
    )


def test_the_index_objects_compaction_mark_says_how_offsets_are_checked(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    tier = make_tier("sqlite-fs", request, tmp_path, functools.partial(write_keyed_log, seed=5))
    _compact(tier)
    summary = _narrower(_compacted(tier))[0]
    key = summary.index_key
    storage = tier.open_storage()
    try:
        swapped = storage.object_metadata(key) or {}
        data = storage.read_range(key, 0, storage.object_size(key) or 0)
        # a swap whose mark failed leaves the output pending: still a compaction's output
        storage.put_object(key, data, metadata={**swapped, COMPACTION_KEY: PENDING})
        assert _check(tier, summary) == []
        # without the mark the segment is checked as the copier's
        storage.put_object(key, data, metadata={k: v for k, v in swapped.items() if k != COMPACTION_KEY})
        assert any("the row's" in m for m in _messages(_check(tier, summary), ProblemKind.OFFSET_RANGE))
        # metadata that cannot be read is said, and the segment checked as the copier's
        sidecar = Path(urlparse(tier.backend.remote_url).path) / (key + META_SUFFIX)
        assert sidecar.exists()
        sidecar.write_text("{not json")
        problems = _check(tier, summary)
        assert "cannot read the index object's metadata" in _messages(problems, ProblemKind.UNREADABLE)[0]
        assert _messages(problems, ProblemKind.OFFSET_RANGE)
    finally:
        storage.close()


def _rewrite_snapshot(tier: Tier, summary: SegmentSummary, first_offset: int) -> None:
    """Give producer 5's entry in the segment's producer snapshot the transaction first offset
    ``first_offset`` (-1: none open), keeping the index object's metadata."""
    storage = tier.open_storage()
    try:
        key = summary.index_key
        found = summary.segment.layout.index_range(IndexType.PRODUCER_SNAPSHOT)
        assert found is not None
        size = storage.object_size(key)
        assert size is not None
        data = bytearray(storage.read_range(key, 0, size))
        entries = decode_snapshot(bytes(data[found.position : found.end]))
        new = encode_snapshot(
            [
                e._replace(current_txn_first_offset=first_offset) if e.producer_id == PID else e
                for e in entries
            ]
        )
        assert len(new) == found.size
        data[found.position : found.end] = new
        storage.put_object(key, bytes(data), metadata=storage.object_metadata(key))
    finally:
        storage.close()


@pytest.mark.parametrize(
    ("snapshot_first", "why"),
    [(-1, "closes the transaction the log leaves open"), (3, "opens it after the log does")],
)
def test_an_outputs_snapshot_must_keep_what_its_log_leaves_open(
    snapshot_first: int, why: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    tier = make_tier("sqlite-fs", request, tmp_path, _partition(_first_batch_of_open_transaction_goes))
    _compact(tier, segment_bytes=SMALLEST_SEGMENT)
    ((summary, _),) = _compacted(tier)
    assert (summary.segment.start_offset, summary.segment.end_offset) == (0, 2)
    _rewrite_snapshot(tier, summary, snapshot_first)
    (message,) = _messages(_check(tier, summary), ProblemKind.INDEX_MISMATCH)
    assert message.endswith("the log leaves open {5: 2}"), why


def test_an_outputs_snapshot_naming_a_transaction_after_its_range_is_reported(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    tier = make_tier("sqlite-fs", request, tmp_path, _partition(_marker_in_next_segment))
    _compact(tier, segment_bytes=SMALLEST_SEGMENT)
    summary = next(s for s, _ in _compacted(tier) if s.segment.start_offset == 0)
    assert _check(tier, summary) == []
    _rewrite_snapshot(tier, summary, summary.segment.end_offset + 1)
    (message,) = _messages(_check(tier, summary), ProblemKind.INDEX_MISMATCH)
    assert message.startswith("producer snapshot: open transactions (producer id: first offset) {5: 2}")


@pytest.mark.usefixtures("aws_env")
def test_spark_compaction_verifies_healthy_on_spark(
    spark: SparkSession, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    tier = make_tier("sqlite-fs", request, tmp_path, functools.partial(write_keyed_log, seed=5))
    _compact(tier, spark=spark)
    assert _narrower(_compacted(tier))
    report = _assert_healthy(tier, collect=functools.partial(collect_stage, spark, progress=False))
    assert report.segments == sum(len(_summaries(tier, TopicPartition(TOPIC, p))) for p in (0, 1))
