"""Remote storage in an S3 bucket (or any S3-compatible store, through ``endpoint_url``).

* Puts above ``multipart_threshold_bytes`` are multipart uploads
  (:class:`~rlm.storage.s3_multipart.MultipartUploader`): parts go up through a bounded pool and
  any failure aborts the upload. The caller's ``on_upload`` records each upload's id before its
  parts are sent; :meth:`S3Storage.abort_incomplete_puts` aborts the upload of a process killed
  mid-put by that id, then lists the key's uploads for any other
  (:class:`~rlm.storage.s3_cleanup.UploadCleanup`: both calls optional, as some stores lack them).
* Integrity (``S3Config.checksums``): by default every PUT and part carries its CRC-32C
  (``x-amz-checksum-crc32c``), which S3 checks on receipt. A multipart upload is a CRC-32C upload
  of ``S3Config.multipart_checksum_type``: ``COMPOSITE`` by default, completed with each part's
  CRC-32C, which S3 checks against the parts it holds; or ``FULL_OBJECT``, completed with the
  whole object's CRC-32C as well. After a put, :class:`~rlm.storage.s3_verify.PutVerifier` checks
  what is stored (``S3Config.verify_after_put``); a mismatch deletes the object. Stores that reject
  the checksum headers get ``Content-MD5`` or nothing (:mod:`rlm.storage.s3_client`).
* Ranged reads use only answers that provably hold the asked-for bytes (:mod:`rlm.storage.s3_range`).
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
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Executor, ThreadPoolExecutor
from functools import partial
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

import boto3
from botocore.credentials import Credentials
from botocore.exceptions import BotoCoreError, ClientError, IncompleteReadError
from botocore.response import StreamingBody

from rlm.errors import ConfigError, InvalidObjectKeyError, NotFoundError, StorageError
from rlm.metastore.model import PendingUpload
from rlm.storage.events import NoEvents, StorageEvents
from rlm.storage.layout import validate_key
from rlm.storage.payload import Payload, check_expected_crc32c, crc32c_update
from rlm.storage.protocol import STREAM_PIECE_BYTES, PutResult, PutSource, check_stream_arguments
from rlm.storage.ratelimit import RateLimiter
from rlm.storage.retry import call_with_retry
from rlm.storage.s3_cleanup import UploadCleanup
from rlm.storage.s3_client import new_session, s3_client
from rlm.storage.s3_config import S3Config
from rlm.storage.s3_errors import NOT_FOUND_CODES, error_for_code, s3_error_code, translate
from rlm.storage.s3_multipart import MultipartUploader, Uploaded, body_checksum, s3_crc32c, stored_object
from rlm.storage.s3_range import Span, answer_span, check_refused_range, ranged_answer, skip
from rlm.storage.s3_verify import PutVerifier

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
        events: StorageEvents | None = None,
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
            events: Receives what the metrics count (skipped optional calls, size-only checks).

        Raises:
            ConfigError: The bucket, prefix, endpoint URL or region is not usable.
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
        session = session or new_session()
        self._session = session
        self._client: S3Client = s3_client(session, self.config)
        self._owned_executor = executor is None
        self._executor = executor or ThreadPoolExecutor(
            max_workers=self.config.max_concurrency, thread_name_prefix="rlm-s3-part"
        )
        events = events if events is not None else NoEvents()
        self._cleanup = UploadCleanup(self._client, bucket, self._call, events)
        self._multipart = MultipartUploader(
            self._client, bucket, self.config, self._executor, self._call, self._cleanup
        )
        self._verifier = PutVerifier(
            self._client, bucket, self.config, self._call, events, self.delete_objects
        )
        self._closed = False

    def __repr__(self) -> str:
        where = f", endpoint_url={self.config.endpoint_url!r}" if self.config.endpoint_url else ""
        return f"S3Storage(bucket={self.bucket!r}, prefix={self.prefix!r}{where})"

    def credentials(self) -> Credentials | None:
        """The session's credentials, for the store's async reader (botocore refreshes them here
        when they are temporary), or None when the standard chain found none. Never logged."""
        found: Credentials | None = self._session.get_credentials()
        return found

    # -- plumbing -------------------------------------------------------------------------

    def _full_key(self, key: str) -> str:
        return self._key_prefix + validate_key(key)

    def _call(self, operation: str, key: str, request: Callable[[], T]) -> T:
        """One request, translated to rlm errors and retried while retriable."""

        def attempt() -> T:
            try:
                return request()
            except (BotoCoreError, ClientError) as exc:
                if s3_error_code(exc) == "NoSuchBucket":  # S3's message does not say which
                    raise StorageError(
                        f"S3 bucket {self.bucket!r} does not exist (S3 {operation} {key!r}: NoSuchBucket)",
                        key=key,
                        retriable=False,
                    ) from exc
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
        on_upload: Callable[[PendingUpload], None] | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> PutResult:
        full_key = self._full_key(key)
        extra = {} if not metadata else {"Metadata": dict(metadata)}
        with Payload(source, size) as payload:
            if payload.size > self.config.multipart_threshold_bytes:
                sent = self._multipart.upload(key, full_key, payload, crc32c, rate_limiter, on_upload, extra)
            else:
                sent = self._put_single(key, full_key, payload, crc32c, rate_limiter, extra)
            self._verifier.verify(key, full_key, payload.size, sent)
            return PutResult(key, payload.size, sent.crc32c)

    def _put_single(
        self,
        key: str,
        full_key: str,
        payload: Payload,
        expected: int | None,
        limiter: RateLimiter | None,
        extra: dict[str, Any],
    ) -> Uploaded:
        data = payload.read(0, payload.size)
        checksum = crc32c_update(data)
        check_expected_crc32c(key, checksum, expected)
        if limiter is not None:
            limiter.acquire(len(data))
        args = body_checksum(self.config, data, s3_crc32c(checksum))

        def put() -> str | None:
            answer = self._client.put_object(Bucket=self.bucket, Key=full_key, Body=data, **args, **extra)
            return answer.get("ETag") or None

        etag = self._call("PutObject", key, put)
        return Uploaded(checksum, s3_crc32c(checksum), etag)

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
                if s3_error_code(exc) == "InvalidRange":  # the object ends before start, if a HEAD agrees
                    self._check_refused_range(key, full_key, start, length)
                    return b""
                raise
            status = response["ResponseMetadata"]["HTTPStatusCode"]
            with response["Body"] as body:
                return ranged_answer(
                    body, status, response.get("ContentRange"), start, length, f"S3 GetObject {key!r}"
                )

        return self._call("GetObject", key, get)

    def stream_range(
        self, key: str, start: int, length: int, *, piece_bytes: int = STREAM_PIECE_BYTES
    ) -> Iterator[bytes]:
        check_stream_arguments(start, length, piece_bytes)
        return self._stream(key, self._full_key(key), start, start + length, piece_bytes)

    def _stream(self, key: str, full_key: str, position: int, end: int, piece_bytes: int) -> Iterator[bytes]:
        """One ranged GET read piece by piece; a read failing part way opens another GET from where
        it stopped, at most ``retry.max_attempts`` times in a row. A 206 body that ends before the
        bytes its ``Content-Range`` announced is such a failure, not the object's end."""
        failures = 0
        while position < end:
            opened = self._call("GetObject", key, partial(self._open_range, key, full_key, position, end))
            if opened is None:
                return  # the object ends before ``position``
            body, span = opened
            # A 206 holds every announced byte; a 200's length is checked by botocore.
            opened_at, announced_end = position, position + span.length if span.exact else position
            with body:
                while position < end:
                    try:
                        piece = body.read(min(piece_bytes, end - position))
                        if not piece and position < announced_end:
                            raise IncompleteReadError(
                                actual_bytes=position - opened_at, expected_bytes=span.length
                            )
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

    def _open_range(
        self, key: str, full_key: str, position: int, end: int
    ) -> tuple[StreamingBody, Span] | None:
        """The body of a GET of ``[position, end)``, read up to ``position``, and where the asked-for
        bytes are in it; ``None`` when the object ends before ``position``. The answer is held to the
        rules of :mod:`rlm.storage.s3_range` (:func:`~rlm.storage.s3_range.answer_span`)."""
        try:
            response = self._client.get_object(
                Bucket=self.bucket, Key=full_key, Range=f"bytes={position}-{end - 1}"
            )
        except ClientError as exc:
            if s3_error_code(exc) == "InvalidRange":
                self._check_refused_range(key, full_key, position, end - position)
                return None
            raise
        body: StreamingBody = response["Body"]
        status = response["ResponseMetadata"]["HTTPStatusCode"]
        try:
            span = answer_span(
                status, response.get("ContentRange"), position, end - position, f"S3 GetObject {key!r}"
            )
            if span.exact and span.length == 0:  # the object ends before ``position``
                body.close()
                return None
            skip(body, span.skip)
        except BaseException:
            body.close()
            raise
        return body, span

    def _check_refused_range(self, key: str, full_key: str, start: int, length: int) -> None:
        """After a 416 to a GET of ``[start, start + length)``: a HEAD must find the object ending
        at or before ``start`` (:func:`~rlm.storage.s3_range.check_refused_range`)."""
        stored = stored_object(self._client, self.bucket, full_key, False)
        size = None if stored is None else stored.size
        check_refused_range(size, start, length, f"S3 GetObject {key!r}", key)

    def object_size(self, key: str) -> int | None:
        full_key = self._full_key(key)
        stored = self._call(
            "HeadObject", key, partial(stored_object, self._client, self.bucket, full_key, False)
        )
        return None if stored is None else stored.size

    def object_metadata(self, key: str) -> dict[str, str] | None:
        full_key = self._full_key(key)

        def head() -> dict[str, str] | None:
            try:
                return dict(self._client.head_object(Bucket=self.bucket, Key=full_key)["Metadata"])
            except ClientError as exc:
                if s3_error_code(exc) in NOT_FOUND_CODES:
                    return None
                raise

        return self._call("HeadObject", key, head)

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

    def abort_incomplete_puts(self, keys: Iterable[str], uploads: Iterable[PendingUpload] = ()) -> None:
        keys, uploads = list(keys), list(uploads)
        # Check every key before aborting anything.
        full_keys = [self._full_key(key) for key in keys]
        recorded = [(upload, self._full_key(upload.key)) for upload in uploads]
        for upload, full_key in recorded:
            self._cleanup.abort(upload.key, full_key, upload.upload_id)
        for key, full_key in zip(keys, full_keys, strict=True):
            self._cleanup.abort_listed(key, full_key)

    def list_keys(self, prefix: str = "") -> Iterator[str]:
        validate_key(prefix, allow_prefix=True)
        full_prefix = self._key_prefix + prefix
        token: str | None = None
        followed: set[str] = set()
        while True:
            args: dict[str, Any] = {"Bucket": self.bucket, "Prefix": full_prefix}
            if token is not None:
                args["ContinuationToken"] = token
            page = self._call("ListObjectsV2", prefix, partial(self._client.list_objects_v2, **args))
            truncated = bool(page.get("IsTruncated"))
            following = page.get("NextContinuationToken") or None
            # A store that ignores the token answers with a page already listed: checked before
            # its keys are given again, as the listing would never end.
            if truncated and (following is None or following in followed):
                raise StorageError(
                    f"S3 ListObjectsV2 {prefix!r}: the listing is truncated but names no next page, "
                    f"or the same page again (NextContinuationToken {following!r})",
                    key=prefix,
                    retriable=False,
                )
            for entry in page.get("Contents", []):
                yield entry["Key"][len(self._key_prefix) :]
            if not truncated or following is None:
                return
            followed.add(following)
            token = following

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
