"""Remote storage in an S3 bucket (or any S3-compatible store, through ``endpoint_url``).

* Puts above ``multipart_threshold_bytes`` are multipart uploads
  (:class:`~rlm.storage.s3_multipart.MultipartUploader`): parts go up through a bounded pool and
  any failure aborts the upload. The upload of a process killed mid-put stays until
  :meth:`S3Storage.abort_incomplete_puts` lists the key's uploads and aborts them.
* Integrity: every PUT and part carries its CRC-32C (``x-amz-checksum-crc32c``), which S3 checks
  on receipt. A multipart upload is a CRC-32C upload of ``S3Config.multipart_checksum_type``:
  ``COMPOSITE`` by default, completed with each part's CRC-32C, which S3 checks against the parts
  it holds; or ``FULL_OBJECT``, completed with the whole object's CRC-32C as well. After a put, a
  HEAD compares the stored size and CRC-32C (the whole object's, or the composite of the parts')
  with what was sent; a mismatch deletes the object.
* Retries: botocore's own retries are off; every request (each part included) goes through
  :func:`rlm.storage.retry.call_with_retry`: exponential backoff with full jitter on throttling,
  5xx, timeouts and connection errors, a bounded number of attempts.
* Streamed reads (:meth:`S3Storage.stream_range`) are one ranged GET read piece by piece; a body
  that breaks part way is resumed with a GET from where it stopped, within the retry policy.
* Credentials come from the standard AWS chain through the boto3 session; they are never logged.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Executor, ThreadPoolExecutor
from functools import partial
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, IncompleteReadError
from botocore.response import StreamingBody

from rlm.errors import (
    ChecksumMismatchError,
    ConfigError,
    InvalidObjectKeyError,
    NotFoundError,
    RlmError,
    StorageError,
)
from rlm.storage.layout import validate_key
from rlm.storage.payload import Payload, check_expected_crc32c, crc32c_update
from rlm.storage.protocol import STREAM_PIECE_BYTES, PutResult, PutSource, check_stream_arguments
from rlm.storage.ratelimit import RateLimiter
from rlm.storage.retry import call_with_retry
from rlm.storage.s3_config import S3Config
from rlm.storage.s3_errors import NOT_FOUND_CODES, error_for_code, s3_error_code, translate
from rlm.storage.s3_multipart import (
    MultipartUploader,
    Uploaded,
    crc32c_matches,
    s3_crc32c,
    stored_object,
)

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

T = TypeVar("T")
#: DeleteObjects takes at most this many keys.
_DELETE_BATCH = 1000


class S3Storage:
    """A :class:`~rlm.storage.protocol.RemoteStorage` in ``bucket`` under ``prefix``. Thread-safe."""

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        config: S3Config | None = None,
        *,
        session: boto3.session.Session | None = None,
        executor: Executor | None = None,
        sleep: Callable[[float], None] = time.sleep,
        draw: Callable[[], float] = random.random,
    ) -> None:
        """Create the client; no request is sent until the first call.

        Args:
            bucket: The bucket, which must exist.
            prefix: Key prefix for every object (``a/b`` stores key ``k`` at ``a/b/k``).
            config: Endpoint, part sizes, concurrency, timeouts and retries.
            session: Where credentials and the region come from (the standard AWS chain by
                default). Handlers registered on its events apply to this store's requests.
            executor: Runs part uploads; must not be a pool whose threads call ``put_object``
                (they would wait on themselves). By default the store owns a pool of
                ``max_concurrency`` threads.
            sleep: Waits between retries.
            draw: Uniform random numbers in ``[0, 1)`` for the retry jitter.

        Raises:
            ConfigError: The bucket or prefix is not usable.
        """
        if not bucket or "/" in bucket:
            raise ConfigError(f"bad S3 bucket name {bucket!r}")
        prefix = prefix.strip("/")
        if prefix:
            try:
                validate_key(prefix)
            except InvalidObjectKeyError as exc:
                raise ConfigError(f"bad S3 key prefix {prefix!r}: {exc}") from exc
        self.bucket = bucket
        self.prefix = prefix
        self.config = config or S3Config()
        self._key_prefix = f"{prefix}/" if prefix else ""
        self._sleep = sleep
        self._draw = draw
        session = session or boto3.session.Session()
        self._client: S3Client = session.client(
            "s3",
            endpoint_url=self.config.endpoint_url,
            region_name=self.config.region,
            config=Config(
                connect_timeout=self.config.connect_timeout_s,
                read_timeout=self.config.read_timeout_s,
                max_pool_connections=self.config.max_pool_connections,
                retries={"mode": "standard", "total_max_attempts": 1},
                # Every body carries rlm's CRC-32C, checked by the store, so botocore need not
                # also SHA-256 the payload for the signature over plain HTTP (HTTPS never does).
                s3={"addressing_style": self.config.addressing_style, "payload_signing_enabled": False},
                # rlm sends its own CRC-32C; by default botocore would add a CRC32 to every request.
                request_checksum_calculation="when_required",
                response_checksum_validation="when_required",
            ),
        )
        self._owned_executor = executor is None
        self._executor = executor or ThreadPoolExecutor(
            max_workers=self.config.max_concurrency, thread_name_prefix="rlm-s3-part"
        )
        self._multipart = MultipartUploader(self._client, bucket, self.config, self._executor, self._call)
        self._closed = False

    def __repr__(self) -> str:
        where = f", endpoint_url={self.config.endpoint_url!r}" if self.config.endpoint_url else ""
        return f"S3Storage(bucket={self.bucket!r}, prefix={self.prefix!r}{where})"

    # -- plumbing -------------------------------------------------------------------------

    def _full_key(self, key: str) -> str:
        return self._key_prefix + validate_key(key)

    def _call(self, operation: str, key: str, request: Callable[[], T]) -> T:
        """One request, translated to rlm errors and retried while retriable."""

        def attempt() -> T:
            try:
                return request()
            except (BotoCoreError, ClientError) as exc:
                raise translate(exc, operation=operation, key=key) from exc

        return call_with_retry(
            attempt, self.config.retry, what=f"S3 {operation} {key}", sleep=self._sleep, draw=self._draw
        )

    # -- RemoteStorage: put ---------------------------------------------------------------

    def put_object(
        self,
        key: str,
        source: PutSource,
        *,
        size: int | None = None,
        crc32c: int | None = None,
        rate_limiter: RateLimiter | None = None,
    ) -> PutResult:
        full_key = self._full_key(key)
        with Payload(source, size) as payload:
            if payload.size > self.config.multipart_threshold_bytes:
                sent = self._multipart.upload(key, full_key, payload, crc32c, rate_limiter)
            else:
                sent = self._put_single(key, full_key, payload, crc32c, rate_limiter)
            self._verify(key, full_key, payload.size, sent.reported)
            return PutResult(key, payload.size, sent.crc32c)

    def _put_single(
        self, key: str, full_key: str, payload: Payload, expected: int | None, limiter: RateLimiter | None
    ) -> Uploaded:
        data = payload.read(0, payload.size)
        checksum = crc32c_update(data)
        check_expected_crc32c(key, checksum, expected)
        if limiter is not None:
            limiter.acquire(len(data))
        args: dict[str, Any] = {}
        if self.config.checksums:
            args = {"ChecksumAlgorithm": "CRC32C", "ChecksumCRC32C": s3_crc32c(checksum)}

        def put() -> None:
            self._client.put_object(Bucket=self.bucket, Key=full_key, Body=data, **args)

        self._call("PutObject", key, put)
        return Uploaded(checksum, s3_crc32c(checksum))

    def _verify(self, key: str, full_key: str, size: int, sent: str) -> None:
        """HEAD the object just put; delete it unless its size and CRC-32C are what was sent."""
        if not self.config.verify_after_put:
            return
        stored = self._call("HeadObject", key, partial(stored_object, self._client, self.bucket, full_key))
        problem = None
        if stored is None:
            problem = "the object is missing after the put"
        elif stored.size != size:
            problem = f"{stored.size} bytes stored, {size} sent"
        elif self.config.checksums and stored.crc32c is not None and not crc32c_matches(stored.crc32c, sent):
            problem = f"CRC-32C {stored.crc32c} stored, {sent} sent"
        if problem is None:
            return
        error = ChecksumMismatchError(f"S3 put {key!r}: {problem}; the object was deleted", key=key)
        try:
            self.delete_objects([key])
        except RlmError as exc:  # the copier's cleanup deletes it later; the mismatch is what matters
            error = ChecksumMismatchError(f"S3 put {key!r}: {problem}; deleting it failed: {exc}", key=key)
        raise error

    # -- RemoteStorage: reads, deletes, listings --------------------------------------------

    def read_range(self, key: str, start: int, length: int) -> bytes:
        if start < 0 or length < 0:
            raise ValueError(f"bad range: start {start}, length {length}")
        full_key = self._full_key(key)
        if length == 0:
            if self.object_size(key) is None:
                raise NotFoundError(f"no object {key!r} in s3://{self.bucket}/{self.prefix}")
            return b""

        def get() -> bytes:
            try:
                response = self._client.get_object(
                    Bucket=self.bucket, Key=full_key, Range=f"bytes={start}-{start + length - 1}"
                )
            except ClientError as exc:
                if s3_error_code(exc) == "InvalidRange":  # the object exists but ends before start
                    return b""
                raise
            with response["Body"] as body:
                data = body.read()
            expected = _range_length(response.get("ContentRange"), len(data))
            if len(data) != expected:
                raise IncompleteReadError(actual_bytes=len(data), expected_bytes=expected)
            return data

        return self._call("GetObject", key, get)

    def stream_range(
        self, key: str, start: int, length: int, *, piece_bytes: int = STREAM_PIECE_BYTES
    ) -> Iterator[bytes]:
        check_stream_arguments(start, length, piece_bytes)
        return self._stream(key, self._full_key(key), start, start + length, piece_bytes)

    def _stream(self, key: str, full_key: str, position: int, end: int, piece_bytes: int) -> Iterator[bytes]:
        """One ranged GET read piece by piece; a read failing part way opens another GET from where
        it stopped, at most ``retry.max_attempts`` times in a row."""
        failures = 0
        while position < end:
            body = self._call("GetObject", key, partial(self._open_range, key, full_key, position, end))
            if body is None:
                return  # the object ends before ``position``
            with body:
                while position < end:
                    try:
                        piece = body.read(min(piece_bytes, end - position))
                    except BotoCoreError as exc:
                        failures += 1
                        error = translate(exc, operation="GetObject", key=key)
                        if not error.retriable or failures >= self.config.retry.max_attempts:
                            raise error from exc
                        self._sleep(self.config.retry.delay(failures, self._draw()))
                        break  # open another GET from ``position``
                    if not piece:
                        return  # the object ends here
                    failures = 0
                    position += len(piece)
                    yield piece

    def _open_range(self, key: str, full_key: str, position: int, end: int) -> StreamingBody | None:
        """The body of a GET of ``[position, end)``; ``None`` when the object ends before ``position``."""
        try:
            response = self._client.get_object(
                Bucket=self.bucket, Key=full_key, Range=f"bytes={position}-{end - 1}"
            )
        except ClientError as exc:
            if s3_error_code(exc) == "InvalidRange":
                return None
            raise
        body: StreamingBody = response["Body"]
        if not response.get("ContentRange", "").startswith(f"bytes {position}-"):
            body.close()
            raise StorageError(
                f"S3 GetObject {key!r}: the store ignored the range from byte {position}", key=key
            )
        return body

    def object_size(self, key: str) -> int | None:
        full_key = self._full_key(key)
        stored = self._call("HeadObject", key, partial(stored_object, self._client, self.bucket, full_key))
        return None if stored is None else stored.size

    def delete_objects(self, keys: Iterable[str]) -> None:
        keys = list(keys)
        full_keys = [self._full_key(key) for key in keys]  # check every key before deleting any
        for first in range(0, len(full_keys), _DELETE_BATCH):
            batch = full_keys[first : first + _DELETE_BATCH]
            self._call("DeleteObjects", keys[first], partial(self._delete, batch))

    def _delete(self, full_keys: list[str]) -> None:
        response = self._client.delete_objects(
            Bucket=self.bucket, Delete={"Objects": [{"Key": k} for k in full_keys], "Quiet": True}
        )
        for error in response.get("Errors", []):
            code = error.get("Code", "")
            if code not in NOT_FOUND_CODES:  # a missing object counts as deleted
                key = error.get("Key", "")[len(self._key_prefix) :]
                message = f"S3 DeleteObjects {key!r}: {code} {error.get('Message', '')}".rstrip()
                raise error_for_code(code, 0, message, key)

    def abort_incomplete_puts(self, keys: Iterable[str]) -> None:
        keys = list(keys)
        full_keys = [self._full_key(key) for key in keys]  # check every key before aborting any
        for key, full_key in zip(keys, full_keys, strict=True):
            self._multipart.abort_unfinished(key, full_key)

    def list_keys(self, prefix: str = "") -> Iterator[str]:
        validate_key(prefix, allow_prefix=True)
        full_prefix = self._key_prefix + prefix
        token: str | None = None
        while True:
            args: dict[str, Any] = {"Bucket": self.bucket, "Prefix": full_prefix}
            if token is not None:
                args["ContinuationToken"] = token
            page = self._call("ListObjectsV2", prefix, partial(self._client.list_objects_v2, **args))
            for entry in page.get("Contents", []):
                yield entry["Key"][len(self._key_prefix) :]
            if not page.get("IsTruncated"):
                return
            token = page["NextContinuationToken"]

    def close(self) -> None:
        """Wait for running part uploads, stop the owned pool, close connections; idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._owned_executor:
            self._executor.shutdown(wait=True)
        self._client.close()

    def __enter__(self) -> S3Storage:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _range_length(content_range: str | None, default: int) -> int:
    """Length announced by a ``Content-Range: bytes a-b/total`` header."""
    if not content_range or not content_range.startswith("bytes "):
        return default
    span = content_range[len("bytes ") :].partition("/")[0]
    first, _, last = span.partition("-")
    try:
        return int(last) - int(first) + 1
    except ValueError:
        return default
