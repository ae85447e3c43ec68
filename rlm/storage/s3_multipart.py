"""Multipart upload of one S3 object: create, upload parts through a bounded pool, complete.

The calling thread reads the source part by part, computing the whole object's CRC-32C in order,
and hands each part to the pool; at most ``max_concurrency`` parts are in flight, so memory stays
under ``(max_concurrency + 1) * part_size_bytes``. Once the store created the upload, the caller's
``on_upload`` records its id before any part is sent. Any failure aborts the upload, so no
unfinished upload (billed storage, invisible in listings) is left behind; only a process killed
mid-upload leaves one, which the cleanup of its copy aborts by the recorded id
(:class:`~rlm.storage.s3_cleanup.UploadCleanup`).

Checksums (``S3Config.checksums``): with ``crc32c``, every part carries its CRC-32C, which S3 checks
on receipt, and the completion lists each part's. The upload's checksum type is
``S3Config.multipart_checksum_type``: ``COMPOSITE`` (the default) has S3 check the listed CRC-32Cs
against the parts it holds and report the CRC-32C of the parts' CRC-32Cs; ``FULL_OBJECT`` has S3
also check the whole object's CRC-32C, sent with the completion, and report it.
:func:`expected_crc32c` is what S3 should report; the store compares it with a HEAD after the put.
With ``md5`` each part carries its ``Content-MD5`` instead; with ``off``, nothing.

Lost responses are expected. A retried CompleteMultipartUpload that finds its upload gone
(``NoSuchUpload``) checks the stored object instead; uploads that a retried CreateMultipartUpload
may have created unseen are found by listing and aborted. Both rely on one writer per key at a
time, which segment keys (one UUID per copy attempt) give.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Executor, Future, wait
from typing import TYPE_CHECKING, Any, NamedTuple

from botocore.exceptions import ClientError

from rlm.metastore.model import PendingUpload
from rlm.storage.payload import Payload, check_expected_crc32c, crc32c_update
from rlm.storage.ratelimit import RateLimiter
from rlm.storage.s3_cleanup import Caller, UploadCleanup
from rlm.storage.s3_client import content_md5
from rlm.storage.s3_config import MAX_PARTS, S3Config
from rlm.storage.s3_errors import NOT_FOUND_CODES, s3_error_code

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_s3.type_defs import CompletedPartTypeDef

_log = logging.getLogger(__name__)


class StoredObject(NamedTuple):
    """What a HEAD tells about a stored object."""

    size: int
    crc32c: str | None
    """The CRC-32C S3 reports, in its form (see :func:`expected_crc32c`); ``None`` when it reports none."""
    etag: str | None = None
    """Its ETag: another put of the key gives another."""


class Uploaded(NamedTuple):
    """What a put sent."""

    crc32c: int
    """CRC-32C of the whole object."""
    reported: str
    """The CRC-32C S3 should report for the object (:func:`expected_crc32c`)."""
    etag: str | None = None
    """The ETag the store answered the put with; ``None`` when unknown (a lost answer)."""


def s3_crc32c(crc: int) -> str:
    """S3's form of a CRC-32C: base64 of its 4 big-endian bytes."""
    return base64.b64encode(crc.to_bytes(4, "big")).decode("ascii")


def expected_crc32c(whole: int, part_crcs: Sequence[int] | None, checksum_type: str) -> str:
    """The CRC-32C S3 reports for an object: the whole object's, or a composite of its parts'.

    Args:
        whole: CRC-32C of the whole object.
        part_crcs: CRC-32C of each part, in part order; ``None`` for a single put.
        checksum_type: The multipart upload's: ``COMPOSITE`` or ``FULL_OBJECT``.

    Returns:
        For a single put and a ``FULL_OBJECT`` upload, ``whole`` in base64. For a ``COMPOSITE``
        upload, the CRC-32C of the parts' CRC-32Cs (4 big-endian bytes each, concatenated) in
        base64, then ``-`` and the number of parts.
    """
    if part_crcs is None or checksum_type == "FULL_OBJECT":
        return s3_crc32c(whole)
    joined = b"".join(crc.to_bytes(4, "big") for crc in part_crcs)
    return f"{s3_crc32c(crc32c_update(joined))}-{len(part_crcs)}"


