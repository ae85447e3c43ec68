"""Settings of the S3 backend."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from rlm.errors import ConfigError
from rlm.storage.retry import RetryPolicy

MIB = 1024 * 1024
#: S3's smallest part (all parts but the last), largest part, and most parts per upload.
MIN_PART_BYTES = 5 * MIB
MAX_PART_BYTES = 5 * 1024 * MIB
MAX_PARTS = 10_000


@dataclass(frozen=True)
class S3Config:
    """How :class:`~rlm.storage.s3.S3Storage` talks to S3."""

    endpoint_url: str | None = None
    """An S3-compatible store's URL (MinIO, Ceph, a test server); ``None`` for AWS."""
    region: str | None = None
    """AWS region; ``None`` takes it from the standard chain (``AWS_REGION``, config file)."""
    addressing_style: Literal["auto", "path", "virtual"] = "auto"
    """``path`` for stores that do not serve ``bucket.host`` names."""
    multipart_threshold_bytes: int = 8 * MIB
    """Objects larger than this are uploaded in parts."""
    part_size_bytes: int = 8 * MIB
    """Size of each part but the last; raised when an object would need more than 10,000 parts."""
    max_concurrency: int = 4
    """Parts of one object uploaded at once (the size of the owned upload pool)."""
    max_pool_connections: int = 16
    """HTTP connections kept open to the endpoint, across all threads using the store."""
    connect_timeout_s: float = 5.0
    """Time allowed to open a connection."""
    read_timeout_s: float = 30.0
    """Time allowed between two reads of a response (not for the whole response)."""
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    """Attempts and backoff for every request."""
    checksums: Literal["crc32c", "md5", "off"] = "crc32c"
    """How the bytes of each put are checked on the way (``s3.checksums``).

    ``crc32c``: every PutObject and UploadPart carries ``x-amz-checksum-crc32c``, which the store
    checks on receipt, and the HEAD after a put compares the CRC-32C it reports. ``md5``: they carry
    ``Content-MD5`` instead, which every S3 implementation checks; no ``x-amz-checksum-*`` or
    ``x-amz-sdk-checksum-algorithm`` header is sent on any call. ``off``: neither; for stores that
    reject both. With ``md5`` and ``off`` the HEAD compares sizes only (``read-back`` verification
    checks the bytes).
    """
    content_md5: bool | None = None
    """Send ``Content-MD5`` on DeleteObjects instead of the ``x-amz-checksum-crc32`` botocore sends
    (``s3.content.md5``), for stores that answer ``MissingContentMD5``. ``None``: only when
    ``checksums`` is not ``crc32c``."""
    multipart_checksum_type: Literal["COMPOSITE", "FULL_OBJECT"] = "COMPOSITE"
    """What S3 checks and keeps for a multipart object, besides each part's CRC-32C.

    ``COMPOSITE``: the CRC-32C of the parts' CRC-32Cs, with ``-<parts>`` (it depends on the part
    size); the older kind, which more S3-compatible stores support, and one a store completes
    without reading the object's bytes again. ``FULL_OBJECT``: the whole object's CRC-32C, the same
    whatever the part size, which S3 combines from the parts'; some S3-compatible stores lack it,
    and some (moto) compute it by reading the whole object again.
    """
    verify_after_put: Literal["head", "read-back", "off"] = "head"
    """How each put is checked once stored (``s3.verify.after.put``).

    ``head``: a HEAD compares the stored size and, with ``crc32c`` checksums, the CRC-32C the store
    reports; a store that reports none (it ignored the checksum) is compared by size, which is
    logged once and counted. ``read-back``: the object is read back whole and its CRC-32C compared:
    a second download of every object, for stores that ignore checksums. ``off``: no check.
    """

    def __post_init__(self) -> None:
        if not MIN_PART_BYTES <= self.part_size_bytes <= MAX_PART_BYTES:
            raise ConfigError(
                f"part_size_bytes must be between {MIN_PART_BYTES} and {MAX_PART_BYTES}, "
                f"not {self.part_size_bytes}"
            )
        if self.multipart_threshold_bytes < 1:
            raise ConfigError(
                f"multipart_threshold_bytes must be positive, not {self.multipart_threshold_bytes}"
            )
        if self.max_concurrency < 1 or self.max_pool_connections < 1:
            raise ConfigError("max_concurrency and max_pool_connections must be at least 1")
        if self.connect_timeout_s <= 0 or self.read_timeout_s <= 0:
            raise ConfigError("timeouts must be positive")
        if self.multipart_checksum_type not in ("COMPOSITE", "FULL_OBJECT"):
            raise ConfigError(
                "multipart_checksum_type must be COMPOSITE or FULL_OBJECT, "
                f"not {self.multipart_checksum_type!r}"
            )
        if self.checksums not in ("crc32c", "md5", "off"):
            raise ConfigError(f"checksums must be crc32c, md5 or off, not {self.checksums!r}")
        if self.verify_after_put not in ("head", "read-back", "off"):
            raise ConfigError(
                f"verify_after_put must be head, read-back or off, not {self.verify_after_put!r}"
            )
        if self.addressing_style not in ("auto", "path", "virtual"):
            raise ConfigError(
                f"addressing_style must be auto, path or virtual, not {self.addressing_style!r}"
            )

    @property
    def delete_content_md5(self) -> bool:
        """Whether DeleteObjects carries ``Content-MD5`` (``content_md5``, or its default)."""
        return self.checksums != "crc32c" if self.content_md5 is None else self.content_md5
