"""The swap's clock: the segments a compaction replaced keep their objects for
``remote.compaction.delete.delay.ms`` from the swap, however long the job ran before it (as
Kafka's cleaner deletes a replaced segment ``file.delete.delay.ms`` after its swap)."""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from rlm.metastore.model import SegmentState, TopicPartition
from rlm.pipeline.compact.engine import GroupResult, InProcessEngine
from rlm.pipeline.compact.job import CompactOptions, cleanup, compact
from rlm.pipeline.compact.segment import OutputPlan
from rlm.pipeline.storage import StorageSpec
from tests.pipeline.compact.support import TOPIC, compacting, write_keyed_log
from tests.pipeline.conftest import make_tier
from tests.pipeline.tiers import Tier

P0 = TopicPartition(TOPIC, 0)
DELAY_MS = 1_500


class _SlowWrite(InProcessEngine):
    """Writes the outputs, then takes longer than the delay before the swap."""

    def write(self, outputs: Sequence[OutputPlan], *, now_ms: int, write: bool) -> list[GroupResult]:
        results = super().write(outputs, now_ms=now_ms, write=write)
        time.sleep(DELAY_MS * 1.5 / 1000)
        return results


@pytest.fixture
def tier(request: pytest.FixtureRequest, tmp_path: Path) -> Tier:
    return make_tier("postgres-s3", request, tmp_path, functools.partial(write_keyed_log, seed=9))


def test_replaced_segments_keep_their_objects_for_the_delay_after_a_slow_swap(
    tier: Tier, aws_env: None
) -> None:
    settings = compacting(tier.settings).replace(remote_compaction_delete_delay_ms=DELAY_MS)
    spec = StorageSpec.from_settings(settings)
    storage = tier.open_storage()
    try:
        with tier.open_store() as store:
            report = compact(store, storage, spec, _SlowWrite(spec), settings, CompactOptions())
            swapped_by = time.time_ns() // 1_000_000
            assert {p.status for p in report.partitions} == {"compacted"}, report.to_json()
            replaced = list(store.list_segments(P0, states=[SegmentState.DELETE_SEGMENT_STARTED]))
            assert replaced
            assert all(r.delete_after_ms is not None and r.delete_after_ms >= swapped_by for r in replaced)
            # the next job's cleanup, just after the swap, leaves the replaced objects to the
            # reads that picked them before it
            cleanup(store, storage, P0, now_ms=time.time_ns() // 1_000_000, delay_ms=DELAY_MS)
            assert all(storage.object_size(r.layout.log_key) is not None for r in replaced)
    finally:
        storage.close()
