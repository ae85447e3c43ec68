"""A ``read_committed`` export of a tier whose tail holds a transaction with its marker still on
the broker's disk (the copier tiers below the high watermark, not below the last stable offset).

The export stops at the transaction's first offset, and so does the ledger; once the marker is
tiered the next incremental run exports the held-back records if the transaction committed, and
never if it aborted. In process (the executors' pyarrow writer, no Spark) for each way the open
transactions are found, and once through ``rlm spark export``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import pyarrow.compute as pc
import pytest
from pyspark.sql import SparkSession

from rlm.cli import main
from rlm.log.dirwriter import LogDirWriter
from rlm.log.files import segment_file_name
from rlm.log.model import ControlType
from rlm.log.writer import ProducerRecord, TopicConfig
from rlm.metastore.model import IndexType, TopicPartition
from rlm.pipeline.export.bounds import NO_END, Range, next_offsets, partition_range
from rlm.pipeline.export.files import LocalFiles
from rlm.pipeline.export.job import ExportOptions, ExportReport, export_parquet, output_uri
from rlm.pipeline.export.parquet import files_stage
from rlm.pipeline.export.rows import Isolation
from rlm.pipeline.stage import Stage, run_in_process
from rlm.pipeline.storage import StorageSpec
from rlm.remote_tier.read_plan import (
    PartitionPlan,
    SegmentSummary,
    plan_partition,
    select_partitions,
    summarize,
)
from rlm.remote_tier.stable import tiered_stable_offset
from rlm.storage.protocol import RemoteStorage
from tests.metadata_support import segment
from tests.pipeline.conftest import make_tier
from tests.pipeline.export_support import read_pyarrow
from tests.pipeline.tiers import Tier, copy_eligible
from tests.tiering_support import set_high_watermarks

TOPIC = "orders"
ABORTED = TopicPartition(TOPIC, 0)
COMMITTED = TopicPartition(TOPIC, 1)
MARKERS = {ABORTED: ControlType.ABORT, COMMITTED: ControlType.COMMIT}
PRODUCER = 7
#: The high watermark the log is first tiered at: segments [0, 1] and [2, 3] lie below it, the
#: marker's segment [4, 5] does not.
MARKER_LOCAL = 4
#: The high watermark at which the marker's segment is tiered too.
MARKER_TIERED = 7
T0 = 1_700_000_000_000
#: What each partition's first read_committed run exports: the record before the transaction.
BEFORE = [0]
#: What the run after the marker is tiered adds: the transaction's records (when committed), the
#: plain record written while it was open, the plain record after the marker.
AFTER = {ABORTED: [3, 5], COMMITTED: [1, 2, 3, 5]}

#: Which producer snapshots the broker left for the copier to tier: the open transactions are
#: read from the last segment's snapshot, or scanned from the segment before's, or from offset 0.
SNAPSHOTS = ("every", "not the last", "none")


def write_logs(logs: Path, snapshots: str = "every") -> None:
    """Per partition: 0 plain, 1 the producer's first transactional record | roll | 2 its second,
    3 plain | roll | 4 the marker (ABORT in partition 0, COMMIT in 1), 5 plain | roll | 6 plain.
    The high watermark is :data:`MARKER_LOCAL`."""
    now = [T0]

    def clock() -> int:
        now[0] += 1
        return now[0]

    def record(value: bytes) -> list[ProducerRecord]:
        return [ProducerRecord(T0, b"k", value)]

    with LogDirWriter(logs, clock=clock, default_config=TopicConfig()) as writer:
        for tp, marker in MARKERS.items():
            log = writer.partition(tp.topic, tp.partition)
            txn = {"producer_id": PRODUCER, "producer_epoch": 0, "transactional": True}
            log.append(record(b"before"))
            log.append(record(b"txn-1"), base_sequence=0, **txn)  # type: ignore[arg-type]
            log.roll()
            log.append(record(b"txn-2"), base_sequence=1, **txn)  # type: ignore[arg-type]
            log.append(record(b"during"))
            log.roll()
            log.append_control(marker, producer_id=PRODUCER, producer_epoch=0)
            log.append(record(b"after"))
            log.roll()
            log.append(record(b"active"))
    set_high_watermarks(logs, {tp: MARKER_LOCAL for tp in MARKERS})
    dropped = {"every": (), "not the last": (4,), "none": (2, 4, 6, 7)}[snapshots]
    for tp in MARKERS:
        for offset in dropped:
            (logs / str(tp) / segment_file_name(offset, ".snapshot")).unlink()


def tier_the_markers(tier: Tier) -> None:
    """The broker's high watermark passes the markers' segments, and the copier tiers them."""
    set_high_watermarks(tier.settings.log_dirs[0], {tp: MARKER_TIERED for tp in MARKERS})
    assert sum(o.copied_segments for o in copy_eligible(tier)) == len(MARKERS)


def plans(tier: Tier) -> dict[TopicPartition, PartitionPlan]:
    with tier.open_store() as store:
        return {r.topic_partition: plan_partition(store, r) for r in select_partitions(store)}


def offsets(output: Path) -> dict[TopicPartition, list[int]]:
    """The exported offsets per partition (each as often as it was exported)."""
    found: dict[TopicPartition, list[int]] = {tp: [] for tp in MARKERS}
    for row in read_pyarrow(output):
        found[TopicPartition(row["topic"], row["partition"])].append(row["offset"])
    return found


def write_in_process(stage: Stage, summaries: Sequence[SegmentSummary], directory: str) -> int:
    """The export's writer without Spark: the executors' pyarrow files, written in this process."""
    written = run_in_process(files_stage(stage, directory), summaries)
    return int(pc.sum(written.column("rows")).as_py() or 0)


def export_in_process(
    tier: Tier, output: Path, isolation: Isolation = Isolation.READ_COMMITTED
) -> ExportReport:
    spec = StorageSpec.from_settings(tier.settings)
    storage = tier.open_storage()
    options = ExportOptions(str(output), isolation=isolation, incremental=True)
    try:
        with tier.open_store() as store:
            return export_parquet(
                store, storage, spec, run_in_process, write_in_process, LocalFiles(), options
            )
    finally:
        storage.close()


def ledger(tier: Tier, output: Path) -> dict[TopicPartition, int]:
    with tier.open_store() as store:
        return store.export_offsets(output_uri(str(output)))


@pytest.fixture(params=SNAPSHOTS)
def tier(request: pytest.FixtureRequest, tmp_path: Path) -> Tier:
    """:func:`write_logs` tiered on SQLite and files, the markers still local."""
    return make_tier("sqlite-fs", request, tmp_path / "tier", lambda logs: write_logs(logs, request.param))


def test_the_tiered_stable_offset_is_the_open_transactions_first_offset(
    tier: Tier, request: pytest.FixtureRequest
) -> None:
    kept = {
        tp: [s.index_ref(IndexType.PRODUCER_SNAPSHOT) is not None for s in plan.segments]
        for tp, plan in plans(tier).items()
    }
    snapshots = {"every": [True, True], "not the last": [True, False], "none": [False, False]}
    assert kept == {tp: snapshots[request.node.callspec.params["tier"]] for tp in MARKERS}
    storage = tier.open_storage()
    try:
        assert {tp: tiered_stable_offset(storage, plan) for tp, plan in plans(tier).items()} == {
            ABORTED: 1,
            COMMITTED: 1,
        }
        tier_the_markers(tier)
        assert {tp: tiered_stable_offset(storage, plan) for tp, plan in plans(tier).items()} == {
            ABORTED: None,
            COMMITTED: None,
        }
    finally:
        storage.close()


def test_an_export_waits_for_the_marker_then_drops_an_abort_and_adds_a_commit_once(
    tier: Tier, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    first = export_in_process(tier, out)
    assert offsets(out) == {ABORTED: BEFORE, COMMITTED: BEFORE}
    assert ledger(tier, out) == {ABORTED: 1, COMMITTED: 1}
    assert {p.topic_partition: p.offsets for p in first.partitions} == {
        ABORTED: Range(0, 1),
        COMMITTED: Range(0, 1),
    }
    # read_uncommitted is not held back: every tiered data record.
    export_in_process(tier, tmp_path / "uncommitted", Isolation.READ_UNCOMMITTED)
    assert offsets(tmp_path / "uncommitted") == {ABORTED: [0, 1, 2, 3], COMMITTED: [0, 1, 2, 3]}

    tier_the_markers(tier)
    second = export_in_process(tier, out)
    assert offsets(out) == {tp: sorted(BEFORE + AFTER[tp]) for tp in MARKERS}
    assert second.rows == sum(len(rows) for rows in AFTER.values())
    assert ledger(tier, out) == {ABORTED: 6, COMMITTED: 6}
    third = export_in_process(tier, out)
    assert third.rows == 0 and ledger(tier, out) == {ABORTED: 6, COMMITTED: 6}


def test_the_range_and_the_ledger_stop_at_the_stable_offset_and_never_go_back() -> None:
    tp = TopicPartition(TOPIC, 0)
    plan = PartitionPlan(tp, None, summarize([segment(0, 9), segment(10, 19)]))
    storage = cast(RemoteStorage, None)  # without --from/--to nothing is read

    def bounds(resume_at: int | None, stable_end: int | None) -> tuple[Range, int]:
        offsets = partition_range(storage, plan, resume_at=resume_at, stable_end=stable_end)
        return offsets, next_offsets({tp: plan}, {tp: offsets})[tp]

    assert bounds(None, None) == (Range(0, NO_END), 20)
    assert bounds(None, 12) == (Range(0, 12), 12)  # held at the open transaction's first offset
    assert bounds(12, 12) == (Range(12, 12), 12)  # still open: nothing, and no step forward
    assert bounds(15, 12) == (Range(15, 12), 15)  # an earlier read_uncommitted run went further


@pytest.mark.parametrize("tier", ["every"], indirect=True)
def test_rlm_spark_export_waits_for_the_marker(
    spark: SparkSession, tier: Tier, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"

    def export() -> dict[str, Any]:
        args = ["spark", "export", "--config", str(tier.config), "--quiet", "--json", "--incremental"]
        code = main([*args, "--output", str(out)])
        captured = capsys.readouterr()
        assert code == 0, captured.err
        report: dict[str, Any] = json.loads(captured.out)
        return report

    first = export()
    assert offsets(out) == {ABORTED: BEFORE, COMMITTED: BEFORE}
    assert {p["partition"]: (p["stop_offset"], p["next_offset"]) for p in first["partitions"]} == {
        0: (1, 1),
        1: (1, 1),
    }
    tier_the_markers(tier)
    second = export()
    assert offsets(out) == {tp: sorted(BEFORE + AFTER[tp]) for tp in MARKERS}
    assert {p["partition"]: (p["stop_offset"], p["next_offset"]) for p in second["partitions"]} == {
        0: (None, 6),
        1: (None, 6),
    }
