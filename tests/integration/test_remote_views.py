"""The partitions' remote-tier views (:mod:`rlm.lookup.views`) against a real store.

* A view read from the store before the process's own retention advanced the remote log start
  offset and invalidated the view, but kept after that, is not reused: the next lookup reads the
  store again and sees the new log start offset.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Iterator
from pathlib import Path

import pytest

from metadata.engine import create_engine_for_url
from metadata.store import SqlMetadataStore
from rlm.lookup.views import RemoteTierView, RemoteViews
from rlm.metastore import RemoteTierSummary, TopicPartition
from rlm.metastore.availability import StoreAvailability
from tests.clock import FakeClock
from tests.metadata_support import TP, add_finished, segment, sqlite_copy


class PausingStore(SqlMetadataStore):
    """The SQL store; once ``pause`` is set, a read of summaries waits, its answer read, until
    ``resume`` is set."""

    def __init__(self, url: str) -> None:
        super().__init__(create_engine_for_url(url), clock=FakeClock())
        self.pause = threading.Event()
        self.paused = threading.Event()
        self.resume = threading.Event()

    def remote_tier_summaries(
        self, tps: Collection[TopicPartition]
    ) -> dict[TopicPartition, RemoteTierSummary]:
        found = super().remote_tier_summaries(tps)
        if self.pause.is_set():
            self.paused.set()
            assert self.resume.wait(10)
        return found


@pytest.fixture
def store(sqlite_template: Path, tmp_path: Path) -> Iterator[PausingStore]:
    opened = PausingStore(sqlite_copy(sqlite_template, tmp_path))
    try:
        yield opened
    finally:
        opened.close()


def test_a_view_read_before_an_invalidation_is_not_kept_after_it(store: PausingStore) -> None:
    add_finished(store, segment(0, 99, 1_000), segment(100, 199, 2_000))
    views = RemoteViews(store, StoreAvailability(1.0), ttl_s=3600, clock=FakeClock(0.0))
    assert views.get(TP, None).log_start_offset == -1

    # A lookup's read of the view starts (the cached one is invalidated) and is slow to return.
    views.invalidate(TP)
    store.pause.set()
    read: list[RemoteTierView] = []
    reader = threading.Thread(target=lambda: read.append(views.get(TP, None)))
    reader.start()
    assert store.paused.wait(10)
    store.pause.clear()
    # Meanwhile the process's retention advances the remote log start offset and invalidates the
    # view, before it deletes the segment below.
    store.advance_log_start_offset(TP, 100)
    views.invalidate(TP)
    store.resume.set()
    reader.join(10)
    assert [v.log_start_offset for v in read] == [-1]  # read before: its own caller may use it

    assert views.get(TP, None).log_start_offset == 100
