"""Where a remote segment's bytes go: object keys, and the concatenated index object.

Pure functions and values, no I/O. A segment is two objects (design: "The remote segment"):

* ``<hash>/<topic>-<partition>-<topic id>/<start offset>-<segment id>.log`` — the ``.log`` as is;
* ``<hash>/<topic>-<partition>-<topic id>/<start offset>-<segment id>.indexes`` — the small files
  (offset index, time index, transaction index, producer snapshot, leader-epoch checkpoint)
  concatenated, with each file's byte range kept in the metadata row
  (:class:`~rlm.metastore.model.ObjectLayout`), so one ranged GET fetches one index.

``<hash>`` is the first 4 hex digits of SHA-256 of ``"<topic>-<partition>"``: S3 scales request
rates per key prefix, and the hash spreads partitions over 65,536 prefixes. ``<topic id>`` is
Kafka's form of the topic id (22 URL-safe base64 characters), or Kafka's zero id
``AAAAAAAAAAAAAAAAAAAAAA`` when the broker wrote no ``partition.metadata``; it keeps the objects of
a deleted topic apart from those of a new topic of the same name. ``<start offset>`` has 20 digits
like Kafka's file names, so keys sort in offset order; ``<segment id>`` is the copy attempt's UUID.

Keys are relative to the store's root (an S3 bucket and prefix, or a directory). Topic names are
validated with Kafka's rule, and :func:`validate_key` refuses any key that could leave the root.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple
from uuid import UUID

from rlm.errors import InvalidObjectKeyError, InvalidTopicNameError
from rlm.log.checkpoints import uuid_to_topic_id
from rlm.log.files import OFFSET_WIDTH
from rlm.metastore.model import ByteRange, IndexType, ObjectLayout

#: Kafka's ``Topic.MAX_NAME_LENGTH``.
MAX_TOPIC_LENGTH = 249
#: S3's limit on a key, in UTF-8 bytes.
MAX_KEY_BYTES = 1024
#: Hex digits of the hash that starts every key.
HASH_DIGITS = 4
#: Kafka's ``Uuid.ZERO_UUID`` in its string form: "no topic id".
ZERO_TOPIC_ID = "AAAAAAAAAAAAAAAAAAAAAA"
LOG_SUFFIX = ".log"
INDEXES_SUFFIX = ".indexes"

_TOPIC_CHARS = re.compile(r"[a-zA-Z0-9._-]+")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")

#: Order of the files in the index object. Fixed, so the same files give the same bytes.
INDEX_ORDER: tuple[IndexType, ...] = (
    IndexType.OFFSET,
    IndexType.TIMESTAMP,
    IndexType.TRANSACTION,
    IndexType.PRODUCER_SNAPSHOT,
    IndexType.LEADER_EPOCH,
)


def validate_topic(topic: str) -> str:
    """Check a topic name against Kafka's ``Topic.validate``; returns it unchanged.

    Raises:
        InvalidTopicNameError: The name is empty, longer than 249 characters, ``.`` or ``..``, or
            holds a character other than ASCII letters, digits, ``.``, ``_`` and ``-``.
    """
    if not topic:
        raise InvalidTopicNameError(topic, "the name is empty")
    if topic in (".", ".."):
        raise InvalidTopicNameError(topic, "'.' and '..' are not allowed")
    if len(topic) > MAX_TOPIC_LENGTH:
        raise InvalidTopicNameError(topic, f"{len(topic)} characters, the maximum is {MAX_TOPIC_LENGTH}")
    if not _TOPIC_CHARS.fullmatch(topic):
        raise InvalidTopicNameError(topic, "only ASCII letters, digits, '.', '_' and '-' are allowed")
    return topic


def validate_key(key: str, *, allow_prefix: bool = False) -> str:
    """Check that ``key`` names an object inside the store's root; returns it unchanged.

    A key is ``/``-separated parts, each non-empty and neither ``.`` nor ``..``, with no
    backslash or control character, at most 1024 UTF-8 bytes. With ``allow_prefix`` (for
    listing) the key may also be empty or end with ``/``.

    Raises:
        InvalidObjectKeyError: The key breaks one of these rules; the message says which.
    """
    if not key and allow_prefix:
        return key
    if not key:
        raise _bad_key(key, "the key is empty")
    if len(key.encode("utf-8", "surrogatepass")) > MAX_KEY_BYTES:
        raise _bad_key(key, f"longer than {MAX_KEY_BYTES} bytes")
    if "\\" in key:
        raise _bad_key(key, "backslashes are not allowed")
    if _CONTROL.search(key):
        raise _bad_key(key, "control characters are not allowed")
    if key.startswith("/"):
        raise _bad_key(key, "the key is absolute")
    parts = key.split("/")
    if allow_prefix and parts[-1] == "":
        parts.pop()
    for part in parts:
        if part in ("", ".", ".."):
            raise _bad_key(key, "empty, '.' and '..' parts are not allowed")
    return key


def _bad_key(key: str, reason: str) -> InvalidObjectKeyError:
    return InvalidObjectKeyError(f"invalid object key {key!r}: {reason}", key=key)


def partition_hash(topic: str, partition: int) -> str:
    """The short hash that starts every key of ``topic``-``partition`` (4 lowercase hex digits)."""
    digest = hashlib.sha256(f"{topic}-{partition}".encode()).hexdigest()
    return digest[:HASH_DIGITS]


def partition_prefix(topic: str, topic_id: UUID | None, partition: int) -> str:
    """The key prefix, ending with ``/``, under which every object of one partition lies.

    Raises:
        InvalidTopicNameError: ``topic`` breaks Kafka's rule.
        ValueError: ``partition`` is negative.
    """
    validate_topic(topic)
    if partition < 0:
        raise ValueError(f"partition {partition} is negative")
    tid = uuid_to_topic_id(topic_id) if topic_id is not None else ZERO_TOPIC_ID
    return f"{partition_hash(topic, partition)}/{topic}-{partition}-{tid}/"


class SegmentKeys(NamedTuple):
    """The two object keys of one remote segment."""

    log_key: str
    indexes_key: str


def segment_keys(
    topic: str, topic_id: UUID | None, partition: int, start_offset: int, segment_id: UUID
) -> SegmentKeys:
    """The keys of a segment's ``.log`` object and its index object.

    Raises:
        InvalidTopicNameError: ``topic`` breaks Kafka's rule.
        ValueError: ``partition`` or ``start_offset`` is negative.
    """
    if start_offset < 0:
        raise ValueError(f"start offset {start_offset} is negative")
    stem = f"{partition_prefix(topic, topic_id, partition)}{start_offset:0{OFFSET_WIDTH}d}-{segment_id}"
    return SegmentKeys(stem + LOG_SUFFIX, stem + INDEXES_SUFFIX)


class ParsedKey(NamedTuple):
    """What a key made by :func:`segment_keys` says."""

    topic: str
    partition: int
    topic_id: str
    """Kafka's form of the topic id (:data:`ZERO_TOPIC_ID` when the broker wrote none)."""
    start_offset: int
    segment_id: UUID
    suffix: str
    """:data:`LOG_SUFFIX` or :data:`INDEXES_SUFFIX`."""


