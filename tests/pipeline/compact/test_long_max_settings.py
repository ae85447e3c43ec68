"""Compaction with the settings Kafka's users write as Long.MAX_VALUE ("for good")."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from rlm.arguments import INT64_MAX
from rlm.metastore.model import SegmentState, TopicPartition
from rlm.pipeline.compact.engine import InProcessEngine
from rlm.pipeline.compact.job import CompactOptions, CompactReport, compact
from rlm.pipeline.storage import StorageSpec
from tests.pipeline.compact.support import TOPIC, WRITTEN_AT, compacting, survivors, write_keyed_log
from tests.pipeline.conftest import make_tier
from tests.pipeline.tiers import Tier

NOW = WRITTEN_AT + 3_600_000


@pytest.fixture
def tier(request: pytest.FixtureRequest, tmp_path: Path) -> Tier:
    return make_tier("sqlite-fs", request, tmp_path, functools.partial(write_keyed_log, seed=5))


def _run(tier: Tier, **topic: object) -> CompactReport:
    settings = compacting(tier.settings.replace(remote_compaction_delete_delay_ms=INT64_MAX), **topic)
    storage = tier.open_storage()
    try:
        with tier.open_store() as store:
            spec = StorageSpec.from_settings(settings)
            return compact(
                store, storage, spec, InProcessEngine(spec), settings, CompactOptions(), now_ms=NOW
            )
    finally:
        storage.close()


def test_replaced_segments_kept_for_good_and_tombstones_too(tier: Tier) -> None:
    tp = TopicPartition(TOPIC, 1)
    before = {r.segment_id for r in tier.finished(tp)}
    report = _run(tier, delete_retention_ms=INT64_MAX)
    assert not report.failed, report.to_json()
    assert {p.status for p in report.partitions} == {"compacted"}
    with tier.open_store() as store:
        replaced = list(store.list_segments(tp, states=[SegmentState.DELETE_SEGMENT_STARTED]))
    assert replaced and {r.segment_id for r in replaced} <= before
    assert {r.delete_after_ms for r in replaced} == {INT64_MAX}  # their objects stay for good
    tombstones = [s for s in survivors(tier, tp) if s.value is None and not s.control]
    assert tombstones
