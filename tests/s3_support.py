"""S3 servers over real HTTP for tests, and stores built on them.

Two independent implementations, one process each per test session:

* moto's server mode (``moto_s3``): close to AWS, lists and aborts multipart uploads, checks
  checksums;
* s3rver (``s3rver``, npm, installed by ``make`` into ``build/s3rver``): file-backed, answers 501
  to ListMultipartUploads and 405 to AbortMultipartUpload, ignores checksums, and answers
  ``Range: bytes=0-0`` with the whole object — the kind of S3-compatible store rlm must work on.

``moto_s3``, ``s3rver`` and ``s3_server`` (each server in turn) are fixtures of
``tests/conftest.py``, so that the session runs one of each whatever the modules that use them.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import subprocess
import sys
import threading
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import boto3
import pytest
from botocore.config import Config
from moto.server import ThreadedMotoServer

from rlm.storage.events import StorageEvents
from rlm.storage.retry import RetryPolicy
from rlm.storage.s3 import S3Storage
from rlm.storage.s3_client import new_session
from rlm.storage.s3_config import MIN_PART_BYTES, S3Config

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

REGION = "us-east-1"
REPO = Path(__file__).resolve().parents[1]
#: Where ``make s3rver`` installs it (``npm install --prefix build/s3rver s3rver@3.7.1``).
S3RVER_BIN = REPO / "build" / "s3rver" / "node_modules" / ".bin" / "s3rver"
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
class S3Server:
    """A running S3 server, and what of S3 it implements."""

    name: str
    endpoint_url: str
    access_key_id: str = "rlm-test-key"
    """moto accepts any key; s3rver only its own."""
    lists_uploads: bool = True
    """Implements ListMultipartUploads."""
    aborts_uploads: bool = True
    """Implements AbortMultipartUpload."""
    checks_checksums: bool = True
    """Refuses a body whose ``x-amz-checksum-crc32c`` is wrong, and reports the CRC-32C on HEAD."""
    lists_in_order: bool = True
    """Lists keys in ascending byte order, as AWS S3 does."""
    uploads_dir: Path | None = None
    """Where the server keeps unfinished uploads, for a server that cannot list them."""
    addressing_style: Literal["auto", "path", "virtual"] = "auto"

    def session(self) -> boto3.session.Session:
        """A session with static test credentials (sharing what botocore's loaders read, as rlm's
        own sessions do: :func:`rlm.storage.s3_client.new_session`)."""
        return new_session(
            aws_access_key_id=self.access_key_id, aws_secret_access_key="rlm-test-secret", region_name=REGION
        )

    def client(self) -> S3Client:
        """A plain boto3 client, to look at the bucket behind a store's back (one per server)."""
        return self._client

    @cached_property
    def _client(self) -> S3Client:
        config = Config(s3={"addressing_style": self.addressing_style})
        return self.session().client("s3", endpoint_url=self.endpoint_url, config=config)

    def new_bucket(self) -> str:
        """Create a bucket with a fresh name; returns the name."""
        name = f"rlm-test-{uuid.uuid4().hex[:12]}"
        self.client().create_bucket(Bucket=name)
        return name

    def config(self, config: S3Config = TEST_S3_CONFIG, endpoint_url: str | None = None) -> S3Config:
        """``config`` pointed at this server (or at ``endpoint_url``, a proxy in front of it)."""
        return replace(
            config,
            endpoint_url=endpoint_url or self.endpoint_url,
            addressing_style=self.addressing_style,
        )

    def storage(
        self,
        bucket: str,
        prefix: str = "",
        config: S3Config = TEST_S3_CONFIG,
        session: boto3.session.Session | None = None,
        *,
        endpoint_url: str | None = None,
        events: StorageEvents | None = None,
    ) -> S3Storage:
        """An :class:`S3Storage` on this server (``session`` may carry fault-injection handlers)."""
        return S3Storage(
            bucket,
            prefix,
            self.config(config, endpoint_url),
            session=session or self.session(),
            events=events,
        )

    def unfinished_uploads(self, bucket: str) -> list[str]:
        """Keys of the multipart uploads started and neither completed nor aborted, sorted."""
        if self.uploads_dir is None:
            listing = self.client().list_multipart_uploads(Bucket=bucket)
            return sorted(upload.get("Key", "") for upload in listing.get("Uploads", []))
        # s3rver keeps each upload in <dir>/<bucket>/._S3rver_uploads/<upload id>/, its key in "key".
        uploads = self.uploads_dir / bucket / "._S3rver_uploads"
        return sorted(key.read_text() for key in uploads.glob("*/key"))


class RecordingEvents:
    """:class:`~rlm.storage.events.StorageEvents` that remembers what it was told. Thread-safe."""

    def __init__(self) -> None:
        self.failed: Counter[str] = Counter()
        """Optional calls refused, by operation."""
        self.size_only = 0
        """Puts checked by size only."""
        self._lock = threading.Lock()

    def optional_call_failed(self, operation: str) -> None:
        with self._lock:
            self.failed[operation] += 1

    def checksum_unreported(self) -> None:
        with self._lock:
            self.size_only += 1


#: The name most tests know the moto server by.
MotoS3 = S3Server


@contextlib.contextmanager
def running_moto() -> Iterator[S3Server]:
    """A moto S3 server on a free port of 127.0.0.1 (the session's: fixture ``moto_s3``)."""
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield S3Server("moto", f"http://{host}:{port}")
    finally:
        server.stop()


@contextlib.contextmanager
def running_s3rver(directory: Path) -> Iterator[S3Server]:
    """An s3rver process on a free port of 127.0.0.1 keeping its files in ``directory``.

    The session's one is the ``s3rver`` fixture of ``tests/conftest.py``.
    """
    if not S3RVER_BIN.exists():
        pytest.fail(f"s3rver is not installed at {S3RVER_BIN}: `make s3rver` installs it (make test does)")
    # Node 20 needs the legacy OpenSSL provider for s3rver's paged listings (MD5-based tokens).
    env = {**os.environ, "NODE_OPTIONS": "--openssl-legacy-provider"}
    command = [str(S3RVER_BIN), "--directory", str(directory), "--address", "127.0.0.1", "--port", "0"]
    # A killed test run leaves no server behind: Linux sends it SIGTERM when the test process dies.
    setpriv = shutil.which("setpriv")
    guard = [setpriv, "--pdeathsig", "TERM", "--"] if setpriv and sys.platform == "linux" else []
    process = subprocess.Popen(
        [*guard, *command, "--silent", "--no-vhost-buckets"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    try:
        port = _listening_port(process)
        yield S3Server(
            "s3rver",
            f"http://127.0.0.1:{port}",
            access_key_id="S3RVER",
            lists_uploads=False,
            aborts_uploads=False,
            checks_checksums=False,
            lists_in_order=False,
            uploads_dir=directory,
            addressing_style="path",
        )
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


def _listening_port(process: subprocess.Popen[str], timeout_s: float = 30) -> int:
    """The port in s3rver's ``S3rver listening on 127.0.0.1:PORT`` line; the rest is drained."""
    found: list[int] = []
    ready = threading.Event()
    seen: list[str] = []

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:  # read to the end, so the pipe never fills up
            match = re.search(r"listening on [\d.]+:(\d+)", line)
            if match and not found:
                found.append(int(match.group(1)))
                ready.set()
            elif not found:
                seen.append(line)
        ready.set()

    threading.Thread(target=read, name="s3rver-output", daemon=True).start()
    if not ready.wait(timeout_s) or not found:
        raise RuntimeError(f"s3rver did not start (exit {process.poll()}): {''.join(seen)}")
    return found[0]
