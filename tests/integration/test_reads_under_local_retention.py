"""Range streams, fetches and lookups whose local segments the broker deletes while they read.

The broker deletes its oldest segments once they are tiered (local retention): it renames their
files (``.deleted``) and removes them later, whenever it likes. A stream planned before that reads
the tiered offsets it can no longer find locally from the remote tier, then the broker's files
from their new start: the records are those of the brute-force read, no offset missing or sent
twice. Where no tier holds them any more, the stream ends with an error that names the offset,
never short. A fetch whose segment goes before it is read reads the remote tier; one that has
read batches when its next segment goes answers with those. A lookup that finds a segment it
listed gone lists the directory again and answers as if it had never been there. A remote
segment reaching past the broker's first offset across a compaction gap hands over to its files.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from rlm.bootstrap import Runtime
from rlm.errors import OffsetOutOfRangeError
from rlm.log.batches import decode_batch
from rlm.log.byte_source import read_batch_bytes
from rlm.log.dirwriter import LogDirWriter
from rlm.log.files import segment_file_name
from rlm.log.index import OffsetIndex, TimestampOffset
from rlm.log.logdir import PARTITION_METADATA, LogDir, PartitionDir
from rlm.log.model import Record
from rlm.log.model import TopicPartition as LogTopicPartition
from rlm.log.segment import Segment
from rlm.log.txnindex import TransactionIndex
from rlm.log.writer import ProducerRecord
from rlm.lookup.plans import IsolationLevel
from rlm.metastore.model import SegmentState, TopicPartition
from rlm.stream.chunks import StreamBatch
from rlm.stream.plan import RangePlan, RangeQuery
from rlm.stream.reader import BatchReader
from rlm.tiering.prepare import prepare_segment
from rlm.timestamps import SpecialTimestamp
from tests.integration.test_fetch import BACKEND_PARAMS, tiered_partition
from tests.integration.test_stream import aborted_offsets, expected
from tests.lookup_support import NOW, OTHER_BROKER, TOPIC, Backend, Tiered, runtime

T = TypeVar("T")
#: Bounds a stream that must end; reached only when the behaviour is broken.
WAIT = 10.0


@pytest.fixture(params=BACKEND_PARAMS)
def tiered(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Tiered]:
    yield from tiered_partition(request, tmp_path, auth_enabled=False, remote_fetch_stream_buffer_bytes=4096)


async def on_threads(call: Callable[[], T]) -> T:
    return await asyncio.get_running_loop().run_in_executor(None, call)


def deleted_by_the_broker(segment: Segment) -> None:
    """As the broker's retention deletes a segment: its files renamed with ``.deleted`` (their
    removal comes later)."""
    for path in segment.directory.glob(f"{segment.base_offset:020d}.*"):
        if not path.name.endswith(".deleted"):
            path.rename(path.with_name(path.name + ".deleted"))


def tiered_local_segments(tiered: Tiered) -> list[Segment]:
    """The broker's rolled segments whose records are all copied, oldest first."""
    found = []
    for segment in LogDir(tiered.partition.log_dir.path).partition(TOPIC, 0).rolled_segments():
        last = segment.last_offset()
        if last is None or last > tiered.truth.highest_copied:
            break
        found.append(segment)
    return found


def batches_sent(
    rt: Runtime, plan: RangePlan, on_batch: Callable[[StreamBatch], Awaitable[None]] | None = None
) -> list[StreamBatch]:
    """The batches the stream of ``plan`` sends (``on_batch`` awaited as each batch is taken;
    bounded by :data:`WAIT`: a stream that would never end fails)."""
    streams = rt.streams

    async def read() -> list[StreamBatch]:
        reader = BatchReader(
            plan,
            streams.service,
            streams.indexes,
            streams.remote,
            on_threads,
            chunk_bytes=streams.chunk_bytes,
        )
        taken = []
        async for batch in reader.batches():
            taken.append(batch)
            if on_batch is not None:
                await on_batch(batch)
        await streams.remote.close()
        return taken

    return asyncio.run(asyncio.wait_for(read(), WAIT))


