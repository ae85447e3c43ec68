"""The remote storage contract: Kafka's ``RemoteStorageManager`` data movement, by object key.

rlm's core moves bytes only through :class:`RemoteStorage`; ``rlm.storage.s3.S3Storage`` and
``rlm.storage.filesystem.FilesystemStorage`` implement it, and one contract suite runs against both.

Conventions shared by every method:

* Keys are relative to the store's root (bucket and prefix, or directory) and must pass
  :func:`rlm.storage.layout.validate_key`; any other key raises
  :class:`~rlm.errors.InvalidObjectKeyError` before anything is sent.
* Every operation is idempotent. Putting a key again replaces the object whole; deleting a
  missing object succeeds. A reader never sees part of an object: a put is atomic.
* :class:`~rlm.errors.StorageUnavailableError` (retriable) means the store throttled, failed or
  could not be reached even after the backend's own retries; nothing half-done is left behind and
  the same call may be made again later. Other :class:`~rlm.errors.StorageError` subclasses say
  whether they are retriable in ``retriable``.
* Checksums are CRC-32C (Castagnoli), as an unsigned 32-bit integer: the checksum S3 computes and
  verifies natively (``x-amz-checksum-crc32c``), and the one Kafka's v2 batches already use.
* Implementations are safe to use from many threads at once.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import NamedTuple, Protocol

from rlm.metastore.model import PendingUpload
from rlm.storage.ratelimit import RateLimiter

PutSource = bytes | os.PathLike[str]
"""What :meth:`RemoteStorage.put_object` uploads: bytes in memory, or a local file's path."""
#: Bytes per piece of :meth:`RemoteStorage.stream_range` unless the caller says otherwise.
STREAM_PIECE_BYTES = 8 * 1024 * 1024


def check_stream_arguments(start: int, length: int, piece_bytes: int) -> None:
    """What every :meth:`RemoteStorage.stream_range` checks before reading.

    Raises:
        ValueError: ``start`` or ``length`` is negative, or ``piece_bytes`` is not positive.
    """
    if start < 0 or length < 0:
        raise ValueError(f"bad range: start {start}, length {length}")
    if piece_bytes <= 0:
        raise ValueError(f"pieces must hold at least one byte, not {piece_bytes}")


class PutResult(NamedTuple):
    """What was stored under a key."""

    key: str
    size: int
    """Bytes stored."""
    crc32c: int
    """CRC-32C of the stored bytes."""


