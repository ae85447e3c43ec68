"""What a segment's objects say of themselves: the part of its metadata row the keys and the bytes
do not give, stored as the index object's metadata (S3 user metadata; a sidecar file on the
filesystem store).

The keys give the topic, partition, topic id, start offset and segment id; the description gives
the rest of the row (end offset, max timestamp, ``.log`` size, leader epochs, the byte range of
each file in the index object, whether a transaction index was stored, the copying broker and
the copy's time). ``rlm spark rebuild-metadata`` turns a described object set back into its row
without reading a byte of it. One metadata entry, ``rlm-segment``, holds compact JSON; a
description longer than S3 allows (2 KiB, thousands of leader epochs) is not stored, and such
a segment is rebuilt by reading its objects, as those copied before descriptions existed are.

A compaction's output says so in a second entry, ``rlm-compaction``, stored whether or not the
description fits: ``pending`` when its objects are uploaded, ``swapped`` once the job's metadata
swap made it the partition's segment (the index object is stored again, same bytes). Until then
the segments it replaces are the partition's, and a rebuild must choose them (see
:mod:`rlm.pipeline.rebuild.job`).

A copy the copier retired says so in a third entry, ``rlm-retired``, stored before the metadata
store retires it (:mod:`rlm.storage.marks`): its objects are deleted soon after, but a store
rebuilt from the objects in between must not bring them back as a row. Its value is when, then
why: ``1700000000123 diverged`` (the broker's log diverged from the copy: an unclean leader
election; a time alone says the same) or ``1700000000123 topic-deleted`` (the topic was deleted
and created again under its name).

A trim's copy (:mod:`rlm.tiering.trim`: a diverged copy's first batches, written as a new segment)
names the copy it replaces in a fourth entry, ``rlm-replaces``: that copy's segment id, stored with
its objects before the metadata store swaps it in. A rebuild that finds both its objects makes it
the row and the copy it names an orphan, before the swap as after it
(:mod:`rlm.pipeline.rebuild.job`). Like the marks, it is an entry of its own: stored whether or not
the description fits, kept when a mark is added, and passed over by an rlm that does not know it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import NamedTuple
from uuid import UUID

from rlm.errors import CorruptDataError
from rlm.metastore.model import ByteRange, IndexType, LeaderEpochEntry, RemoteSegment

#: The metadata entry holding the description (S3 lowercases names: this one is lowercase).
DESCRIPTION_KEY = "rlm-segment"
#: The metadata entry of a compaction's output: :data:`PENDING` or :data:`SWAPPED`.
COMPACTION_KEY = "rlm-compaction"
#: A compaction's output whose swap did not happen (yet, or ever: the job died before it).
PENDING = "pending"
#: A compaction's output the swap made the partition's segment.
SWAPPED = "swapped"
#: The metadata entry of a copy the copier retired; its value is when (epoch ms), then why.
RETIRED_KEY = "rlm-retired"
#: Why a copy was retired: the broker's log diverged from its records (an unclean leader election).
DIVERGED = "diverged"
#: Why a copy was retired: its topic was deleted (and created again under its name).
TOPIC_DELETED = "topic-deleted"
#: The metadata entry of a trim's copy: the segment id of the copy it replaces.
REPLACES_KEY = "rlm-replaces"
#: S3's limit on the user metadata of an object, keys and values together.
MAX_METADATA_BYTES = 2048
VERSION = 1


class Description(NamedTuple):
    """The row's fields an object set does not give by its keys."""

    end_offset: int
    max_timestamp_ms: int
    size_bytes: int
    leader_epochs: tuple[LeaderEpochEntry, ...]
    index_ranges: tuple[tuple[IndexType, ByteRange], ...]
    txn_index_empty: bool
    broker_id: int
    event_time_ms: int

    @classmethod
    def of(cls, segment: RemoteSegment) -> Description:
        return cls(
            segment.end_offset,
            segment.max_timestamp_ms,
            segment.size_bytes,
            segment.leader_epochs,
            segment.layout.index_ranges,
            segment.txn_index_empty,
            segment.broker_id,
            segment.event_time_ms,
        )


