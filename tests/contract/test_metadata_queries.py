"""The store's lookups against brute force, over random overlapping segments and state changes.

Start offsets are drawn across every level of the offset tree (neighbours within 256 offsets,
across 256^k boundaries, up to 2^62), timestamps are unordered and often tie, and segments move
through their states in a random interleaving, so the tree is grown and shrunk in any order.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import insert, select

from metadata.models import PartitionRow, SegmentEpochRow, SegmentRow
from metadata.rows import epoch_values, segment_values
from metadata.store import SqlMetadataStore
from metadata.tree import BITS, LEVELS
from rlm.metastore import RemoteSegment, SegmentState
from tests.clock import FakeClock
from tests.metadata_support import BACKENDS, TP, clear, open_store, segment, sqlite_copy, stored_tree

STARTED = SegmentState.COPY_SEGMENT_STARTED
FINISHED = SegmentState.COPY_SEGMENT_FINISHED
DELETE_STARTED = SegmentState.DELETE_SEGMENT_STARTED
DELETE_FINISHED = SegmentState.DELETE_SEGMENT_FINISHED
#: Each segment follows one of these paths, stopping anywhere along it.
PATHS = [
    [FINISHED, DELETE_STARTED, DELETE_FINISHED],
    [DELETE_STARTED, DELETE_FINISHED],
]


@pytest.fixture(scope="module", params=BACKENDS)
def module_store(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SqlMetadataStore]:
    """One store per backend for the module; each example starts by emptying it."""
    if request.param == "sqlite":
        url = sqlite_copy(request.getfixturevalue("sqlite_template"), tmp_path_factory.mktemp("q"))
    else:
        url = request.getfixturevalue("postgres_url")
    with open_store(url, FakeClock(), list_page_size=4) as store:
        yield store


# Start offsets written in base 256 with few, small non-zero digits share prefixes at every
# level of the tree, so that searches climb and descend through several levels.
_digit = st.sampled_from([0, 0, 0, 0, 1, 2, 255])
_starts = st.one_of(
    st.integers(0, 700),
    st.builds(
        lambda digits: sum(d << (BITS * i) for i, d in enumerate(digits)),
        st.lists(_digit, min_size=LEVELS + 1, max_size=LEVELS + 1).map(lambda ds: [*ds[:7], 0]),
    ),
    st.integers(0, 2**62),
)
_lengths = st.one_of(st.integers(0, 3), st.integers(0, 300), st.integers(0, 2**26))


@st.composite
def _segment(draw: st.DrawFn) -> RemoteSegment:
    start = draw(_starts)
    end = min(start + draw(_lengths), 2**63 - 1)
    second_epoch = draw(st.one_of(st.none(), st.integers(start, end)))
    epochs = ((0, start),) if second_epoch is None else ((0, start), (1, second_epoch))
    timestamp = draw(st.one_of(st.integers(-1, 40), st.integers(0, 2**41)))
    return segment(start, end, timestamp, epochs=epochs, size_bytes=draw(st.integers(0, 99)))


@st.composite
def _history(draw: st.DrawFn) -> tuple[list[RemoteSegment], list[int], list[int]]:
    """Segments, the path each follows and how far, and an interleaving of their steps."""
    segments = draw(st.lists(_segment(), min_size=1, max_size=18))
    paths = [draw(st.integers(0, len(PATHS) - 1)) for _ in segments]
    steps = [draw(st.integers(0, len(PATHS[p]))) for p in paths]
    order = draw(st.permutations([i for i, n in enumerate(steps) for _ in range(n)]))
    return segments, paths, [*order]


def _key(seg: RemoteSegment) -> tuple[int, str]:
    return seg.start_offset, str(seg.segment_id)


def _interesting_offsets(segments: list[RemoteSegment]) -> list[int]:
    offsets = {0}
    for seg in segments:
        for value in (seg.start_offset, seg.end_offset):
            offsets.update({max(0, value - 1), value, value + 1})
        offsets.add((seg.start_offset + seg.end_offset) // 2)
    return sorted(offsets)


def _interesting_timestamps(segments: list[RemoteSegment]) -> list[int]:
    stamps = {-5, 2**42}
    for seg in segments:
        stamps.update({seg.max_timestamp_ms - 1, seg.max_timestamp_ms, seg.max_timestamp_ms + 1})
    return sorted(stamps)


def _expected_tree(finished: list[RemoteSegment]) -> dict[tuple[int, int], tuple[int, int]]:
    tree: dict[tuple[int, int], tuple[int, int]] = {}
    for seg in finished:
        for level in range(1, LEVELS + 1):
            key = (level, seg.start_offset >> (BITS * level))
            ts, end = tree.get(key, (seg.max_timestamp_ms, seg.end_offset))
            tree[key] = (max(ts, seg.max_timestamp_ms), max(end, seg.end_offset))
    return tree


@settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(history=_history(), data=st.data())
def test_lookups_match_brute_force(
    module_store: SqlMetadataStore,
    history: tuple[list[RemoteSegment], list[int], list[int]],
    data: st.DataObject,
) -> None:
    store = module_store
    clear(store.engine)
    segments, paths, order = history
    states = {seg.segment_id: STARTED for seg in segments}
    ever_finished: list[RemoteSegment] = []
    for seg in segments:
        store.add_segment(seg)
    taken = [0] * len(segments)
    for index in order:
        seg = segments[index]
        state = PATHS[paths[index]][taken[index]]
        taken[index] += 1
        assert store.update_segment_state(seg.segment_id, state, event_time_ms=1).changed
        states[seg.segment_id] = state
        if state is FINISHED:
            ever_finished.append(seg)

    finished = sorted((s for s in segments if states[s.segment_id] is FINISHED), key=_key)
    assert stored_tree(store) == _expected_tree(finished)
    assert store.max_timestamp(TP) == max((s.max_timestamp_ms for s in finished), default=None)
    assert store.remote_log_size(TP) == sum(s.size_bytes for s in finished)
    assert store.highest_copied_offset(TP) == max((s.end_offset for s in ever_finished), default=-1)
    for epoch in (0, 1):
        lasts = [r[1] for s in ever_finished if (r := s.epoch_range(epoch))]
        assert store.highest_copied_offset(TP, leader_epoch=epoch) == max(lasts, default=-1)
    listed = [(s.segment_id, s.state) for s in store.list_segments(TP, states=[FINISHED])]
    assert listed == [(s.segment_id, FINISHED) for s in finished]
    summary = store.remote_tier_summaries([TP])[TP]
    assert summary.record == store.get_partition(TP)
    assert summary.first_offset == (finished[0].start_offset if finished else None)
    assert summary.max_timestamp == store.max_timestamp(TP)

    offsets = data.draw(st.lists(st.sampled_from(_interesting_offsets(segments)), max_size=12))
    for offset in offsets:
        holding = [s for s in finished if s.contains(offset)]
        expected = max(holding, key=_key, default=None)
        found = store.segment_for_offset(TP, offset)
        assert (found and found.segment_id) == (expected and expected.segment_id), offset
        epoch = data.draw(st.integers(0, 1))
        in_epoch = [s for s in holding if (r := s.epoch_range(epoch)) is not None and r[0] <= offset <= r[1]]
        expected = max(in_epoch, key=_key, default=None)
        found = store.segment_for_offset(TP, offset, leader_epoch=epoch)
        assert (found and found.segment_id) == (expected and expected.segment_id), (offset, epoch)

    timestamps = st.sampled_from(_interesting_timestamps(segments))
    probes = data.draw(st.lists(st.tuples(st.sampled_from(offsets or [0]), timestamps), max_size=16))
    for offset, timestamp in probes:
        candidates = [s for s in finished if s.max_timestamp_ms >= timestamp and s.end_offset >= offset]
        expected = min(candidates, key=_key, default=None)
        found = store.first_segment_for_timestamp(TP, timestamp, from_offset=offset)
        assert (found and found.segment_id) == (expected and expected.segment_id), (
            offset,
            timestamp,
        )


def test_rebuilding_the_summaries_reproduces_them(database_url: str) -> None:
    with open_store(database_url, FakeClock()) as store:
        segs = [segment(i * 300, i * 300 + 299, (i * 7919) % 1000) for i in range(40)]
        for seg in segs:
            store.add_segment(seg)
        for seg in segs[::2]:
            store.update_segment_state(seg.segment_id, FINISHED, event_time_ms=1)
        for seg in segs[::6]:
            store.update_segment_state(seg.segment_id, DELETE_STARTED, event_time_ms=2)
        tree, record = stored_tree(store), store.get_partition(TP)
        store.rebuild_summaries(TP)
        assert stored_tree(store) == tree
        assert store.get_partition(TP) == record


def test_rebuilding_counts_a_bulk_loaded_segment_that_ends_at_offset_zero(database_url: str) -> None:
    # Rows written directly, as a bulk load writes them: only the rebuild derives the summaries.
    only = segment(0, 0, 500, state=FINISHED)
    with open_store(database_url, FakeClock()) as store:
        store.advance_log_start_offset(TP, 0)  # the partition's row
        with store.engine.begin() as conn:
            partition_id = conn.execute(
                select(PartitionRow.id).where(
                    PartitionRow.topic == TP.topic, PartitionRow.partition == TP.partition
                )
            ).scalar_one()
            conn.execute(insert(SegmentRow).values(segment_values(only, partition_id)))
            conn.execute(insert(SegmentEpochRow), epoch_values(only, partition_id))

        store.rebuild_summaries(TP)

        assert store.highest_copied_offset(TP) == 0
        assert store.highest_copied_offset(TP, leader_epoch=0) == 0
        assert store.remote_log_size(TP) == only.size_bytes
