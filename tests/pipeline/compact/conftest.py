"""The log the end-to-end and fault tests on Spark tier, its reference compaction, and the jobs
of the kill and race tests (:mod:`tests.pipeline.compact.killed_jobs`), started as the first test
here begins and tested last of the pipeline tests."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from rlm.metastore.model import TopicPartition
from tests.pipeline.compact.support import TOPIC, Survivor, survivors, write_keyed_log
from tests.pipeline.compact.test_reference_job import run
from tests.pipeline.conftest import make_tier
from tests.pipeline.tiers import Tier

if TYPE_CHECKING:
    from tests.pipeline.compact.killed_jobs import Case

#: Small: a test runs several jobs on it, some with a Spark of their own.
E2E_LOG = functools.partial(write_keyed_log, seed=21, batches=30)
PARTITIONS = (TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1))
#: The kill and race tests (a node id prefix), whose jobs :func:`started` starts.
KILLED_JOBS_MODULE = "tests/pipeline/compact/test_spark_faults.py"
#: Every pipeline test (a node id prefix).
PIPELINE = "tests/pipeline/"


@pytest.fixture(scope="session")
def reference(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> dict[TopicPartition, list[Survivor]]:
    """What the reference compaction (in process, SQLite and files) leaves of :data:`E2E_LOG`."""
    tier = make_tier("sqlite-fs", request, tmp_path_factory.mktemp("reference"), E2E_LOG)
    report = run(tier)
    assert {p.status for p in report.partitions} == {"compacted"}, report.to_json()
    return {tp: survivors(tier, tp) for tp in PARTITIONS}


@pytest.fixture
def e2e_tier(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> Tier:
    """:data:`E2E_LOG` tiered on the backend pair ``kind`` (a test parameter)."""
    return make_tier(kind, request, tmp_path / "tier", E2E_LOG)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests of :data:`KILLED_JOBS_MODULE` after every other pipeline test (the order of the
    rest kept), so that their jobs, started with the first test here, run beside the others."""
    mine = [item for item in items if item.nodeid.startswith(KILLED_JOBS_MODULE)]
    if not mine:
        return
    rest = [item for item in items if not item.nodeid.startswith(KILLED_JOBS_MODULE)]
    after = max((i + 1 for i, item in enumerate(rest) if item.nodeid.startswith(PIPELINE)), default=0)
    items[:] = [*rest[:after], *mine, *rest[after:]]


@pytest.fixture(scope="session", autouse=True)
def started(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[tuple[str, str], Case]]:
    """The jobs of the selected kill and race tests, started once, as the first test here begins
    (:func:`tests.pipeline.compact.killed_jobs.started`): they make their way to their points
    while the other tests run."""
    from tests.pipeline.compact import killed_jobs as jobs  # imports this module

    yield from jobs.started(request, tmp_path_factory)