_TOPIC_ID_CHARS = len(ZERO_TOPIC_ID)
_SEGMENT_NAME = re.compile(
    rf"(?P<offset>[0-9]{{{OFFSET_WIDTH}}})-(?P<id>[0-9a-f-]{{36}})(?P<suffix>{re.escape(LOG_SUFFIX)}|"
    rf"{re.escape(INDEXES_SUFFIX)})"
)


def parse_segment_key(key: str) -> ParsedKey | None:
    """The topic, partition, start offset and segment id in a key :func:`segment_keys` made.

    ``None`` for any other key: another layout, a hash that is not the partition's, a topic name
    Kafka would refuse.
    """
    parts = key.split("/")
    if len(parts) != 3:
        return None
    digest, directory, name = parts
    topic_id, dash = directory[-_TOPIC_ID_CHARS:], directory[-_TOPIC_ID_CHARS - 1 : -_TOPIC_ID_CHARS]
    topic, _, number = directory[: -_TOPIC_ID_CHARS - 1].rpartition("-")
    found = _SEGMENT_NAME.fullmatch(name)
    if dash != "-" or not number.isdigit() or not number.isascii() or found is None:
        return None
    try:
        validate_topic(topic)
        segment_id = UUID(found["id"])
    except (InvalidTopicNameError, ValueError):
        return None
    partition = int(number)
    if digest != partition_hash(topic, partition) or str(segment_id) != found["id"]:
        return None
    return ParsedKey(topic, partition, topic_id, int(found["offset"]), segment_id, found["suffix"])


@dataclass(frozen=True)
class IndexBlob:
    """The bytes of a segment's index object and where each file lies in them.

    A file that does not exist (no transaction index when nothing was aborted, no producer
    snapshot) is absent from ``ranges``; a file that exists but is empty (an offset index with no
    entries) has a zero-length range. Readers therefore tell "no such file" (``None``) from
    "empty file" (``b""``), as Kafka's ``RemoteStorageManager.fetchIndex`` callers do.
    """

    data: bytes
    ranges: tuple[tuple[IndexType, ByteRange], ...]
    """Byte range of each present file, in :data:`INDEX_ORDER`."""

    @classmethod
    def build(cls, files: Mapping[IndexType, bytes | None]) -> IndexBlob:
        """Concatenate the files in :data:`INDEX_ORDER`; ``None`` or a missing kind means absent."""
        chunks: list[bytes] = []
        ranges: list[tuple[IndexType, ByteRange]] = []
        position = 0
        for kind in INDEX_ORDER:
            content = files.get(kind)
            if content is None:
                continue
            ranges.append((kind, ByteRange(position, len(content))))
            chunks.append(content)
            position += len(content)
        return cls(b"".join(chunks), tuple(ranges))

    def range_of(self, kind: IndexType) -> ByteRange | None:
        """Where ``kind`` lies in :attr:`data`, ``None`` when the file is absent."""
        return dict(self.ranges).get(kind)

    def extract(self, kind: IndexType) -> bytes | None:
        """The bytes of one file, ``None`` when it is absent."""
        found = self.range_of(kind)
        return None if found is None else self.data[found.position : found.end]

    def layout(self, keys: SegmentKeys) -> ObjectLayout:
        """The object layout to record in the segment's metadata row."""
        return ObjectLayout(log_key=keys.log_key, index_key=keys.indexes_key, index_ranges=self.ranges)
