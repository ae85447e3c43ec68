"""Whole batches out of chunked reads (``rlm.stream.chunks``), against kafka-python's batches."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from rlm.errors import CorruptRecordError
from rlm.log.scan import adjoining
from rlm.stream.chunks import (
    RUN_BYTES,
    Batch,
    batch_runs_in_range,
    batches_in_range,
    chunk_runs,
    joined,
    ranged,
    read_ahead,
)


def kafka_batch(base_offset: int, records: int, value_bytes: int) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=0, producer_id=-1, producer_epoch=-1, base_sequence=-1,
        batch_size=1 << 24,
    )  # fmt: skip
    for i in range(records):
        builder.append(i, timestamp=1_700_000_000_000 + i, key=None, value=b"v" * value_bytes, headers=[])
    data = bytearray(builder.build())
    data[0:8] = base_offset.to_bytes(8, "big")  # kafka-python writes base offset 0; no CRC covers it
    return bytes(data)


FIRST = kafka_batch(0, 3, 10)
LOG = FIRST + b"".join(kafka_batch(base, 3, size) for base, size in [(3, 3000), (6, 1), (9, 700)])


class Reads:
    """The log read by ranges, counting and recording the reads, optionally held forever."""

    def __init__(self, data: bytes, *, hang_after: int | None = None) -> None:
        self.data = data
        self.asked: list[tuple[int, int]] = []
        self.cancelled = 0
        self.hang_after = hang_after

    async def read(self, position: int, length: int) -> bytes:
        self.asked.append((position, length))
        if self.hang_after is not None and len(self.asked) > self.hang_after:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                self.cancelled += 1
                raise
        await asyncio.sleep(0)
        return self.data[position : position + length]


async def collect(
    reads: Reads, start: int, end: int, chunk: int, *, whole: bool = False
) -> list[tuple[int, int, int]]:
    out = []
    found = batches_in_range(reads.read, start, end, chunk_bytes=chunk, name="x.log", whole=whole)
    async for header, data in found:
        assert data == reads.data[header.position : header.position + header.size]
        out.append((header.base_offset, header.last_offset, header.position))
    return out


@pytest.mark.parametrize("chunk", [1, 17, 512, 4096, 1 << 20])
def test_every_whole_batch_comes_out_whatever_the_chunk_size(chunk: int) -> None:
    reads = Reads(LOG)
    found = asyncio.run(collect(reads, 0, len(LOG), chunk))
    assert [(first, last) for first, last, _ in found] == [(0, 2), (3, 5), (6, 8), (9, 11)]
    assert found[0][2] == 0 and found[-1][2] + len(LOG) - found[-1][2] == len(LOG)
    assert all(length <= chunk for _, length in reads.asked)


@pytest.mark.parametrize("chunk", [1, 17, 256, 4096, 1 << 20])
def test_a_batch_cut_by_the_end_is_left_out(chunk: int) -> None:
    """The tail of a segment the broker is still writing (batches read across chunks or not)."""
    assert [b[0] for b in asyncio.run(collect(Reads(LOG), 0, len(LOG) - 5, chunk))] == [0, 3, 6]


@pytest.mark.parametrize("chunk", [1, 17, 256, 4096, 1 << 20])
@pytest.mark.parametrize("left", [5, 20, 700])
def test_a_batch_cut_by_the_end_of_a_whole_object_is_corrupt(chunk: int, left: int) -> None:
    """A whole object or rolled segment whose last batch is cut short (its size field, outside
    the CRC, says more than there is): the batches before come out, then the error names it."""
    last = LOG.rindex(kafka_batch(9, 3, 700))
    found: list[int] = []

    async def walk() -> None:
        found_batches = batches_in_range(
            Reads(LOG).read, 0, len(LOG) - left, chunk_bytes=chunk, name="x.log", whole=True
        )
        async for header, _ in found_batches:
            found.append(header.base_offset)

    with pytest.raises(CorruptRecordError, match="the last batch is cut short") as raised:
        asyncio.run(walk())
    assert found == [0, 3, 6]
    assert (raised.value.path, raised.value.position) == ("x.log", last)


@pytest.mark.parametrize("chunk", [1, 17, 256, 4096, 1 << 20])
def test_a_whole_object_read_to_its_end_is_no_error(chunk: int) -> None:
    found = asyncio.run(collect(Reads(LOG), 0, len(LOG), chunk, whole=True))
    assert [first for first, _, _ in found] == [0, 3, 6, 9]


def test_a_bad_size_field_is_named_with_its_position() -> None:
    damaged = LOG[:8] + (3).to_bytes(4, "big") + LOG[12:]
    with pytest.raises(CorruptRecordError, match="smaller than the minimum") as raised:
        asyncio.run(collect(Reads(damaged), 0, len(damaged), 64))
    assert "x.log" in str(raised.value)


@pytest.mark.parametrize("cut", [3, 12, 30])
def test_a_bad_size_field_across_two_chunks_is_named_with_its_position(cut: int) -> None:
    second = len(FIRST)
    damaged = LOG[: second + 8] + (3).to_bytes(4, "big") + LOG[second + 12 :]
    with pytest.raises(CorruptRecordError, match="smaller than the minimum") as raised:
        asyncio.run(collect(Reads(damaged), 0, len(damaged), second + cut))  # its header in two chunks
    assert (raised.value.path, raised.value.position) == ("x.log", second)


def test_closing_the_iterator_cancels_the_read_ahead_at_once() -> None:
    reads = Reads(LOG, hang_after=1)
    seen: list[tuple[int, int]] = []

    async def first_then_close() -> None:
        batches = batches_in_range(reads.read, 0, len(LOG), chunk_bytes=len(FIRST), name="x.log")
        await anext(batches)  # the first chunk's batch; the second chunk is asked for next
        for _ in range(100):
            if len(reads.asked) == 2:
                break
            await asyncio.sleep(0)
        await batches.aclose()
        seen.append((len(reads.asked), reads.cancelled))  # before the loop ends: nothing left behind

    asyncio.run(first_then_close())
    assert seen == [(2, 1)]  # one chunk read ahead, never more, and cancelled by the close


@pytest.mark.parametrize("chunk", [17, 4096, 1 << 20])
def test_on_last_is_called_once_the_last_chunk_is_in_with_no_read_in_flight(chunk: int) -> None:
    reads = Reads(LOG)
    calls: list[tuple[int, int]] = []  # (reads asked, batches taken) at each call
    taken: list[int] = []

    def on_last() -> None:
        calls.append((len(reads.asked), len(taken)))

    async def run() -> None:
        found = batches_in_range(reads.read, 0, len(LOG), chunk_bytes=chunk, name="x.log", on_last=on_last)
        async for header, _ in found:
            taken.append(header.base_offset)

    asyncio.run(run())
    assert len(calls) == 1
    asked, before = calls[0]
    assert asked == len(reads.asked)  # no read asked after it
    assert reads.asked[-1][0] + reads.asked[-1][1] == len(LOG)  # the last read was the end's
    assert before < len(taken)  # the last chunk's batches came after it


def test_runs_hold_about_run_bytes_each() -> None:
    log = b"".join(kafka_batch(base * 3, 3, 20_000) for base in range(40))  # 40 batches of 60 KB
    reads = Reads(log)

    async def runs() -> list[list[int]]:
        found = batch_runs_in_range(reads.read, 0, len(log), chunk_bytes=1 << 20, name="x.log")
        return [[header.size for header, _ in run] async for run in found]

    sizes = asyncio.run(runs())
    assert sum(len(run) for run in sizes) == 40
    assert all(sum(run) - run[-1] < RUN_BYTES for run in sizes)  # a run ends at the batch reaching it
    assert max(sum(run) for run in sizes) >= RUN_BYTES  # runs were cut: the test tested something


def test_batches_of_one_chunk_are_joined_without_a_copy() -> None:
    async def views() -> list[Batch]:
        found = batch_runs_in_range(Reads(LOG).read, 0, len(LOG), chunk_bytes=1 << 20, name="x.log")
        return [data async for run in found for _, data in run]

    batches = asyncio.run(views())
    whole = joined(batches)
    first = batches[0]
    assert isinstance(whole, memoryview) and isinstance(first, memoryview)
    assert whole.obj is first.obj  # a view of the chunk read, not a copy
    assert whole == LOG
    assert joined(batches[1:3]) == LOG[len(FIRST) : len(FIRST) + len(batches[1]) + len(batches[2])]
    assert joined(batches[:1]) is batches[0]


@pytest.mark.parametrize(
    "pick",
    [
        lambda views, other: [views[0], views[2]],  # a gap between them
        lambda views, other: [views[1], views[0]],  # out of order
        lambda views, other: [views[0], other[1]],  # end to end in the log, but of two chunks
        lambda views, other: [bytes(views[0]), views[1]],  # bytes of their own
    ],
)
def test_batches_that_do_not_lie_end_to_end_in_one_chunk_are_copied(
    pick: Callable[[list[memoryview], list[memoryview]], list[Batch]],
) -> None:
    bounds = [0, len(FIRST), len(FIRST) + len(kafka_batch(3, 3, 3000)), len(LOG)]
    chunk, other = memoryview(LOG), memoryview(bytearray(LOG))
    views = [chunk[a:b] for a, b in itertools.pairwise(bounds)]
    others = [other[a:b] for a, b in itertools.pairwise(bounds)]
    batches = pick(views, others)
    assert adjoining(batches) is None
    assert joined(batches) == b"".join(batches)


def test_chunk_runs_are_the_runs_of_views_of_one_chunk() -> None:
    first, second = memoryview(b"abcdef"), memoryview(b"ghij")
    data: list[Batch] = [first[:2], first[2:4], first[4:], second[:1], b"own", second[1:], second[2:]]
    assert list(chunk_runs(data)) == [(0, 3), (3, 4), (4, 5), (5, 7)]
    assert [bytes(joined(data[a:b])) for a, b in chunk_runs(data)] == [b"abcdef", b"g", b"own", b"hijij"]
    assert list(chunk_runs([])) == []


@pytest.mark.parametrize("lead", [1, 2000, len(LOG)])
def test_with_a_lead_on_last_is_called_once_the_chunks_in_come_within_it_of_the_end(lead: int) -> None:
    reads = Reads(LOG)
    got: list[int] = []  # the size of each chunk yielded
    calls: list[int] = []  # chunks yielded before each call: the next one is the call's

    async def run() -> None:
        chunks = ranged(reads.read, 0, len(LOG), 512)
        async for data in read_ahead(chunks, 0, len(LOG), lambda: calls.append(len(got)), lead=lead):
            got.append(len(data))

    asyncio.run(run())
    assert sum(got) == len(LOG) and len(got) > 2
    ends = list(itertools.accumulate(got))
    assert calls == [next(i for i, end in enumerate(ends) if len(LOG) - end <= lead)]
    if lead == len(LOG):
        assert calls == [0]  # from the first chunk, with the second one's read in flight
