"""``rlm spark verify`` end to end: the command line, Spark local[2], each backend pair.

A healthy tier reports nothing and exits 0. A tier with one fault of each kind injected (a flipped
byte, a truncated object, a deleted index object, a wrong max timestamp in a row, a gap, a stale
STARTED row, an orphan object) reports exactly those problems, each named by kind, partition and
segment (or object), and exits 1; without ``--deep`` only what HEADs and metadata show.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from rlm.cli import main
from rlm.metastore.model import TopicPartition
from rlm.pipeline.spark.progress import StageProgress
from rlm.pipeline.spark.stage import map_segments
from rlm.pipeline.storage import StorageSpec
from rlm.pipeline.verify.segment import verify_stage
from rlm.remote_tier.read_plan import plan_partition, select_partitions
from tests.pipeline.conftest import BACKENDS, make_tier
from tests.pipeline.tiers import (
    Tier,
    add_started_row,
    delete_finished,
    flip_byte,
    put_orphan,
    set_max_timestamp,
    truncate,
)
from tests.tiering_support import WRITER_NOW_MS, SegmentPlan, write_scripted_log_dir

pytestmark = pytest.mark.usefixtures("aws_env")

TOPIC = "faults"
#: Two partitions of five rolled segments (of 60 records) each.
PLANS = {
    TopicPartition(TOPIC, p): [
        SegmentPlan(records=60, max_timestamp_ms=WRITER_NOW_MS - 60_000 + i) for i in range(5)
    ]
    for p in (0, 1)
}
Finding = tuple[str, str, str]
"""(kind, partition, segment id or object key): what names a problem."""


@dataclass(frozen=True)
class FaultyTier:
    tier: Tier
    deep: set[Finding]
    """Every problem ``--deep`` must report, and nothing else."""
    shallow: set[Finding]
    """Every problem a run without ``--deep`` must report, and nothing else."""
    flipped_position: int


def _inject(tier: Tier) -> FaultyTier:
    first, second = TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)
    a, b = tier.finished(first), tier.finished(second)
    storage = tier.open_storage()
    try:
        flipped = flip_byte(storage, a[1])
        truncate(storage, a[2].layout.log_key, 100)
        storage.delete_objects([a[3].layout.index_key])
        set_max_timestamp(tier, a[4].segment_id, a[4].max_timestamp_ms - 1)
        with tier.open_store() as store:
            delete_finished(store, storage, b[2], WRITER_NOW_MS)
            stale = add_started_row(store, b[-1], event_time_ms=1_000)
        orphan = put_orphan(storage, b[0])
    finally:
        storage.close()
    shallow = {
        ("size-mismatch", "faults-0", str(a[2].segment_id)),
        ("missing-object", "faults-0", str(a[3].segment_id)),
        ("gap", "faults-1", str(b[3].segment_id)),
        ("stale-row", "faults-1", str(stale.segment_id)),
        ("orphan-object", "faults-1", orphan),
    }
    deep = shallow | {
        ("corrupt-batch", "faults-0", str(a[1].segment_id)),
        ("corrupt-batch", "faults-0", str(a[2].segment_id)),
        ("max-timestamp", "faults-0", str(a[4].segment_id)),
    }
    return FaultyTier(tier, deep, shallow, flipped)


@pytest.fixture(scope="module", params=BACKENDS)
def faulty(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> FaultyTier:
    directory = tmp_path_factory.mktemp(f"faulty-{request.param}")
    tier = make_tier(request.param, request, directory, lambda logs: write_scripted_log_dir(logs, PLANS))
    return _inject(tier)


def _run(capsys: pytest.CaptureFixture[str], config: Path, *args: str) -> tuple[int, str]:
    code = main(["spark", "verify", "--config", str(config), "--quiet", *args])
    captured = capsys.readouterr()
    if code != 0 and not captured.out:
        return code, captured.err
    return code, captured.out


def _verify_json(capsys: pytest.CaptureFixture[str], config: Path, *args: str) -> tuple[int, dict[str, Any]]:
    code, out = _run(capsys, config, "--json", *args)
    return code, json.loads(out)


def _findings(report: dict[str, Any]) -> set[Finding]:
    found = set()
    for p in report["problems"]:
        name = "-" if p["topic"] is None else f"{p['topic']}-{p['partition']}"
        found.add((p["kind"], name, p["object_key"] if p["kind"] == "orphan-object" else p["segment_id"]))
    return found


def test_a_healthy_tier_reports_nothing(
    spark: SparkSession, healthy_tier: Tier, capsys: pytest.CaptureFixture[str]
) -> None:
    code, report = _verify_json(capsys, healthy_tier.config, "--deep")
    assert report["problems"] == []
    assert code == 0 and report["healthy"]
    with healthy_tier.open_store() as store:
        segments = [s.segment for r in select_partitions(store) for s in plan_partition(store, r).segments]
    assert report["segments"] == len(segments) >= 10
    assert any(not s.txn_index_empty for s in segments)  # aborted transactions are checked too
    # Every byte of every .log object was read, and the index files besides.
    assert report["bytes_read"] > sum(s.size_bytes for s in segments)
    code, out = _run(capsys, healthy_tier.config)
    assert code == 0 and "no problems found" in out and "0 bytes read" in out


def test_each_injected_fault_is_found_and_named(
    spark: SparkSession, faulty: FaultyTier, capsys: pytest.CaptureFixture[str]
) -> None:
    code, report = _verify_json(capsys, faulty.tier.config, "--deep")
    assert _findings(report) == faulty.deep
    assert code == 1 and not report["healthy"]
    by_kind = {p["kind"]: p for p in report["problems"]}
    crc = [p for p in report["problems"] if p["kind"] == "corrupt-batch" and "CRC" in p["message"]]
    assert [p["position"] for p in crc] == [faulty.flipped_position]
    assert "max timestamp" in by_kind["max-timestamp"]["message"]
    assert by_kind["missing-object"]["object_key"].endswith(".indexes")
    assert "holds" in by_kind["size-mismatch"]["message"]


def test_without_deep_only_heads_and_metadata(
    spark: SparkSession, faulty: FaultyTier, capsys: pytest.CaptureFixture[str]
) -> None:
    code, report = _verify_json(capsys, faulty.tier.config)
    assert _findings(report) == faulty.shallow
    assert (code, report["bytes_read"]) == (1, 0)


def test_the_table_counts_problems_by_kind_and_partition_of_those_asked_for(
    spark: SparkSession, faulty: FaultyTier, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = _run(capsys, faulty.tier.config, "--deep", "--topic", TOPIC, "--partition", "1")
    assert code == 1
    rows = [line.split() for line in out.splitlines()]
    expected = sorted(f for f in faulty.deep if f[1] == "faults-1")
    table = rows[rows.index(["KIND", "PARTITION", "PROBLEMS"]) + 1 :][: len(expected)]
    assert table == [[kind, "faults-1", "1"] for kind, _, _ in expected]
    for kind, partition, name in expected:
        assert any(line.startswith(f"{kind}: {partition} ") and name in line for line in out.splitlines())
    assert "faults-0" not in out
    assert f"{len(expected)} problems found" in out
    code, err = _run(capsys, faulty.tier.config, "--topic", "nosuchtopic")
    assert code == 1
    assert "knows no partition of topic 'nosuchtopic'" in err


@pytest.mark.parametrize("healthy_tier", ["sqlite-fs"], indirect=True)
def test_progress_line_counts_the_stage_tasks(spark: SparkSession, healthy_tier: Tier) -> None:
    with healthy_tier.open_store() as store:
        summaries = [s for r in select_partitions(store) for s in plan_partition(store, r).segments]
    stream = io.StringIO()
    frame = map_segments(
        spark, verify_stage(StorageSpec.from_settings(healthy_tier.settings), deep=False), summaries
    )
    with StageProgress(spark, "verify", len(summaries), stream=stream, enabled=True, interval_s=0.05):
        rows = frame.toArrow().to_pylist()
    assert len(rows) == len(summaries)
    last = stream.getvalue().rstrip("\n").rsplit("\r", 1)[-1]
    assert last.startswith(f"verify: {len(summaries)}/{len(summaries)} segments, 0 running")
