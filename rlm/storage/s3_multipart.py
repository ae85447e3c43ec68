"""Multipart upload of one S3 object: create, upload parts through a bounded pool, complete.

The calling thread reads the source part by part, computing the whole object's CRC-32C in order,
and hands each part to the pool; at most ``max_concurrency`` parts are in flight, so memory stays
under ``(max_concurrency + 1) * part_size_bytes``. Any failure aborts the upload, so no unfinished
upload (billed storage, invisible in listings) is left behind; only a process killed mid-upload
leaves one, which :meth:`MultipartUploader.abort_unfinished` (the store's
``abort_incomplete_puts``) finds by listing and aborts.

Lost responses are expected. A retried CompleteMultipartUpload that finds its upload gone
(``NoSuchUpload``) checks the stored object instead; uploads that a retried CreateMultipartUpload
may have created unseen are found by listing and aborted. Both rely on one writer per key at a
time, which segment keys (one UUID per copy attempt) give.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Executor, Future, wait
from functools import partial
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, TypeVar

from botocore.exceptions import ClientError

from rlm.errors import StorageError
from rlm.storage.payload import Payload, check_expected_crc32c, crc32c_update
from rlm.storage.ratelimit import RateLimiter
from rlm.storage.s3_config import MAX_PARTS, S3Config
from rlm.storage.s3_errors import NOT_FOUND_CODES, s3_error_code

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_s3.type_defs import CompletedPartTypeDef

_log = logging.getLogger(__name__)
T = TypeVar("T")


class Caller(Protocol):
    """Runs one S3 request with error translation and retries (``S3Storage._call``)."""

    def __call__(self, operation: str, key: str, request: Callable[[], T], /) -> T: ...


class StoredObject(NamedTuple):
    """What a HEAD tells about a stored object."""

    size: int
    crc32c: str | None
    """Whole-object CRC-32C in S3's base64 form; ``None`` when S3 reports none (or only per part)."""


def s3_crc32c(crc: int) -> str:
    """S3's form of a CRC-32C: base64 of its 4 big-endian bytes."""
    return base64.b64encode(crc.to_bytes(4, "big")).decode("ascii")


def stored_object(client: S3Client, bucket: str, full_key: str) -> StoredObject | None:
    """HEAD an object; ``None`` when there is none. botocore errors propagate."""
    try:
        head = client.head_object(Bucket=bucket, Key=full_key, ChecksumMode="ENABLED")
    except ClientError as exc:
        if s3_error_code(exc) in NOT_FOUND_CODES:
            return None
        raise
    reported = head.get("ChecksumCRC32C")
    whole = reported if reported and "-" not in reported else None  # "<crc>-<n>": composite of parts
    return StoredObject(head["ContentLength"], whole)


