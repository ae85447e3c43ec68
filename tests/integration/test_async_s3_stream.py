"""Streamed reads of S3 on the event loop (:meth:`rlm.storage.async_s3.AsyncS3Reader.stream_range`),
through a fault proxy in front of moto's server: one GET read piece by piece, resumed from where
it broke, given up after the store's retries in a row; as many open at once as the reader has
connections for."""

from __future__ import annotations

import asyncio
import dataclasses
import random
from collections.abc import Iterator

import pytest

from rlm.errors import StorageUnavailableError
from rlm.storage.async_s3 import AsyncS3Reader
from rlm.storage.retry import RetryPolicy
from tests.s3_proxy import ProxyFault, S3Proxy
from tests.s3_support import TEST_S3_CONFIG, MotoS3

IMPATIENT = dataclasses.replace(
    TEST_S3_CONFIG, retry=RetryPolicy(max_attempts=3, base_delay_s=0.001, max_delay_s=0.002)
)
DATA = random.Random(7).randbytes(200_000)
KEY = "seg/a.log"


@pytest.fixture(scope="module")
def proxied(moto_s3: MotoS3) -> Iterator[tuple[S3Proxy, AsyncS3Reader]]:
    with S3Proxy(moto_s3.endpoint_url) as proxy:
        storage = moto_s3.storage(moto_s3.new_bucket(), "tier", IMPATIENT, endpoint_url=proxy.endpoint_url)
        storage.put_object(KEY, DATA)
        yield proxy, AsyncS3Reader.for_storage(storage)
        storage.close()


def streamed(reader: AsyncS3Reader, start: int, length: int, piece_bytes: int) -> list[bytearray]:
    async def run() -> list[bytearray]:
        try:
            return [piece async for piece in reader.stream_range(KEY, start, length, piece_bytes=piece_bytes)]
        finally:
            await reader.close()

    return asyncio.run(run())


def ranges(proxy: S3Proxy, since: int) -> list[str]:
    return [e.headers.get("range", "") for e in proxy.exchanges_of("GetObject")[since:]]


def test_a_streamed_read_is_one_get_taken_in_pieces_of_the_asked_size(
    proxied: tuple[S3Proxy, AsyncS3Reader],
) -> None:
    proxy, reader = proxied
    before = len(proxy.exchanges_of("GetObject"))
    pieces = streamed(reader, 1000, 150_000, 7000)
    assert b"".join(pieces) == DATA[1000:151_000]
    assert {len(p) for p in pieces[:-1]} == {7000} and len(pieces[-1]) == 150_000 % 7000
    assert ranges(proxy, before) == ["bytes=1000-150999"]


def test_the_pieces_stop_where_the_object_ends(proxied: tuple[S3Proxy, AsyncS3Reader]) -> None:
    _, reader = proxied
    assert b"".join(streamed(reader, 190_000, 50_000, 4096)) == DATA[190_000:]
    assert streamed(reader, len(DATA) + 10, 100, 4096) == []


def test_a_get_cut_part_way_is_resumed_from_the_last_whole_piece(
    proxied: tuple[S3Proxy, AsyncS3Reader],
) -> None:
    proxy, reader = proxied
    before = len(proxy.exchanges_of("GetObject"))
    proxy.inject(ProxyFault.CUT_BODY, "GetObject", every=2)
    try:
        assert b"".join(streamed(reader, 0, 10, 10)) == DATA[:10]  # the first GET, whole
        pieces = streamed(reader, 0, len(DATA), 7000)  # the second, cut half way; the third, whole
    finally:
        proxy.clear()
    assert b"".join(pieces) == DATA
    gets = proxy.exchanges_of("GetObject")[before:]
    assert len(gets) == 3
    resumed_at = int(ranges(proxy, before)[2].removeprefix("bytes=").split("-")[0])
    assert ranges(proxy, before)[1:] == ["bytes=0-199999", f"bytes={resumed_at}-199999"]
    assert resumed_at % 7000 == 0 and 0 < resumed_at <= len(DATA) // 2  # the whole pieces it had


def test_a_get_that_keeps_breaking_gives_up_retriably(proxied: tuple[S3Proxy, AsyncS3Reader]) -> None:
    proxy, reader = proxied
    before = len(proxy.exchanges_of("GetObject"))
    proxy.inject(ProxyFault.CUT_BODY, "GetObject")
    try:
        with pytest.raises(StorageUnavailableError, match="gave up after 3 failures") as raised:
            streamed(reader, 0, len(DATA), 150_000)  # half a body never holds a whole piece
    finally:
        proxy.clear()
    assert raised.value.retriable
    assert ranges(proxy, before) == ["bytes=0-199999"] * 3


def test_bad_arguments_are_refused_at_the_call(proxied: tuple[S3Proxy, AsyncS3Reader]) -> None:
    _, reader = proxied
    with pytest.raises(ValueError, match="bad range"):
        reader.stream_range(KEY, -1, 10, piece_bytes=10)
    with pytest.raises(ValueError, match="at least one byte"):
        reader.stream_range(KEY, 0, 10, piece_bytes=0)


#: An object larger than what the socket buffers and aiohttp take in while its read is not taken:
#: a read of it left open keeps its connection.
LARGE = 16 * 1024 * 1024


def first_pieces(reader: AsyncS3Reader, reads: int, patience_s: float) -> list[bool]:
    """Open ``reads`` streamed reads of the large object at once, each kept open, and say of each
    whether its first piece came within ``patience_s``."""

    async def run() -> list[bool]:
        opened = [reader.stream_range("large", 0, LARGE, piece_bytes=4096) for _ in range(reads)]
        came = []
        try:
            for pieces in opened:
                try:
                    came.append(len(await asyncio.wait_for(anext(pieces), patience_s)) == 4096)
                except TimeoutError:
                    came.append(False)
        finally:
            for pieces in opened:
                await pieces.aclose()
            await reader.close()
        return came

    return asyncio.run(run())


def test_as_many_reads_stay_open_at_once_as_the_reader_has_connections(moto_s3: MotoS3) -> None:
    bucket = moto_s3.new_bucket()
    one = dataclasses.replace(IMPATIENT, max_pool_connections=1)
    storage = moto_s3.storage(bucket, "tier", one)
    storage.put_object("large", bytes(LARGE))
    try:
        # The store's own pool: a second open read waits for the first one's connection.
        assert first_pieces(AsyncS3Reader.for_storage(storage), 2, 1.0) == [True, False]
        reader = AsyncS3Reader.for_storage(storage, connections=6)
        assert reader.connections == 6
        assert first_pieces(reader, 6, 30.0) == [True] * 6
    finally:
        storage.close()
