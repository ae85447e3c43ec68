"""The check of each S3 put once stored (``S3Config.verify_after_put``).

``head`` compares the size and the CRC-32C a HEAD reports with what was sent; a mismatch means
the store holds other bytes, and the object is deleted. A store may ignore the checksum headers
(s3rver does; GCS's XML API and older Ceph RGW are reported to) and report no CRC-32C: the check
then falls back to the size, which is logged once per store and counted
(:meth:`StorageEvents.checksum_unreported`). ``read-back`` reads the whole object back and
compares its CRC-32C, which catches what such a store would keep unnoticed.

A check that finds other bytes than were sent is made once more, :data:`RECHECK_AFTER_S` later,
before the object is deleted: a store may answer a PUT before the object reads back whole (s3rver
answers a streamed PUT before its file is written, and reads an empty file meanwhile). Only bytes
still other then are a mismatch; a store that needed the second look is named once in the log.

An object whose ETag is not the one the put was answered with was stored by another put of the
key since (a key rewritten in place, as the remote log start marker, may have two writers at
once): it is the other put's, which may have been checked already, so it is kept, and the put
fails all the same.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, NamedTuple

from botocore.exceptions import ClientError

from rlm.errors import ChecksumMismatchError, RlmError
from rlm.storage.events import StorageEvents
from rlm.storage.payload import crc32c_update
from rlm.storage.s3_cleanup import Caller
from rlm.storage.s3_config import S3Config
from rlm.storage.s3_errors import NOT_FOUND_CODES, s3_error_code
from rlm.storage.s3_multipart import Uploaded, crc32c_matches, stored_object

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

_log = logging.getLogger(__name__)
#: Bytes read at a time when reading an object back.
_READ_CHUNK = 1024 * 1024
#: Seconds after which a put whose check found other bytes than were sent is checked again.
RECHECK_AFTER_S = 0.25


class _Problem(NamedTuple):
    """What a check found stored other than was sent."""

    text: str
    etag: str | None
    """The ETag of what is stored; ``None`` when unknown (nothing is)."""


class PutVerifier:
    """Checks puts of one store. Thread-safe."""

    def __init__(
        self,
        client: S3Client,
        bucket: str,
        config: S3Config,
        call: Caller,
        events: StorageEvents,
        delete: Callable[[list[str]], None],
    ) -> None:
        self._client = client
        self._bucket = bucket
        self._config = config
        self._call = call
        self._events = events
        self._delete = delete
        self._warned = threading.Event()
        self._lag_warned = threading.Event()

    def verify(self, key: str, full_key: str, size: int, sent: Uploaded) -> None:
        """Check the object just put; delete it unless it holds what was sent.

        Raises:
            ChecksumMismatchError: It does not (retriable: the put may be made again).
            StorageUnavailableError / StorageError: The check itself failed.
        """
        if self._config.verify_after_put == "off":
            return
        first = self._problem(key, full_key, size, sent)
        if first is None:
            return
        time.sleep(RECHECK_AFTER_S)  # the store may not read back whole yet (module docstring)
        problem = self._problem(key, full_key, size, sent)
        if problem is None:
            self._lagged(key, first.text)
            return
        if None not in (problem.etag, sent.etag) and problem.etag != sent.etag:
            # Another put of the key replaced this one's object: that is the other writer's, and
            # it may have checked it already. Deleting it would lose both.
            raise ChecksumMismatchError(
                f"S3 put {key!r}: {problem.text}: another put replaced the object meanwhile (ETag "
                f"{problem.etag}, this put's {sent.etag}); it is kept",
                key=key,
            )
        error = ChecksumMismatchError(f"S3 put {key!r}: {problem.text}; the object was deleted", key=key)
        try:
            self._delete([key])
        except RlmError as exc:  # the copier's cleanup deletes it later; the mismatch is what matters
            error = ChecksumMismatchError(
                f"S3 put {key!r}: {problem.text}; deleting it failed: {exc}", key=key
            )
        raise error

    def _problem(self, key: str, full_key: str, size: int, sent: Uploaded) -> _Problem | None:
        """What the stored object holds other than was sent, as ``verify_after_put`` checks it;
        None when nothing."""
        if self._config.verify_after_put == "read-back":
            return self._read_back_problem(key, full_key, size, sent)
        return self._head_problem(key, full_key, size, sent)

    def _lagged(self, key: str, first: str) -> None:
        if self._lag_warned.is_set():
            return
        self._lag_warned.set()
        _log.warning(
            "the S3 store answered the put of %s before it read back whole (%s), and held what was "
            "sent %s s later: puts are checked again before they count as a mismatch (this is said "
            "once)",
            key,
            first,
            RECHECK_AFTER_S,
        )

    def _head_problem(self, key: str, full_key: str, size: int, sent: Uploaded) -> _Problem | None:
        crc32c = self._config.checksums == "crc32c"
        stored = self._call(
            "HeadObject", key, partial(stored_object, self._client, self._bucket, full_key, crc32c)
        )
        if stored is None:
            return _Problem("the object is missing after the put", None)
        if stored.size != size:
            return _Problem(f"{stored.size} bytes stored, {size} sent", stored.etag)
        if not crc32c:
            return None
        if stored.crc32c is None:
            self._size_only(key)
            return None
        if not crc32c_matches(stored.crc32c, sent.reported):
            return _Problem(f"CRC-32C {stored.crc32c} stored, {sent.reported} sent", stored.etag)
        return None

    def _size_only(self, key: str) -> None:
        self._events.checksum_unreported()
        if self._warned.is_set():
            return
        self._warned.set()
        _log.warning(
            "the S3 store reported no CRC-32C for %s although the put sent one: it may ignore "
            "x-amz-checksum-crc32c, so puts are verified by their size only (this is said once; "
            "rlm_storage_size_only_verifications_total counts them). s3.verify.after.put: read-back "
            "checks the stored bytes",
            key,
        )

    def _read_back_problem(self, key: str, full_key: str, size: int, sent: Uploaded) -> _Problem | None:
        stored = self._call("GetObject", key, partial(self._read_back, full_key))
        if stored is None:
            return _Problem("the object is missing after the put", None)
        stored_size, stored_crc, etag = stored
        if stored_size != size:
            return _Problem(f"{stored_size} bytes read back, {size} sent", etag)
        if stored_crc != sent.crc32c:
            return _Problem(f"CRC-32C {stored_crc:08x} read back, {sent.crc32c:08x} sent", etag)
        return None

    def _read_back(self, full_key: str) -> tuple[int, int, str | None] | None:
        """Size, CRC-32C and ETag of the stored object, read whole; ``None`` when there is none."""
        try:
            response = self._client.get_object(Bucket=self._bucket, Key=full_key)
        except ClientError as exc:
            if s3_error_code(exc) in NOT_FOUND_CODES:
                return None
            raise
        size = crc = 0
        with response["Body"] as body:
            while chunk := body.read(_READ_CHUNK):
                size += len(chunk)
                crc = crc32c_update(chunk, crc)
        return size, crc, response.get("ETag") or None
