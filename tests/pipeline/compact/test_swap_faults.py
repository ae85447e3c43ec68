"""A compaction swap whose answer is lost (the database timed out: the swap may or may not have
landed): that partition is reported failed and its outputs kept for the next job's cleanup, which
keeps them when the swap landed and deletes them when it did not; the other partitions are
swapped in."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from metadata.store import SqlMetadataStore
from rlm.errors import MetadataUnavailableError
from rlm.metastore.compaction import CompactionLease
from rlm.metastore.model import RemoteSegment, TopicPartition
from rlm.pipeline.compact.engine import InProcessEngine
from rlm.pipeline.compact.job import CompactOptions, compact
from rlm.pipeline.storage import StorageSpec
from tests.pipeline.compact.support import TOPIC, compacting, live_keys, orphans, write_keyed_log
from tests.pipeline.compact.test_reference_job import NOW, run
from tests.pipeline.conftest import make_tier
from tests.pipeline.tiers import Tier

P0, P1 = TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)


class _LostSwapAnswer(SqlMetadataStore):
    """The real store, except that the answer of partition 0's swap is lost (after it landed when
    ``lands``)."""

    lands = False
    """Set by the test before it opens the store."""

    def swap_compacted(
        self, lease: CompactionLease, new: Sequence[RemoteSegment], replaced: Sequence[UUID], **kwargs: Any
    ) -> bool:
        if lease.topic_partition != P0:
            return super().swap_compacted(lease, new, replaced, **kwargs)
        if self.lands:
            super().swap_compacted(lease, new, replaced, **kwargs)
        raise MetadataUnavailableError("the metadata database did not answer within 6 s", kind="timeout")


@pytest.fixture
def tier(request: pytest.FixtureRequest, tmp_path: Path) -> Tier:
    return make_tier("sqlite-fs", request, tmp_path, functools.partial(write_keyed_log, seed=9))


@pytest.mark.parametrize("lands", [True, False], ids=["landed", "lost"])
def test_a_swap_whose_answer_is_lost_fails_only_its_partition(tier: Tier, lands: bool) -> None:
    settings = compacting(tier.settings)
    spec = StorageSpec.from_settings(settings)
    p0_before = tier.finished(P0)
    _LostSwapAnswer.lands = lands
    with (
        _LostSwapAnswer.open(tier.settings.metadata_url) as store,
        contextlib.closing(tier.open_storage()) as storage,
    ):
        report = compact(store, storage, spec, InProcessEngine(spec), settings, CompactOptions(), now_ms=NOW)
    by_tp = {p.topic_partition: p for p in report.partitions}
    assert by_tp[P0].status == "failed" and "did not answer" in (by_tp[P0].reason or "")
    assert by_tp[P1].status == "compacted"
    assert (tier.finished(P0) != p0_before) == lands
    stored = set(live_keys(tier))  # the finished rows' objects are all there
    with contextlib.closing(tier.open_storage()) as storage:
        assert all(storage.object_size(k) is not None for k in stored)
    run(tier)  # the next job's cleanup
    assert not orphans(tier)
    with contextlib.closing(tier.open_storage()) as storage:
        assert all(storage.object_size(k) is not None for k in live_keys(tier))
