"""LATEST_TIERED (-5, KIP-1005) once remote retention deleted every remote segment.

Kafka answers ``UnifiedLog.highestOffsetInRemoteStorage``: the highest offset ever copied, which
never falls (retention does not lower it), with no timestamp and the epoch its leader epoch cache
gives that offset, -1 when the cache starts above it (Kafka truncates the cache from the start
when remote retention moves the log start offset past the deleted segments). rlm answers the same
from the metadata store and the broker's ``leader-epoch-checkpoint`` (the remote tier's batch
below where that starts); the tier it names is the
one still holding the offset, none once the offset is below the log start offset.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from rlm.bootstrap import Runtime
from rlm.log.checkpoints import EpochEntry, write_leader_epoch_checkpoint
from rlm.log.logdir import LEADER_EPOCH_CHECKPOINT, LogDir
from rlm.lookup.list_offsets import ErrorCode
from rlm.metastore.model import SegmentState
from tests.lookup_support import (
    TOPIC,
    Backend,
    BatchPlan,
    PartitionPlan,
    Tiered,
    runtime,
    tier_partition,
    write_partition,
)

LATEST_TIERED = -5


def _plan(tiering: str, *, expire: bool) -> PartitionPlan:
    batches = tuple(BatchPlan(timestamps=(i * 100, i * 100 + 50), advance_ms=100) for i in range(20))
    return PartitionPlan(
        batches,
        tiering=tiering,  # type: ignore[arg-type]
        local_deleted=1.0,
        retention_bytes_share=0.0 if expire else None,
    )


@dataclass
class Sidecar:
    tiered: Tiered
    root: Path
    backend: Backend

    @property
    def rt(self) -> Runtime:
        return self.tiered.runtime

    def query_tier(self) -> Runtime:
        """A query tier over the same store and objects: no local log."""
        (self.root / "no-logs").mkdir(exist_ok=True)
        return runtime(
            self.backend,
            self.root,
            self.root / "no-logs",
            metadata_url=self.rt.settings.metadata_url,
            remote_url=self.rt.settings.remote_url,
            remote_log_index_cache_dir=self.root / "query-cache",
        )


@pytest.fixture
def sidecar(request: pytest.FixtureRequest, sqlite_template: Path) -> Iterator[Sidecar]:
    tiering, expire = request.param
    plan = _plan(tiering, expire=expire)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        truth = write_partition(root / "logs", plan)
        backend = Backend("sqlite-fs", sqlite_template=sqlite_template)
        rt = runtime(backend, root, root / "logs")
        try:
            yield Sidecar(
                tier_partition(rt, LogDir(root / "logs").partition(TOPIC, 0), truth, plan), root, backend
            )
        finally:
            rt.close()


def _answer(rt: Runtime, sidecar: Sidecar) -> tuple[int, int, int, str | None]:
    found = rt.lookup.find(sidecar.tiered.tp, LATEST_TIERED)
    result = rt.list_offsets.find_one(sidecar.tiered.tp, LATEST_TIERED)
    assert result.error_code is ErrorCode.NONE, result.error_message
    assert (result.offset, result.timestamp, result.leader_epoch, result.tier) == (
        found.offset,
        found.timestamp,
        found.leader_epoch,
        found.tier,
    )
    return found.offset, found.timestamp, found.leader_epoch, found.tier


@pytest.mark.parametrize(
    "sidecar", [("both", False), ("remote", False)], indirect=True, ids=["both", "remote"]
)
def test_the_highest_tiered_offset_is_the_remote_tiers_while_it_holds_it(sidecar: Sidecar) -> None:
    truth = sidecar.tiered.truth
    highest = truth.highest_copied
    assert highest >= 0, sidecar.tiered.notes
    assert _answer(sidecar.rt, sidecar) == (highest, -1, truth.epoch_at(highest), "remote")
    query = sidecar.query_tier()
    try:
        assert _answer(query, sidecar) == (highest, -1, truth.epoch_at(highest), "remote")
    finally:
        query.close()


@pytest.mark.parametrize(
    "sidecar", [("both", True), ("remote", True)], indirect=True, ids=["local-kept", "local-deleted"]
)
def test_once_retention_deleted_every_remote_segment_the_highest_copied_offset_stays(
    sidecar: Sidecar,
) -> None:
    tiered, truth = sidecar.tiered, sidecar.tiered.truth
    highest = truth.highest_copied
    assert highest >= 0 and tiered.retention_deleted > 0, tiered.notes
    assert not list(sidecar.rt.store.list_segments(tiered.tp, states=[SegmentState.COPY_SEGMENT_FINISHED]))
    assert truth.log_start_offset == highest + 1, tiered.notes
    # The offset is no tier's any more: below the log start offset, its segments deleted. Its
    # epoch is the broker's checkpoint's, which local retention cut past it when it deleted the
    # local segments (-1), else still holds it.
    assert _answer(sidecar.rt, sidecar) == (highest, -1, truth.held_epoch_at(highest), None)

    # As Kafka leaves it: the leader epoch checkpoint truncated at the new log start offset.
    checkpoint = tiered.partition.path / LEADER_EPOCH_CHECKPOINT
    kept = [e for e in truth.epochs if e.start_offset > truth.log_start_offset]
    first = max(
        (e for e in truth.epochs if e.start_offset <= truth.log_start_offset), key=lambda e: e.start_offset
    )
    write_leader_epoch_checkpoint(checkpoint, [EpochEntry(first.epoch, truth.log_start_offset), *kept])
    assert _answer(sidecar.rt, sidecar) == (highest, -1, -1, None)

    # A query tier has no checkpoint, and no segment holds the offset: no epoch either.
    query = sidecar.query_tier()
    try:
        assert _answer(query, sidecar) == (highest, -1, -1, None)
    finally:
        query.close()
