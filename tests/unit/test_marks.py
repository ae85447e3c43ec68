"""Marks stored with a segment's index object after it was written (rlm.storage.marks)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from rlm.errors import CorruptDataError
from rlm.metastore.model import LeaderEpochEntry, ObjectLayout, RemoteSegment, TopicPartition
from rlm.storage.delegate import DelegatingStorage
from rlm.storage.description import (
    COMPACTION_KEY,
    DESCRIPTION_KEY,
    DIVERGED,
    MAX_METADATA_BYTES,
    PENDING,
    REPLACES_KEY,
    RETIRED_KEY,
    SWAPPED,
    TOPIC_DELETED,
    Retirement,
    describe,
    read_compaction,
    read_description,
    read_replaces,
    read_retired,
    retired_mark,
    with_mark,
)
from rlm.storage.filesystem import META_SUFFIX, FilesystemStorage
from rlm.storage.marks import mark_retired, mark_swapped
from rlm.storage.protocol import PutResult, PutSource, RemoteStorage

INDEX_BYTES = b"\x00\x01indexes" * 100


def row(epochs: int = 1) -> RemoteSegment:
    return RemoteSegment(
        segment_id=uuid.uuid4(),
        topic_partition=TopicPartition("orders", 0),
        topic_id=None,
        start_offset=0,
        end_offset=999,
        max_timestamp_ms=1_700_000_000_000,
        size_bytes=100,
        broker_id=1,
        event_time_ms=1_700_000_000_000,
        leader_epochs=tuple(LeaderEpochEntry(e, e) for e in range(epochs)),
        layout=ObjectLayout("orders-0/x.log", "orders-0/x.indexes", ()),
        txn_index_empty=True,
    )


@pytest.fixture
def storage(tmp_path: Path) -> FilesystemStorage:
    return FilesystemStorage(tmp_path)


def test_a_mark_is_added_beside_the_description_and_read_back() -> None:
    segment = row()
    marked = with_mark(describe(segment), RETIRED_KEY, retired_mark(1_700_000_000_123, TOPIC_DELETED))
    assert marked[RETIRED_KEY] == "1700000000123 topic-deleted"
    assert read_retired(marked) == Retirement(1_700_000_000_123, TOPIC_DELETED)
    assert read_description(marked, "k") is not None
    assert read_retired(describe(segment)) is None


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("1700000000123", Retirement(1_700_000_000_123, DIVERGED)),  # the first marks: a time alone
        ("1700000000123 diverged", Retirement(1_700_000_000_123, DIVERGED)),
        ("1700000000123 topic-deleted", Retirement(1_700_000_000_123, TOPIC_DELETED)),
        ("soon", Retirement(-1, DIVERGED)),  # marked, though it does not say when
        ("soon topic-deleted", Retirement(-1, TOPIC_DELETED)),
        ("42 compacted-away", Retirement(42, "compacted-away")),  # a later version's reason
    ],
)
def test_a_retired_mark_says_when_and_why(value: str, expected: Retirement) -> None:
    assert read_retired({RETIRED_KEY: value}) == expected


def test_a_mark_that_would_not_fit_beside_the_description_leaves_it_out() -> None:
    # As many leader epochs as the description just fits within S3's limit.
    epochs = next(n for n in range(1, 400) if DESCRIPTION_KEY not in describe(row(n + 1)))
    metadata = describe(row(epochs))
    assert DESCRIPTION_KEY in metadata

    marked = with_mark(metadata, RETIRED_KEY, "1700000000123")

    assert marked == {RETIRED_KEY: "1700000000123"}
    assert sum(len(k) + len(v) for k, v in {**metadata, **marked}.items()) > MAX_METADATA_BYTES


def test_a_trims_copy_names_the_copy_it_replaces_whether_or_not_its_description_fits() -> None:
    old = uuid.uuid4()
    metadata = describe(row(), replaces=old)
    assert metadata[REPLACES_KEY] == str(old) and read_replaces(metadata) == old
    assert read_description(metadata, "k") == read_description(describe(row()), "k")
    assert read_replaces(describe(row())) is None
    # Too many leader epochs for the description: the name is stored all the same.
    too_long = describe(row(400), replaces=old)
    assert DESCRIPTION_KEY not in too_long and read_replaces(too_long) == old
    # A mark added later keeps it.
    assert read_replaces(with_mark(metadata, RETIRED_KEY, retired_mark(42, DIVERGED))) == old


@pytest.mark.parametrize("value", ["", "soon", "42", f"{uuid.UUID(int=7)} and more"])
def test_a_replaced_copy_that_is_no_segment_id_is_no_name(value: str) -> None:
    assert read_replaces({REPLACES_KEY: value}) is None


def test_marking_retired_stores_the_same_bytes_and_keeps_the_other_entries(
    storage: FilesystemStorage,
) -> None:
    segment = row()
    storage.put_object(segment.layout.index_key, INDEX_BYTES, metadata=describe(segment, compaction=PENDING))

    assert mark_retired(storage, segment, now_ms=42)

    key = segment.layout.index_key
    assert storage.read_range(key, 0, len(INDEX_BYTES) + 1) == INDEX_BYTES
    metadata = storage.object_metadata(key)
    assert metadata is not None
    assert (read_retired(metadata), read_compaction(metadata)) == (Retirement(42, DIVERGED), PENDING)
    assert read_description(metadata, key) == read_description(describe(segment), key)


def test_a_damaged_sidecar_is_replaced_by_the_mark(storage: FilesystemStorage, tmp_path: Path) -> None:
    segment = row()
    key = segment.layout.index_key
    storage.put_object(key, INDEX_BYTES, metadata=describe(segment))
    (tmp_path / (key + META_SUFFIX)).write_text("{not json")
    with pytest.raises(CorruptDataError):
        storage.object_metadata(key)

    assert mark_retired(storage, segment, now_ms=42)

    assert storage.object_metadata(key) == {RETIRED_KEY: "42 diverged"}
    assert json.loads((tmp_path / (key + META_SUFFIX)).read_text()) == {RETIRED_KEY: "42 diverged"}


def test_a_copy_marked_retired_already_keeps_its_mark_and_is_not_stored_again(tmp_path: Path) -> None:
    storage = CountingPuts(FilesystemStorage(tmp_path))
    segment = row()
    storage.put_object(segment.layout.index_key, INDEX_BYTES, metadata=describe(segment))
    assert mark_retired(storage, segment, now_ms=42, why=TOPIC_DELETED)
    assert storage.puts == 2

    assert mark_retired(storage, segment, now_ms=43)  # a pass that failed before retiring it

    assert storage.puts == 2
    metadata = storage.object_metadata(segment.layout.index_key)
    assert metadata is not None and read_retired(metadata) == Retirement(42, TOPIC_DELETED)


class CountingPuts(DelegatingStorage):
    def __init__(self, inner: RemoteStorage) -> None:
        super().__init__(inner)
        self.puts = 0

    def put_object(self, key: str, source: PutSource, **kwargs: Any) -> PutResult:
        self.puts += 1
        return self.inner.put_object(key, source, **kwargs)


def test_a_gone_index_object_is_not_marked(storage: FilesystemStorage) -> None:
    segment = row()
    assert not mark_retired(storage, segment, now_ms=42)
    assert storage.object_size(segment.layout.index_key) is None
    with pytest.raises(CorruptDataError, match="is gone"):
        mark_swapped(storage, segment)


def test_marking_swapped_replaces_pending(storage: FilesystemStorage) -> None:
    segment = row()
    key = segment.layout.index_key
    storage.put_object(key, INDEX_BYTES, metadata=describe(segment, compaction=PENDING))

    mark_swapped(storage, segment)

    metadata = storage.object_metadata(key)
    assert metadata is not None and metadata[COMPACTION_KEY] == SWAPPED
    assert storage.read_range(key, 0, len(INDEX_BYTES)) == INDEX_BYTES
