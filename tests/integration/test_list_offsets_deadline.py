"""A ListOffsets request's deadline covers all of it, planning included, however many partitions it
names; planning asks the metadata store once for many partitions; a request's size is bounded.

The store sits behind a seam (a subclass of the SQL store) that counts its calls and can hold the
batched read of remote-tier views at a gate, as a database that does not answer would. Bounds on
elapsed time are loose (the time the gate stays closed): they tell a deadline kept from one ignored.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from metadata.engine import create_engine_for_url
from metadata.store import SqlMetadataStore
from rlm.bootstrap import Runtime, build_runtime
from rlm.errors import InvalidArgumentError
from rlm.log.logdir import LogDir
from rlm.lookup.list_offsets import ErrorCode, ListOffsetsRequest, PartitionQuery, TopicQuery
from rlm.metastore.model import PartitionRecord, RemoteTierSummary, TopicPartition
from tests.lookup_support import (
    TOPIC,
    Backend,
    BatchPlan,
    PartitionPlan,
    Truth,
    tier_partition,
    write_partitions,
)

WAIT = 10.0
"""Upper bound for something that must happen; reached only when the behaviour is broken."""


class GatedStore(SqlMetadataStore):
    """The SQL store, counting its per-partition and batched reads; batched reads of views wait
    while ``gate`` is closed."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.gate = threading.Event()
        self.gate.set()
        self.batches: list[int] = []
        self.single_reads = 0

    def remote_tier_summaries(
        self, tps: Collection[TopicPartition]
    ) -> dict[TopicPartition, RemoteTierSummary]:
        self.batches.append(len(tps))
        if not self.gate.wait(WAIT):
            raise AssertionError("the test never opened the gate")
        return super().remote_tier_summaries(tps)

    def get_partition(self, tp: TopicPartition) -> PartitionRecord | None:
        self.single_reads += 1
        return super().get_partition(tp)

    def max_timestamp(self, tp: TopicPartition) -> int | None:
        self.single_reads += 1
        return super().max_timestamp(tp)


@dataclass
class Sidecar:
    runtime: Runtime
    store: GatedStore
    truths: dict[int, Truth]

    def request(self, partitions: list[tuple[str, int, int]], timeout_ms: int | None) -> ListOffsetsRequest:
        topics: dict[str, list[PartitionQuery]] = {}
        for topic, partition, timestamp in partitions:
            topics.setdefault(topic, []).append(PartitionQuery(partition, timestamp))
        return ListOffsetsRequest(tuple(TopicQuery(t, tuple(qs)) for t, qs in topics.items()), timeout_ms)


@pytest.fixture
def sidecar(tmp_path: Path, sqlite_template: Path) -> Iterator[Sidecar]:
    log_dir = tmp_path / "logs"
    plan = PartitionPlan(
        tuple(BatchPlan(timestamps=(i * 100, i * 100 + 50)) for i in range(12)), tiering="both"
    )
    truths = write_partitions(log_dir, {0: plan})
    settings = Backend("sqlite-fs", sqlite_template=sqlite_template).settings(
        tmp_path, log_dir, list_offsets_max_partitions=10_000
    )
    store = GatedStore(create_engine_for_url(settings.metadata_url))
    rt = build_runtime(settings, registry=CollectorRegistry(), store=store)
    try:
        tier_partition(rt, LogDir(log_dir).partition(TOPIC, 0), truths[0], plan)
        yield Sidecar(rt, store, truths)
    finally:
        store.gate.set()
        rt.close()


