"""Records as Arrow rows, against kafka-python's decoding of the same tiered objects.

The records stage (the first stage of export and compaction) must yield one row per record of
every finished segment, equal to what kafka-python (a decoder independent of rlm's) reads from the
``.log`` objects, with the aborted flag equal to what the transaction markers say. It runs here in
this process and on Spark, with the same rows.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from kafka.record import MemoryRecords
from pyspark.sql import SparkSession

from rlm.log.model import ControlType
from rlm.pipeline.columns import EXPORT_COLUMNS, RECORD_SCHEMA, records_stage
from rlm.pipeline.spark.stage import collect_stage, map_segments
from rlm.pipeline.stage import run_in_process
from rlm.pipeline.storage import StorageSpec
from rlm.pipeline.transactions import attach_aborted
from rlm.remote_tier.read_plan import PartitionPlan, SegmentSummary, plan_partition, select_partitions
from tests.pipeline.tiers import Tier

pytestmark = pytest.mark.usefixtures("aws_env")
_TIMESTAMP_TYPES = {0: "CreateTime", 1: "LogAppendTime"}


def _plans(tier: Tier) -> list[PartitionPlan]:
    with tier.open_store() as store:
        return [plan_partition(store, record) for record in select_partitions(store)]


def _oracle(tier: Tier, plans: list[PartitionPlan]) -> list[dict[str, Any]]:
    """Every record of the plans' segments as kafka-python decodes them, aborted flags from the
    markers that follow (a transaction's batches are aborted when its producer's next marker is)."""
    rows: list[dict[str, Any]] = []
    storage = tier.open_storage()
    try:
        for plan in plans:
            pending: dict[int, list[dict[str, Any]]] = {}
            for summary in plan.segments:
                data = storage.read_range(summary.log_key, 0, summary.segment.size_bytes)
                rows += _decode(summary, data, pending)
    finally:
        storage.close()
    return rows


def _decode(
    summary: SegmentSummary, data: bytes, pending: dict[int, list[dict[str, Any]]]
) -> list[dict[str, Any]]:
    tp = summary.topic_partition
    memory = MemoryRecords(data)
    rows = []
    while (batch := memory.next_batch()) is not None:
        v2 = batch.magic >= 2
        control = v2 and batch.is_control_batch
        transactional = v2 and batch.is_transactional
        batch_rows = []
        for record in batch:
            row = {
                "topic": tp.topic,
                "partition": tp.partition,
                "offset": record.offset,
                "timestamp": record.timestamp if batch.magic > 0 else None,
                "timestamp_type": _TIMESTAMP_TYPES[batch.timestamp_type]
                if batch.magic > 0
                else "NoTimestampType",
                "key": record.key,
                "value": record.value,
                "headers": [{"key": k, "value": v} for k, v in record.headers] if v2 else [],
                "leader_epoch": batch.leader_epoch if v2 and batch.leader_epoch >= 0 else None,
                "producer_id": batch.producer_id if v2 and batch.producer_id >= 0 else None,
                "is_control": control,
                "is_transactional": transactional,
                "aborted": False,
            }
            batch_rows.append(row)
            if control:
                marker = int.from_bytes(record.key[2:4], "big")
                for earlier in pending.pop(batch.producer_id, []):
                    earlier["aborted"] = marker == ControlType.ABORT
        if transactional and not control:
            pending.setdefault(batch.producer_id, []).extend(batch_rows)
        rows += batch_rows
    return rows


def _rows(table: pa.Table) -> list[dict[str, Any]]:
    """Rows in offset order, timestamps as epoch milliseconds (Spark's Arrow has microseconds)."""
    millis = table.column("timestamp").cast(pa.timestamp("ms", tz="UTC")).cast(pa.int64())
    table = table.set_column(table.schema.get_field_index("timestamp"), "timestamp", millis)
    return sorted(table.to_pylist(), key=lambda r: (r["topic"], r["partition"], r["offset"]))


def test_records_are_kafka_pythons_with_aborted_flags_from_the_markers(healthy_tier: Tier) -> None:
    spec = StorageSpec.from_settings(healthy_tier.settings)
    plans = attach_aborted(_plans(healthy_tier), spec, run_in_process)
    summaries = [s for plan in plans for s in plan.segments]
    assert any(s.aborted for s in summaries)
    table = run_in_process(records_stage(spec), summaries)
    assert table.schema == RECORD_SCHEMA
    assert list(EXPORT_COLUMNS) == RECORD_SCHEMA.names[:10]
    expected = sorted(_oracle(healthy_tier, plans), key=lambda r: (r["topic"], r["partition"], r["offset"]))
    got = _rows(table)
    assert len(got) == len(expected) > 1000
    assert got == expected
    assert sum(r["aborted"] for r in got) > 0 and sum(r["is_control"] for r in got) > 0


@pytest.mark.parametrize("healthy_tier", ["sqlite-fs"], indirect=True)  # S3 reads: the test above
def test_spark_yields_the_same_rows(spark: SparkSession, healthy_tier: Tier) -> None:
    spec = StorageSpec.from_settings(healthy_tier.settings)
    plans = attach_aborted(_plans(healthy_tier), spec, lambda stage, s: collect_stage(spark, stage, s))
    summaries = [s for plan in plans for s in plan.segments]
    on_spark = map_segments(spark, records_stage(spec), summaries).toArrow()
    here = run_in_process(records_stage(spec), summaries)
    assert on_spark.num_rows == here.num_rows
    assert _rows(on_spark) == _rows(here)


@pytest.mark.parametrize("healthy_tier", ["sqlite-fs"], indirect=True)
def test_collect_stage_brings_back_what_the_stage_yields_in_order(
    spark: SparkSession, healthy_tier: Tier
) -> None:
    """``collect_stage`` (an RDD job, one Arrow stream per segment) gives the stage's own schema
    and the rows of every segment in the order of the summaries, as a run in this process does;
    and none for no segment."""
    spec = StorageSpec.from_settings(healthy_tier.settings)
    plans = attach_aborted(_plans(healthy_tier), spec, run_in_process)
    summaries = [s for plan in plans for s in plan.segments][::-1]
    collected = collect_stage(spark, records_stage(spec), summaries)
    here = run_in_process(records_stage(spec), summaries)
    assert collected.schema == RECORD_SCHEMA
    assert collected.num_rows == here.num_rows > 1000
    assert collected.to_pylist() == here.to_pylist()
    empty = collect_stage(spark, records_stage(spec), [])
    assert empty.schema == RECORD_SCHEMA and empty.num_rows == 0
