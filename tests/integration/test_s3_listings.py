"""Listings of an S3 store over many pages, played by the fault proxy in front of moto: pages of
two keys, keys a URL must escape, partition prefixes that are prefixes of other partitions', and a
store that answers every page request with its first page."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from rlm.errors import StorageError
from rlm.storage.s3 import S3Storage
from tests.s3_proxy import ProxyFault, S3Proxy
from tests.s3_support import MotoS3

KEYS = sorted(
    [
        "a/1/x",
        "a/10/x",
        "a-b/1/x",
        "a/1/with space",
        "a/1/plus+sign",
        "a/1/percent%2F",
        "a/1/amp&lt;",
        "a/1/ünïcödé",
        "a/1/question?mark",
        "a/1/hash#tag",
    ],
    key=lambda k: k.encode(),
)


@pytest.fixture
def proxied(moto_s3: MotoS3) -> Iterator[tuple[S3Proxy, S3Storage]]:
    with S3Proxy(moto_s3.endpoint_url) as proxy:
        storage = moto_s3.storage(
            moto_s3.new_bucket(), f"t/{uuid.uuid4().hex[:8]}", endpoint_url=proxy.endpoint_url
        )
        yield proxy, storage
        storage.close()


def test_a_listing_of_many_pages_gives_each_key_once_and_only_under_its_prefix(
    proxied: tuple[S3Proxy, S3Storage],
) -> None:
    proxy, storage = proxied
    for key in KEYS:
        storage.put_object(key, key.encode())
    proxy.inject(ProxyFault.SMALL_PAGES, "ListObjectsV2")
    assert list(storage.list_keys()) == KEYS
    assert list(storage.list_keys("a/1/")) == [k for k in KEYS if k.startswith("a/1/")]
    assert list(storage.list_keys("a/1")) == [k for k in KEYS if k.startswith("a/1")]
    assert list(storage.list_keys("a-")) == ["a-b/1/x"]
    assert len(proxy.exchanges_of("ListObjectsV2")) > len(KEYS) // 2


def test_a_store_that_answers_every_page_request_with_the_first_page_is_an_error(
    proxied: tuple[S3Proxy, S3Storage],
) -> None:
    proxy, storage = proxied
    for key in KEYS:
        storage.put_object(key, b"")
    proxy.inject(ProxyFault.SMALL_PAGES, "ListObjectsV2")
    proxy.inject(ProxyFault.IGNORE_CONTINUATION, "ListObjectsV2")
    listed: list[str] = []
    with pytest.raises(StorageError, match="ListObjectsV2.*the same page again") as raised:
        for key in storage.list_keys():
            listed.append(key)
            assert len(listed) <= len(KEYS), "a key listed twice"
    assert raised.value.retriable is False
    assert listed == KEYS[:2]
