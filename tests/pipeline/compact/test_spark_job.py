"""The compaction job on Spark (``local[2]``) against the reference compaction on random logs."""

from __future__ import annotations

import functools
import itertools
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from pyspark.sql import SparkSession

from rlm.config import Settings
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
    return run_settings(tier, compacting(tier.settings, **topic), engine_of, spark, now_ms=now_ms)


def run_settings(
    tier: Tier, settings: Settings, engine_of: str, spark: SparkSession, *, now_ms: int = NOW
) -> CompactReport:
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


#: The topics of the comparison with the reference, one partition each, compacted by one job: each
#: strategy, without a lag and with a lag that holds back the newest records.
MIX = [
    (f"{strategy}-{n}", strategy, lag)
    for n, lag in enumerate((0, 3_600_000 - 400))
    for strategy in ("offset", "timestamp", "header")
]


def mixed(settings: Settings) -> Settings:
    """``settings`` with the topics of :data:`MIX` compacted as they say."""
    overrides = {
        name: compacting(settings, compaction_strategy=strategy, min_compaction_lag_ms=lag).topic(TOPIC)
        for name, strategy, lag in MIX
    }
    return settings.replace(topic_overrides=overrides)


def write_mix(logs: Path, seed: int) -> None:
    """A random keyed log per topic of :data:`MIX` (seeds ``seed``, ``seed + 1``, …)."""
    for n, (name, _, _) in enumerate(MIX):
        write_keyed_log(logs, seed=seed + n, partitions=1, batches=40, topic=name)


def twin_tiers(request: pytest.FixtureRequest, base: Path, seed: int) -> tuple[Tier, Tier]:
    n = next(_counter)
    write = functools.partial(write_mix, seed=seed)
    return (
        make_tier("sqlite-fs", request, base / f"ref-{n}", write),
        make_tier("sqlite-fs", request, base / f"spark-{n}", write),
    )


def shapes(tier: Tier, tp: TopicPartition) -> list[tuple[int, int, int, int]]:
    return [(r.start_offset, r.end_offset, r.size_bytes, r.max_timestamp_ms) for r in tier.finished(tp)]


# An example tiers a log of every topic of MIX twice and runs two jobs on each (a Spark job costs
# about as much for one partition as for a few): one example, and no shrinking (a failure is
# reported as drawn). The explore profile draws other logs on each run.
@settings(
    max_examples=1, phases=[Phase.generate], suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(seed=st.integers(0, 10_000))
def test_spark_writes_what_the_reference_writes(
    spark: SparkSession, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, seed: int
) -> None:
    reference, on_spark = twin_tiers(request, tmp_path_factory.mktemp("twins"), seed)
    config = mixed(reference.settings)
    expected = run_settings(reference, config, "reference", spark)
    got = run_settings(on_spark, mixed(on_spark.settings), "spark", spark)
    assert not got.failed, got.to_json()
    assert len(got.partitions) == len(MIX)
    assert [(p.topic_partition, p.status, p.counts) for p in got.partitions] == [
        (p.topic_partition, p.status, p.counts) for p in expected.partitions
    ]
    assert "compacted" in {p.status for p in got.partitions}, got.to_json()
    tps = [TopicPartition(name, 0) for name, _, _ in MIX]
    for tp in tps:
        assert survivors(on_spark, tp) == survivors(reference, tp), tp
        assert shapes(on_spark, tp) == shapes(reference, tp), tp
    # past the horizon, both drop the tombstones they stamped
    later = NOW + 86_400_000 + 1
    assert [
        p.counts
        for p in run_settings(on_spark, mixed(on_spark.settings), "spark", spark, now_ms=later).partitions
    ] == [p.counts for p in run_settings(reference, config, "reference", spark, now_ms=later).partitions]
    for tp in tps:
        assert survivors(on_spark, tp) == survivors(reference, tp), tp


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
