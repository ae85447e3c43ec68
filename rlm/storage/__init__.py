"""Remote storage: the contract, the object key layout, and the S3 and filesystem backends.

rlm's core depends on :class:`RemoteStorage` and :mod:`rlm.storage.layout`; the composition root
opens a backend with :func:`rlm.storage.url.open_storage` (which imports boto3).
"""

from rlm.storage.layout import (
    IndexBlob,
    SegmentKeys,
    partition_prefix,
    segment_keys,
    validate_key,
    validate_topic,
)
from rlm.storage.protocol import PutResult, PutSource, RemoteStorage
from rlm.storage.range_source import RangeSource, read_index
from rlm.storage.ratelimit import RateLimiter

__all__ = [
    "IndexBlob",
    "PutResult",
    "PutSource",
    "RangeSource",
    "RateLimiter",
    "RemoteStorage",
    "SegmentKeys",
    "partition_prefix",
    "read_index",
    "segment_keys",
    "validate_key",
    "validate_topic",
]
