"""A topic whose ``cleanup.policy`` lost ``compact`` after a compaction job died before its swap:
no job compacts its partitions again, and the next job still deletes what the dead one left."""

from __future__ import annotations

import contextlib
import functools
from pathlib import Path

import pytest

from rlm.metastore.model import TopicPartition
from rlm.pipeline.compact.engine import InProcessEngine
from rlm.pipeline.compact.job import CompactOptions, compact
from rlm.pipeline.storage import StorageSpec
from tests.pipeline.compact.support import TOPIC, compacting, die_before_the_swap, orphans, write_keyed_log
from tests.pipeline.compact.test_reference_job import NOW
from tests.pipeline.conftest import make_tier
from tests.pipeline.tiers import Tier

P0 = TopicPartition(TOPIC, 0)


@pytest.fixture
def tier(request: pytest.FixtureRequest, tmp_path: Path) -> Tier:
    return make_tier("sqlite-fs", request, tmp_path, functools.partial(write_keyed_log, seed=9))


def test_a_dead_jobs_outputs_are_deleted_once_the_topic_is_no_longer_compacted(tier: Tier) -> None:
    die_before_the_swap(tier, now_ms=NOW)
    left = orphans(tier)
    assert left  # the dead job's outputs, never swapped in
    settings = compacting(tier.settings, cleanup_policy="delete")
    spec = StorageSpec.from_settings(settings)
    finished_before = tier.finished(P0)

    with tier.open_store() as store, contextlib.closing(tier.open_storage()) as storage:
        report = compact(
            store, storage, spec, InProcessEngine(spec), settings, CompactOptions(), now_ms=NOW + 1
        )

        assert store.compaction_outputs(P0) == []
        assert store.get_compaction_lease(P0) is None
    assert report.partitions == [] and report.cleaned_objects == len(left)
    assert not orphans(tier)
    assert tier.finished(P0) == finished_before  # nothing compacted
