"""Object keys and the index object of a remote segment."""

from __future__ import annotations

import hashlib
import re
import uuid

import pytest

from rlm.errors import InvalidObjectKeyError, InvalidTopicNameError
from rlm.log.checkpoints import uuid_to_topic_id
from rlm.metastore.model import ByteRange, IndexType
from rlm.storage.layout import (
    INDEX_ORDER,
    ZERO_TOPIC_ID,
    IndexBlob,
    ParsedKey,
    parse_segment_key,
    partition_hash,
    partition_prefix,
    segment_keys,
    validate_key,
    validate_topic,
)

TOPIC_ID = uuid.UUID("5f0c2b9e-8f3c-4d7e-9a6b-0c1d2e3f4a5b")
SEGMENT_ID = uuid.UUID("00000000-0000-4000-8000-000000000001")

# -- topic names ---------------------------------------------------------------------------


@pytest.mark.parametrize("topic", ["a", "orders", "__consumer_offsets", "a.b_c-D9", "..a", "x" * 249])
def test_valid_topic_names(topic: str) -> None:
    assert validate_topic(topic) == topic


@pytest.mark.parametrize(
    ("topic", "reason"),
    [
        ("", "empty"),
        (".", "'.' and '..'"),
        ("..", "'.' and '..'"),
        ("../evil", "only ASCII"),
        ("a/b", "only ASCII"),
        ("a\\b", "only ASCII"),
        ("a b", "only ASCII"),
        ("caf\u00e9", "only ASCII"),
        ("x" * 250, "250 characters"),
    ],
)
def test_invalid_topic_names_are_refused_by_name(topic: str, reason: str) -> None:
    with pytest.raises(InvalidTopicNameError, match=re.escape(reason)) as raised:
        validate_topic(topic)
    assert raised.value.topic == topic
    assert repr(topic) in str(raised.value)


@pytest.mark.parametrize("topic", ["../evil", "a/b", ".", ".."])
def test_keys_cannot_be_built_for_invalid_topics(topic: str) -> None:
    with pytest.raises(InvalidTopicNameError):
        segment_keys(topic, None, 0, 0, SEGMENT_ID)
    with pytest.raises(InvalidTopicNameError):
        partition_prefix(topic, None, 0)


# -- object keys ---------------------------------------------------------------------------


def test_partition_hash_is_stable_and_short() -> None:
    # Pinned: changing it would orphan every object already stored.
    assert partition_hash("orders", 3) == "cf0a"
    assert partition_hash("orders", 3) == hashlib.sha256(b"orders-3").hexdigest()[:4]
    hashes = {partition_hash("orders", p) for p in range(64)}
    assert all(re.fullmatch(r"[0-9a-f]{4}", h) for h in hashes)
    assert len(hashes) > 50  # partitions of one topic spread over prefixes


def test_segment_keys_follow_the_layout() -> None:
    keys = segment_keys("orders", TOPIC_ID, 3, 42, SEGMENT_ID)
    stem = f"cf0a/orders-3-{uuid_to_topic_id(TOPIC_ID)}/00000000000000000042-{SEGMENT_ID}"
    assert keys.log_key == stem + ".log"
    assert keys.indexes_key == stem + ".indexes"
    assert uuid_to_topic_id(TOPIC_ID) == "Xwwrno88TX6aawwdLj9KWw"
    for key in keys:
        assert validate_key(key) == key
        assert key.startswith(partition_prefix("orders", TOPIC_ID, 3))


def test_unknown_topic_id_uses_kafkas_zero_id() -> None:
    keys = segment_keys("orders", None, 3, 0, SEGMENT_ID)
    assert keys.log_key.startswith(f"cf0a/orders-3-{ZERO_TOPIC_ID}/")
    assert partition_prefix("orders", None, 3) == f"cf0a/orders-3-{ZERO_TOPIC_ID}/"


def test_a_recreated_topic_gets_other_keys() -> None:
    old = partition_prefix("orders", TOPIC_ID, 3)
    new = partition_prefix("orders", uuid.uuid4(), 3)
    assert old != new
    assert not new.startswith(old) and not old.startswith(new)


def test_partition_prefixes_do_not_nest() -> None:
    prefixes = [
        partition_prefix("t", None, 1),
        partition_prefix("t", None, 10),
        partition_prefix("t-1", None, 0),
    ]
    for a in prefixes:
        for b in prefixes:
            assert a == b or not b.startswith(a)


def test_keys_sort_in_offset_order() -> None:
    offsets = [0, 9, 10, 1_000, 2**40, 2**63 - 1]
    keys = [segment_keys("t", None, 0, offset, uuid.uuid4()).log_key for offset in offsets]
    assert sorted(keys) == keys


@pytest.mark.parametrize(("topic", "topic_id"), [("orders", TOPIC_ID), ("a-1", None), ("x_-.y", TOPIC_ID)])
def test_keys_parse_back_into_what_built_them(topic: str, topic_id: uuid.UUID | None) -> None:
    keys = segment_keys(topic, topic_id, 12, 345, SEGMENT_ID)
    tid = ZERO_TOPIC_ID if topic_id is None else uuid_to_topic_id(topic_id)
    assert parse_segment_key(keys.log_key) == ParsedKey(topic, 12, tid, 345, SEGMENT_ID, ".log")
    assert parse_segment_key(keys.indexes_key) == ParsedKey(topic, 12, tid, 345, SEGMENT_ID, ".indexes")