def crc32c_matches(reported: str, expected: str) -> bool:
    """Whether the CRC-32C a store reports is the :func:`expected_crc32c` one.

    A composite CRC-32C reported without its ``-<parts>`` suffix (moto's HEAD leaves it out) is
    compared on its value.
    """
    if reported == expected:
        return True
    value, suffixed, _ = expected.partition("-")
    return bool(suffixed) and reported == value


def stored_object(client: S3Client, bucket: str, full_key: str, crc32c: bool) -> StoredObject | None:
    """HEAD an object (asking for its CRC-32C when ``crc32c``); ``None`` when there is none.

    botocore errors propagate.
    """
    try:
        if crc32c:
            head = client.head_object(Bucket=bucket, Key=full_key, ChecksumMode="ENABLED")
        else:  # x-amz-checksum-mode is one of the headers some stores refuse
            head = client.head_object(Bucket=bucket, Key=full_key)
    except ClientError as exc:
        if s3_error_code(exc) in NOT_FOUND_CODES:
            return None
        raise
    return StoredObject(head["ContentLength"], head.get("ChecksumCRC32C") or None, head.get("ETag") or None)


class MultipartUploader:
    """Uploads objects in parts for one store. Thread-safe: each upload keeps its own state."""

    def __init__(
        self,
        client: S3Client,
        bucket: str,
        config: S3Config,
        executor: Executor,
        call: Caller,
        cleanup: UploadCleanup,
    ) -> None:
        self._client = client
        self._bucket = bucket
        self._config = config
        self._executor = executor
        self._call = call
        self._cleanup = cleanup
        self._crc32c = config.checksums == "crc32c"

    def upload(
        self,
        key: str,
        full_key: str,
        payload: Payload,
        expected: int | None,
        limiter: RateLimiter | None,
        on_upload: Callable[[PendingUpload], None] | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> Uploaded:
        """Upload ``payload`` to ``full_key``; returns what was sent. Aborts on any failure.

        ``on_upload`` is called with the upload once created, before any part is sent; when it
        raises, the upload is aborted and its error propagates.
        """
        creates = 0
        checksum_type = self._config.multipart_checksum_type

        def create() -> str:
            nonlocal creates
            creates += 1
            more = dict(extra or {})
            if not self._crc32c:
                return self._client.create_multipart_upload(Bucket=self._bucket, Key=full_key, **more)[
                    "UploadId"
                ]
            return self._client.create_multipart_upload(
                Bucket=self._bucket,
                Key=full_key,
                ChecksumAlgorithm="CRC32C",
                ChecksumType=checksum_type,
                **more,
            )["UploadId"]

        try:
            upload_id = self._call("CreateMultipartUpload", key, create)
            try:
                if on_upload is not None:
                    on_upload(PendingUpload(key, upload_id))
                parts, checksum = self._upload_parts(key, full_key, upload_id, payload, limiter)
                check_expected_crc32c(key, checksum, expected)
                part_crcs = [crc for _, crc in parts]
                sent = Uploaded(checksum, expected_crc32c(checksum, part_crcs, checksum_type))
                etag = self._complete(
                    key, full_key, upload_id, [part for part, _ in parts], payload.size, sent
                )
                sent = sent._replace(etag=etag)
            except BaseException:
                self._abort(key, full_key, upload_id)
                raise
        finally:
            if creates > 1:  # an earlier CreateMultipartUpload may have succeeded unseen
                self._abort_strays(key, full_key)
        return sent

    def _upload_parts(
        self, key: str, full_key: str, upload_id: str, payload: Payload, limiter: RateLimiter | None
    ) -> tuple[list[tuple[CompletedPartTypeDef, int]], int]:
        """Upload every part; returns each part with its CRC-32C, in order, and the whole CRC-32C."""
        part_size = max(self._config.part_size_bytes, -(-payload.size // MAX_PARTS))
        in_flight: set[Future[tuple[CompletedPartTypeDef, int]]] = set()
        parts: list[tuple[CompletedPartTypeDef, int]] = []
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
        parts.sort(key=lambda part: part[0]["PartNumber"])
        return parts, checksum

    def _upload_part(
        self, key: str, full_key: str, upload_id: str, number: int, data: bytes
    ) -> tuple[CompletedPartTypeDef, int]:
        value = crc32c_update(data)
        crc = s3_crc32c(value)
        args = body_checksum(self._config, data, crc)

        def send() -> str:
            return self._client.upload_part(
                Bucket=self._bucket, Key=full_key, UploadId=upload_id, PartNumber=number, Body=data, **args
            )["ETag"]

        part: CompletedPartTypeDef = {"PartNumber": number, "ETag": self._call("UploadPart", key, send)}
        if self._crc32c:
            part["ChecksumCRC32C"] = crc
        return part, value

    def _complete(
        self,
        key: str,
        full_key: str,
        upload_id: str,
        parts: list[CompletedPartTypeDef],
        size: int,
        sent: Uploaded,
    ) -> str | None:
        """Complete the upload; returns the object's ETag (``None`` when the answer was lost)."""
        attempts = 0
        extra: dict[str, Any] = {}
        if self._crc32c and self._config.multipart_checksum_type == "FULL_OBJECT":
            extra = {"ChecksumCRC32C": s3_crc32c(sent.crc32c), "ChecksumType": "FULL_OBJECT"}

        def complete() -> str | None:
            nonlocal attempts
            attempts += 1
            try:
                completed = self._client.complete_multipart_upload(
                    Bucket=self._bucket,
                    Key=full_key,
                    UploadId=upload_id,
                    MultipartUpload={"Parts": parts},
                    **extra,
                )
                return completed.get("ETag") or None
            except ClientError as exc:
                # S3 forgets a completed upload: an earlier attempt may have completed it unseen.
                if (
                    attempts > 1
                    and s3_error_code(exc) == "NoSuchUpload"
                    and self._holds(full_key, size, sent.reported)
                ):
                    return None
                raise

        return self._call("CompleteMultipartUpload", key, complete)

    def _holds(self, full_key: str, size: int, reported: str) -> bool:
        """Whether the stored object has this size and, when S3 reports one, this CRC-32C."""
        stored = stored_object(self._client, self._bucket, full_key, self._crc32c)
        if stored is None or stored.size != size:
            return False
        return stored.crc32c is None or not self._crc32c or crc32c_matches(stored.crc32c, reported)

    def _abort(self, key: str, full_key: str, upload_id: str) -> None:
        try:
            self._cleanup.abort(key, full_key, upload_id)
        except Exception as exc:  # the original error matters more; the copy's cleanup retries it
            _log.warning("could not abort multipart upload of %s: %s", key, exc)

    def _abort_strays(self, key: str, full_key: str) -> None:
        try:
            self._cleanup.abort_listed(key, full_key)
        except Exception as exc:
            _log.warning("could not abort the stray multipart uploads of %s: %s", key, exc)


def body_checksum(config: S3Config, data: bytes, crc32c: str) -> dict[str, Any]:
    """The checksum arguments of a PutObject or UploadPart of ``data`` (its CRC-32C in S3's form)."""
    if config.checksums == "crc32c":
        return {"ChecksumAlgorithm": "CRC32C", "ChecksumCRC32C": crc32c}
    if config.checksums == "md5":
        return {"ContentMD5": content_md5(data)}
    return {}
