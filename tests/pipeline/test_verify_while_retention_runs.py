"""``rlm spark verify`` while retention (or a compaction's deferred deletion) runs: a segment
planned as finished and deleted before its check reached it left the tier; it is not missing, and
one deleted between the reads of its partition's record and of its segments leaves no gap."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from metadata.store import SqlMetadataStore
from rlm.metastore.model import RemoteSegment, TopicPartition
from rlm.pipeline.stage import Stage, run_in_process
from rlm.pipeline.storage import StorageSpec
from rlm.pipeline.verify.job import VerifyOptions, verify
from rlm.pipeline.verify.problems import ProblemKind
from rlm.remote_tier.read_plan import SegmentSummary
from tests.pipeline.conftest import make_tier
from tests.pipeline.tiers import Tier, delete_finished, verify_tier

NOW = 1_800_000_000_000


@pytest.fixture
def tier(request: pytest.FixtureRequest, tmp_path: Path) -> Tier:
    return make_tier("sqlite-fs", request, tmp_path)


@pytest.mark.parametrize("deep", [False, True])
def test_a_segment_deleted_while_verify_runs_is_not_missing(tier: Tier, deep: bool) -> None:
    tp = TopicPartition("orders", 0)
    victim = tier.finished(tp)[0]

    def retention_first(stage: Stage, summaries: Sequence[SegmentSummary]) -> pa.Table:
        """The stage, run once retention deleted the victim (planned as finished)."""
        assert victim.segment_id in {s.segment.segment_id for s in summaries}
        storage = tier.open_storage()
        try:
            with tier.open_store() as store:
                store.advance_log_start_offset(tp, victim.end_offset + 1)
                delete_finished(store, storage, victim, NOW)
        finally:
            storage.close()
        return run_in_process(stage, summaries)

    report = verify_tier(tier, VerifyOptions(deep=deep), now_ms=NOW, collect=retention_first)
    assert [str(p) for p in report.problems] == []
    # The same segment's objects gone while its row says finished is a problem.
    storage = tier.open_storage()
    try:
        survivor = tier.finished(tp)[0]
        storage.delete_objects([survivor.layout.log_key])
    finally:
        storage.close()
    report = verify_tier(tier, VerifyOptions(deep=deep), now_ms=NOW)
    assert [(p.kind, p.segment_id) for p in report.problems] == [
        (ProblemKind.MISSING_OBJECT, str(survivor.segment_id))
    ]


class _RetentionBeforeTheSegmentsAreRead(SqlMetadataStore):
    """The tier's store, where retention deletes ``victim`` (advancing the remote log start
    offset past it first, as retention does) just before verify reads its partition's segments:
    after verify read the partition's record."""

    victim: RemoteSegment
    tier: Tier
    done = False

    def list_segments(self, tp: TopicPartition, **filters: Any) -> Iterator[RemoteSegment]:
        if not self.done and tp == self.victim.topic_partition:
            self.done = True
            storage = self.tier.open_storage()
            try:
                with self.tier.open_store() as store:
                    store.advance_log_start_offset(tp, self.victim.end_offset + 1)
                    delete_finished(store, storage, self.victim, NOW)
            finally:
                storage.close()
        return super().list_segments(tp, **filters)


def test_segments_retention_deletes_while_verify_plans_leave_no_gap(tier: Tier) -> None:
    tp = TopicPartition("orders", 0)
    with tier.open_store() as store:  # an earlier retention pass set the remote log start offset
        assert store.advance_log_start_offset(tp, 0) == 0
    store = _RetentionBeforeTheSegmentsAreRead.open(tier.settings.metadata_url)
    assert isinstance(store, _RetentionBeforeTheSegmentsAreRead)
    store.victim, store.tier = tier.finished(tp)[0], tier
    storage = tier.open_storage()
    try:
        spec = StorageSpec.from_settings(tier.settings)
        report = verify(store, storage, spec, run_in_process, VerifyOptions(), now_ms=NOW)
    finally:
        storage.close()
        store.close()
    assert store.done
    assert [str(p) for p in report.problems] == []