def stream(
    tiered: Tiered, plan: RangePlan, on_batch: Callable[[StreamBatch], Awaitable[None]] | None = None
) -> list[Record]:
    """The records the stream of ``plan`` sends (``on_batch`` awaited as each batch is taken)."""
    taken = batches_sent(tiered.runtime, plan, on_batch)
    records = [r for b in taken for r in decode_batch(bytes(b.data), b.header._replace(position=0))]
    return [r for r in records if plan.start <= r.offset < plan.end]


def test_segments_deleted_after_planning_are_read_from_the_remote_tier(tiered: Tiered) -> None:
    truth = tiered.truth
    plan = tiered.runtime.streams.plan(RangeQuery(TopicPartition(TOPIC, 0), offset=truth.log_start_offset))
    gone = tiered_local_segments(tiered)
    assert len(gone) >= 2, "fewer than two tiered local segments: the test would test little"
    assert plan.local_start == gone[0].base_offset
    for segment in gone:
        deleted_by_the_broker(segment)
    assert stream(tiered, plan) == expected(truth, truth.log_start_offset, None, False)


def test_segments_deleted_while_the_local_ones_are_read_are_read_from_the_remote_tier(
    tiered: Tiered,
) -> None:
    truth = tiered.truth
    tp = TopicPartition(TOPIC, 0)
    gone = tiered_local_segments(tiered)
    assert len(gone) >= 2, "fewer than two tiered local segments: the test would test little"
    plan = tiered.runtime.streams.plan(RangeQuery(tp, offset=gone[0].base_offset))
    deleted: list[int] = []

    async def delete_the_next_ones(batch: StreamBatch) -> None:
        # The first local batch is taken (its file open): the broker deletes it and the others.
        if not deleted and batch.tier == "local":
            for segment in gone:
                deleted_by_the_broker(segment)
                deleted.append(segment.base_offset)

    assert stream(tiered, plan, delete_the_next_ones) == expected(truth, gone[0].base_offset, None, False)
    assert deleted, "no local batch was read: the test tested nothing"


def test_records_deleted_from_both_tiers_end_the_stream_with_an_error(tiered: Tiered) -> None:
    tp = TopicPartition(TOPIC, 0)
    gone = tiered_local_segments(tiered)
    plan = tiered.runtime.streams.plan(RangeQuery(tp, offset=gone[0].base_offset))
    store = tiered.runtime.store
    for segment in gone:
        deleted_by_the_broker(segment)
    # ... and the remote copies of the first of them deleted by the remote tier's retention.
    dropped = 0
    while (copy := store.segment_for_offset(tp, gone[0].base_offset)) is not None:
        store.update_segment_state(copy.segment_id, SegmentState.DELETE_SEGMENT_STARTED, event_time_ms=0)
        dropped += 1
    assert dropped, "no remote segment held the offset: the test would test nothing"
    with pytest.raises(OffsetOutOfRangeError, match=f"offset {gone[0].base_offset}"):
        stream(tiered, plan)


def test_a_read_committed_stream_planned_as_the_broker_deletes_segments_leaves_their_aborts_out(
    tiered: Tiered, monkeypatch: pytest.MonkeyPatch
) -> None:
    truth = tiered.truth
    gone = tiered_local_segments(tiered)
    start = gone[0].base_offset
    aborted = [o for o in aborted_offsets(truth) if start <= o < gone[-1].base_offset]
    assert aborted, "no aborted record in the deleted segments: the test would test nothing"
    real = Segment.transaction_index
    deleted: list[int] = []

    def transaction_index(self: Segment) -> TransactionIndex:
        # The broker deletes the segment once the plan has listed it, as its index is read.
        if self.base_offset in {s.base_offset for s in gone}:
            deleted_by_the_broker(self)
            deleted.append(self.base_offset)
        return real(self)

    monkeypatch.setattr(Segment, "transaction_index", transaction_index)
    query = RangeQuery(TopicPartition(TOPIC, 0), offset=start, isolation=IsolationLevel.READ_COMMITTED)
    plan = tiered.runtime.streams.plan(query)
    assert deleted, "no deleted segment's index was read: the test tested nothing"
    sent = stream(tiered, plan)
    assert not {r.offset for r in sent} & set(aborted)
    assert sent == expected(truth, start, None, True)


