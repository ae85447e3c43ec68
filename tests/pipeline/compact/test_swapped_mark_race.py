"""Retention deleting a compacted segment while the job marks its index object swapped: the mark
re-stores the object it read, and must not leave it behind once the segment is deleted."""

from __future__ import annotations

import contextlib
import functools
from pathlib import Path
from typing import Any

import pytest

from metadata.store import SqlMetadataStore
from rlm.metastore.model import SegmentState, TopicPartition
from rlm.pipeline.compact.engine import InProcessEngine
from rlm.pipeline.compact.job import CompactOptions, compact
from rlm.pipeline.storage import StorageSpec
from rlm.storage.protocol import RemoteStorage
from rlm.tiering.deletion import delete_segment
from tests.pipeline.compact.support import TOPIC, compacting, orphans, write_keyed_log
from tests.pipeline.compact.test_reference_job import NOW
from tests.pipeline.conftest import make_tier
from tests.pipeline.tiers import Tier

P0 = TopicPartition(TOPIC, 0)


class _RetentionDuringMark:
    """The tier's storage; each time the job re-stores a compacted segment's index object (its
    swapped mark), retention deletes that segment first, between the mark's read and its put."""

    def __init__(self, storage: RemoteStorage, store: SqlMetadataStore) -> None:
        self._storage = storage
        self._store = store
        self.deleted: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._storage, name)

    def put_object(self, key: str, data: bytes, **kwargs: Any) -> Any:
        for tp in (P0,):
            for row in self._store.list_segments(tp, states=[SegmentState.COPY_SEGMENT_FINISHED]):
                if row.layout.index_key == key:
                    assert delete_segment(self._store, self._storage, row, now_ms=NOW, fence=None)
                    self.deleted.append(key)
        return self._storage.put_object(key, data, **kwargs)


@pytest.fixture
def tier(request: pytest.FixtureRequest, tmp_path: Path) -> Tier:
    return make_tier("sqlite-fs", request, tmp_path, functools.partial(write_keyed_log, seed=9))


def test_a_compacted_segment_deleted_while_marked_swapped_leaves_no_object(tier: Tier) -> None:
    settings = compacting(tier.settings)
    spec = StorageSpec.from_settings(settings)
    with tier.open_store() as store, contextlib.closing(tier.open_storage()) as inner:
        storage = _RetentionDuringMark(inner, store)
        options = CompactOptions(partitions=(0,))
        report = compact(store, storage, spec, InProcessEngine(spec), settings, options, now_ms=NOW)  # type: ignore[arg-type]

    assert [p.status for p in report.partitions] == ["compacted"]
    assert storage.deleted  # retention got to a compacted segment during its mark
    assert not orphans(tier)
