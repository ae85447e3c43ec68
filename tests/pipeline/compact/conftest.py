"""The log the end-to-end and fault tests on Spark tier, and its reference compaction."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from rlm.metastore.model import TopicPartition
from tests.pipeline.compact.support import TOPIC, Survivor, survivors, write_keyed_log
from tests.pipeline.compact.test_reference_job import run
from tests.pipeline.conftest import make_tier
from tests.pipeline.tiers import Tier

#: Small: a test runs several jobs on it, some with a Spark of their own.
E2E_LOG = functools.partial(write_keyed_log, seed=21, batches=30)
PARTITIONS = (TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1))


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