class RemoteStorage(Protocol):
    """Objects on the remote tier: whole puts, ranged and streamed reads, deletes and listings."""

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
        """Store ``source`` under ``key``, replacing any object there.

        Large sources go up in parts (S3 multipart upload); either the whole object is stored and
        verified (size and CRC-32C), or nothing is: a failed put leaves neither a partial object
        nor an unfinished multipart upload. A put whose process is killed can leave one (or a
        filesystem temporary file); :meth:`abort_incomplete_puts` removes it.

        Args:
            key: Where to store the bytes.
            source: The bytes, or the path of a local file to read them from.
            size: Bytes to store: the first ``size`` bytes of the file (a broker may preallocate
                segment files beyond their data). Defaults to the whole source.
            crc32c: The CRC-32C the caller expects the bytes to have, when known.
            rate_limiter: Throttles the bytes sent (shared between concurrent uploads).
            on_upload: Called with each multipart upload the put starts, once the store created it
                and before any of its bytes are sent, so the caller can record it for the cleanup
                of a killed put. When it raises, the upload is aborted and the put fails with its
                error. Stores whose leftovers need no name (the filesystem) never call it.
            metadata: Small ASCII strings stored with the object, replaced with it and deleted
                with it (S3 user metadata, 2 KiB in all; a sidecar file on the filesystem), read
                back by :meth:`object_metadata`.

        Returns:
            The key, size and CRC-32C stored.

        Raises:
            InvalidObjectKeyError: The key is not allowed.
            NotFoundError: ``source`` is a path that does not exist.
            CorruptDataError: The file holds fewer than ``size`` bytes.
            ChecksumMismatchError: The bytes do not have ``crc32c`` (not retriable), or the store
                received other bytes than were sent (retriable). Nothing is stored.
            StorageUnavailableError: Retries are spent (retriable).
            StorageError: The store refused the put (access denied, no such bucket, ...).
        """
        ...

    def read_range(self, key: str, start: int, length: int) -> bytes:
        """Read ``length`` bytes of ``key`` from byte ``start``.

        A range that runs past the end returns the bytes that exist (``b""`` from the end on),
        so the result is shorter than ``length`` only at the end of the object.

        Raises:
            ValueError: ``start`` or ``length`` is negative.
            NotFoundError: No object is stored under ``key``.
            StorageUnavailableError: Retries are spent (retriable).
            StorageError: The store refused the read.
        """
        ...

    def stream_range(
        self, key: str, start: int, length: int, *, piece_bytes: int = STREAM_PIECE_BYTES
    ) -> Iterator[bytes]:
        """Yield ``length`` bytes of ``key`` from byte ``start`` in order, at most ``piece_bytes``
        at a time, from one read of the store (one GET on S3) rather than one per piece.

        Memory holds one piece, whatever the range's size: for reading whole objects front to back
        (a scrubber, a job that decodes every record). As :meth:`read_range`, the pieces add up to
        fewer bytes only where the object ends. A read that fails part way is resumed from where it
        stopped, within the backend's retries. The key and arguments are checked at the call; the
        store is read (and its errors raised) as the pieces are taken.

        Raises:
            ValueError: ``start`` or ``length`` is negative, or ``piece_bytes`` is not positive.
            InvalidObjectKeyError: The key is not allowed.
            NotFoundError: No object is stored under ``key``.
            StorageUnavailableError: Retries are spent (retriable).
            StorageError: The store refused the read.
        """
        ...

    def object_size(self, key: str) -> int | None:
        """Size in bytes of the object under ``key``; ``None`` when there is none.

        Raises:
            StorageUnavailableError: Retries are spent (retriable).
            StorageError: The store refused the call.
        """
        ...

    def object_metadata(self, key: str) -> dict[str, str] | None:
        """The metadata the object was stored with (empty when none); ``None`` when there is no
        such object.

        Raises:
            CorruptDataError: The object is there but its stored metadata cannot be read (a
                damaged filesystem sidecar); names ``key``.
            StorageError: The store failed.
        """
        ...

    def delete_objects(self, keys: Iterable[str]) -> None:
        """Delete every object in ``keys``; a key with no object counts as deleted.

        Raises:
            InvalidObjectKeyError: A key is not allowed (nothing is deleted).
            StorageUnavailableError: Retries are spent (retriable); some keys may be deleted.
            StorageError: The store refused a delete.
        """
        ...

    def abort_incomplete_puts(self, keys: Iterable[str], uploads: Iterable[PendingUpload] = ()) -> None:
        """Remove what unfinished puts of ``keys`` left behind; stored objects are kept.

        A put whose process was killed can leave an unfinished S3 multipart upload (parts S3
        stores and bills, never listed as objects) or a filesystem temporary file. This aborts
        ``uploads`` by their ids (as ``on_upload`` of :meth:`put_object` named them), then every
        other such upload the store lists, or removes every such file, of exactly these keys. A
        key with nothing pending counts as done, so the call is idempotent. Call it only for keys
        no put is still writing (a segment's keys after its copy was abandoned): such a put would
        fail.

        The S3 calls this makes (AbortMultipartUpload, ListMultipartUploads) are optional: some
        S3-compatible stores do not implement them or deny them. Such a refusal is logged as a
        warning and counted (``StorageEvents.optional_call_failed``), not raised; what was not
        aborted is left to the bucket's lifecycle rule (AbortIncompleteMultipartUpload).

        Raises:
            InvalidObjectKeyError: A key is not allowed (nothing is removed).
            StorageUnavailableError: Retries are spent (retriable); some keys may be done.
            StorageError: The filesystem store could not remove a file.
        """
        ...

    def list_keys(self, prefix: str = "") -> Iterator[str]:
        """Every key that starts with ``prefix``, each once.

        Used to find objects that no metadata row refers to. ``prefix`` is a plain string prefix:
        ``"ab/t-0-"`` matches ``"ab/t-0-x/..."``; end it with ``/`` to list one "directory". The
        filesystem and AWS S3 list in ascending (UTF-8 byte) order; some S3-compatible stores do
        not (s3rver lists directory by directory: ``a/x`` before ``a.b``), so callers that need an
        order sort.

        Raises:
            InvalidObjectKeyError: The prefix contains ``.``/``..`` parts, backslashes or control
                characters.
            StorageUnavailableError: Retries are spent (retriable).
        """
        ...

    def close(self) -> None:
        """Release connections and owned threads; idempotent."""
        ...
