"""``read_committed`` reads of a query tier whose tail holds a transaction with its marker still on
the broker's disk (the copier tiers below the high watermark, not below the last stable offset).

Without the broker's log the last stable offset is not known; the remote tier's own stands for it
(:mod:`rlm.lookup.tier_stable`): the first offset of the transaction whose marker is not tiered.
A range stream stops there, and ListOffsets names no offset at or above it, as Kafka names none
at or above the last fetchable offset. Once the marker is tiered the transaction's records are
read if it committed and left out if it aborted.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from rlm.bootstrap import Runtime, build_runtime
from rlm.log.batches import decode_batch
from rlm.log.dirwriter import LogDirWriter
from rlm.log.logdir import LogDir
from rlm.log.model import ControlType
from rlm.log.writer import ProducerRecord, TopicConfig
from rlm.lookup.plans import IsolationLevel, Search
from rlm.metastore.model import TopicPartition
from rlm.stream.plan import RangeQuery
from tests.clock import FakeClock
from tests.lookup_support import Backend, runtime
from tests.tiering_support import set_high_watermarks

TP = TopicPartition("orders", 0)
T0 = 1_700_000_000_000
PRODUCER = 7
#: The high watermark the log is first tiered at: segments [0, 1] and [2, 3] lie below it, the
#: marker's segment [4, 5] does not.
MARKER_LOCAL = 4
MARKER_TIERED = 7
LATEST_TIERED = -5
#: Record timestamps: offset n was appended at T0 + n.
OPEN_RECORD_TIME = T0 + 3
"""The plain record appended while the transaction was open."""


def write_log(logs: Path, marker: ControlType) -> None:
    """0 plain, 1 the producer's first transactional record | roll | 2 its second, 3 plain | roll |
    4 the marker, 5 plain | roll | 6 plain; the high watermark is :data:`MARKER_LOCAL`."""
    clock = FakeClock(T0)
    with LogDirWriter(logs, clock=clock, default_config=TopicConfig()) as writer:
        log = writer.partition(TP.topic, TP.partition)
        txn = {"producer_id": PRODUCER, "producer_epoch": 0, "transactional": True}

        def append(value: bytes, **producer: object) -> None:
            log.append([ProducerRecord(T0 + log.next_offset, b"k", value)], **producer)  # type: ignore[arg-type]
            clock.now += 1

        append(b"before")
        append(b"txn-1", base_sequence=0, **txn)
        log.roll()
        append(b"txn-2", base_sequence=1, **txn)
        append(b"during")
        log.roll()
        log.append_control(marker, producer_id=PRODUCER, producer_epoch=0)
        append(b"after")
        log.roll()
        append(b"active")
    set_high_watermarks(logs, {TP: MARKER_LOCAL})


class Tier:
    """A sidecar that tiered the log, and a query tier over the same store and objects."""

    def __init__(self, root: Path, sidecar: Runtime) -> None:
        self.root = root
        self.sidecar = sidecar
        settings = sidecar.settings.replace(log_dirs=(), remote_log_index_cache_dir=root / "query-cache")
        self.query = build_runtime(settings, registry=CollectorRegistry())

    def copy(self) -> None:
        for outcome in self.sidecar.copier.run_once(list(LogDir(self.root / "logs").partitions())):
            assert outcome.error is None, outcome.error
        self.query.lookup.invalidate(TP)  # another process: as after the views' time to live

    def stream(self, isolation: IsolationLevel) -> list[int]:
        """The offsets of the records a range stream of the whole partition sends."""
        plan = self.query.streams.plan(RangeQuery(TP, isolation=isolation))

        async def read() -> list[int]:
            offsets = []
            async with contextlib.aclosing(self.query.streams.runs(plan)) as runs:
                async for run in runs:
                    for batch in run:
                        records = decode_batch(bytes(batch.data), batch.header._replace(position=0))
                        offsets += [r.offset for r in records if plan.start <= r.offset < plan.end]
            return offsets

        return asyncio.run(read())

    def offset(self, timestamp: int, isolation: IsolationLevel) -> int:
        return self.query.lookup.find(TP, timestamp, isolation=isolation).offset


@pytest.fixture(params=[ControlType.ABORT, ControlType.COMMIT], ids=["abort", "commit"])
def tier(request: pytest.FixtureRequest, tmp_path: Path, sqlite_template: Path) -> Iterator[Tier]:
    write_log(tmp_path / "logs", request.param)
    sidecar = runtime(Backend("sqlite-fs", sqlite_template=sqlite_template), tmp_path, tmp_path / "logs")
    try:
        tier = Tier(tmp_path, sidecar)
        try:
            tier.copy()
            assert sidecar.store.highest_copied_offset(TP) == 3
            yield tier
        finally:
            tier.query.close()
    finally:
        sidecar.close()


def test_a_read_committed_stream_stops_at_a_transaction_whose_marker_is_not_tiered(tier: Tier) -> None:
    assert tier.stream(IsolationLevel.READ_UNCOMMITTED) == [0, 1, 2, 3]
    assert tier.stream(IsolationLevel.READ_COMMITTED) == [0]


def test_read_committed_list_offsets_name_nothing_at_or_past_the_tiers_stable_offset(tier: Tier) -> None:
    uncommitted, committed = IsolationLevel.READ_UNCOMMITTED, IsolationLevel.READ_COMMITTED
    assert tier.offset(OPEN_RECORD_TIME, uncommitted) == 3
    assert tier.offset(OPEN_RECORD_TIME, committed) == -1
    assert tier.offset(-3, uncommitted) == 3  # MAX_TIMESTAMP
    assert tier.offset(-3, committed) == -1
    assert tier.offset(LATEST_TIERED, uncommitted) == 3
    assert tier.offset(LATEST_TIERED, committed) == -1
    assert tier.offset(T0, committed) == 0  # before the transaction
    # Bounding LATEST_TIERED reads the tier: the search runs on the reader pool (KIP-1075).
    lookup = tier.query.lookup
    planned = lookup.plan(TP, LATEST_TIERED, committed, local=None, view=lookup.usable_view(TP, None))
    assert isinstance(planned, Search) and planned.reads_remote


def test_once_the_marker_is_tiered_a_commit_is_read_and_an_abort_left_out(
    tier: Tier, request: pytest.FixtureRequest
) -> None:
    set_high_watermarks(tier.root / "logs", {TP: MARKER_TIERED})
    tier.copy()
    aborted = request.node.callspec.params["tier"] is ControlType.ABORT
    assert tier.stream(IsolationLevel.READ_COMMITTED) == ([0, 3, 5] if aborted else [0, 1, 2, 3, 5])
    assert tier.offset(OPEN_RECORD_TIME, IsolationLevel.READ_COMMITTED) == 3
    assert tier.offset(LATEST_TIERED, IsolationLevel.READ_COMMITTED) == 5