def test_topic_ids_with_dashes_parse() -> None:
    topic_id = next(
        u for u in (uuid.UUID(int=n * 7919 + 3) for n in range(1, 10**6)) if "-" in uuid_to_topic_id(u)
    )
    parsed = parse_segment_key(segment_keys("t-2", topic_id, 3, 0, SEGMENT_ID).log_key)
    assert parsed is not None and (parsed.topic, parsed.partition) == ("t-2", 3)


@pytest.mark.parametrize(
    "key",
    [
        "orders-0/00000000000000000000-00000000-0000-4000-8000-000000000001.log",  # no hash
        "ffff/orders-0-AAAAAAAAAAAAAAAAAAAAAA/00000000000000000000-00000000-0000-4000-8000-000000000001.log",
        "x/y/z",
        "a/b",
        "",
    ],
)
def test_other_keys_do_not_parse(key: str) -> None:
    """Keys of another layout, or whose hash is not the partition's (the second one)."""
    assert parse_segment_key(key) is None


def test_a_changed_part_does_not_parse() -> None:
    good = segment_keys("orders", TOPIC_ID, 0, 7, SEGMENT_ID).log_key
    for bad in (
        good.replace(".log", ".txt"),
        good.replace("-0-", "-x-"),
        good.replace("0007", "000a"),
        good + "/x",
    ):
        assert parse_segment_key(bad) is None


def test_negative_partition_or_offset_is_refused() -> None:
    with pytest.raises(ValueError, match="partition -1"):
        segment_keys("t", None, -1, 0, SEGMENT_ID)
    with pytest.raises(ValueError, match="start offset -5"):
        segment_keys("t", None, 0, -5, SEGMENT_ID)


@pytest.mark.parametrize(
    ("key", "reason"),
    [
        ("", "empty"),
        ("../x", "'..'"),
        ("a/../b", "'..'"),
        ("./a", "'.'"),
        ("a//b", "empty"),
        ("a/", "empty"),
        ("/a", "absolute"),
        ("a\\b", "backslash"),
        ("a\x00b", "control"),
        ("a\rb", "control"),
        ("k" * 1025, "1024 bytes"),
    ],
)
def test_invalid_keys(key: str, reason: str) -> None:
    with pytest.raises(InvalidObjectKeyError, match=re.escape(reason)) as raised:
        validate_key(key)
    assert raised.value.key == key
    assert raised.value.retriable is False


def test_prefixes_may_be_empty_or_end_with_a_slash() -> None:
    assert validate_key("", allow_prefix=True) == ""
    assert validate_key("ab/", allow_prefix=True) == "ab/"
    assert validate_key("ab/t-0-", allow_prefix=True) == "ab/t-0-"
    with pytest.raises(InvalidObjectKeyError):
        validate_key("../", allow_prefix=True)


# -- the index object ----------------------------------------------------------------------


def test_index_blob_concatenates_in_a_fixed_order() -> None:
    files = {
        IndexType.LEADER_EPOCH: b"0\n1\n0 0\n",
        IndexType.OFFSET: b"O" * 16,
        IndexType.TIMESTAMP: b"T" * 24,
        IndexType.PRODUCER_SNAPSHOT: b"P" * 5,
    }
    blob = IndexBlob.build(files)
    assert blob.data == b"O" * 16 + b"T" * 24 + b"P" * 5 + b"0\n1\n0 0\n"
    assert blob.ranges == (
        (IndexType.OFFSET, ByteRange(0, 16)),
        (IndexType.TIMESTAMP, ByteRange(16, 24)),
        (IndexType.PRODUCER_SNAPSHOT, ByteRange(40, 5)),
        (IndexType.LEADER_EPOCH, ByteRange(45, 8)),
    )
    assert IndexBlob.build(dict(reversed(list(files.items())))) == blob
    for kind, content in files.items():
        assert blob.extract(kind) == content


def test_absent_files_are_not_listed_and_empty_files_have_empty_ranges() -> None:
    blob = IndexBlob.build({IndexType.OFFSET: b"", IndexType.TIMESTAMP: b"ts", IndexType.TRANSACTION: None})
    assert blob.range_of(IndexType.OFFSET) == ByteRange(0, 0)
    assert blob.extract(IndexType.OFFSET) == b""
    assert blob.range_of(IndexType.TRANSACTION) is None
    assert blob.extract(IndexType.TRANSACTION) is None
    assert blob.extract(IndexType.PRODUCER_SNAPSHOT) is None
    assert blob.data == b"ts"


def test_index_blob_round_trips_through_the_object_layout() -> None:
    files = {kind: kind.value.encode() * 3 for kind in INDEX_ORDER}
    blob = IndexBlob.build(files)
    keys = segment_keys("orders", TOPIC_ID, 3, 42, SEGMENT_ID)
    layout = blob.layout(keys)
    assert (layout.log_key, layout.index_key) == keys
    for kind, content in files.items():
        found = layout.index_range(kind)
        assert found is not None
        assert blob.data[found.position : found.end] == content