def deleted_when_read(monkeypatch: pytest.MonkeyPatch, segment: Segment) -> list[int]:
    """The broker deletes ``segment`` once a reader has listed it, as the reader looks it up."""
    real = Segment.offset_index
    deleted: list[int] = []

    def offset_index(self: Segment) -> OffsetIndex:
        if self.base_offset == segment.base_offset and not deleted:
            deleted_by_the_broker(self)
            deleted.append(self.base_offset)
        return real(self)

    monkeypatch.setattr(Segment, "offset_index", offset_index)
    return deleted


def test_a_fetch_whose_segment_is_deleted_before_it_is_read_reads_the_remote_tier(
    tiered: Tiered, monkeypatch: pytest.MonkeyPatch
) -> None:
    gone = tiered_local_segments(tiered)
    offset = gone[0].base_offset + 1
    deleted = deleted_when_read(monkeypatch, gone[0])
    result = tiered.runtime.fetcher.fetch(TopicPartition(TOPIC, 0), offset, 1 << 20)
    assert deleted, "the segment was not looked up: the test tested nothing"
    assert result.tier == "remote" and result.records
    assert result.records == tiered.truth.data_records(offset)[: len(result.records)]


def test_a_fetch_that_finds_its_next_segment_deleted_answers_what_it_read(
    tiered: Tiered, monkeypatch: pytest.MonkeyPatch
) -> None:
    gone = tiered_local_segments(tiered)
    assert len(gone) >= 2, "fewer than two tiered local segments: the test would test little"
    offset = gone[0].base_offset
    deleted = deleted_when_read(monkeypatch, gone[1])
    result = tiered.runtime.fetcher.fetch(TopicPartition(TOPIC, 0), offset, 1 << 20)
    assert deleted, "the segment was not looked up: the test tested nothing"
    assert result.tier == "local" and result.records
    assert result.next_offset == gone[1].base_offset
    assert result.records == tiered.truth.data_records(offset)[: len(result.records)]
    assert all(r.offset < gone[1].base_offset for r in result.records)


@pytest.mark.parametrize("asked", ["above the remote tier", "MAX_TIMESTAMP"])
def test_a_lookup_whose_listed_segment_is_deleted_under_it_answers_from_a_new_listing(
    tiered: Tiered, monkeypatch: pytest.MonkeyPatch, asked: str
) -> None:
    truth = tiered.truth
    tp = TopicPartition(TOPIC, 0)
    gone = tiered_local_segments(tiered)
    real = Segment.max_timestamp_and_offset
    missing: list[int] = []

    def max_timestamp_and_offset(self: Segment, *, scan_tail: bool = False) -> TimestampOffset:
        # The broker deletes the segment once the lookup has listed it, as the lookup reads it.
        if self.base_offset == gone[0].base_offset and not missing:
            deleted_by_the_broker(self)
            try:
                return real(self, scan_tail=scan_tail)
            except FileNotFoundError:
                missing.append(self.base_offset)
                raise
        return real(self, scan_tail=scan_tail)

    max_remote = tiered.runtime.store.max_timestamp(tp)
    assert max_remote is not None
    monkeypatch.setattr(Segment, "max_timestamp_and_offset", max_timestamp_and_offset)
    if asked == "MAX_TIMESTAMP":  # planned as a search (the remote tier may hold it), then searched
        timestamp: int = SpecialTimestamp.MAX_TIMESTAMP
        expected = truth.special(timestamp)
    else:  # answered when planned: only the broker's files are searched (none holds one here)
        timestamp = max_remote + 1
        expected = truth.for_timestamp(timestamp)
    answer = tiered.runtime.lookup.find(tp, timestamp)
    assert (answer.offset, answer.timestamp) == (expected.offset, expected.timestamp)
    assert missing, "the lookup found the deleted segment's files: the test tested nothing"


