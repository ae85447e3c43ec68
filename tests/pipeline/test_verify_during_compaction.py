"""``rlm spark verify`` while a compaction job runs: what the job wrote and has not swapped in yet
is recorded (its cleanup deletes it if the job dies), so it is no orphan; nor is what a copy
started while verify ran uploads, nor what was deleted after it was listed."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rlm.metastore.model import SegmentState, TopicPartition
from rlm.pipeline.compact.engine import GroupResult, InProcessEngine
from rlm.pipeline.compact.job import CompactOptions, compact
from rlm.pipeline.stage import run_in_process
from rlm.pipeline.storage import StorageSpec
from rlm.pipeline.verify.job import VerifyOptions, VerifyReport, verify
from rlm.pipeline.verify.problems import ProblemKind
from rlm.storage.filesystem import FilesystemStorage
from tests.pipeline.compact.support import TOPIC, compacting, write_keyed_log
from tests.pipeline.compact.test_reference_job import NOW
from tests.pipeline.conftest import make_tier
from tests.pipeline.tiers import Tier, add_started_row, put_orphan, verify_tier


@pytest.fixture
def tier(request: pytest.FixtureRequest, tmp_path: Path) -> Tier:
    return make_tier("sqlite-fs", request, tmp_path, functools.partial(write_keyed_log, seed=9))


def _verify(tier: Tier) -> VerifyReport:
    return verify_tier(tier, VerifyOptions(), now_ms=NOW)


def test_outputs_written_and_not_yet_swapped_in_are_no_orphans(tier: Tier) -> None:
    settings = compacting(tier.settings)
    spec = StorageSpec.from_settings(settings)
    during: list[VerifyReport] = []

    class VerifiedBeforeTheSwap(InProcessEngine):
        def write(self, outputs: Any, *, now_ms: int, write: Any) -> list[GroupResult]:
            results = super().write(outputs, now_ms=now_ms, write=write)
            during.append(_verify(tier))  # a verify that runs while the job is about to swap
            return results

    storage = tier.open_storage()
    try:
        with tier.open_store() as store:
            report = compact(
                store, storage, spec, VerifiedBeforeTheSwap(spec), settings, CompactOptions(), now_ms=NOW
            )
    finally:
        storage.close()
    assert not report.failed and report.partitions
    assert during, "the job wrote no output"
    orphans = [str(p) for r in during for p in r.problems if p.kind is ProblemKind.ORPHAN_OBJECT]
    assert orphans == []
    assert _verify(tier).healthy


class _CopyStartsWhileListing(FilesystemStorage):
    """The tier's store, where a copy of ``tp`` starts (its row, then its objects, as the copier
    goes) just before the first listing: after verify read the rows, before it listed the keys."""

    def __init__(self, tier: Tier, tp: TopicPartition) -> None:
        super().__init__(tier.backend.remote_url.removeprefix("file://"))
        self.tier, self.tp = tier, tp
        self.copied: list[str] = []

    def list_keys(self, prefix: str = "") -> Iterator[str]:
        if not self.copied:
            with self.tier.open_store() as store:
                row = add_started_row(store, self.tier.finished(self.tp)[-1], NOW)
            for key in (row.layout.log_key, row.layout.index_key):
                self.put_object(key, b"being copied")
                self.copied.append(key)
        return super().list_keys(prefix)


@pytest.mark.parametrize("topics", [(), (TOPIC,)])
def test_a_copy_that_starts_while_verify_runs_leaves_no_orphan(tier: Tier, topics: tuple[str, ...]) -> None:
    tp = TopicPartition(TOPIC, 0)
    storage = _CopyStartsWhileListing(tier, tp)
    with tier.open_store() as store:
        spec = StorageSpec.from_settings(tier.settings)
        report = verify(store, storage, spec, run_in_process, VerifyOptions(topics=topics), now_ms=NOW)
    assert len(storage.copied) == 2
    assert [str(p) for p in report.problems] == []


class _FailedCopyCleanedUpAfterListing(FilesystemStorage):
    """The tier's store, where a copy of ``tp`` under way when verify starts fails once its keys
    were listed: the copier deletes its objects and finishes the row's deletion."""

    def __init__(self, tier: Tier, tp: TopicPartition) -> None:
        super().__init__(tier.backend.remote_url.removeprefix("file://"))
        self.tier = tier
        with tier.open_store() as store:
            self.row = add_started_row(store, tier.finished(tp)[-1], NOW)
        self.keys = [self.row.layout.log_key, self.row.layout.index_key]
        for key in self.keys:
            self.put_object(key, b"being copied")
        self.cleaned = False

    def list_keys(self, prefix: str = "") -> Iterator[str]:
        yield from super().list_keys(prefix)
        if not self.cleaned:
            self.cleaned = True
            with self.tier.open_store() as store:
                store.update_segment_state(
                    self.row.segment_id, SegmentState.DELETE_SEGMENT_STARTED, event_time_ms=NOW
                )
                self.delete_objects(self.keys)
                store.update_segment_state(
                    self.row.segment_id, SegmentState.DELETE_SEGMENT_FINISHED, event_time_ms=NOW
                )


@pytest.mark.parametrize("topics", [(), (TOPIC,)])
def test_objects_deleted_after_they_were_listed_are_no_orphans(tier: Tier, topics: tuple[str, ...]) -> None:
    storage = _FailedCopyCleanedUpAfterListing(tier, TopicPartition(TOPIC, 0))
    with tier.open_store() as store:
        spec = StorageSpec.from_settings(tier.settings)
        report = verify(store, storage, spec, run_in_process, VerifyOptions(topics=topics), now_ms=NOW)
    assert storage.cleaned
    assert [str(p) for p in report.problems] == []
    # An object no row references that stays is still an orphan.
    put_orphan(storage, tier.finished(TopicPartition(TOPIC, 0))[-1])
    with tier.open_store() as store:
        report = verify(store, storage, spec, run_in_process, VerifyOptions(topics=topics), now_ms=NOW)
    assert [p.kind for p in report.problems] == [ProblemKind.ORPHAN_OBJECT]
