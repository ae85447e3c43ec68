"""The filesystem store holds every key rlm's layout makes, makes what a put creates durable, and
never lists less than it holds without saying so."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from rlm.errors import InvalidObjectKeyError, StorageError
from rlm.storage.filesystem import CONTINUED, META_SUFFIX, PIECE_BYTES, TMP_SUFFIX, FilesystemStorage
from rlm.storage.layout import segment_keys

#: The longest topic name Kafka allows (249 characters): its partition directory's name in the
#: key layout is longer than a file system's 255 bytes.
LONG_TOPIC = "t" * 240 + ".orders-9"


@pytest.fixture
def storage(tmp_path: Path) -> Iterator[FilesystemStorage]:
    with FilesystemStorage(tmp_path / "remote") as store:
        yield store


def test_a_topic_with_the_longest_name_kafka_allows_is_stored_and_listed_by_its_keys(
    storage: FilesystemStorage,
) -> None:
    keys = segment_keys(LONG_TOPIC, uuid.uuid4(), 7, 1_000, uuid.uuid4())
    assert max(len(part) for part in keys.log_key.split("/")) > 255  # one name could not hold it

    storage.put_object(keys.log_key, b"log bytes")
    storage.put_object(keys.indexes_key, b"index bytes", metadata={"rlm-segment": "s"})

    assert storage.read_range(keys.log_key, 4, 5) == b"bytes"
    assert b"".join(storage.stream_range(keys.indexes_key, 0, 11)) == b"index bytes"
    assert storage.object_size(keys.log_key) == 9
    assert storage.object_metadata(keys.indexes_key) == {"rlm-segment": "s"}
    assert list(storage.list_keys()) == sorted([keys.log_key, keys.indexes_key])
    directory = keys.log_key.rpartition("/")[0]
    assert list(storage.list_keys(directory + "/")) == sorted([keys.log_key, keys.indexes_key])
    assert list(storage.list_keys(directory[:230])) == sorted([keys.log_key, keys.indexes_key])
    for path in storage.root.rglob("*"):
        assert len(path.name.encode()) <= PIECE_BYTES + len(CONTINUED) + len(META_SUFFIX)

    storage.delete_objects([keys.log_key])
    assert storage.object_size(keys.log_key) is None
    assert list(storage.list_keys()) == [keys.indexes_key]


def test_a_key_part_ending_with_the_mark_of_a_cut_part_is_refused(storage: FilesystemStorage) -> None:
    with pytest.raises(InvalidObjectKeyError, match="marks a long part"):
        storage.put_object(f"a{CONTINUED}/b", b"x")
    with pytest.raises(InvalidObjectKeyError, match="marks a long part"):
        storage.object_size(f"a/b{CONTINUED}")
    storage.put_object("a+/b~", b"x")  # either character alone is a key's own
    assert list(storage.list_keys()) == ["a+/b~"]


def test_a_put_fsyncs_its_sidecar_and_every_directory_it_creates(
    storage: FilesystemStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[str] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    storage.put_object("ab/orders-0-x/seg.indexes", b"index bytes", metadata={"rlm-segment": "s"})

    root = os.path.realpath(storage.root)
    partition = f"{root}/ab/orders-0-x"
    assert root in synced and f"{root}/ab" in synced and partition in synced  # each new entry
    assert any(
        p.startswith(f"{partition}/.seg.indexes{META_SUFFIX}.") and p.endswith(TMP_SUFFIX) for p in synced
    )
    assert any(
        p.startswith(f"{partition}/.seg.indexes.") and p.endswith(TMP_SUFFIX) and META_SUFFIX not in p
        for p in synced
    )

    synced.clear()
    storage.put_object("ab/orders-0-x/seg.log", b"log bytes")
    assert f"{root}/ab" not in synced and root not in synced  # nothing new to make durable there


def test_a_directory_the_listing_cannot_read_is_an_error_not_a_shorter_list(
    storage: FilesystemStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage.put_object("aa/t-0-x/one.log", b"1")
    storage.put_object("bb/t-1-x/two.log", b"2")
    unreadable = str(storage.root / "bb" / "t-1-x")
    real_scandir = os.scandir

    def scandir(path: str) -> object:  # an I/O error, or a directory restored with the wrong owner
        if str(path) == unreadable:
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)

    with pytest.raises(StorageError, match="list the keys under 'bb/t-1-x'"):
        list(storage.list_keys())
    assert list(storage.list_keys("aa/")) == ["aa/t-0-x/one.log"]
    assert list(storage.list_keys("cc/")) == []  # a prefix naming no directory lists nothing