def written(log_dir: Path, count: int, rolls: tuple[int, ...] = ()) -> None:
    """A log of ``count`` one-record batches, a segment rolled at each offset of ``rolls``, its
    high watermark checkpointed at its end."""
    writer = LogDirWriter(log_dir, clock=lambda: NOW)
    appender = writer.partition(TOPIC, 0)
    for offset in range(count):
        if offset in rolls:
            appender.roll()
        appender.append([ProducerRecord(NOW + offset, None, b"v%d" % offset)])
    writer.close({LogTopicPartition(TOPIC, 0): count})


def last_offsets_sent(rt: Runtime, plan: RangePlan) -> list[int]:
    """The last offset of each batch the stream of ``plan`` sends."""
    return [batch.header.last_offset for batch in batches_sent(rt, plan)]


def test_a_remote_segment_reaching_into_the_local_log_past_a_gap_hands_over_to_it(
    tmp_path: Path, sqlite_template: Path
) -> None:
    """A remote segment of other boundaries (another leader's copy) reaching past the broker's
    first local offset, with no records between the last one sent and that offset (compacted away):
    the stream goes on from the broker's files, not from the same remote segment again and again."""
    log_dir = tmp_path / "logs"
    written(log_dir, 40, rolls=(10, 20, 30))
    partition = LogDir(log_dir).partition(TOPIC, 0)
    rt = runtime(Backend("sqlite-fs", sqlite_template=sqlite_template), tmp_path, log_dir)
    try:
        # One remote segment of offsets 0-24 lacking 15-19, then the broker deletes 0-19 locally.
        _upload(rt, partition, [o for o in range(25) if not 15 <= o < 20])
        for segment in partition.segments()[:2]:
            deleted_by_the_broker(segment)
        plan = rt.streams.plan(RangeQuery(TopicPartition(TOPIC, 0), offset=0, end_offset=30))
        assert (plan.local_start, plan.end) == (20, 30)
        sent = last_offsets_sent(rt, plan)
        assert sent == [o for o in range(30) if not 15 <= o < 20]
    finally:
        rt.close()


def _upload(rt: Runtime, partition: PartitionDir, offsets: list[int]) -> None:
    """Copy the batches of ``offsets`` as one remote segment, as another broker would have."""
    staging = partition.log_dir.path.parent / "copy" / partition.path.name
    staging.mkdir(parents=True)
    shutil.copyfile(partition.path / PARTITION_METADATA, staging / PARTITION_METADATA)
    with open(staging / segment_file_name(offsets[0], ".log"), "wb") as out:
        for segment in partition.segments():
            with segment.open() as source:
                for header in segment.headers():
                    if header.last_offset in offsets:
                        out.write(read_batch_bytes(source, header))
    prepared = prepare_segment(
        PartitionDir(staging, LogDir(staging.parent)),
        Segment(staging, offsets[0]),
        broker_id=OTHER_BROKER,
        now_ms=NOW,
        epochs=partition.leader_epochs(),
    )
    remote = prepared.remote
    rt.store.add_segment(remote)
    rt.storage.put_object(remote.layout.log_key, prepared.log_path, size=remote.size_bytes)
    rt.storage.put_object(remote.layout.index_key, prepared.index_blob.data)
    rt.store.update_segment_state(
        remote.segment_id,
        SegmentState.COPY_SEGMENT_FINISHED,
        event_time_ms=NOW,
        expected=SegmentState.COPY_SEGMENT_STARTED,
    )
    shutil.rmtree(staging.parent)
