"""A range stream reads the next remote segment while the end of one is sent.

The batches read through the stream's reader (:class:`rlm.stream.reader.BatchReader`) over a
partition tiered to several segments, with the remote reads recorded: by the time the first batch
of a segment is taken, the next segment's read has begun (the segments are smaller than
:data:`~rlm.stream.reader.NEXT_SEGMENT_LEAD_BYTES`, so the whole of each is within it of its end),
each segment is read by one streamed read (one GET on S3) and nothing else, and the batches are
those of the brute-force read.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncGenerator, Callable, Iterator
from typing import TypeVar

import pytest

from rlm.log.batches import decode_batch
from rlm.metastore.model import SegmentState, TopicPartition
from rlm.stream.chunks import Chunk, StreamBatch
from rlm.stream.plan import RangeQuery
from rlm.stream.reader import NEXT_SEGMENT_LEAD_BYTES, AsyncRangeReader, BatchReader
from tests.integration.test_fetch import BACKEND_PARAMS, tiered_partition
from tests.integration.test_stream import expected
from tests.lookup_support import TOPIC, Tiered

T = TypeVar("T")
#: Seconds the consumer waits at a segment's last batch for the next segment's read to be asked.
PATIENCE_S = 30.0


@pytest.fixture(scope="module", params=BACKEND_PARAMS)
def tiered(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tiered]:
    root = tmp_path_factory.mktemp("read-ahead")
    yield from tiered_partition(request, root, auth_enabled=False, remote_fetch_stream_buffer_bytes=4096)


class Recorded:
    """The stream's remote reader, each read recorded as ``(key, start, length)``."""

    def __init__(self, inner: AsyncRangeReader) -> None:
        self.inner = inner
        self.asked: list[tuple[str, int, int]] = []

    def stream_range(
        self, key: str, start: int, length: int, *, piece_bytes: int
    ) -> AsyncGenerator[Chunk, None]:
        self.asked.append((key, start, length))
        return self.inner.stream_range(key, start, length, piece_bytes=piece_bytes)

    async def close(self) -> None:
        """The inner reader belongs to the runtime."""


async def on_threads(call: Callable[[], T]) -> T:
    return await asyncio.get_running_loop().run_in_executor(None, call)


def test_the_next_segment_is_read_while_the_end_of_one_is_taken(tiered: Tiered) -> None:
    rt, truth = tiered.runtime, tiered.truth
    tp = TopicPartition(TOPIC, 0)
    streams = rt.streams
    plan = streams.plan(RangeQuery(tp, offset=truth.log_start_offset))
    finished = list(rt.store.list_segments(tp, states=[SegmentState.COPY_SEGMENT_FINISHED]))
    remote = [s for s in finished if plan.local_start is None or s.start_offset < plan.local_start]
    assert len(remote) >= 2, "one remote segment: the test would test nothing"
    assert all(s.size_bytes < NEXT_SEGMENT_LEAD_BYTES for s in remote)
    next_key = {s.layout.log_key: t.layout.log_key for s, t in itertools.pairwise(remote)}
    recorded = Recorded(streams.remote)

    async def read() -> list[StreamBatch]:
        reader = BatchReader(
            plan, streams.service, streams.indexes, recorded, on_threads, chunk_bytes=streams.chunk_bytes
        )
        taken: list[StreamBatch] = []
        async for batch in reader.batches():
            first = not taken or taken[-1].name != batch.name
            taken.append(batch)
            following = next_key.get(batch.name)
            if following is not None and first:
                waited = 0.0  # the read ahead runs on the loop while the consumer waits here
                while following not in [key for key, _, _ in recorded.asked] and waited < PATIENCE_S:
                    await asyncio.sleep(0.01)
                    waited += 0.01
                assert following in [key for key, _, _ in recorded.asked], f"{following} not read ahead"
        await streams.remote.close()
        return taken

    taken = asyncio.run(read())
    assert len(recorded.asked) == len({key for key, _, _ in recorded.asked}), "a segment was read twice"
    records = [r for b in taken for r in decode_batch(b.data, b.header._replace(position=0))]
    assert [r for r in records if plan.start <= r.offset < plan.end] == expected(
        truth, truth.log_start_offset, None, False
    )
