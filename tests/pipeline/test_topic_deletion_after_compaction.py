"""A deleted topic's partitions deleted from the remote tier after a compaction job died before its
swap: the outputs it wrote are the deleted topic's data too, and go with it (Kafka deletes every
remote segment of a deleted topic), so that no rebuild from the objects brings them back."""

from __future__ import annotations

import functools
import time
from pathlib import Path

import pytest

from metadata.store import SqlMetadataStore
from rlm.metastore.model import SegmentState, TopicPartition
from rlm.pipeline.rebuild.job import RebuildOptions, rebuild
from rlm.pipeline.stage import run_in_process
from rlm.pipeline.storage import StorageSpec
from rlm.tiering.leases import LeaseKeeper
from rlm.tiering.partition_deletion import delete_partition
from tests.metadata_support import sqlite_copy
from tests.pipeline.compact.support import TOPIC, compacting, die_before_the_swap, write_keyed_log
from tests.pipeline.compact.test_reference_job import NOW
from tests.pipeline.conftest import make_tier
from tests.pipeline.tiers import Tier

P0 = TopicPartition(TOPIC, 0)
#: Far past every lease the copier took and every delay.
LATER = time.time_ns() // 1_000_000 + 10 * 86_400_000


@pytest.fixture(params=["sqlite-fs", "postgres-s3"])
def tier(request: pytest.FixtureRequest, tmp_path: Path, aws_env: None) -> Tier:
    return make_tier(request.param, request, tmp_path / "tier", functools.partial(write_keyed_log, seed=9))


def test_deleting_a_topic_deletes_the_outputs_a_dead_compaction_job_left(
    tier: Tier, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    settings = compacting(tier.settings)
    spec = StorageSpec.from_settings(settings)
    die_before_the_swap(tier, now_ms=NOW)
    storage = tier.open_storage()
    try:
        with tier.open_store() as store:
            left = [k for o in store.compaction_outputs(P0) for k in (o.log_key, o.index_key)]
            assert left and all(storage.object_size(k) is not None for k in left)
            record = store.get_partition(P0)
            assert record is not None and record.topic_id is not None
            leases = LeaseKeeper(store, settings.broker_id, settings.remote_log_manager_lease_ttl_ms)
            done = delete_partition(
                store, storage, leases, P0, record.topic_id, clock=lambda: LATER, idle_ms=0
            )
            assert done.skipped is None and done.deleted_segments > 0
            assert [k for k in left if storage.object_size(k) is not None] == []
            assert store.compaction_outputs(P0) == []
        directory = tmp_path / "rebuilt"
        directory.mkdir()
        url = sqlite_copy(request.getfixturevalue("sqlite_template"), directory)
        with SqlMetadataStore.open(url) as rebuilt:
            rebuild(rebuilt, storage, spec, run_in_process, RebuildOptions(), now_ms=LATER)
            assert list(rebuilt.list_segments(P0, states=[SegmentState.COPY_SEGMENT_FINISHED])) == []
    finally:
        storage.close()
