"""The lookup service's in-memory segment lists (:mod:`rlm.lookup.segment_lists`).

* :meth:`SegmentList.first_for_timestamp` gives the store's ``first_segment_for_timestamp``
  answer, over random segments that overlap, share start offsets, lack timestamps, or were never
  finished or since deleted (SQLite, and PostgreSQL when marked), and brute force's too.
* A list is kept while the version it was read at holds, across summaries; a partition over the
  bound is not listed, nor listed again until its remote log start offset moves, and its lookups
  ask the store and still answer right; past the total bound the least recently searched lists go.
* A list read before retention deleted a segment (in another sidecar: nothing told this one) is
  dropped at the first lookup that reads the deleted segment, which then answers as the store
  says; the next lookup reads a new list.
"""

from __future__ import annotations

import dataclasses
import tempfile
import uuid
from collections.abc import Callable, Collection, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from metadata.engine import create_engine_for_url
from metadata.store import SqlMetadataStore
from rlm.config import TopicSettings
from rlm.log.logdir import LogDir
from rlm.lookup.segment_lists import DEFAULT_MAX_SEGMENTS, SegmentList, SegmentLists
from rlm.lookup.service import LookupService
from rlm.metastore import RemoteSegment, RemoteTierSummary, SegmentState, TopicPartition
from rlm.tiering.retention import Retention
from tests.clock import FakeClock
from tests.lookup_support import (
    TOPIC,
    Backend,
    BatchPlan,
    Expected,
    PartitionPlan,
    Tiered,
    runtime,
    tier_partition,
    write_partition,
)
from tests.metadata_support import BACKENDS, TP, add_finished, clear, open_store, segment, sqlite_copy

FINISHED = SegmentState.COPY_SEGMENT_FINISHED
DELETE_STARTED = SegmentState.DELETE_SEGMENT_STARTED
DELETE_FINISHED = SegmentState.DELETE_SEGMENT_FINISHED


class CountingStore(SqlMetadataStore):
    """The SQL store, counting the segment searches, the listings of finished segments and the
    reads of remote-tier summaries."""

    searches = 0
    listings = 0
    summaries = 0

    def remote_tier_summaries(
        self, tps: Collection[TopicPartition]
    ) -> dict[TopicPartition, RemoteTierSummary]:
        self.summaries += 1
        return super().remote_tier_summaries(tps)

    def first_segment_for_timestamp(
        self, tp: TopicPartition, timestamp_ms: int, *, from_offset: int = 0
    ) -> RemoteSegment | None:
        self.searches += 1
        return super().first_segment_for_timestamp(tp, timestamp_ms, from_offset=from_offset)

    def list_segments(
        self,
        tp: TopicPartition,
        *,
        states: Collection[SegmentState] | None = None,
        leader_epoch: int | None = None,
    ) -> Iterator[RemoteSegment]:
        if states is not None and list(states) == [FINISHED]:
            self.listings += 1
        return super().list_segments(tp, states=states, leader_epoch=leader_epoch)


def counting_store(url: str, *, list_page_size: int = 500) -> CountingStore:
    return CountingStore(create_engine_for_url(url), clock=FakeClock(), list_page_size=list_page_size)


# -- the list's answers against the store's ------------------------------------------------------


@pytest.fixture(scope="module", params=BACKENDS)
def module_store(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SqlMetadataStore]:
    """One store per backend for the module, listing 3 segments a page; each example empties it."""
    if request.param == "sqlite":
        url = sqlite_copy(request.getfixturevalue("sqlite_template"), tmp_path_factory.mktemp("segments"))
    else:
        url = request.getfixturevalue("postgres_url")
    with open_store(url, FakeClock(), list_page_size=3) as store:
        yield store


#: What becomes of a drawn segment: finished (most), still copying, being deleted, deleted.
_FATES = (FINISHED, FINISHED, FINISHED, SegmentState.COPY_SEGMENT_STARTED, DELETE_STARTED, DELETE_FINISHED)


