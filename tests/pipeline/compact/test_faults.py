"""Compaction under faults: corrupt input, retention mid-job, two jobs, a killed job."""

from __future__ import annotations

import functools
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from rlm.errors import StaleLeaseError
from rlm.metastore.compaction import CompactionLease
from rlm.metastore.model import SegmentState, TopicPartition
from rlm.pipeline.compact.engine import GroupResult, InProcessEngine
from rlm.pipeline.compact.job import CompactOptions, compact
from rlm.pipeline.compact.segment import OutputPlan
from rlm.pipeline.storage import StorageSpec
from tests.pipeline.compact.support import (
    TOPIC,
    WRITTEN_AT,
    compacting,
    orphans,
    survivors,
    write_keyed_log,
)
from tests.pipeline.compact.test_reference_job import NOW, run
from tests.pipeline.compact.test_spark_job import run as run_on
from tests.pipeline.conftest import make_tier
from tests.pipeline.tiers import Tier, delete_finished, flip_byte

P0, P1 = TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)


@pytest.fixture
def tier(request: pytest.FixtureRequest, tmp_path: Path) -> Tier:
    return make_tier("sqlite-fs", request, tmp_path, functools.partial(write_keyed_log, seed=9))


@pytest.mark.parametrize("engine", ["reference", pytest.param("spark", marks=pytest.mark.spark)])
def test_a_corrupt_segment_fails_only_its_partition(
    tier: Tier, engine: str, request: pytest.FixtureRequest, aws_env: None
) -> None:
    victim = tier.finished(P0)[1]
    storage = tier.open_storage()
    try:
        position = flip_byte(storage, victim)
    finally:
        storage.close()
    rows_before = tier.finished(P0)
    report = run_on(tier, "spark", request.getfixturevalue("spark")) if engine == "spark" else run(tier)
    by_tp = {p.topic_partition: p for p in report.partitions}
    assert report.failed
    assert by_tp[P0].status == "failed"
    assert victim.layout.log_key in (by_tp[P0].reason or "")
    assert f"position {position}" in (by_tp[P0].reason or "") and "offset" in (by_tp[P0].reason or "")
    assert tier.finished(P0) == rows_before  # untouched
    assert by_tp[P1].status == "compacted"
    assert not orphans(tier)


class _RetentionMidJob(InProcessEngine):
    """Retention deletes a segment the job replaces, after the job planned and before it swaps."""

    def __init__(self, spec: StorageSpec, tier: Tier) -> None:
        super().__init__(spec)
        self.tier = tier

    def write(self, outputs: Sequence[OutputPlan], *, now_ms: int, write: bool) -> list[GroupResult]:
        results = super().write(outputs, now_ms=now_ms, write=write)
        victim = next(o for o in outputs if o.inputs[0].topic_partition == P0).inputs[0].segment
        storage = self.tier.open_storage()
        try:
            with self.tier.open_store() as store:
                delete_finished(store, storage, victim, now_ms)
        finally:
            storage.close()
        return results


def test_retention_mid_job_discards_that_partition(tier: Tier) -> None:
    settings = compacting(tier.settings)
    spec = StorageSpec.from_settings(settings)
    storage = tier.open_storage()
    try:
        with tier.open_store() as store:
            report = compact(
                store, storage, spec, _RetentionMidJob(spec, tier), settings, CompactOptions(), now_ms=NOW
            )
    finally:
        storage.close()
    by_tp = {p.topic_partition: p for p in report.partitions}
    assert by_tp[P0].status == "discarded" and "no longer finished" in (by_tp[P0].reason or "")
    assert by_tp[P1].status == "compacted"
    assert not orphans(tier)
    with tier.open_store() as store:
        assert not store.compaction_outputs(P0)
        assert not list(store.list_segments(P0, states=[SegmentState.DELETE_SEGMENT_STARTED]))


