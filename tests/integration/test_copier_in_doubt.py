"""A copy whose ``COPY_SEGMENT_FINISHED`` update fails with its outcome unknown.

The update is sent, then its answer is lost (the answer timeout closes the connection while the
database is stalled, say): the commit may have landed, may land later, or may never land. The
copier must not delete objects that a finished row points to, whichever happens. A store that
stands between the copier and the real one (SQLite and PostgreSQL) plays each of the three.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from metadata import SqlMetadataStore
from metadata.engine import create_engine_for_url
from rlm.errors import MetadataUnavailableError
from rlm.metastore.model import RemoteSegment, SegmentState, StateUpdate, TopicPartition
from rlm.tiering.copier import Copier
from tests.clock import FakeClock
from tests.tiering_support import Backend, SegmentPlan, Tiering, assert_invariants, write_scripted_log_dir

TP = TopicPartition("orders", 0)
NOW = 1_700_000_000_000


class Landing(enum.Enum):
    """When the lost commit of the first FINISHED update becomes visible."""

    BEFORE_THE_ANSWER = "the commit had landed"
    AFTER_THE_NEXT_READ = "the commit lands just after the copier reads the row"
    NEVER = "the commit never lands"


class InDoubtStore(SqlMetadataStore):
    """The real store, except that the first FINISHED update loses its answer (and lands as
    ``landing`` says)."""

    def __init__(self, landing: Landing, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.landing = landing
        self.in_flight: Callable[[], StateUpdate] | None = None
        self.lost = 0

    def update_segment_state(self, segment_id: UUID, state: SegmentState, **kwargs: Any) -> StateUpdate:
        if state is not SegmentState.COPY_SEGMENT_FINISHED or self.lost:
            return super().update_segment_state(segment_id, state, **kwargs)
        self.lost += 1
        commit = partial(super().update_segment_state, segment_id, state, **kwargs)
        if self.landing is Landing.BEFORE_THE_ANSWER:
            commit()
        elif self.landing is Landing.AFTER_THE_NEXT_READ:
            self.in_flight = commit
        raise MetadataUnavailableError(
            "the metadata database did not answer within 6 s; the connection was closed", kind="timeout"
        )

    def get_segment(self, segment_id: UUID) -> RemoteSegment | None:
        seen = super().get_segment(segment_id)
        if self.in_flight is not None:
            commit, self.in_flight = self.in_flight, None
            commit()
        return seen


@pytest.mark.parametrize("landing", list(Landing), ids=[landing.name.lower() for landing in Landing])
def test_a_lost_finished_update_never_leaves_a_finished_row_without_its_objects(
    backend: Backend,
    tiering_factory: Callable[..., Tiering],
    tmp_path: Path,
    landing: Landing,
) -> None:
    log_dir = tmp_path / "logs"
    write_scripted_log_dir(log_dir, {TP: [SegmentPlan(20, NOW - 1_000), SegmentPlan(20, NOW)]})
    tiering = tiering_factory(backend, log_dir, FakeClock(NOW))
    store = InDoubtStore(landing, create_engine_for_url(backend.metadata_url), clock=tiering.clock)
    copier = Copier(
        tiering.settings, store, tiering.storage, tiering.metrics, clock=tiering.clock, leases=tiering.leases
    )
    try:
        (first,) = copier.run_once()
        assert isinstance(first.error, MetadataUnavailableError) and store.lost == 1
        rows = tiering.segments(TP)
        assert len(rows) == 1
        if landing is Landing.NEVER:
            # The copy did not finish: its row and objects are gone, and the next pass copies again.
            assert rows[0].state is SegmentState.DELETE_SEGMENT_FINISHED
            assert tiering.store.highest_copied_offset(TP) == -1
        else:
            assert rows[0].state is SegmentState.COPY_SEGMENT_FINISHED
            assert tiering.store.highest_copied_offset(TP) == rows[0].end_offset
        for row in tiering.finished(TP):
            assert tiering.storage.object_size(row.layout.log_key) == row.size_bytes
            assert tiering.storage.object_size(row.layout.index_key) is not None

        (second,) = copier.run_once()
        assert second.error is None
        assert [(r.start_offset, r.end_offset) for r in tiering.finished(TP)] == [(0, 19), (20, 39)]
        assert_invariants(tiering.store, tiering.storage, [log_dir])
    finally:
        store.close()