@st.composite
def _segments(draw: st.DrawFn) -> list[tuple[RemoteSegment, SegmentState]]:
    """Segments over a small offset range, so that they overlap and share start offsets, with
    timestamps that tie, go down as well as up, or are missing (-1)."""
    out = []
    for _ in range(draw(st.integers(0, 30))):
        start = draw(st.one_of(st.integers(0, 200), st.sampled_from([0, 50, 100])))
        end = start + draw(st.one_of(st.integers(0, 3), st.integers(0, 80)))
        timestamp = draw(st.one_of(st.integers(-1, 30), st.sampled_from([-1, 10, 20])))
        out.append((segment(start, end, timestamp), draw(st.sampled_from(_FATES))))
    return out


def _store_segments(store: SqlMetadataStore, drawn: list[tuple[RemoteSegment, SegmentState]]) -> None:
    for seg, fate in drawn:
        if fate is SegmentState.COPY_SEGMENT_STARTED:
            store.add_segment(seg)
            continue
        add_finished(store, seg)
        if fate is not FINISHED:
            store.update_segment_state(seg.segment_id, DELETE_STARTED, event_time_ms=2)
        if fate is DELETE_FINISHED:
            store.update_segment_state(seg.segment_id, DELETE_FINISHED, event_time_ms=3)


def _probes(drawn: list[tuple[RemoteSegment, SegmentState]]) -> tuple[list[int], list[int]]:
    """Timestamps and first offsets at, and next to, every edge of every segment."""
    timestamps = {-5, -1, 0, 10**15}
    offsets = {-3, 0, 1, 10**12}
    for seg, _ in drawn:
        timestamps.update(seg.max_timestamp_ms + d for d in (-1, 0, 1))
        for value in (seg.start_offset, seg.end_offset):
            offsets.update(value + d for d in (-1, 0, 1))
    return sorted(timestamps), sorted(offsets)


@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(drawn=_segments(), data=st.data())
def test_first_for_timestamp_answers_as_the_store(
    module_store: SqlMetadataStore, drawn: list[tuple[RemoteSegment, SegmentState]], data: st.DataObject
) -> None:
    store = module_store
    clear(store.engine)
    _store_segments(store, drawn)
    listed = SegmentList(store.list_segments(TP, states=[FINISHED]))
    finished = [seg for seg, fate in drawn if fate is FINISHED]
    assert sorted(s.segment_id for s in listed.segments) == sorted(s.segment_id for s in finished)
    timestamps, offsets = _probes(drawn)
    probes = data.draw(
        st.lists(st.tuples(st.sampled_from(timestamps), st.sampled_from(offsets)), max_size=40)
    )
    for timestamp, offset in probes:
        found = listed.first_for_timestamp(timestamp, from_offset=offset)
        expected = store.first_segment_for_timestamp(TP, timestamp, from_offset=offset)
        assert (found and found.segment_id) == (expected and expected.segment_id), (timestamp, offset)
    # Every probe against brute force: the first finished segment in offset order that qualifies.
    in_order = sorted(finished, key=lambda s: (s.start_offset, s.segment_id.int))
    for timestamp in timestamps:
        for offset in offsets:
            found = listed.first_for_timestamp(timestamp, from_offset=offset)
            brute = next(
                (s for s in in_order if s.max_timestamp_ms >= timestamp and s.end_offset >= offset), None
            )
            assert (found and found.segment_id) == (brute and brute.segment_id), (timestamp, offset)


def test_a_list_out_of_offset_order_is_refused() -> None:
    with pytest.raises(ValueError, match="offset order"):
        SegmentList([segment(10, 19), segment(0, 9)])


# -- the bound ------------------------------------------------------------------------------------


@pytest.fixture
def store(sqlite_template: Path, tmp_path: Path) -> Iterator[CountingStore]:
    opened = counting_store(sqlite_copy(sqlite_template, tmp_path), list_page_size=2)
    try:
        yield opened
    finally:
        opened.close()


