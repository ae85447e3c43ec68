"""Text files of a log directory, byte for byte as §4.4/§4.5 describe them, and their defects."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rlm.errors import CorruptCheckpointError
from rlm.log.checkpoints import (
    EpochEntry,
    decode_leader_epoch_checkpoint,
    encode_leader_epoch_checkpoint,
    epoch_for_offset,
    new_topic_id,
    read_leader_epoch_checkpoint,
    read_meta_properties,
    read_offset_checkpoint,
    read_partition_metadata,
    topic_id_to_uuid,
    uuid_to_topic_id,
    write_leader_epoch_checkpoint,
    write_meta_properties,
    write_offset_checkpoint,
    write_partition_metadata,
)

# --- offset checkpoints ---------------------------------------------------------------------


def test_offset_checkpoint_bytes(tmp_path: Path) -> None:
    path = tmp_path / "recovery-point-offset-checkpoint"
    write_offset_checkpoint(path, {("orders", 0): 1200, ("orders", 1): 987})
    assert path.read_bytes() == b"0\n2\norders 0 1200\norders 1 987\n"
    assert read_offset_checkpoint(path) == {("orders", 0): 1200, ("orders", 1): 987}
    assert not list(tmp_path.glob("*.tmp"))


def test_offset_checkpoint_missing_empty_and_version_only(tmp_path: Path) -> None:
    path = tmp_path / "cp"
    assert read_offset_checkpoint(path) == {}
    for content in (b"", b"0\n", b"0"):
        path.write_bytes(content)
        assert read_offset_checkpoint(path) == {}
    write_offset_checkpoint(path, {})
    assert path.read_bytes() == b"0\n0\n"
    assert read_offset_checkpoint(path) == {}


def test_offset_checkpoint_lenient_reading(tmp_path: Path) -> None:
    path = tmp_path / "cp"
    path.write_bytes(b"0\r\n3\r\nmy.topic-x  12\t-3 \na 0 1\na 0 2")
    # Java readLine line breaks, runs of whitespace, a later duplicate wins.
    assert read_offset_checkpoint(path) == {("my.topic-x", 12): -3, ("a", 0): 2}


@pytest.mark.parametrize(
    ("content", "line", "problem"),
    [
        (b"1\n0\n", 1, "unrecognised version 1"),
        (b"zero\n0\n", 1, "malformed version"),
        (b" 0\n0\n", 1, "malformed version"),
        (b"0\nx\n", 2, "malformed entry count"),
        (b"0\n2\na 0 1\n", 2, "expected 2 entries but found 1"),
        (b"0\n1\na 0 1\nb 0 2\n", 2, "expected 1 entries but found 2"),
        (b"0\n2\na 0 1\na 0\n", 4, "malformed entry 'a 0'"),
        (b"0\n1\na b 1\n", 3, "malformed entry"),
        (b"0\n1\na 0 99999999999999999999\n", 3, "does not fit an int64"),
        (b"0\n1\n a 0 1\n", 3, "got 4 fields"),
        (b"0\n1\n\n", 3, "got 0 fields"),
        (b"0\n1\na 0 1_0\n", 3, "not a decimal integer"),
    ],
)
def test_offset_checkpoint_corruption(tmp_path: Path, content: bytes, line: int, problem: str) -> None:
    path = tmp_path / "replication-offset-checkpoint"
    path.write_bytes(content)
    with pytest.raises(CorruptCheckpointError, match=f"line {line}: .*{problem}") as info:
        read_offset_checkpoint(path)
    assert info.value.path == str(path)
    assert "replication-offset-checkpoint" in str(info.value)


def test_invalid_utf8_is_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "cp"
    path.write_bytes(b"0\n1\n\xff 0 1\n")
    with pytest.raises(CorruptCheckpointError, match="utf-8"):
        read_offset_checkpoint(path)


@pytest.mark.parametrize(
    "entries",
    [{("bad topic", 0): 1}, {("", 0): 1}, {("t", -1): 1}, {("t", 0): 2**63}, {("t\n", 0): 1}],
)
def test_offset_checkpoint_writer_rejects_unwritable_entries(
    tmp_path: Path, entries: dict[tuple[str, int], int]
) -> None:
    with pytest.raises(ValueError):
        write_offset_checkpoint(tmp_path / "cp", entries)
    assert not (tmp_path / "cp").exists()


topics = st.from_regex(r"[a-zA-Z0-9._-]{1,40}", fullmatch=True)
offset_maps = st.dictionaries(
    st.tuples(topics, st.integers(0, 2**31 - 1)), st.integers(-(2**63), 2**63 - 1), max_size=20
)


@given(entries=offset_maps)
def test_offset_checkpoint_round_trip(
    tmp_path_factory: pytest.TempPathFactory, entries: dict[tuple[str, int], int]
) -> None:
    path = tmp_path_factory.mktemp("cp") / "cleaner-offset-checkpoint"
    write_offset_checkpoint(path, entries)
    assert read_offset_checkpoint(path) == entries


# --- leader-epoch-checkpoint ----------------------------------------------------------------

EPOCHS = [EpochEntry(0, 0), EpochEntry(2, 1500), EpochEntry(5, 7321)]


def test_leader_epoch_checkpoint_bytes(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    write_leader_epoch_checkpoint(path, EPOCHS)
    assert path.read_bytes() == b"0\n3\n0 0\n2 1500\n5 7321\n"
    assert read_leader_epoch_checkpoint(path) == EPOCHS
    assert read_leader_epoch_checkpoint(tmp_path / "missing") == []


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"0\n1\n0 0 0\n", "line 3: malformed entry"),
        (b"0\n1\n0\n", "line 3: malformed entry"),
        (b"0\n1\n99999999999 0\n", "does not fit an int32"),
        (b"3\n0\n", "line 1: unrecognised version 3"),
        (b"0\n2\n0 0\n", "line 2: expected 2 entries but found 1"),
    ],
)
def test_leader_epoch_checkpoint_corruption(tmp_path: Path, content: bytes, problem: str) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    path.write_bytes(content)
    with pytest.raises(CorruptCheckpointError, match=problem):
        read_leader_epoch_checkpoint(path)
    with pytest.raises(CorruptCheckpointError, match=f"^idx: .*{problem}"):
        decode_leader_epoch_checkpoint(content, path="idx")


def test_leader_epoch_checkpoint_from_bytes() -> None:
    """What a remote segment keeps in its index object reads back as the file does."""
    assert decode_leader_epoch_checkpoint(encode_leader_epoch_checkpoint(EPOCHS)) == EPOCHS
    assert decode_leader_epoch_checkpoint(b"") == []
    with pytest.raises(CorruptCheckpointError, match="not utf-8"):
        decode_leader_epoch_checkpoint(b"0\n1\n\xff 0\n")


def test_leader_epoch_writer_rejects_negative(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        write_leader_epoch_checkpoint(tmp_path / "e", [EpochEntry(-1, 0)])


@pytest.mark.parametrize(
    ("offset", "epoch"),
    [(0, 0), (1499, 0), (1500, 2), (7320, 2), (7321, 5), (10**12, 5)],
)
def test_epoch_for_offset(offset: int, epoch: int) -> None:
    assert epoch_for_offset(EPOCHS, offset) == epoch


def test_epoch_for_offset_before_first_or_empty() -> None:
    assert epoch_for_offset([EpochEntry(3, 100)], 99) == -1
    assert epoch_for_offset([], 5) == -1


# --- partition.metadata ---------------------------------------------------------------------

TOPIC_ID = "vG7Nc8TcRSqQbcJxgYm-Aw"


def test_partition_metadata_bytes(tmp_path: Path) -> None:
    path = tmp_path / "partition.metadata"
    write_partition_metadata(path, TOPIC_ID)
    assert path.read_bytes() == b"version: 0\ntopic_id: vG7Nc8TcRSqQbcJxgYm-Aw"
    assert read_partition_metadata(path) == TOPIC_ID
    assert read_partition_metadata(tmp_path / "missing") is None


def test_topic_id_uuid_conversions() -> None:
    value = topic_id_to_uuid(TOPIC_ID)
    assert value.bytes == bytes.fromhex("bc6ecd73c4dc452a906dc2718189be03")
    assert uuid_to_topic_id(value) == TOPIC_ID
    assert topic_id_to_uuid(TOPIC_ID + "==") == value  # Java's decoder takes padding too
    assert uuid_to_topic_id(uuid.UUID(int=0)) == "AAAAAAAAAAAAAAAAAAAAAA"
    for bad in ("", "vG7Nc8TcRSqQbcJxgYm-A", "vG7Nc8TcRSqQbcJxgYm+Aw", "vG7Nc8TcRSqQbcJxgYm-Aw=", "x" * 25):
        with pytest.raises(ValueError):
            topic_id_to_uuid(bad)


def test_new_topic_id() -> None:
    for _ in range(200):
        topic_id = new_topic_id()
        assert len(topic_id) == 22 and not topic_id.startswith("-")
        value = topic_id_to_uuid(topic_id)
        assert value.int not in (0, 1) and value.version == 4
        assert uuid_to_topic_id(value) == topic_id


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"", "line 1: malformed line None"),
        (b"version: 0\n", "line 2: malformed line None"),
        (b"version: -1\ntopic_id: " + TOPIC_ID.encode(), "line 1: unrecognised version -1"),
        (b"version: x\ntopic_id: " + TOPIC_ID.encode(), "line 1"),
        (b"version:0\ntopic_id: " + TOPIC_ID.encode(), "line 1: malformed line"),
        (b"vers: 0\ntopic_id: " + TOPIC_ID.encode(), "line 1: malformed line"),
        (b"version: 0\ntopicid: " + TOPIC_ID.encode(), "line 2: malformed line"),
        (b"version: 0\ntopic_id: nope", "line 2: 'nope' is not a base64 topic id"),
        (b"version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA", "line 2: the topic id is the zero UUID"),
    ],
)
def test_partition_metadata_corruption(tmp_path: Path, content: bytes, problem: str) -> None:
    path = tmp_path / "partition.metadata"
    path.write_bytes(content)
    with pytest.raises(CorruptCheckpointError, match=problem) as info:
        read_partition_metadata(path)
    assert info.value.path == str(path)


def test_partition_metadata_newer_version_and_trailing_newline_are_read(tmp_path: Path) -> None:
    path = tmp_path / "partition.metadata"
    path.write_bytes(b"version: 1\ntopic_id: " + TOPIC_ID.encode() + b"\n")
    assert read_partition_metadata(path) == TOPIC_ID


def test_partition_metadata_writer_rejects_zero_and_malformed(tmp_path: Path) -> None:
    for bad in ("AAAAAAAAAAAAAAAAAAAAAA", "not-an-id"):
        with pytest.raises(ValueError):
            write_partition_metadata(tmp_path / "partition.metadata", bad)


# --- meta.properties ------------------------------------------------------------------------

KAFKA_META = b"""#
#Thu Oct 24 10:00:00 UTC 2024
node.id=1
directory.id=J8aAPcfLQt2bqs1JT_rMgQ
version=1
cluster.id=MkU3OEVBNTcwNTJENDM2Qk
"""


def test_read_meta_properties_as_kafka_writes_it(tmp_path: Path) -> None:
    path = tmp_path / "meta.properties"
    path.write_bytes(KAFKA_META)
    assert read_meta_properties(path) == {
        "node.id": "1",
        "directory.id": "J8aAPcfLQt2bqs1JT_rMgQ",
        "version": "1",
        "cluster.id": "MkU3OEVBNTcwNTJENDM2Qk",
    }


def test_read_java_properties_syntax(tmp_path: Path) -> None:
    path = tmp_path / "meta.properties"
    path.write_bytes(
        b"  ! a comment\n"
        b"a = 1\n"
        b"b:2\n"
        b"c    3  \n"
        b"d\\=e=f\\:g\n"
        b"long = one \\\n"
        b"    two\n"
        b"esc=\\t\\u0041\\n\\q\n"
        b"empty\n"
        b"\n"
        b"latin=\xe9\n"
    )
    assert read_meta_properties(path) == {
        "a": "1",
        "b": "2",
        "c": "3  ",
        "d=e": "f:g",
        "long": "one two",
        "esc": "\tA\nq",
        "empty": "",
        "latin": "\u00e9",
    }


def test_meta_properties_malformed_escape_and_missing(tmp_path: Path) -> None:
    path = tmp_path / "meta.properties"
    path.write_bytes(b"a=\\u12\n")
    with pytest.raises(CorruptCheckpointError, match="line 1"):
        read_meta_properties(path)
    with pytest.raises(FileNotFoundError):
        read_meta_properties(tmp_path / "nope")


def test_write_meta_properties(tmp_path: Path) -> None:
    path = tmp_path / "meta.properties"
    props = {"version": "1", "node.id": "3", "cluster.id": "MkU3OEVBNTcwNTJENDM2Qk"}
    write_meta_properties(path, props)
    assert path.read_bytes() == b"cluster.id=MkU3OEVBNTcwNTJENDM2Qk\nnode.id=3\nversion=1\n"
    assert read_meta_properties(path) == props


@given(props=st.dictionaries(st.text(min_size=1, max_size=10), st.text(max_size=10), max_size=8))
def test_meta_properties_round_trip(tmp_path_factory: pytest.TempPathFactory, props: dict[str, str]) -> None:
    path = tmp_path_factory.mktemp("meta") / "meta.properties"
    write_meta_properties(path, props)
    assert read_meta_properties(path) == props
