"""An S3 server over real HTTP for tests (moto's server mode), and stores built on it.

Import the fixtures into a test module (``from tests.s3_support import moto_s3  # noqa: F401``).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import boto3
import pytest
from moto.server import ThreadedMotoServer

from rlm.storage.retry import RetryPolicy
from rlm.storage.s3 import S3Storage
from rlm.storage.s3_config import MIN_PART_BYTES, S3Config

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

REGION = "us-east-1"
#: Retries fast enough for tests, patient enough for a server failing a fifth of requests.
TEST_RETRY = RetryPolicy(max_attempts=10, base_delay_s=0.001, max_delay_s=0.01)
#: The smallest parts S3 (and moto) accept, so multipart objects stay small.
TEST_S3_CONFIG = S3Config(
    region=REGION,
    multipart_threshold_bytes=MIN_PART_BYTES,
    part_size_bytes=MIN_PART_BYTES,
    max_concurrency=3,
    retry=TEST_RETRY,
)


@dataclass(frozen=True)
class MotoS3:
    """A running moto S3 server."""

    endpoint_url: str

    def session(self) -> boto3.session.Session:
        """A session with static test credentials (moto accepts any)."""
        return boto3.session.Session(
            aws_access_key_id="rlm-test-key", aws_secret_access_key="rlm-test-secret", region_name=REGION
        )

    def client(self) -> S3Client:
        """A plain boto3 client, to look at the bucket behind a store's back."""
        return self.session().client("s3", endpoint_url=self.endpoint_url)

    def new_bucket(self) -> str:
        """Create a bucket with a fresh name; returns the name."""
        name = f"rlm-test-{uuid.uuid4().hex[:12]}"
        self.client().create_bucket(Bucket=name)
        return name

    def storage(
        self,
        bucket: str,
        prefix: str = "",
        config: S3Config = TEST_S3_CONFIG,
        session: boto3.session.Session | None = None,
    ) -> S3Storage:
        """An :class:`S3Storage` on this server (``session`` may carry fault-injection handlers)."""
        return S3Storage(
            bucket,
            prefix,
            replace(config, endpoint_url=self.endpoint_url),
            session=session or self.session(),
        )

    def unfinished_uploads(self, bucket: str) -> list[str]:
        """Keys of the multipart uploads started and neither completed nor aborted."""
        listing = self.client().list_multipart_uploads(Bucket=bucket)
        return [upload.get("Key", "") for upload in listing.get("Uploads", [])]


@pytest.fixture(scope="session")
def moto_s3() -> Iterator[MotoS3]:
    """One moto S3 server for the test session, on a free port of 127.0.0.1."""
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield MotoS3(f"http://{host}:{port}")
    finally:
        server.stop()
