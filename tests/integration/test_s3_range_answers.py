"""Answers to ranged GETs whose headers do not match what they say elsewhere, played by the fault
proxy in front of moto: a ranged body labelled 200, a 206 sending less than its ``Content-Range``.
Every read (``read_range``, the store's streamed reads and the async reader's) gives the asked-for
bytes or an error, never other bytes or fewer as if the object ended there."""

from __future__ import annotations

import asyncio
import dataclasses
import random
import uuid
from collections.abc import Iterator

import pytest

from rlm.errors import StorageError, StorageUnavailableError
from rlm.storage.async_s3 import AsyncS3Reader
from rlm.storage.retry import RetryPolicy
from rlm.storage.s3 import S3Storage
from tests.s3_proxy import ProxyFault, S3Proxy
from tests.s3_support import TEST_S3_CONFIG, MotoS3

IMPATIENT = dataclasses.replace(
    TEST_S3_CONFIG, retry=RetryPolicy(max_attempts=3, base_delay_s=0.001, max_delay_s=0.002)
)
DATA = random.Random(11).randbytes(1000)
KEY = "seg/a.log"
RANGES = [(0, 1), (0, 100), (100, 10), (500, 500), (990, 50), (999, 1)]


@pytest.fixture
def proxied(moto_s3: MotoS3) -> Iterator[tuple[S3Proxy, S3Storage]]:
    with S3Proxy(moto_s3.endpoint_url) as proxy:
        storage = moto_s3.storage(
            moto_s3.new_bucket(), f"t/{uuid.uuid4().hex[:8]}", IMPATIENT, endpoint_url=proxy.endpoint_url
        )
        storage.put_object(KEY, DATA)
        yield proxy, storage
        storage.close()


def async_streamed(storage: S3Storage, start: int, length: int, piece_bytes: int) -> bytes:
    reader = AsyncS3Reader.for_storage(storage)

    async def run() -> bytes:
        try:
            return b"".join(
                [piece async for piece in reader.stream_range(KEY, start, length, piece_bytes=piece_bytes)]
            )
        finally:
            await reader.close()

    return asyncio.run(run())


def test_a_ranged_body_labelled_200_gives_the_asked_bytes(proxied: tuple[S3Proxy, S3Storage]) -> None:
    proxy, storage = proxied
    proxy.inject(ProxyFault.RANGE_AS_200, "GetObject")
    for start, length in RANGES:
        asked = DATA[start : start + length]
        assert storage.read_range(KEY, start, length) == asked, (start, length)
        assert b"".join(storage.stream_range(KEY, start, length, piece_bytes=7)) == asked, (start, length)
        assert async_streamed(storage, start, length, 7) == asked, (start, length)
    gets = proxy.exchanges_of("GetObject")
    assert {e.status for e in gets} == {200}  # what the client saw
    assert all("content-range" in e.response_headers for e in gets)


def test_a_206_sending_less_than_its_content_range_is_resumed(proxied: tuple[S3Proxy, S3Storage]) -> None:
    proxy, storage = proxied
    for start, length in RANGES[1:]:  # one byte cannot be halved
        asked = DATA[start : start + length]
        proxy.inject(ProxyFault.SHORT_206, "GetObject", times=1)
        assert storage.read_range(KEY, start, length) == asked, (start, length)
        proxy.inject(ProxyFault.SHORT_206, "GetObject", times=1)
        assert b"".join(storage.stream_range(KEY, start, length, piece_bytes=7)) == asked, (start, length)
        proxy.inject(ProxyFault.SHORT_206, "GetObject", times=1)
        assert async_streamed(storage, start, length, 7) == asked, (start, length)


def test_a_206_that_keeps_sending_half_its_content_range_is_resumed_until_whole(
    proxied: tuple[S3Proxy, S3Storage],
) -> None:
    proxy, storage = proxied
    proxy.inject(ProxyFault.SHORT_206, "GetObject")  # every answer: half of what is left
    asked = DATA[100:900]
    before = len(proxy.exchanges_of("GetObject"))
    # Each GET gives some bytes: the streamed read goes on from where each stopped.
    assert b"".join(storage.stream_range(KEY, 100, 800, piece_bytes=7)) == asked
    resumed = [e.headers["range"] for e in proxy.exchanges_of("GetObject")[before:]]
    assert resumed[:3] == ["bytes=100-899", "bytes=500-899", "bytes=700-899"]
    # One read asks for the whole range again each time: it gives up, never returns half.
    with pytest.raises(StorageUnavailableError, match="gave up after 3 attempts"):
        storage.read_range(KEY, 100, 800)


def test_a_416_for_a_range_starting_inside_the_object_is_an_error_not_its_end(
    proxied: tuple[S3Proxy, S3Storage],
) -> None:
    proxy, storage = proxied
    proxy.inject(ProxyFault.REFUSE_RANGE_PAST_END, "GetObject")
    assert storage.read_range(KEY, 0, 1000) == DATA  # ends at the object's end: answered
    refused = r"refused bytes=990-1039 \(InvalidRange\), but the object holds 1000 bytes"
    with pytest.raises(StorageError, match=refused) as raised:
        storage.read_range(KEY, 990, 50)
    assert raised.value.retriable is False
    with pytest.raises(StorageError, match=refused):
        b"".join(storage.stream_range(KEY, 990, 50, piece_bytes=7))
    with pytest.raises(StorageError, match=refused):
        async_streamed(storage, 990, 50, 7)
    # A range past the end is one still: the server's own 416, and nothing to read.
    assert storage.read_range(KEY, 1000, 10) == b""
    assert b"".join(storage.stream_range(KEY, 1000, 10)) == b""
    assert async_streamed(storage, 1000, 10, 7) == b""
    assert {e.status for e in proxy.exchanges_of("GetObject")} == {206, 416}
