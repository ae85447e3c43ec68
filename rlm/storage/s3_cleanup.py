"""Aborting unfinished multipart uploads: by the ids recorded when they started, then by listing.

A multipart upload whose uploader died stays on the store, its parts billed, until it is
aborted. rlm records each upload's id before sending its parts (``on_upload`` of ``put_object``),
so the cleanup aborts it by id, which needs no listing. Listing the key's uploads then finds the
rest: an upload created by a request whose answer was lost, or by a process killed before it
recorded the id.

Both calls are optional to rlm. Some S3-compatible stores do not implement them (s3rver answers
501 to ListMultipartUploads and 405 to AbortMultipartUpload) or a bucket policy denies them;
such a refusal is logged (a warning the first time per call, then at debug level), counted
(:meth:`StorageEvents.optional_call_failed`) and skipped, so it never stops the copier's cleanup.
What is left is for the bucket's lifecycle rule (AbortIncompleteMultipartUpload) to remove.
Retriable failures (throttling, 5xx, timeouts) still raise: the cleanup is run again later.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from botocore.exceptions import ClientError

from rlm.errors import InvalidObjectKeyError, StorageError
from rlm.storage.events import StorageEvents
from rlm.storage.s3_errors import s3_error_code

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

_log = logging.getLogger(__name__)
T = TypeVar("T")


class Caller(Protocol):
    """Runs one S3 request with error translation and retries (``S3Storage._call``)."""

    def __call__(self, operation: str, key: str, request: Callable[[], T], /) -> T: ...


class UploadCleanup:
    """Aborts the unfinished multipart uploads of one bucket. Thread-safe."""

    def __init__(self, client: S3Client, bucket: str, call: Caller, events: StorageEvents) -> None:
        self._client = client
        self._bucket = bucket
        self._call = call
        self._events = events
        self._warned: set[str] = set()
        self._lock = threading.Lock()

    def abort(self, key: str, full_key: str, upload_id: str) -> None:
        """Abort one upload; one already gone (``NoSuchUpload``) counts as aborted.

        A refusal is logged and counted; retriable failures raise
        :class:`~rlm.errors.StorageUnavailableError`.
        """
        request = partial(self._abort_upload, full_key, upload_id)
        self._optional(
            "AbortMultipartUpload", key, partial(self._call, "AbortMultipartUpload", key, request), None
        )

    def abort_listed(self, key: str, full_key: str) -> None:
        """Abort every upload of exactly ``full_key`` the store lists (a refused listing is skipped)."""
        listed: list[str] = self._optional(
            "ListMultipartUploads", key, partial(self.unfinished, key, full_key), []
        )
        for upload_id in listed:
            self.abort(key, full_key, upload_id)

    def unfinished(self, key: str, full_key: str) -> list[str]:
        """Ids of the unfinished multipart uploads of exactly ``full_key``, from every listing page.

        Raises:
            StorageError: The store refused the listing, or a truncated page names no next one.
        """
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

    def _optional(self, operation: str, key: str, requests: Callable[[], T], skipped: T) -> T:
        """Run ``requests``; a refusal is logged, counted and answered with ``skipped``."""
        try:
            return requests()
        except StorageError as exc:
            if exc.retriable or isinstance(exc, InvalidObjectKeyError):
                raise
            self._events.optional_call_failed(operation)
            with self._lock:
                first = operation not in self._warned
                self._warned.add(operation)
            _log.log(
                logging.WARNING if first else logging.DEBUG,
                "skipped %s of %s: %s; unfinished multipart uploads it would have removed are left to "
                "the bucket's lifecycle rule (AbortIncompleteMultipartUpload)",
                operation,
                key,
                exc,
            )
            return skipped