def test_a_partition_over_the_bound_is_not_kept(store: CountingStore) -> None:
    add_finished(store, *(segment(i * 10, i * 10 + 9, i) for i in range(5)))
    at_bound = SegmentLists(store, max_segments=5).get(TP, "v1", -1)
    assert at_bound is not None and [s.start_offset for s in at_bound.segments] == [0, 10, 20, 30, 40]
    assert SegmentLists(store, max_segments=4).get(TP, "v1", -1) is None
    assert SegmentLists(store, max_segments=0).get(TP, "v1", -1) is None


def test_over_the_bound_is_checked_again_only_when_the_log_start_offset_moved(store: CountingStore) -> None:
    add_finished(store, *(segment(i * 10, i * 10 + 9, i) for i in range(3)))
    lists = SegmentLists(store, max_segments=2)
    assert lists.get(TP, "v1", -1) is None
    assert store.listings == 1
    add_finished(store, segment(30, 39, 3))
    assert lists.get(TP, "v2", -1) is None  # copies only add segments: not listed again
    assert store.listings == 1
    # Retention deletes the first two segments, advancing the log start offset first.
    first, second = list(store.list_segments(TP, states=[FINISHED]))[:2]
    store.advance_log_start_offset(TP, second.end_offset + 1)
    for gone in (first, second):
        store.update_segment_state(gone.segment_id, DELETE_STARTED, event_time_ms=2)
    listings = store.listings
    found = lists.get(TP, "v3", second.end_offset + 1)
    assert store.listings == listings + 1
    assert found is not None and [s.start_offset for s in found.segments] == [20, 30]


def test_a_list_is_kept_while_its_version_holds(store: CountingStore) -> None:
    add_finished(store, segment(0, 9, 5))
    lists = SegmentLists(store)
    first = lists.get(TP, "v1", -1)
    assert lists.get(TP, "v1", -1) is first and store.listings == 1
    add_finished(store, segment(10, 19, 6))
    assert lists.get(TP, "v1", -1) is first  # the version the list was read at: the same list
    newer = lists.get(TP, "v2", -1)
    assert newer is not None and len(newer) == 2 and store.listings == 2
    lists.drop(TP)
    again = lists.get(TP, "v2", -1)
    assert again is not None and again is not newer and store.listings == 3


def test_the_least_recently_searched_lists_go_past_the_total_bound(store: CountingStore) -> None:
    other = TopicPartition(TP.topic, TP.partition + 1)
    third = TopicPartition(TP.topic, TP.partition + 2)
    for tp in (TP, other, third):
        add_finished(store, *(segment(i * 10, i * 10 + 9, i, tp=tp) for i in range(2)))
    lists = SegmentLists(store, max_segments=2, max_total_segments=4)
    kept = lists.get(TP, "v", -1)
    lists.get(other, "v", -1)
    assert lists.total_segments == 4 and store.listings == 2
    assert lists.get(TP, "v", -1) is kept  # searched last: `other` is now the oldest
    lists.get(third, "v", -1)
    assert lists.total_segments == 4 and store.listings == 3
    assert lists.get(TP, "v", -1) is kept and store.listings == 3
    lists.get(other, "v", -1)  # dropped: read again
    assert lists.total_segments == 4 and store.listings == 4
    lists.drop()
    assert lists.total_segments == 0


@pytest.mark.parametrize(("per_partition", "total"), [(-1, 10), (11, 10), (0, -1)])
def test_bad_bounds_are_refused(store: CountingStore, per_partition: int, total: int) -> None:
    with pytest.raises(ValueError, match="max_segments"):
        SegmentLists(store, max_segments=per_partition, max_total_segments=total)


# -- lookups ---------------------------------------------------------------------------------------


def _plan() -> PartitionPlan:
    """Rising timestamps over many small segments, all tiered, the tiered ones deleted locally."""
    batches = tuple(BatchPlan(timestamps=(i * 100, i * 100 + 10, i * 100 + 20)) for i in range(40))
    return PartitionPlan(batches, segment_bytes=600, index_interval_bytes=128, tiering="remote")