def test_planning_asks_the_store_once_for_many_partitions(sidecar: Sidecar) -> None:
    # Above every remote timestamp: answered while planning, from the broker's log.
    local = sidecar.truths[0].records[-1].record.timestamp
    asked = [("never-produced", p, 0) for p in range(9_999)] + [(TOPIC, 0, local)]
    before = sidecar.store.single_reads
    response = sidecar.runtime.list_offsets.handle(sidecar.request(asked, timeout_ms=30_000))
    unknown, known = response.topics
    assert {p.error_code for p in unknown.partitions} == {ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    [answer] = known.partitions
    want = sidecar.truths[0].for_timestamp(local)
    assert (answer.error_code, answer.offset, answer.timestamp) == (
        ErrorCode.NONE,
        want.offset,
        want.timestamp,
    )
    # One batched read for the whole request (its statements: one per chunk, see the store's
    # contract test), no per-partition read of the partition, its first segment or max timestamp.
    assert sidecar.store.batches == [10_000]
    assert sidecar.store.single_reads == before
    # Views are kept of the partitions the store or the broker knows, not of any a request names.
    assert len(sidecar.runtime.lookup.views) == 1


def test_the_deadline_covers_planning_and_unread_partitions_time_out(sidecar: Sidecar) -> None:
    list_offsets = sidecar.runtime.list_offsets
    # Views held for an hour: on a loaded machine, more than the default second may pass between
    # the two requests, and the second would read orders-0's view again.
    sidecar.runtime.lookup.views.ttl_s = 3600
    local = sidecar.truths[0].records[-1].record.timestamp
    warm = list_offsets.handle(sidecar.request([(TOPIC, 0, local)], timeout_ms=30_000))
    assert warm.topics[0].partitions[0].error_code is ErrorCode.NONE  # orders-0's view is now held
    read_before = len(sidecar.store.batches)
    sidecar.store.gate.clear()
    # The store answers only after WAIT: a request that ignored its deadline would take that long.
    opening = threading.Timer(WAIT, sidecar.store.gate.set)
    opening.start()
    asked = [(TOPIC, 0, local)] + [("never-produced", p, 0) for p in range(2_000)]
    started = time.monotonic()
    try:
        # Planning 2,001 partitions takes a fraction of a second; on a loaded machine up to a
        # second: the deadline leaves room for it, and is still far below WAIT.
        response = list_offsets.handle(sidecar.request(asked, timeout_ms=3000))
    finally:
        took = time.monotonic() - started
        opening.cancel()
        sidecar.store.gate.set()

    assert took < WAIT, f"the request took {took:.1f} s for a 1 s deadline: it waited for the store"
    assert sidecar.store.batches[read_before:] == [2_000], "the views were not read in one batch"
    known, unknown = response.topics
    assert {p.error_code for p in unknown.partitions} == {ErrorCode.REQUEST_TIMED_OUT}
    assert all(p.error_message for p in unknown.partitions)
    # The partition whose view was held answered, the others' read notwithstanding.
    assert known.partitions[0].error_code is ErrorCode.NONE
    assert known.partitions[0].offset == sidecar.truths[0].for_timestamp(local).offset


def test_a_deadline_taken_when_the_request_arrived_counts_the_wait_for_a_thread(sidecar: Sidecar) -> None:
    list_offsets = sidecar.runtime.list_offsets
    arrived = list_offsets.deadline(200)
    time.sleep(0.3)  # a request that waited this long for a worker thread
    response = list_offsets.handle(
        sidecar.request([("never-produced", 1, 0)], timeout_ms=200), deadline=arrived
    )
    assert response.topics[0].partitions[0].error_code is ErrorCode.REQUEST_TIMED_OUT
    assert sidecar.store.batches == [], "a request already out of time asked the store"


def test_a_request_names_at_most_the_configured_partitions_in_all(sidecar: Sidecar) -> None:
    list_offsets = sidecar.runtime.list_offsets
    halves = [("a", p, 0) for p in range(5_000)] + [("b", p, 0) for p in range(5_001)]
    with pytest.raises(
        InvalidArgumentError, match=r"names 10001 partitions; at most 10000 .*list.offsets.max.partitions"
    ):
        list_offsets.handle(sidecar.request(halves, timeout_ms=1000))
    assert sidecar.store.batches == []
    empty_topics = ListOffsetsRequest(tuple(TopicQuery(f"t{i}", ()) for i in range(10_001)))
    with pytest.raises(InvalidArgumentError, match="names 10001 partitions"):
        list_offsets.handle(empty_topics)
    list_offsets.max_partitions = 3
    with pytest.raises(InvalidArgumentError, match="at most 3"):
        list_offsets.handle(sidecar.request([("a", p, 0) for p in range(4)], timeout_ms=1000))


def test_a_request_that_goes_away_while_views_are_read_cancels_the_read(sidecar: Sidecar) -> None:
    """The client went away while the request awaited its batched read of views, still queued
    behind busy metadata threads: the read is dropped, not run later for nobody."""
    rt = sidecar.runtime
    pool = rt.metadata_pool
    release = threading.Event()
    running = threading.Barrier(pool.threads + 1)

    def busy(token: object) -> None:
        running.wait(WAIT)
        assert release.wait(WAIT)

    blockers = [pool.submit(busy) for _ in range(pool.threads)]
    try:
        running.wait(WAIT)  # every metadata thread is taken
        asked = [("never-produced", p, 0) for p in range(3)]

        async def main() -> None:
            request = asyncio.create_task(rt.list_offsets.handle_async(sidecar.request(asked, 30_000)))
            while pool.pending == 0:
                await asyncio.sleep(0.001)
            request.cancel()
            with pytest.raises(asyncio.CancelledError):
                await request

        asyncio.run(main())
        assert pool.pending == 0, "the read of a request that went away stayed queued"
    finally:
        release.set()
        for blocker in blockers:
            assert blocker.wait(WAIT)
    assert sidecar.store.batches == [], "the read of a request that went away was run"
