"""``rlm spark compact`` in processes of its own: killed in each stage, and two jobs at once.

The jobs are started before these tests run (:mod:`tests.pipeline.compact.killed_jobs`, fixture
``started``). A killed job is held at its point until its test kills its whole process group with
SIGKILL and waits until none of the job's processes is left. The next job (on the session's
Spark) must then clean up what the killed one left and compact as if nothing had happened.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from rlm.metastore.model import TopicPartition
from tests.pipeline.compact.child_job import OWN_JVM
from tests.pipeline.compact.conftest import PARTITIONS
from tests.pipeline.compact.killed_jobs import PATIENCE_S, TOGETHER, Case, kill_when_reached, stderr_tail
from tests.pipeline.compact.support import (
    Survivor,
    assert_lookups_exact,
    live_keys,
    orphans,
    stored_keys,
    survivors,
)
from tests.pipeline.compact.test_reference_job import NOW, run
from tests.pipeline.compact.test_spark_job import run as run_on

pytestmark = [pytest.mark.slow, pytest.mark.spark, pytest.mark.usefixtures("aws_env")]
P0 = PARTITIONS[0]


def everything(tier_survivors: dict[TopicPartition, list[Survivor]]) -> int:
    return sum(len(s) for s in tier_survivors.values())


# Each stage once, on the embedded backends; the swap, the one step that is a transaction of the
# metadata store, on PostgreSQL.
KILLS = [
    *(pytest.param("sqlite-fs", p, id=f"sqlite-fs-{p}") for p in ("read", "decide", "write", "swapped-one")),
    pytest.param("postgres-s3", "swap", id="postgres-s3-swap", marks=pytest.mark.postgres),
]
# Two jobs racing for the same leases: on PostgreSQL, where the race is between two connections
# of a server as in production.
RACES = [pytest.param("postgres-s3", id="postgres-s3", marks=pytest.mark.postgres)]


@pytest.mark.parametrize(("kind", "point"), KILLS)
def test_a_job_killed_in_a_stage_leaves_nothing_after_the_next_cleanup(
    started: dict[tuple[str, str], Case],
    kind: str,
    point: str,
    spark: SparkSession,
    reference: dict[TopicPartition, list[Survivor]],
    tmp_path: Path,
) -> None:
    case = started[kind, point]
    tier, before = case.tier, case.before
    (job,) = case.jobs
    kill_when_reached(job.process, job.marker, job.out, own_jvm=point in OWN_JVM)

    # The metadata is untouched, or fully swapped (the first partition, killed after its swap).
    swapped = {P0} if point == "swapped-one" else set()
    assert {tp: survivors(tier, tp) for tp in PARTITIONS} == {
        tp: reference[tp] if tp in swapped else before[tp] for tp in PARTITIONS
    }
    wrote = point not in ("read", "decide")
    if wrote:
        assert orphans(tier)  # outputs written and never swapped in
    else:
        assert stored_keys(tier) == case.objects_before

    report = run_on(tier, "spark", spark)  # the next job
    assert {p.topic_partition: p.status for p in report.partitions} == {
        tp: "unchanged" if tp in swapped else "compacted" for tp in PARTITIONS
    }, report.to_json()
    assert (report.cleaned_objects > 0) == wrote
    assert not orphans(tier)
    for tp in PARTITIONS:
        assert survivors(tier, tp) == reference[tp]
        assert_lookups_exact(tier, tp, tmp_path / "cache")
    # Past the delay the replaced segments' objects go too: the survivors' objects are all left.
    assert {p.status for p in run(tier, now_ms=NOW + 300_001).partitions} == {"unchanged"}
    assert stored_keys(tier) == live_keys(tier)
    assert everything(before) > everything(reference)  # the job had something to do


@pytest.mark.parametrize("kind", RACES)
def test_two_jobs_at_once_compact_each_partition_once(
    started: dict[tuple[str, str], Case], kind: str, reference: dict[TopicPartition, list[Survivor]]
) -> None:
    case = started[kind, TOGETHER]
    reports: list[dict[str, Any]] = []
    for job in case.jobs:
        assert job.process.wait(timeout=PATIENCE_S) == 0, stderr_tail(job.out)
        reports.append(json.loads(job.out.read_text()))
    for tp in PARTITIONS:
        (a, b) = (
            next(p for p in r["partitions"] if (p["topic"], p["partition"]) == (tp.topic, tp.partition))
            for r in reports
        )
        winner, loser = (a, b) if a["status"] == "compacted" else (b, a)
        assert (winner["status"], loser["status"]) == ("compacted", "skipped"), reports
        assert "the compaction lease is held by job" in loser["reason"]
        assert survivors(case.tier, tp) == reference[tp]
    assert not orphans(case.tier)
