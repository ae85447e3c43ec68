"""``rlm spark verify`` while retention (or a compaction's deferred deletion) runs: a segment
planned as finished and deleted before its check reached it left the tier; it is not missing."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pytest

from rlm.metastore.model import TopicPartition
from rlm.pipeline.stage import Stage, run_in_process
from rlm.pipeline.storage import StorageSpec
from rlm.pipeline.verify.job import VerifyOptions, verify
from rlm.pipeline.verify.problems import ProblemKind
from rlm.remote_tier.read_plan import SegmentSummary
from tests.pipeline.conftest import make_tier
from tests.pipeline.tiers import Tier, delete_finished

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

    storage = tier.open_storage()
    try:
        with tier.open_store() as store:
            spec = StorageSpec.from_settings(tier.settings)
            report = verify(store, storage, spec, retention_first, VerifyOptions(deep=deep), now_ms=NOW)
    finally:
        storage.close()
    assert [str(p) for p in report.problems] == []
    # The same segment's objects gone while its row says finished is a problem.
    storage = tier.open_storage()
    try:
        survivor = tier.finished(tp)[0]
        storage.delete_objects([survivor.layout.log_key])
        with tier.open_store() as store:
            report = verify(store, storage, spec, run_in_process, VerifyOptions(deep=deep), now_ms=NOW)
    finally:
        storage.close()
    assert [(p.kind, p.segment_id) for p in report.problems] == [
        (ProblemKind.MISSING_OBJECT, str(survivor.segment_id))
    ]