class Sidecar:
    """A tiered partition and a lookup service of its own over a counting store, whose summary
    of the remote tier is reused for an hour of its clock (which only the test moves)."""

    def __init__(self, tiered: Tiered, url: str, *, max_listed_segments: int = DEFAULT_MAX_SEGMENTS) -> None:
        self.tiered = tiered
        self.store = counting_store(url)
        self.clock = FakeClock(0.0)
        rt = tiered.runtime
        self.service = LookupService(
            self.store,
            rt.storage,
            rt.index_cache,
            rt.settings.log_dirs,
            metadata_ttl_s=3600,
            max_listed_segments=max_listed_segments,
            clock=self.clock,
        )

    def finished(self) -> list[RemoteSegment]:
        return list(self.tiered.runtime.store.list_segments(self.tiered.tp, states=[FINISHED]))

    def answer(self, timestamp: int) -> Expected:
        found = self.service.find(self.tiered.tp, timestamp)
        return Expected(found.offset, found.timestamp, found.leader_epoch)


SidecarOf = Callable[..., Sidecar]


@pytest.fixture
def sidecar_of(sqlite_template: Path) -> Iterator[SidecarOf]:
    """Builds :class:`Sidecar` objects over a fresh tiered partition; closes what it built."""
    made: list[Sidecar] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        log_dir = root / "logs"
        truth = write_partition(log_dir, _plan())
        rt = runtime(Backend("sqlite-fs", sqlite_template=sqlite_template), root, log_dir)
        try:
            tiered = tier_partition(rt, LogDir(log_dir).partition(TOPIC, 0), truth, _plan())

            def build(**options: int) -> Sidecar:
                made.append(Sidecar(tiered, rt.settings.metadata_url, **options))
                return made[-1]

            yield build
        finally:
            for sidecar in made:
                sidecar.store.close()
            rt.close()


def _remote_timestamps(sidecar: Sidecar) -> list[int]:
    truth = sidecar.tiered.truth
    return [r.record.timestamp for r in truth.records if r.record.offset < truth.local_start_offset]


def test_lookups_answer_from_the_list_without_searching_the_store(sidecar_of: SidecarOf) -> None:
    sidecar = sidecar_of()
    assert len(sidecar.finished()) >= 4
    truth = sidecar.tiered.truth
    for timestamp in _remote_timestamps(sidecar):
        for target in (timestamp - 1, timestamp):
            assert sidecar.answer(target) == truth.for_timestamp(target), target
            assert sidecar.service.find(sidecar.tiered.tp, target).tier == "remote"
    assert sidecar.store.searches == 0
    assert (sidecar.store.summaries, sidecar.store.listings) == (1, 1)  # the summary, then the list


def test_the_list_outlives_the_summaries_of_its_version(sidecar_of: SidecarOf) -> None:
    sidecar = sidecar_of()
    truth, tp = sidecar.tiered.truth, sidecar.tiered.tp
    timestamps = _remote_timestamps(sidecar)
    assert sidecar.answer(timestamps[0]) == truth.for_timestamp(timestamps[0])
    assert (sidecar.store.summaries, sidecar.store.listings) == (1, 1)  # the summary, then the list
    sidecar.clock.advance(7200)  # the summary expires; the store's record of the partition is the same
    assert sidecar.answer(timestamps[1]) == truth.for_timestamp(timestamps[1])
    assert (sidecar.store.summaries, sidecar.store.listings) == (2, 1)  # the summary only
    # The remote log start offset moves (to the first offset: the answers stay the same).
    first = sidecar.finished()[0]
    sidecar.tiered.runtime.store.advance_log_start_offset(tp, first.start_offset)
    sidecar.clock.advance(7200)
    assert sidecar.answer(timestamps[2]) == truth.for_timestamp(timestamps[2])
    assert (sidecar.store.summaries, sidecar.store.listings) == (3, 2)  # the summary and a new list
    assert sidecar.store.searches == 0


def test_over_the_bound_lookups_search_the_store_and_answer_the_same(sidecar_of: SidecarOf) -> None:
    sidecar = sidecar_of(max_listed_segments=2)
    assert len(sidecar.finished()) > 2
    truth = sidecar.tiered.truth
    timestamps = _remote_timestamps(sidecar)
    for timestamp in timestamps:
        assert sidecar.answer(timestamp) == truth.for_timestamp(timestamp), timestamp
    assert sidecar.store.searches >= len(timestamps)
    assert sidecar.store.listings == 1  # over the bound once, never listed again