def test_a_partition_another_job_holds_is_skipped(tier: Tier) -> None:
    with tier.open_store() as store:
        other = store.acquire_compaction_lease(P0, "other-job", 60_000)
        assert other is not None
        assert store.acquire_compaction_lease(P0, "third-job", 60_000) is None
    report = run(tier)
    by_tp = {p.topic_partition: p for p in report.partitions}
    assert by_tp[P0].status == "skipped" and "other-job" in (by_tp[P0].reason or "")
    assert by_tp[P1].status == "compacted"
    with tier.open_store() as store:
        # the other job's swap is still its own to make; a stale epoch is refused
        assert store.swap_compacted(other, [], [], now_ms=NOW, delete_after_ms=NOW) is True
        stale = CompactionLease(P0, "other-job", other.epoch - 1, other.expires_at_ms)
        with pytest.raises(StaleLeaseError, match="lease epoch"):
            store.swap_compacted(stale, [], [], now_ms=NOW, delete_after_ms=NOW)
        assert store.release_compaction_lease(other)
        assert store.acquire_compaction_lease(P0, "third-job", 60_000) is not None


def test_replaced_segments_keep_their_objects_for_the_delay(tier: Tier) -> None:
    replaced = tier.finished(P0)
    run(tier)
    storage = tier.open_storage()
    try:
        assert all(
            storage.object_size(r.layout.log_key) is not None for r in replaced if r not in tier.finished(P0)
        )
    finally:
        storage.close()
    run(tier, now_ms=NOW + 300_001)  # the next job's cleanup, past the delay
    storage = tier.open_storage()
    try:
        gone = [r for r in replaced if r not in tier.finished(P0)]
        assert gone and all(storage.object_size(r.layout.log_key) is None for r in gone)
    finally:
        storage.close()
    assert not orphans(tier)


KILL_CHILD = """
import os, sys
from tests.pipeline.compact import test_faults
test_faults.killed_job(sys.argv[1], sys.argv[2])
"""


def killed_job(config: str, stage: str) -> None:
    """Run in a child process: compact, and die (SIGKILL) in ``stage``."""
    import os
    import signal

    import yaml

    from metadata.store import SqlMetadataStore
    from rlm.config import load_settings
    from rlm.storage.url import open_storage

    # A lease that expires at once: the next job takes the partitions over without waiting.
    settings = compacting(load_settings(config)).replace(remote_compaction_lease_ttl_ms=1)

    class Dying(InProcessEngine):
        def decide(self, plans, options):  # type: ignore[no-untyped-def]
            decided = super().decide(plans, options)
            if stage == "decide":
                os.kill(os.getpid(), signal.SIGKILL)
            return decided

        def write(self, outputs, *, now_ms, write):  # type: ignore[no-untyped-def]
            results = super().write(outputs[:1], now_ms=now_ms, write=write)  # one output written
            if stage == "write":
                os.kill(os.getpid(), signal.SIGKILL)
            return results

    del yaml
    spec = StorageSpec.from_settings(settings)
    with SqlMetadataStore.open(settings.metadata_url) as store:
        compact(
            store,
            open_storage(settings.remote_url),
            spec,
            Dying(spec),
            settings,
            CompactOptions(),
            now_ms=NOW,
        )


@pytest.mark.parametrize("stage", ["decide", "write"])
def test_a_killed_job_leaves_nothing_after_the_next_cleanup(tier: Tier, stage: str) -> None:
    before = {tp: survivors(tier, tp) for tp in (P0, P1)}
    child = subprocess.run(
        [sys.executable, "-c", KILL_CHILD, str(tier.config), stage],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert child.returncode == -9, child.stderr
    assert {tp: survivors(tier, tp) for tp in (P0, P1)} == before  # metadata untouched
    if stage == "write":
        assert orphans(tier)  # the killed job wrote an output it never swapped in
    report = run(tier)
    assert {p.status for p in report.partitions} == {"compacted"}
    assert (report.cleaned_objects > 0) == (stage == "write")  # the outputs it recorded
    assert not orphans(tier)


def test_the_written_at_clock_is_before_the_job() -> None:
    assert WRITTEN_AT < NOW
