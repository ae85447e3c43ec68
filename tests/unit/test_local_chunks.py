"""A chunk of a broker's segment read, chosen and encoded in one call (:mod:`rlm.stream.local_chunks`)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from functools import partial
from pathlib import Path

import pytest

from rlm.errors import CorruptDataError
from rlm.log.aborted import AbortedIndex
from rlm.log.byte_source import FileSource, iter_headers
from rlm.log.index import OffsetIndex
from rlm.log.model import Codec
from rlm.metastore.model import TopicPartition
from rlm.stream.chunks import StreamBatch
from rlm.stream.local_chunks import ChunkJob, Encoding, chunk_bounds
from rlm.stream.ndjson import ndjson_lines
from rlm.stream.plan import RangePlan
from tests.lookup_support import TOPIC, BatchPlan, PartitionPlan, write_partition

PLAN = PartitionPlan(
    batches=tuple(
        BatchPlan(timestamps=(i, i + 1), codec=Codec.NONE, kind="commit" if i % 4 == 2 else "plain")
        for i in range(12)
    ),
    segment_bytes=1 << 20,
    tiering="local",
)
WHOLE = RangePlan(TopicPartition(TOPIC, 0), 0, 1 << 62, 1 << 62, None, None)


def offsets(group: Sequence[StreamBatch]) -> list[int]:
    return [batch.header.base_offset for batch in group]


@pytest.fixture
def segment(tmp_path: Path) -> Path:
    write_partition(tmp_path, PLAN)
    (log,) = (tmp_path / f"{TOPIC}-0").glob("*.log")
    return log


def job(log: Path, lo: int, hi: int, encoding: Encoding[object], next_offset: int = 0) -> ChunkJob[object]:
    source = FileSource(log)
    try:
        return ChunkJob(WHOLE, AbortedIndex(()), encoding, source.duplicate(), str(log), lo, hi, next_offset)
    finally:
        source.close()


def data_batches(log: Path) -> list[int]:
    with FileSource(log) as source:
        return [h.base_offset for h in iter_headers(source, 0) if not h.is_control]


def test_positions_apart_are_index_entries_at_least_a_step_apart() -> None:
    index = OffsetIndex(100)
    for offset, position in ((101, 100), (102, 250), (103, 300), (104, 900), (105, 1000)):
        index.append(offset, position)
    assert index.positions_apart(0, 1000, 200) == [250, 900]
    assert index.positions_apart(0, 950, 1) == [100, 250, 300, 900]
    assert chunk_bounds(index.positions_apart, 0, 1200, 200) == [0, 250, 900, 1200]
    assert chunk_bounds(index.positions_apart, 1200, 1200, 200) == [1200]


def test_a_chunk_sends_its_data_batches_from_the_next_offset(segment: Path) -> None:
    size = segment.stat().st_size
    batches = data_batches(segment)
    read = job(segment, 0, size, Encoding(offsets, group_bytes=1))()
    assert [o for piece in read.pieces for o in piece] == batches  # type: ignore[attr-defined]
    assert (read.end, read.error, read.done) == (size, None, False)
    later = job(segment, 0, size, Encoding(offsets, group_bytes=1), next_offset=batches[3])()
    assert [o for piece in later.pieces for o in piece] == batches[3:]  # type: ignore[attr-defined]


def test_a_batch_cut_by_the_chunks_end_is_left_for_the_reader(segment: Path) -> None:
    size = segment.stat().st_size
    read = job(segment, 0, size - 1, Encoding(offsets, group_bytes=1 << 30))()
    last = max(h.position for h in iter_headers(FileSource(segment), 0))
    assert read.end == last < size - 1
    assert read.error is None
    assert data_batches(segment)[-1] not in read.pieces[0]  # type: ignore[operator]


def test_a_call_of_a_stream_gone_reads_nothing_and_closes_its_descriptor(segment: Path) -> None:
    call = job(segment, 0, segment.stat().st_size, Encoding(offsets, group_bytes=1))
    call.cancelled = True
    read = call()
    assert (read.pieces, read.read, read.done) == ([], 0, True)
    with pytest.raises(OSError):
        os.fstat(call.fd)


def test_a_batch_failing_its_crc_ends_the_chunk_after_the_ones_before(segment: Path) -> None:
    headers = [h for h in iter_headers(FileSource(segment), 0) if not h.is_control]
    bad = headers[5]
    raw = bytearray(segment.read_bytes())
    raw[bad.position + bad.size - 1] ^= 0xFF
    segment.write_bytes(bytes(raw))
    read = job(segment, 0, len(raw), Encoding(partial(ndjson_lines, WHOLE), group_bytes=1))()
    assert isinstance(read.error, CorruptDataError)
    assert str(segment) in str(read.error)
    assert len(read.pieces) == 5
    assert b'"offset":%d,' % headers[4].base_offset in read.pieces[4]  # type: ignore[operator]


def test_a_chunk_is_encoded_in_even_groups_none_left_over(segment: Path) -> None:
    size = segment.stat().st_size
    by_records = job(segment, 0, size, Encoding(offsets, 1 << 30, group_records=10))()
    assert len(data_batches(segment)) == 12  # of 2 records each: 24 records, 3 groups of 8
    assert [len(piece) for piece in by_records.pieces] == [4, 4, 4]  # type: ignore[arg-type]
    whole = job(segment, 0, size, Encoding(offsets, 1 << 30, group_records=24))()
    assert [len(piece) for piece in whole.pieces] == [12]  # type: ignore[arg-type]
    data = sum(h.size for h in iter_headers(FileSource(segment), 0) if not h.is_control)
    by_bytes = job(segment, 0, size, Encoding(offsets, group_bytes=data * 2 // 5))()
    assert len(by_bytes.pieces) == 2  # not a third of what is left over
    assert [o for piece in by_bytes.pieces for o in piece] == data_batches(segment)  # type: ignore[attr-defined]


class CancelOnStart:
    """A read meter whose read's stream ends while the read runs (``job.cancelled`` set then)."""

    def __init__(self) -> None:
        self.job: ChunkJob[object] | None = None
        self.in_flight = 0
        self.ended: list[int] = []

    def read_started(self) -> None:
        self.in_flight += 1
        assert self.job is not None
        self.job.cancelled = True

    def read_ended(self, size: int) -> None:
        self.in_flight -= 1
        self.ended.append(size)


def test_a_read_whose_stream_ends_while_it_runs_is_counted_ended(segment: Path) -> None:
    meter = CancelOnStart()
    source = FileSource(segment)
    size = segment.stat().st_size
    call: ChunkJob[object] = ChunkJob(
        WHOLE, AbortedIndex(()), Encoding(offsets, 1), source.duplicate(), str(segment), 0, size, 0, meter
    )
    source.close()
    meter.job = call
    call()
    assert (meter.in_flight, meter.ended) == (0, [size])
