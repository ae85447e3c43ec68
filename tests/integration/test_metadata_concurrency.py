"""Racing writers on one partition, each with its own engine and connections, as separate
sidecar processes would be: every race ends in exactly one valid state and loses no update."""

from __future__ import annotations

import functools
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from typing import TypeVar

import pytest

from metadata.store import SqlMetadataStore
from rlm.errors import InvalidStateTransitionError, MetadataError, StateConflictError
from rlm.metastore import RemoteSegment, SegmentState, StateUpdate
from tests.clock import FakeClock
from tests.metadata_support import TP, add_finished, open_store, segment, stored_tree

STARTED = SegmentState.COPY_SEGMENT_STARTED
FINISHED = SegmentState.COPY_SEGMENT_FINISHED
DELETE_STARTED = SegmentState.DELETE_SEGMENT_STARTED
DELETE_FINISHED = SegmentState.DELETE_SEGMENT_FINISHED
WORKERS = 4
T = TypeVar("T")


@pytest.fixture
def stores(database_url: str) -> Iterator[list[SqlMetadataStore]]:
    """One store (engine, connection pool) per worker, all on the same database."""
    with ExitStack() as stack:
        yield [stack.enter_context(open_store(database_url, FakeClock())) for _ in range(WORKERS)]


def race(*calls: Callable[[], T]) -> list[T | MetadataError]:
    """Run the calls at once, one thread each, released together; an rlm error is a result."""
    barrier = threading.Barrier(len(calls))

    def run(call: Callable[[], T]) -> T | MetadataError:
        barrier.wait()
        try:
            return call()
        except (InvalidStateTransitionError, StateConflictError) as exc:
            return exc

    with ThreadPoolExecutor(max_workers=len(calls)) as pool:
        return list(pool.map(run, calls))


def test_copier_finishing_while_cleanup_deletes_ends_in_one_state(
    stores: list[SqlMetadataStore],
) -> None:
    copier, cleanup = stores[0], stores[1]
    outcomes: Counter[str] = Counter()
    for round_ in range(30):
        seg = segment(round_ * 100, round_ * 100 + 99, size_bytes=round_)
        copier.add_segment(seg)
        finish, delete = race(
            functools.partial(copier.update_segment_state, seg.segment_id, FINISHED, event_time_ms=1),
            # The cleanup pass for abandoned copies deletes only what is still COPY_SEGMENT_STARTED.
            functools.partial(
                cleanup.update_segment_state,
                seg.segment_id,
                DELETE_STARTED,
                event_time_ms=2,
                expected=STARTED,
            ),
        )
        stored = copier.get_segment(seg.segment_id)
        assert stored is not None
        if isinstance(finish, StateUpdate):
            assert finish.changed and isinstance(delete, StateConflictError)
            assert stored.state is FINISHED
            outcomes["copier"] += 1
        else:
            assert isinstance(finish, InvalidStateTransitionError)
            assert isinstance(delete, StateUpdate) and delete.changed
            assert stored.state is DELETE_STARTED
            outcomes["cleanup"] += 1
    finished = [s for s in copier.list_segments(TP, states=[FINISHED])]
    assert copier.remote_log_size(TP) == sum(s.size_bytes for s in finished)
    assert sum(outcomes.values()) == 30


def test_retention_passes_racing_delete_each_segment_once(
    stores: list[SqlMetadataStore],
) -> None:
    segs = [segment(i * 10, i * 10 + 9, 1_000 + i, size_bytes=7) for i in range(40)]
    add_finished(stores[0], *segs)
    deleted_by: Counter[str] = Counter()
    lock = threading.Lock()

    def retention_pass(store: SqlMetadataStore) -> int:
        claimed = 0
        for seg in segs:
            try:
                update = store.update_segment_state(
                    seg.segment_id, DELETE_STARTED, event_time_ms=3, expected=FINISHED
                )
            except StateConflictError:
                # Another pass already finished deleting it.
                stored = store.get_segment(seg.segment_id)
                assert stored is not None and stored.state is DELETE_FINISHED
                continue
            if update.changed:  # this pass won the segment: it deletes the objects
                claimed += 1
                with lock:
                    deleted_by[str(seg.segment_id)] += 1
            store.update_segment_state(seg.segment_id, DELETE_FINISHED, event_time_ms=4)
        return claimed

    claims = race(*(lambda s=s: retention_pass(s) for s in stores))
    assert sum(c for c in claims if isinstance(c, int)) == len(segs)
    assert set(deleted_by.values()) == {1} and len(deleted_by) == len(segs)
    states = {s.state for s in stores[0].list_segments(TP)}
    assert states == {DELETE_FINISHED}
    assert stores[0].remote_log_size(TP) == 0
    assert stores[0].max_timestamp(TP) is None


def test_concurrent_finishes_and_deletes_lose_no_update(stores: list[SqlMetadataStore]) -> None:
    segs = [segment(i * 50, i * 50 + 49, (i * 7_919) % 5_000, size_bytes=i) for i in range(60)]
    for seg in segs:
        stores[0].add_segment(seg)
    mine = [segs[w::WORKERS] for w in range(WORKERS)]

    def work(store: SqlMetadataStore, assigned: list[RemoteSegment]) -> int:
        for seg in assigned:
            store.update_segment_state(seg.segment_id, FINISHED, event_time_ms=1)
        for seg in assigned[::3]:
            store.update_segment_state(seg.segment_id, DELETE_STARTED, event_time_ms=2)
        return len(assigned)

    race(*(lambda s=s, a=a: work(s, a) for s, a in zip(stores, mine, strict=True)))
    deleted = {seg.segment_id for part in mine for seg in part[::3]}
    finished = [s for s in segs if s.segment_id not in deleted]
    store = stores[0]
    assert store.remote_log_size(TP) == sum(s.size_bytes for s in finished)
    assert store.max_timestamp(TP) == max(s.max_timestamp_ms for s in finished)
    assert store.highest_copied_offset(TP) == max(s.end_offset for s in segs)
    record, tree = store.get_partition(TP), stored_tree(store)
    store.rebuild_summaries(TP)  # what a single writer would have left
    assert store.get_partition(TP) == record
    assert stored_tree(store) == tree
    for seg in segs:
        expected = None if seg.segment_id in deleted else seg.segment_id
        found = store.segment_for_offset(TP, seg.start_offset + 1)
        assert (found and found.segment_id) == expected


def test_one_broker_wins_a_lease_takeover_race(database_url: str) -> None:
    clock = FakeClock()
    with ExitStack() as stack:
        stores = [stack.enter_context(open_store(database_url, clock)) for _ in range(WORKERS)]
        first = stores[0].acquire_lease(TP, owner=100, ttl_ms=1_000)
        assert first is not None
        for round_ in range(10):
            clock.advance(1_000)  # the current lease expires; every broker tries to take over
            results = race(
                *(lambda s=s, b=b: s.acquire_lease(TP, owner=b, ttl_ms=1_000) for b, s in enumerate(stores))
            )
            winners = [lease for lease in results if lease is not None]
            assert len(winners) == 1, round_
            assert winners[0] == stores[0].get_lease(TP)
            assert winners[0].epoch == first.epoch + round_ + 1
