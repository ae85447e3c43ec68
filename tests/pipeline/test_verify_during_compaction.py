"""``rlm spark verify`` while a compaction job runs: what the job wrote and has not swapped in yet
is recorded (its cleanup deletes it if the job dies), so it is no orphan."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest

from rlm.pipeline.compact.engine import GroupResult, InProcessEngine
from rlm.pipeline.compact.job import CompactOptions, compact
from rlm.pipeline.stage import run_in_process
from rlm.pipeline.storage import StorageSpec
from rlm.pipeline.verify.job import VerifyOptions, VerifyReport, verify
from rlm.pipeline.verify.problems import ProblemKind
from tests.pipeline.compact.support import compacting, write_keyed_log
from tests.pipeline.compact.test_reference_job import NOW
from tests.pipeline.conftest import make_tier
from tests.pipeline.tiers import Tier


@pytest.fixture
def tier(request: pytest.FixtureRequest, tmp_path: Path) -> Tier:
    return make_tier("sqlite-fs", request, tmp_path, functools.partial(write_keyed_log, seed=9))


def _verify(tier: Tier) -> VerifyReport:
    storage = tier.open_storage()
    try:
        with tier.open_store() as store:
            spec = StorageSpec.from_settings(tier.settings)
            return verify(store, storage, spec, run_in_process, VerifyOptions(), now_ms=NOW)
    finally:
        storage.close()


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