def test_a_lookup_after_retention_deleted_a_listed_segment_answers_as_the_store(
    sidecar_of: SidecarOf,
) -> None:
    sidecar = sidecar_of()
    tiered, truth = sidecar.tiered, sidecar.tiered.truth
    first, second = sidecar.finished()[:2]
    doomed = [r.record for r in truth.records if first.start_offset <= r.record.offset <= first.end_offset]
    target = doomed[len(doomed) // 2].timestamp
    assert sidecar.answer(target) == truth.for_timestamp(target)
    assert sidecar.store.listings == 1 and sidecar.store.searches == 0

    # Another sidecar's retention deletes the first segment: nothing tells this service.
    rt = tiered.runtime
    expire = rt.settings.replace(topic_defaults=TopicSettings(retention_ms=1))
    retention = Retention(
        expire,
        rt.store,
        rt.storage,
        rt.metrics,
        leases=rt.retention.leases,
        clock=lambda: first.max_timestamp_ms + 1,
    )
    [outcome] = retention.run_once([tiered.partition])
    assert outcome.error is None and outcome.deleted_segments == 1, outcome
    assert rt.storage.object_size(first.layout.log_key) is None
    truth.log_start_offset = outcome.log_start_offset
    expected = truth.for_timestamp(target)
    assert expected.offset == second.start_offset  # the answer moved to the next segment

    # The stale list names the deleted segment first: its object is gone, so the list is dropped
    # and the lookup searched again with the store's answers.
    assert sidecar.answer(target) == expected
    assert sidecar.store.searches >= 1
    # The next lookup reads a new list, without the deleted segment, and needs the store no more.
    searches = sidecar.store.searches
    assert sidecar.answer(target) == expected
    assert sidecar.store.listings == 2 and sidecar.store.searches == searches
    later = [r.record.timestamp for r in truth.records if second.start_offset <= r.record.offset][:5]
    for timestamp in later:
        assert sidecar.answer(timestamp) == truth.for_timestamp(timestamp), timestamp
    assert sidecar.store.searches == searches


def test_a_list_read_before_copies_were_replaced_is_not_reused_at_the_same_offsets_and_size(
    sidecar_of: SidecarOf,
) -> None:
    sidecar = sidecar_of()
    tiered, truth = sidecar.tiered, sidecar.tiered.truth
    store = sidecar.store  # the same database as the runtime's
    *_, diverged, last = sidecar.finished()
    target = diverged.max_timestamp_ms
    assert sidecar.answer(target) == truth.for_timestamp(target)
    assert sidecar.store.listings == 1
    before = store.get_partition(tiered.tp)
    assert before is not None

    # Another sidecar finds the last two copies diverged from the broker's log (an unclean leader
    # election) and tiers the log again over the same offsets, to the same size; the new leader's
    # records there are older than the diverged copy's. The retired copies' objects still exist.
    assert store.truncate_copies(tiered.tp, diverged.start_offset, event_time_ms=1) == 2
    started = SegmentState.COPY_SEGMENT_STARTED
    again = dataclasses.replace(diverged, segment_id=uuid.uuid4(), max_timestamp_ms=target - 1, state=started)
    add_finished(store, again, dataclasses.replace(last, segment_id=uuid.uuid4(), state=started))
    after = store.get_partition(tiered.tp)
    assert after is not None and after.lineage == before.lineage + 1
    assert (after.highest_copied_offset, after.remote_log_start_offset, after.remote_log_size_bytes) == (
        before.highest_copied_offset,
        before.remote_log_start_offset,
        before.remote_log_size_bytes,
    )

    # The store's answer is the first offset of the last copy: the replaced copy of `diverged`
    # holds nothing that recent.
    sidecar.clock.advance(7200)
    assert sidecar.answer(target).offset == last.start_offset
    assert sidecar.store.listings == 2
