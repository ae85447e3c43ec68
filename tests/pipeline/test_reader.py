"""The remote segment reader: chunked ranged reads, and whole batches cut out of the stream."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import pytest

from rlm.errors import CorruptIndexError, CorruptRecordError
from rlm.log.byte_source import BytesSource, iter_headers, read_batch_bytes
from rlm.log.logdir import LogDir
from rlm.log.produce import ProduceSummary
from rlm.log.v2 import parse_v2_header
from rlm.metastore.model import ByteRange
from rlm.pipeline.reader import BatchRun, RawBatch, SegmentReader, iter_batches, iter_runs, read_chunks
from rlm.remote_tier.read_plan import IndexRef, summarize
from rlm.storage.delegate import DelegatingStorage
from rlm.storage.filesystem import FilesystemStorage
from tests.metadata_support import segment


@pytest.fixture(scope="module")
def log_bytes(sample_logdir: tuple[Path, ProduceSummary]) -> bytes:
    """A sample segment with legacy batches and every codec."""
    partition = next(p for p in LogDir(sample_logdir[0]).partitions() if p.topic == "orders")
    return partition.segments()[0].log_path.read_bytes()


def _pieces(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


def _runs_as_batches(chunks: Iterable[bytes], name: str, total: int) -> Iterator[RawBatch]:
    """:func:`iter_runs`, each batch of its runs as the :class:`RawBatch` it stands for."""
    for item in iter_runs(chunks, name, total):
        if isinstance(item, BatchRun):
            assert item.headers
            for h in item.headers:
                header = parse_v2_header(item.data, h.pos, item.position + h.pos)
                assert (header.size, header.last_offset, header.max_timestamp) == (
                    h.size,
                    h.last_offset,
                    h.max_timestamp,
                )
                yield RawBatch(header, item.data[h.pos : h.pos + h.size])
        else:
            yield item


Cut = Callable[[Iterable[bytes], str, int], Iterator[RawBatch]]
#: Both ways of cutting a stream into batches: one at a time, and in runs of v2 batches.
cutters = pytest.mark.parametrize("cut", [iter_batches, _runs_as_batches], ids=["batches", "runs"])


def _pairs(batches: list[RawBatch]) -> list[tuple[int, int, bytes]]:
    return [(b.header.position, b.header.last_offset, bytes(b.data)) for b in batches]


@cutters
@pytest.mark.parametrize("chunk", [1, 7, 61, 4096, 1 << 30])
def test_batches_are_cut_whole_whatever_the_chunks(log_bytes: bytes, chunk: int, cut: Cut) -> None:
    source = BytesSource(log_bytes)
    expected = [(h.position, h.last_offset, read_batch_bytes(source, h)) for h in iter_headers(source)]
    assert len(expected) > 10
    got = _pairs(list(cut(_pieces(log_bytes, chunk), "k", len(log_bytes))))
    assert got == expected


@cutters
def test_an_object_cut_short_is_reported_at_its_last_batch(log_bytes: bytes, cut: Cut) -> None:
    last = list(iter_headers(BytesSource(log_bytes)))[-1]
    short = log_bytes[:-10]
    got: list[RawBatch] = []
    with pytest.raises(CorruptRecordError, match="cut short") as caught:
        got.extend(cut(_pieces(short, 1000), "k.log", len(short)))
    assert caught.value.position == last.position and caught.value.path == "k.log"
    assert got and got[-1].header.end_position == last.position


@cutters
def test_bytes_after_the_last_batch_are_reported(log_bytes: bytes, cut: Cut) -> None:
    longer = log_bytes + b"\x00" * 5
    with pytest.raises(CorruptRecordError, match="5 bytes after the last whole batch") as caught:
        list(cut([longer], "k", len(longer)))
    assert caught.value.position == len(log_bytes)


@cutters
def test_a_size_field_that_cannot_be_a_batch_is_reported(log_bytes: bytes, cut: Cut) -> None:
    third = list(iter_headers(BytesSource(log_bytes)))[2]
    data = bytearray(log_bytes)
    data[third.position + 8 : third.position + 12] = (3).to_bytes(4, "big")
    with pytest.raises(CorruptRecordError, match="smaller than the minimum") as caught:
        list(cut([bytes(data)], "k", len(data)))
    assert caught.value.position == third.position
    data[third.position + 8 : third.position + 12] = (2**31 - 1).to_bytes(4, "big")
    with pytest.raises(CorruptRecordError, match="cut short"):  # never waits for 2 GiB
        list(cut(_pieces(bytes(data), 100), "k", len(data)))


class CountingStorage(DelegatingStorage):
    def __init__(self, inner: FilesystemStorage) -> None:
        super().__init__(inner)
        self.streams: list[tuple[int, int, int]] = []

    def stream_range(
        self, key: str, start: int, length: int, *, piece_bytes: int = 1 << 23
    ) -> Iterator[bytes]:
        self.streams.append((start, length, piece_bytes))
        return super().stream_range(key, start, length, piece_bytes=piece_bytes)


def test_chunks_come_from_one_streamed_read(tmp_path: Path) -> None:
    storage = CountingStorage(FilesystemStorage(tmp_path))
    data = bytes(range(256)) * 40
    storage.put_object("a/b.log", data)
    chunks = list(read_chunks(storage, "a/b.log", len(data), chunk_bytes=3000))
    assert [len(c) for c in chunks] == [3000, 3000, 3000, 1240] and b"".join(chunks) == data
    assert storage.streams == [(0, len(data), 3000)]
    # An object shorter than expected ends the stream where it ends.
    assert b"".join(read_chunks(storage, "a/b.log", len(data) + 5000, chunk_bytes=4000)) == data


def test_index_files_are_read_by_their_ranges(tmp_path: Path) -> None:
    storage = FilesystemStorage(tmp_path)
    storage.put_object("x/y.indexes", b"0123456789")
    reader = SegmentReader(storage, summarize([segment(0, 9)])[0])
    assert reader.read_ref(IndexRef("x/y.indexes", ByteRange(2, 3))) == b"234"
    assert reader.read_ref(IndexRef("x/y.indexes", ByteRange(2, 0))) == b""
    assert reader.bytes_read == 3
    with pytest.raises(CorruptIndexError, match="the file should be 5 bytes at 8, the object holds 2"):
        reader.read_ref(IndexRef("x/y.indexes", ByteRange(8, 5)))
