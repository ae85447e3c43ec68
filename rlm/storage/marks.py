"""Marks on a segment's index object after it was written (:mod:`rlm.storage.description`): a
compaction's output swapped in, a copy retired.

A mark is stored as the object's metadata, and metadata is stored with the object: the index
object is stored again, its same bytes, with the new metadata. Its readers see the same bytes
throughout (a put replaces an object whole). Index objects are small (the indexes of one segment).
"""

from __future__ import annotations

from collections.abc import Callable

from rlm.errors import CorruptDataError
from rlm.metastore.model import RemoteSegment
from rlm.storage.description import (
    DIVERGED,
    RETIRED_KEY,
    SWAPPED,
    describe,
    read_retired,
    retired_mark,
    with_mark,
)
from rlm.storage.protocol import RemoteStorage


def store_again(
    storage: RemoteStorage, key: str, metadata_of: Callable[[dict[str, str]], dict[str, str] | None]
) -> bool:
    """Store the object under ``key`` again, its same bytes, with the metadata ``metadata_of``
    makes of what it has (empty when that cannot be read, as a damaged sidecar), or leave it as it
    is when that gives None; False when there is no such object.

    Raises:
        StorageError: A read or the put failed.
    """
    try:
        metadata = storage.object_metadata(key)
    except CorruptDataError:
        metadata = {}
    size = storage.object_size(key)
    if metadata is None or size is None:
        return False
    marked = metadata_of(metadata)
    if marked is None:
        return True
    data = storage.read_range(key, 0, size)
    storage.put_object(key, data, metadata=marked)
    return True


def mark_swapped(storage: RemoteStorage, row: RemoteSegment) -> None:
    """Mark a swapped-in compaction output's index object swapped: from then on a rebuild chooses
    it over its inputs.

    Raises:
        CorruptDataError: The index object is gone; names it.
        StorageError: A read or the put failed.
    """
    index_key = row.layout.index_key
    if not store_again(storage, index_key, lambda _: describe(row, compaction=SWAPPED)):
        raise CorruptDataError(
            f"the index object of compacted segment {row.segment_id} is gone", path=index_key
        )


def mark_retired(storage: RemoteStorage, row: RemoteSegment, *, now_ms: int, why: str = DIVERGED) -> bool:
    """Mark a copy's index object retired (``why``: :data:`~rlm.storage.description.DIVERGED` or
    :data:`~rlm.storage.description.TOPIC_DELETED`), before the metadata store retires the copy: a
    rebuild from the objects then never makes it a row again. One marked already (by a pass that
    failed before the store's transaction) is left as it is. False when the index object is gone
    (a rebuild finds the set incomplete).

    Raises:
        StorageError: A read or the put failed.
    """

    def marked(metadata: dict[str, str]) -> dict[str, str] | None:
        if read_retired(metadata) is not None:
            return None
        return with_mark(metadata, RETIRED_KEY, retired_mark(now_ms, why))

    return store_again(storage, row.layout.index_key, marked)
