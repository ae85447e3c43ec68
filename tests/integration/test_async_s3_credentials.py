"""The async reader signs with its store's credentials, and follows them when botocore refreshes
them (a web identity role, the instance metadata): temporary keys copied once would expire under a
long-lived process and fail every remote read after the hour. The signatures are read off the wire,
through a proxy in front of moto's server."""

from __future__ import annotations

import asyncio
import gc
import warnings
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import botocore.session
import pytest
from botocore.credentials import CredentialProvider, CredentialResolver, RefreshableCredentials

from rlm.storage.async_s3 import AsyncS3Reader
from rlm.storage.s3 import S3Storage
from rlm.storage.s3_client import share_loaded_data
from tests.s3_proxy import S3Proxy
from tests.s3_support import REGION, MotoS3

KEY = "seg/a.log"
DATA = b"0123456789" * 100


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


class RotatingRole(CredentialProvider):
    """A credential provider of temporary keys that last an hour, as STS hands out: each refresh
    hands out the key ``current`` names."""

    METHOD = "assume-role-with-web-identity"

    def __init__(self, clock: Clock) -> None:
        super().__init__()
        self.clock = clock
        self.current = "ROLEKEY1"
        self.refreshes = 0

    def _metadata(self) -> dict[str, Any]:
        self.refreshes += 1
        return {
            "access_key": self.current,
            "secret_key": f"secret-of-{self.current}",
            "token": f"token-of-{self.current}",
            "expiry_time": (self.clock() + timedelta(hours=1)).isoformat(),
        }

    def load(self) -> RefreshableCredentials:
        m = self._metadata()
        return RefreshableCredentials(
            m["access_key"],
            m["secret_key"],
            m["token"],
            datetime.fromisoformat(m["expiry_time"]),
            self._metadata,
            self.METHOD,
            time_fetcher=self.clock,
        )


@pytest.fixture
def proxy(moto_s3: MotoS3) -> Iterator[S3Proxy]:
    with S3Proxy(moto_s3.endpoint_url) as proxy:
        yield proxy


def _storage(moto_s3: MotoS3, proxy: S3Proxy, role: RotatingRole) -> S3Storage:
    core = botocore.session.Session()
    share_loaded_data(core)
    core.register_component("credential_provider", CredentialResolver([role]))
    session = boto3.session.Session(botocore_session=core, region_name=REGION)
    storage = moto_s3.storage(moto_s3.new_bucket(), "tier", session=session, endpoint_url=proxy.endpoint_url)
    storage.put_object(KEY, DATA)
    return storage


def _signed_with(proxy: S3Proxy, since: int) -> list[str]:
    """The access key of each GetObject since ``since``, from its ``Authorization`` header."""
    keys = []
    for exchange in proxy.exchanges_of("GetObject")[since:]:
        credential = exchange.headers["authorization"].split("Credential=")[1]
        keys.append(credential.split("/")[0])
    return keys


def _read(reader: AsyncS3Reader, loop: asyncio.AbstractEventLoop) -> bytes:
    async def run() -> bytes:
        return b"".join([p async for p in reader.stream_range(KEY, 0, len(DATA), piece_bytes=4096)])

    return loop.run_until_complete(run())


def test_the_reader_follows_its_stores_temporary_credentials_as_they_are_refreshed(
    moto_s3: MotoS3, proxy: S3Proxy
) -> None:
    clock = Clock()
    role = RotatingRole(clock)
    storage = _storage(moto_s3, proxy, role)
    reader = AsyncS3Reader.for_storage(storage, now=clock)
    loop = asyncio.new_event_loop()
    try:
        before = len(proxy.exchanges_of("GetObject"))
        assert _read(reader, loop) == DATA
        # The store's STS hands out a new key; the old one expires within the hour.
        role.current = "ROLEKEY2"
        clock.now += timedelta(minutes=55)
        assert _read(reader, loop) == DATA
        clock.now += timedelta(minutes=55)
        role.current = "ROLEKEY3"
        assert _read(reader, loop) == DATA
        assert _signed_with(proxy, before) == ["ROLEKEY1", "ROLEKEY2", "ROLEKEY3"]
        # The store's own client signs with the same keys: one session's refreshes serve both.
        assert storage.read_range(KEY, 0, 10) == DATA[:10]
        assert _signed_with(proxy, before)[-1] == "ROLEKEY3"
        assert role.refreshes == 3
        loop.run_until_complete(reader.close())
    finally:
        loop.close()
        storage.close()


def test_static_keys_are_signed_with_as_they_are(moto_s3: MotoS3, proxy: S3Proxy) -> None:
    storage = moto_s3.storage(moto_s3.new_bucket(), "tier", endpoint_url=proxy.endpoint_url)
    storage.put_object(KEY, DATA)
    reader = AsyncS3Reader.for_storage(storage)
    loop = asyncio.new_event_loop()
    try:
        before = len(proxy.exchanges_of("GetObject"))
        assert _read(reader, loop) == DATA
        assert _signed_with(proxy, before) == [moto_s3.access_key_id]
        loop.run_until_complete(reader.close())
    finally:
        loop.close()
        storage.close()


def test_reads_that_start_together_share_one_client_that_close_closes(
    moto_s3: MotoS3, proxy: S3Proxy
) -> None:
    # Temporary keys are fetched off the loop while the client is made: reads started together
    # all wait there, and each must not make a client of its own, its connections beyond the
    # reader's bound and never closed (dropped, aiohttp warns of them when they are collected).
    clock = Clock()
    storage = _storage(moto_s3, proxy, RotatingRole(clock))
    reader = AsyncS3Reader.for_storage(storage, now=clock)

    async def read() -> bytes:
        return b"".join([p async for p in reader.stream_range(KEY, 0, len(DATA), piece_bytes=4096)])

    async def run() -> list[bytes]:
        try:
            return list(await asyncio.gather(*(read() for _ in range(4))))
        finally:
            await reader.close()

    gc.collect()  # what earlier tests left is not this one's
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ResourceWarning)
            assert asyncio.run(run()) == [DATA] * 4
            gc.collect()
        unclosed = [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]
        assert unclosed == []
    finally:
        storage.close()