class MultipartUploader:
    """Uploads objects in parts for one store. Thread-safe: each upload keeps its own state."""

    def __init__(
        self, client: S3Client, bucket: str, config: S3Config, executor: Executor, call: Caller
    ) -> None:
        self._client = client
        self._bucket = bucket
        self._config = config
        self._executor = executor
        self._call = call

    def upload(
        self, key: str, full_key: str, payload: Payload, expected: int | None, limiter: RateLimiter | None
    ) -> int:
        """Upload ``payload`` to ``full_key``; returns its CRC-32C. Aborts on any failure."""
        creates = 0

        def create() -> str:
            nonlocal creates
            creates += 1
            if not self._config.checksums:
                return self._client.create_multipart_upload(Bucket=self._bucket, Key=full_key)["UploadId"]
            return self._client.create_multipart_upload(
                Bucket=self._bucket, Key=full_key, ChecksumAlgorithm="CRC32C", ChecksumType="FULL_OBJECT"
            )["UploadId"]

        try:
            upload_id = self._call("CreateMultipartUpload", key, create)
            try:
                parts, checksum = self._upload_parts(key, full_key, upload_id, payload, limiter)
                check_expected_crc32c(key, checksum, expected)
                self._complete(key, full_key, upload_id, parts, payload.size, checksum)
            except BaseException:
                self._abort(key, full_key, upload_id)
                raise
        finally:
            if creates > 1:  # an earlier CreateMultipartUpload may have succeeded unseen
                self._abort_strays(key, full_key)
        return checksum

    def _upload_parts(
        self, key: str, full_key: str, upload_id: str, payload: Payload, limiter: RateLimiter | None
    ) -> tuple[list[CompletedPartTypeDef], int]:
        part_size = max(self._config.part_size_bytes, -(-payload.size // MAX_PARTS))
        in_flight: set[Future[CompletedPartTypeDef]] = set()
        parts: list[CompletedPartTypeDef] = []
        checksum = 0
        try:
            for number, position in enumerate(range(0, payload.size, part_size), start=1):
                data = payload.read(position, part_size)
                checksum = crc32c_update(data, checksum)
                if limiter is not None:
                    limiter.acquire(len(data))
                while len(in_flight) >= self._config.max_concurrency:
                    done, in_flight = wait(in_flight, return_when=FIRST_COMPLETED)
                    parts.extend(future.result() for future in done)
                in_flight.add(
                    self._executor.submit(self._upload_part, key, full_key, upload_id, number, data)
                )
            done, in_flight = wait(in_flight)
            parts.extend(future.result() for future in done)
        except BaseException:
            for future in in_flight:
                future.cancel()
            wait(in_flight)  # no part may land after the abort
            raise
        parts.sort(key=lambda part: part["PartNumber"])
        return parts, checksum

    def _upload_part(
        self, key: str, full_key: str, upload_id: str, number: int, data: bytes
    ) -> CompletedPartTypeDef:
        crc = s3_crc32c(crc32c_update(data))
        args: dict[str, Any] = (
            {"ChecksumAlgorithm": "CRC32C", "ChecksumCRC32C": crc} if self._config.checksums else {}
        )

        def send() -> str:
            return self._client.upload_part(
                Bucket=self._bucket, Key=full_key, UploadId=upload_id, PartNumber=number, Body=data, **args
            )["ETag"]

        part: CompletedPartTypeDef = {"PartNumber": number, "ETag": self._call("UploadPart", key, send)}
        if self._config.checksums:
            part["ChecksumCRC32C"] = crc
        return part

    def _complete(
        self,
        key: str,
        full_key: str,
        upload_id: str,
        parts: list[CompletedPartTypeDef],
        size: int,
        checksum: int,
    ) -> None:
        attempts = 0
        extra: dict[str, Any] = {}
        if self._config.checksums:
            extra = {"ChecksumCRC32C": s3_crc32c(checksum), "ChecksumType": "FULL_OBJECT"}

        def complete() -> None:
            nonlocal attempts
            attempts += 1
            try:
                self._client.complete_multipart_upload(
                    Bucket=self._bucket,
                    Key=full_key,
                    UploadId=upload_id,
                    MultipartUpload={"Parts": parts},
                    **extra,
                )
            except ClientError as exc:
                # S3 forgets a completed upload: an earlier attempt may have completed it unseen.
                if (
                    attempts > 1
                    and s3_error_code(exc) == "NoSuchUpload"
                    and self._holds(full_key, size, checksum)
                ):
                    return
                raise

        self._call("CompleteMultipartUpload", key, complete)

    def _holds(self, full_key: str, size: int, checksum: int) -> bool:
        """Whether the stored object has this size and, when S3 reports one, this CRC-32C."""
        stored = stored_object(self._client, self._bucket, full_key)
        if stored is None or stored.size != size:
            return False
        return stored.crc32c is None or not self._config.checksums or stored.crc32c == s3_crc32c(checksum)

    def abort_unfinished(self, key: str, full_key: str) -> None:
        """Abort every unfinished multipart upload of exactly ``full_key``; raises rlm errors.

        An upload that is gone by the time it is aborted (``NoSuchUpload``) counts as aborted.
        """
        for upload_id in self.unfinished(key, full_key):
            self._call("AbortMultipartUpload", key, partial(self._abort_upload, full_key, upload_id))

    def unfinished(self, key: str, full_key: str) -> list[str]:
        """Ids of the unfinished multipart uploads of exactly ``full_key``, from every listing page."""
        upload_ids: list[str] = []
        markers: dict[str, Any] = {}
        while True:
            page = self._call(
                "ListMultipartUploads",
                key,
                partial(self._client.list_multipart_uploads, Bucket=self._bucket, Prefix=full_key, **markers),
            )
            upload_ids.extend(
                upload["UploadId"]
                for upload in page.get("Uploads", [])
                if upload.get("Key") == full_key and "UploadId" in upload
            )
            if not page.get("IsTruncated"):
                return upload_ids
            following = {
                "KeyMarker": page.get("NextKeyMarker", ""),
                "UploadIdMarker": page.get("NextUploadIdMarker", ""),
            }
            if not following["KeyMarker"] or following == markers:
                raise StorageError(
                    f"S3 ListMultipartUploads {key!r}: the listing is truncated but names no next "
                    f"page (NextKeyMarker {following['KeyMarker']!r}, "
                    f"NextUploadIdMarker {following['UploadIdMarker']!r})",
                    key=key,
                )
            markers = following

    def _abort_upload(self, full_key: str, upload_id: str) -> None:
        try:
            self._client.abort_multipart_upload(Bucket=self._bucket, Key=full_key, UploadId=upload_id)
        except ClientError as exc:
            if s3_error_code(exc) != "NoSuchUpload":  # already aborted (or completed): done
                raise

    def _abort(self, key: str, full_key: str, upload_id: str) -> None:
        try:
            self._call("AbortMultipartUpload", key, partial(self._abort_upload, full_key, upload_id))
        except Exception as exc:  # the original error matters more; abort_incomplete_puts retries it
            _log.warning("could not abort multipart upload of %s: %s", key, exc)

    def _abort_strays(self, key: str, full_key: str) -> None:
        try:
            strays = self.unfinished(key, full_key)
        except Exception as exc:
            _log.warning("could not list multipart uploads of %s: %s", key, exc)
            return
        for upload_id in strays:
            self._abort(key, full_key, upload_id)
