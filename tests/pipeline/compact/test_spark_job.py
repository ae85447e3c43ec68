"""The compaction job on Spark (``local[2]``) against the reference compaction on random logs."""

from __future__ import annotations

import functools
import itertools
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from pyspark.sql import SparkSession

from rlm.metastore.model import TopicPartition
from rlm.pipeline.compact.engine import Engine, InProcessEngine
from rlm.pipeline.compact.job import CompactOptions, CompactReport, compact
from rlm.pipeline.spark.compact import SparkEngine
from rlm.pipeline.storage import StorageSpec
from tests.pipeline.compact.conftest import PARTITIONS
from tests.pipeline.compact.support import (
    TOPIC,
    WRITTEN_AT,
    Survivor,
    assert_lookups_exact,
    compacting,
    orphans,
    stored_keys,
    survivors,
    write_keyed_log,
)
from tests.pipeline.conftest import BACKENDS, make_tier
from tests.pipeline.tiers import Tier

pytestmark = pytest.mark.usefixtures("aws_env")
NOW = WRITTEN_AT + 3_600_000
_counter = itertools.count()


def run(
    tier: Tier, engine_of: str, spark: SparkSession, *, now_ms: int = NOW, **topic: object
) -> CompactReport:
    settings = compacting(tier.settings, **topic)
    spec = StorageSpec.from_settings(settings)
    engine: Engine = (
        SparkEngine(spark, spec, progress=False) if engine_of == "spark" else InProcessEngine(spec)
    )
    storage = tier.open_storage()
    try:
        with tier.open_store() as store:
            return compact(store, storage, spec, engine, settings, CompactOptions(), now_ms=now_ms)
    finally:
        storage.close()


def twin_tiers(request: pytest.FixtureRequest, base: Path, seed: int) -> tuple[Tier, Tier]:
    n = next(_counter)
    write = functools.partial(write_keyed_log, seed=seed, batches=40)
    return (
        make_tier("sqlite-fs", request, base / f"ref-{n}", write),
        make_tier("sqlite-fs", request, base / f"spark-{n}", write),
    )


# Each example tiers two logs and runs two jobs: a few examples, and no shrinking (a failure is
# reported as drawn).
@settings(
    max_examples=3, phases=[Phase.generate], suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    seed=st.integers(0, 10_000),
    strategy=st.sampled_from(["offset", "timestamp", "header"]),
    lag=st.sampled_from([0, 0, 3_600_000 - 400]),
)
def test_spark_writes_what_the_reference_writes(
    spark: SparkSession,
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    seed: int,
    strategy: str,
    lag: int,
) -> None:
    reference, on_spark = twin_tiers(request, tmp_path_factory.mktemp("twins"), seed)
    topic: dict[str, Any] = {"compaction_strategy": strategy, "min_compaction_lag_ms": lag}
    expected = run(reference, "reference", spark, **topic)
    got = run(on_spark, "spark", spark, **topic)
    assert not got.failed, got.to_json()
    assert [(p.status, p.counts) for p in got.partitions] == [
        (p.status, p.counts) for p in expected.partitions
    ]
    for p in range(2):
        tp = TopicPartition(TOPIC, p)
        assert survivors(on_spark, tp) == survivors(reference, tp)
        shape = [
            (r.start_offset, r.end_offset, r.size_bytes, r.max_timestamp_ms) for r in reference.finished(tp)
        ]
        assert [
            (r.start_offset, r.end_offset, r.size_bytes, r.max_timestamp_ms) for r in on_spark.finished(tp)
        ] == shape
    # past the horizon, both drop the tombstones they stamped
    later = NOW + 86_400_000 + 1
    assert [p.counts for p in run(on_spark, "spark", spark, now_ms=later, **topic).partitions] == [
        p.counts for p in run(reference, "reference", spark, now_ms=later, **topic).partitions
    ]
    for p in range(2):
        tp = TopicPartition(TOPIC, p)
        assert survivors(on_spark, tp) == survivors(reference, tp)


@pytest.mark.parametrize("kind", BACKENDS)
def test_tier_compact_then_lookups_are_exact_and_a_second_run_changes_nothing(
    e2e_tier: Tier,
    spark: SparkSession,
    reference: dict[TopicPartition, list[Survivor]],
    tmp_path: Path,
) -> None:
    tier = e2e_tier
    report = run(tier, "spark", spark)
    assert [p.status for p in report.partitions] == ["compacted"] * len(PARTITIONS), report.to_json()
    for tp in PARTITIONS:
        assert survivors(tier, tp) == reference[tp]  # record by record, offsets and bytes
        assert_lookups_exact(tier, tp, tmp_path / "cache")
    rows = {tp: tier.finished(tp) for tp in PARTITIONS}
    objects = stored_keys(tier)
    again = run(tier, "spark", spark)
    assert [p.status for p in again.partitions] == ["unchanged"] * len(PARTITIONS), again.to_json()
    assert {tp: tier.finished(tp) for tp in PARTITIONS} == rows
    assert stored_keys(tier) == objects
    assert not orphans(tier)
