"""The remote log start offset kept beside a partition's segments, for a metadata store rebuilt
from the objects.

Retention advances a partition's remote log start offset in the metadata store, then deletes the
segments below it. The objects left do not say where the log starts: Kafka's log start may lie
above the first segment left (retention deleted every segment while the broker still holds some
of those offsets). So retention also writes the offset it advanced to as a small object of the
partition, ``<partition prefix>remote-log-start``, after the store and before the first delete:
whenever a segment's objects are gone, the marker covers them. ``rlm spark rebuild-metadata``
reads it back, for the topic id it was written under only (a topic deleted and created again under
the same name leaves the deleted topic's marker behind).

The store's offset never falls, but the marker may: its write is not fenced by the lease, so a
sidecar that lost its lease while stalled writes its lower value late. Retention therefore reads
the store again after each write and writes what it finds while that is higher
(:func:`rlm.tiering.retention.mark_log_start`): the marker ends at the store's value. Until that
writer writes again, and if it dies before, until the next pass that advances the log start, the
marker stays below the store's value: a store rebuilt meanwhile claims offsets whose objects are
gone.
"""

from __future__ import annotations

import json
from uuid import UUID

from rlm.errors import CorruptDataError
from rlm.log.checkpoints import topic_id_to_uuid
from rlm.log.files import OFFSET_WIDTH
from rlm.metastore.model import TopicPartition
from rlm.storage.layout import LOG_SUFFIX, ZERO_TOPIC_ID, ParsedKey, parse_segment_key, partition_prefix
from rlm.storage.protocol import RemoteStorage

#: The marker's name under the partition's prefix.
MARKER_NAME = "remote-log-start"
VERSION = 1


def marker_key(tp: TopicPartition, topic_id: UUID | None) -> str:
    """The key of the partition's marker."""
    return f"{partition_prefix(tp.topic, topic_id, tp.partition)}{MARKER_NAME}"


def write_marker(storage: RemoteStorage, tp: TopicPartition, topic_id: UUID | None, offset: int) -> None:
    """Store ``offset`` as the partition's remote log start offset (replacing what was there).

    Raises:
        StorageError: The store refused the write.
    """
    body = json.dumps({"v": VERSION, "log_start_offset": offset}, separators=(",", ":")).encode()
    storage.put_object(marker_key(tp, topic_id), body)


def _parse(key: str) -> ParsedKey | None:
    if not key.endswith(f"/{MARKER_NAME}"):
        return None
    # The prefix is a segment key's: parse one made of it.
    probe = f"{key[: -len(MARKER_NAME)]}{0:0{OFFSET_WIDTH}d}-{UUID(int=0)}{LOG_SUFFIX}"
    return parse_segment_key(probe)


def marker_partition(key: str) -> TopicPartition | None:
    """The partition whose marker ``key`` is; ``None`` when ``key`` is no marker's."""
    parsed = _parse(key)
    return None if parsed is None else TopicPartition(parsed.topic, parsed.partition)


def marker_topic_id(key: str) -> UUID | None:
    """The topic id the marker ``key`` was written for; ``None`` for a topic whose broker wrote no
    id, or a key that is no marker's.

    A topic deleted and created again under the same name leaves the deleted topic's marker under
    the deleted topic's id: it says nothing about the new topic's log start.
    """
    parsed = _parse(key)
    if parsed is None or parsed.topic_id == ZERO_TOPIC_ID:
        return None
    return topic_id_to_uuid(parsed.topic_id)


def read_marker(storage: RemoteStorage, key: str) -> int | None:
    """The offset the marker at ``key`` holds; ``None`` when it is gone.

    Raises:
        CorruptDataError: The object is not a marker rlm wrote; names ``key``.
        StorageError: The read failed.
    """
    size = storage.object_size(key)
    if size is None:
        return None
    try:
        doc = json.loads(storage.read_range(key, 0, size))
        if doc["v"] != VERSION:
            raise ValueError(f"unknown version {doc['v']!r}")
        return int(doc["log_start_offset"])
    except (ValueError, KeyError, TypeError) as exc:
        raise CorruptDataError(f"the remote log start marker is not valid: {exc}", path=key) from exc
