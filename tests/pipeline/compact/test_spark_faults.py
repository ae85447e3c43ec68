"""``rlm spark compact`` in processes of its own: killed in each stage, and two jobs at once.

Each job runs :mod:`tests.pipeline.compact.child_job` in a new process group. A killed job is
held at its point until its test kills the whole group with SIGKILL. A job held in a task has a
Spark of its own (``local[1]``): the driver and the JVM die at once, the executors' Python workers
when their daemon sees the JVM gone. A job held in its driver runs its Spark work on the session's
JVM (:mod:`tests.pipeline.shared_jvm`), where none of it is left at its point: the kill takes the
driver. The test waits until none of the job's processes is left. The next job (on the session's
Spark) must then clean up what the killed one left and compact as if nothing had happened.

The jobs do not share anything (each has a tier of its own: database, bucket or directory), so
the module starts the jobs of all its selected tests at once (:func:`started`): their JVMs start
side by side, and while one test checks what its killed job left, the others' jobs are on their
way to their points, where they wait for their tests.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil  # type: ignore[import-untyped]
import pytest
from pyspark.sql import SparkSession

from rlm.metastore.model import TopicPartition
from tests.pipeline.compact.child_job import OWN_JVM
from tests.pipeline.compact.conftest import E2E_LOG, PARTITIONS
from tests.pipeline.compact.support import (
    Survivor,
    assert_lookups_exact,
    compacted_config,
    live_keys,
    orphans,
    stored_keys,
    survivors,
)
from tests.pipeline.compact.test_reference_job import NOW, run
from tests.pipeline.compact.test_spark_job import run as run_on
from tests.pipeline.conftest import make_tier
from tests.pipeline.shared_jvm import gateway_env
from tests.pipeline.tiers import AWS_ENV, Tier

pytestmark = [pytest.mark.slow, pytest.mark.spark, pytest.mark.usefixtures("aws_env")]
ROOT = Path(__file__).resolve().parents[3]
#: Seconds a job may take to reach its point, or to finish.
PATIENCE_S = 600.0
P0 = PARTITIONS[0]


def start_job(
    spark: SparkSession, point: str, marker: Path, *argv: str, out: Path
) -> subprocess.Popen[bytes]:
    """Start ``rlm spark compact ARGV`` held at ``point``, in a process group of its own (on
    ``spark``'s JVM unless the point is in a task); its stdout goes to ``out``, its stderr beside
    it (``.err``)."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    joined = {} if point in OWN_JVM else gateway_env(spark)
    with out.open("wb") as stdout, out.with_suffix(".err").open("wb") as stderr:
        return subprocess.Popen(
            [sys.executable, "-m", "tests.pipeline.compact.child_job", point, str(marker), *argv],
            cwd=ROOT,
            # executors import the held tasks by name; the S3 credentials are moto's
            env={**os.environ, **AWS_ENV, "PYTHONPATH": path, **joined},
            stdout=stdout,
            stderr=stderr,
            start_new_session=True,
        )


def _stderr(out: Path) -> str:
    return out.with_suffix(".err").read_text(errors="replace")[-4000:]


def _alive(process: psutil.Process) -> bool:
    try:
        return bool(process.is_running() and process.status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


def kill_when_reached(job: subprocess.Popen[bytes], marker: Path, out: Path, *, own_jvm: bool) -> None:
    """Wait for the job to reach its point; SIGKILL its process group; wait for every process it
    had started (with ``own_jvm``: JVM, Python daemon and workers) to be gone."""
    deadline = time.monotonic() + PATIENCE_S
    while not marker.exists():
        assert job.poll() is None, f"the job ended ({job.returncode}) before its point:\n{_stderr(out)}"
        assert time.monotonic() < deadline, f"the job never reached its point:\n{_stderr(out)}"
        time.sleep(0.2)
    tree = [psutil.Process(job.pid), *psutil.Process(job.pid).children(recursive=True)]
    assert int(marker.read_text()) in {p.pid for p in tree}  # the process held is the job's
    # a real Spark: a JVM of its own, or the session's
    assert any(p.name().startswith("java") for p in tree) == own_jvm
    os.killpg(job.pid, signal.SIGKILL)
    assert job.wait(timeout=60) == -signal.SIGKILL
    while any(_alive(p) for p in tree) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [p.pid for p in tree if _alive(p)], "processes of the killed job are still running"


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
TOGETHER = "together"


@dataclass(frozen=True)
class Job:
    process: subprocess.Popen[bytes]
    marker: Path
    out: Path


@dataclass(frozen=True)
class Case:
    """A tier of :data:`E2E_LOG`, what it held before its jobs started, and the jobs."""

    tier: Tier
    before: dict[TopicPartition, list[Survivor]]
    objects_before: set[str]
    jobs: tuple[Job, ...]


def _selected_cases(session: pytest.Session) -> list[tuple[str, str]]:
    """``(kind, point)`` of this module's selected tests, in the order they run (``together``: the
    race of two jobs)."""
    cases = []
    for item in session.items:
        if getattr(item, "module", None) is not sys.modules[__name__]:
            continue
        params = item.callspec.params  # type: ignore[attr-defined]
        cases.append((params["kind"], params.get("point", TOGETHER)))
    return cases


def _start_case(
    spark: SparkSession, kind: str, point: str, request: pytest.FixtureRequest, directory: Path
) -> Case:
    tier = make_tier(kind, request, directory / "tier", E2E_LOG)
    before = {tp: survivors(tier, tp) for tp in PARTITIONS}
    objects_before = stored_keys(tier)
    if point == TOGETHER:
        config = compacted_config(tier, directory / "compact.yaml")
        markers = (directory / "a.leased", directory / "b.leased")
        outs = (directory / "a.out", directory / "b.out")
        jobs = tuple(
            Job(
                start_job(
                    spark, TOGETHER, mine, "--twin", str(twin), "--config", str(config), "--json", out=out
                ),
                mine,
                out,
            )
            for mine, twin, out in zip(markers, markers[::-1], outs, strict=True)
        )
    else:
        # Leases that expire at once: the next job takes the partitions over without waiting.
        config = compacted_config(tier, directory / "compact.yaml", **{"remote.compaction.lease.ttl.ms": 1})
        marker, out = directory / "reached", directory / "job.out"
        jobs = (Job(start_job(spark, point, marker, "--config", str(config), out=out), marker, out),)
    return Case(tier, before, objects_before, jobs)


@pytest.fixture(scope="module")
def started(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    spark: SparkSession,
) -> Iterator[dict[tuple[str, str], Case]]:
    """The jobs of every selected test of the module, started at once, by ``(kind, point)``; at the
    end, the process group of any job still running is killed."""
    cases: dict[tuple[str, str], Case] = {}
    try:
        for kind, point in _selected_cases(request.session):
            cases[kind, point] = _start_case(
                spark, kind, point, request, tmp_path_factory.mktemp(f"{kind}-{point}")
            )
        yield cases
    finally:
        for case in cases.values():
            for job in case.jobs:
                if job.process.poll() is None:
                    os.killpg(job.process.pid, signal.SIGKILL)
                    job.process.wait(timeout=60)


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
        assert job.process.wait(timeout=PATIENCE_S) == 0, _stderr(job.out)
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
