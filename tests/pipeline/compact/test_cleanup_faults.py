"""A compaction job whose cleanup of one partition fails: that partition fails alone, untouched,
and the others are compacted (as for a partition whose segment cannot be read)."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterable
from pathlib import Path

import pytest

from rlm.errors import StorageError
from rlm.metastore.model import TopicPartition
from rlm.pipeline.compact.engine import InProcessEngine
from rlm.pipeline.compact.job import CompactOptions, compact
from rlm.pipeline.storage import StorageSpec
from rlm.storage.delegate import DelegatingStorage
from tests.pipeline.compact.support import TOPIC, compacting, die_before_the_swap, survivors, write_keyed_log
from tests.pipeline.compact.test_reference_job import NOW
from tests.pipeline.conftest import make_tier
from tests.pipeline.tiers import Tier

P0, P1 = TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)


class _RefusesDeletesOfP0(DelegatingStorage):
    """A store that refuses to delete the objects of partition 0 (a denied request)."""

    def delete_objects(self, keys: Iterable[str]) -> None:
        keys = list(keys)
        refused = [k for k in keys if f"{TOPIC}-0-" in k]
        if refused:
            raise StorageError(f"access denied deleting {refused[0]}", key=refused[0], retriable=False)
        self.inner.delete_objects(keys)


@pytest.fixture
def tier(request: pytest.FixtureRequest, tmp_path: Path) -> Tier:
    return make_tier("sqlite-fs", request, tmp_path, functools.partial(write_keyed_log, seed=9))


def test_a_failed_cleanup_fails_only_its_partition(tier: Tier) -> None:
    die_before_the_swap(tier, now_ms=NOW)
    before = survivors(tier, P0)
    settings = compacting(tier.settings)
    spec = StorageSpec.from_settings(settings)
    with tier.open_store() as store, contextlib.closing(_RefusesDeletesOfP0(tier.open_storage())) as storage:
        assert store.compaction_outputs(P0) and store.compaction_outputs(P1)
        report = compact(store, storage, spec, InProcessEngine(spec), settings, CompactOptions(), now_ms=NOW)
        by_tp = {p.topic_partition: p for p in report.partitions}
        assert by_tp[P0].status == "failed" and "access denied" in (by_tp[P0].reason or "")
        assert by_tp[P1].status == "compacted"
        assert store.compaction_outputs(P0)  # left for the next job's cleanup
        assert store.compaction_outputs(P1) == []
        assert store.get_compaction_lease(P0) is None  # given back
    assert survivors(tier, P0) == before