def describe(
    segment: RemoteSegment, *, compaction: str | None = None, replaces: UUID | None = None
) -> dict[str, str]:
    """The metadata to store with the segment's index object: its description (left out when
    it would not fit), for a compaction's output its ``compaction`` state, and for a trim's copy
    the segment id of the copy it ``replaces``."""
    if compaction not in (None, PENDING, SWAPPED):
        raise ValueError(f"unknown compaction state {compaction!r}")
    marks = {} if compaction is None else {COMPACTION_KEY: compaction}
    if replaces is not None:
        marks[REPLACES_KEY] = str(replaces)
    d = Description.of(segment)
    text = json.dumps(
        {
            "v": VERSION,
            "end": d.end_offset,
            "maxts": d.max_timestamp_ms,
            "size": d.size_bytes,
            "epochs": [list(e) for e in d.leader_epochs],
            "ranges": [[kind.value, r.position, r.size] for kind, r in d.index_ranges],
            "txn_empty": d.txn_index_empty,
            "broker": d.broker_id,
            "time": d.event_time_ms,
        },
        separators=(",", ":"),
    )
    used = sum(len(k) + len(v) for k, v in marks.items())
    if used + len(DESCRIPTION_KEY) + len(text) > MAX_METADATA_BYTES:
        return marks
    return {DESCRIPTION_KEY: text, **marks}


def read_compaction(metadata: Mapping[str, str]) -> str | None:
    """The compaction state in an index object's metadata (:data:`PENDING` or
    :data:`SWAPPED`); ``None`` for a segment the copier wrote (or one of unknown state)."""
    state = metadata.get(COMPACTION_KEY)
    return state if state in (PENDING, SWAPPED) else None


def read_replaces(metadata: Mapping[str, str]) -> UUID | None:
    """The segment id of the copy a trim's copy replaces, from its index object's metadata;
    ``None`` for any other segment (or a value that is no segment id)."""
    value = metadata.get(REPLACES_KEY)
    if value is None:
        return None
    try:
        return UUID(value.strip())
    except ValueError:
        return None


class Retirement(NamedTuple):
    """What an ``rlm-retired`` mark says."""

    at_ms: int
    """When the copy was retired (epoch ms); -1 when the mark does not say."""
    why: str
    """:data:`DIVERGED`, :data:`TOPIC_DELETED`, or a word a later version wrote."""


def retired_mark(at_ms: int, why: str) -> str:
    """The value of an ``rlm-retired`` entry (:func:`read_retired` reads it)."""
    return f"{at_ms} {why}"


def read_retired(metadata: Mapping[str, str]) -> Retirement | None:
    """When and why the copy was retired, from an index object's metadata; ``None`` when it was
    not. A mark of a time alone (the first ones) says the broker's log diverged."""
    mark = metadata.get(RETIRED_KEY)
    if mark is None:
        return None
    at, _, why = mark.strip().partition(" ")
    return Retirement(int(at) if at.lstrip("-").isdigit() else -1, why.strip() or DIVERGED)


def with_mark(metadata: Mapping[str, str], key: str, value: str) -> dict[str, str]:
    """``metadata`` with the entry ``key`` set to ``value``; the description is left out when
    both would not fit (the mark is what must be kept: the set is then read from its bytes)."""
    marked = {**metadata, key: value}
    if sum(len(k) + len(v) for k, v in marked.items()) > MAX_METADATA_BYTES:
        marked.pop(DESCRIPTION_KEY, None)
    return marked


def read_description(metadata: Mapping[str, str], key: str) -> Description | None:
    """The description in an index object's metadata; ``None`` when it has none.

    Raises:
        CorruptDataError: The metadata holds a description rlm cannot read; names ``key``.
    """
    text = metadata.get(DESCRIPTION_KEY)
    if text is None:
        return None
    try:
        doc = json.loads(text)
        if doc["v"] != VERSION:
            raise ValueError(f"unknown version {doc['v']!r}")
        return Description(
            int(doc["end"]),
            int(doc["maxts"]),
            int(doc["size"]),
            tuple(LeaderEpochEntry(int(e), int(o)) for e, o in doc["epochs"]),
            tuple((IndexType(k), ByteRange(int(p), int(s))) for k, p, s in doc["ranges"]),
            bool(doc["txn_empty"]),
            int(doc["broker"]),
            int(doc["time"]),
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise CorruptDataError(
            f"the segment description in its metadata is not valid: {exc}", path=key
        ) from exc
