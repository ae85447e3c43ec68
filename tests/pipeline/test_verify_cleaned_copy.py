"""``rlm spark verify --deep`` of the copy of a segment the broker's log cleaner rewrote: the copy
keeps the broker's transaction index, whose entry of an aborted transaction the cleaner emptied
names an ABORT marker that ends no transaction the log holds."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlm.metastore.model import TopicPartition
from rlm.pipeline.verify.job import VerifyOptions
from tests.pipeline.conftest import make_tier
from tests.pipeline.tiers import verify_tier
from tests.unit.test_verify_cleaned_txn import NOW, cleaned


def test_the_copy_of_a_cleaned_segment_verifies_healthy(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    tier = make_tier("sqlite-fs", request, tmp_path, lambda logs: cleaned(logs, rolled=2))
    finished = tier.finished(TopicPartition("users", 0))
    assert finished[0].start_offset == 0 and not finished[0].txn_index_empty
    report = verify_tier(tier, VerifyOptions(deep=True), now_ms=NOW)
    assert [str(p) for p in report.problems] == []
