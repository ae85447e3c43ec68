"""The jobs of the kill and race tests (:mod:`tests.pipeline.compact.test_spark_faults`), started
in processes of their own before their tests run.

Each job runs :mod:`tests.pipeline.compact.child_job` in a new process group. A killed job is held
at its point until its test kills the whole group with SIGKILL. A job held in a task has a Spark
of its own (``local[1]``): the driver and the JVM die at once, the executors' Python workers when
their daemon sees the JVM gone. A job held in its driver runs its Spark work on the session's JVM
(:mod:`tests.pipeline.shared_jvm`), where none of it is left at its point: the kill takes the
driver.

The jobs do not share anything (each has a tier of its own: database, bucket or directory), so
they all start at once, as the first test of ``tests/pipeline/compact`` begins (the session
fixture ``started`` of its ``conftest.py``), while the tests of the module run last of the
pipeline tests (that ``conftest.py`` puts them there): the jobs start their JVMs and make their
way to their points while the other Spark tests run, and wait there for their tests.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil  # type: ignore[import-untyped]
import pytest
from pyspark.sql import SparkSession

from rlm.metastore.model import TopicPartition
from tests.pipeline.compact.child_job import OWN_JVM
from tests.pipeline.compact.conftest import E2E_LOG, KILLED_JOBS_MODULE, PARTITIONS
from tests.pipeline.compact.support import Survivor, compacted_config, stored_keys, survivors
from tests.pipeline.conftest import make_tier
from tests.pipeline.shared_jvm import gateway_env
from tests.pipeline.tiers import AWS_ENV, Tier

ROOT = Path(__file__).resolve().parents[3]
#: Seconds a job may take to reach its point, or to finish.
PATIENCE_S = 600.0
#: The point of the race of two jobs (not killed).
TOGETHER = "together"


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


def stderr_tail(out: Path) -> str:
    """The end of what the job whose stdout is ``out`` wrote to stderr."""
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
        assert job.poll() is None, f"the job ended ({job.returncode}) before its point:\n{stderr_tail(out)}"
        assert time.monotonic() < deadline, f"the job never reached its point:\n{stderr_tail(out)}"
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


def selected_cases(items: Sequence[pytest.Item]) -> list[tuple[str, str]]:
    """``(kind, point)`` of the selected tests of :data:`KILLED_JOBS_MODULE`, in the order they run
    (:data:`TOGETHER`: the race of two jobs)."""
    cases = []
    for item in items:
        if not item.nodeid.startswith(KILLED_JOBS_MODULE):
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


def started(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[tuple[str, str], Case]]:
    """The jobs of every selected test of :data:`KILLED_JOBS_MODULE`, started at once, by
    ``(kind, point)`` (none, and no Spark asked for, when none is selected); at the end, the
    process group of any job still running is killed."""
    cases: dict[tuple[str, str], Case] = {}
    selected = selected_cases(request.session.items)
    if not selected:
        yield cases
        return
    spark: SparkSession = request.getfixturevalue("spark")
    try:
        for kind, point in selected:
            directory = tmp_path_factory.mktemp(f"{kind}-{point}")
            cases[kind, point] = _start_case(spark, kind, point, request, directory)
        yield cases
    finally:
        for case in cases.values():
            for job in case.jobs:
                if job.process.poll() is None:
                    os.killpg(job.process.pid, signal.SIGKILL)
                    job.process.wait(timeout=60)
