"""The KRaft cluster metadata log reader: record values byte by byte, then whole directories
written by tests/cluster_metadata_support.py (cross-checked with kafka-python)."""

from __future__ import annotations

import os
import shutil
import struct
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch

from rlm.errors import CorruptRecordError, NotFoundError
from rlm.log import v2
from rlm.log.checkpoints import uuid_to_topic_id
from rlm.log.cluster_metadata import (
    ClusterMetadata,
    ConfigChange,
    MetadataRecord,
    TopicRemoval,
    decode_record,
    find_cluster_metadata,
    latest_snapshot,
    read_cluster_metadata,
)
from rlm.log.model import CLUSTER_METADATA_DIR, ControlType, Record
from tests.cluster_metadata_support import (
    TS,
    MetadataLogWriter,
    abort_transaction_record,
    batch_spans,
    begin_transaction_record,
    config_record,
    end_transaction_record,
    leader_change_batch,
    metadata_record,
    remove_topic_record,
    snapshot_bytes,
    topic_record,
    write_segment,
)

FOO = uuid.UUID(bytes=bytes(range(16)))
FOO_ID = "AAECAwQFBgcICQoLDA0ODw"  # Kafka's Uuid.toString() of 00 01 .. 0f
BAR = uuid.UUID(bytes=bytes(range(16, 32)))
BAR_ID = "EBESExQVFhcYGRobHB0eHw"
BAZ = uuid.UUID(int=0xBA2)
FOO_AGAIN = uuid.UUID(int=0xF002)
QUX = uuid.UUID(int=0x9C5)
IDS = "000102030405060708090a0b0c0d0e0f"

TOPIC_FOO = bytes.fromhex(f"01 02 00 04 666f6f {IDS} 00")  # frame 1, apiKey 2, v0, "foo", id, no tags
REMOVE_FOO = bytes.fromhex(f"01 09 00 {IDS} 00")  # frame 1, apiKey 9, v0, id, no tags
BEGIN = bytes.fromhex("01 17 00 00")  # apiKey 23, no tagged fields
BEGIN_NAMED = bytes.fromhex("01 17 00 01 00 03 03 6162")  # tag 0, size 3, Name "ab"
END = bytes.fromhex("01 18 00 00")  # apiKey 24
# frame 1, apiKey 4, v0, TOPIC, "foo", "retention.ms", "-1", no tags
CONFIG_FOO = bytes.fromhex("01 04 00 02 04 666f6f 0d 726574656e74696f6e2e6d73 03 2d31 00")
CONFIG_FOO_DELETED = bytes.fromhex("01 04 00 02 04 666f6f 0d 726574656e74696f6e2e6d73 00 00")  # null
ABORT = bytes.fromhex("01 19 00 00")  # apiKey 25


# -- record values ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (TOPIC_FOO, MetadataRecord(2, 0, FOO_ID, "foo")),
        (REMOVE_FOO, MetadataRecord(9, 0, FOO_ID)),
        (BEGIN, MetadataRecord(23, 0)),
        (BEGIN_NAMED, MetadataRecord(23, 0)),
        (END, MetadataRecord(24, 0)),
        (ABORT, MetadataRecord(25, 0)),
        # a TopicRecord with a tagged field (tag 7, 2 bytes) the reader does not know
        (bytes.fromhex(f"01 02 00 04 666f6f {IDS} 01 07 02 abcd"), MetadataRecord(2, 0, FOO_ID, "foo")),
        # RemoveTopicRecord v1: the id first, whatever follows
        (bytes.fromhex(f"01 09 01 {IDS} 00 ffff"), MetadataRecord(9, 1, FOO_ID)),
        # PartitionRecord v1 (apiKey 3): not read past its frame
        (bytes.fromhex("01 03 01 00000000"), MetadataRecord(3, 1)),
        # a name not UTF-8 decodes as Java decodes it
        (bytes.fromhex(f"01 02 00 03 66ff {IDS} 00"), MetadataRecord(2, 0, FOO_ID, "f\ufffd")),
        # apiKey 200 takes two varint bytes (c8 01)
        (bytes.fromhex("01 c801 00 00"), MetadataRecord(200, 0)),
    ],
    ids=[
        "topic",
        "remove",
        "begin",
        "begin-named",
        "end",
        "abort",
        "topic-tagged",
        "remove-v1",
        "other",
        "not-utf8",
        "wide",
    ],
)
def test_record_values_decode(value: bytes, expected: MetadataRecord) -> None:
    assert decode_record(value) == expected


def test_the_helper_encodes_the_vectors() -> None:
    assert topic_record("foo", FOO) == TOPIC_FOO
    assert remove_topic_record(FOO) == REMOVE_FOO
    assert begin_transaction_record() == BEGIN
    assert begin_transaction_record("ab") == BEGIN_NAMED
    assert end_transaction_record() == END
    assert abort_transaction_record() == ABORT


@pytest.mark.parametrize(
    "value",
    [
        None,
        b"",
        bytes.fromhex(f"00 02 00 04 666f6f {IDS} 00"),  # frame version 0 (the 2.8 preview)
        bytes.fromhex(f"02 09 00 {IDS} 00"),  # frame version 2
        bytes.fromhex("01 09 00 0001020304"),  # id cut short
        bytes.fromhex(f"01 02 00 00 {IDS} 00"),  # null name
        bytes.fromhex("01 02 00 7f 666f6f"),  # name runs past the end
        bytes.fromhex(f"01 02 00 04 666f6f {IDS}"),  # no tagged fields
        bytes.fromhex(f"01 02 00 04 666f6f {IDS} 01 00 05 aa"),  # tagged field runs past the end
        TOPIC_FOO + b"\xff",  # bytes after the tagged fields
        bytes.fromhex("01 ffffffffff"),  # apiKey varint too long
    ],
)
def test_malformed_values_raise(value: bytes | None) -> None:
    with pytest.raises(CorruptRecordError):
        decode_record(value)


# -- directories -----------------------------------------------------------------------------


def _removal(topic_id: str, offset: int, *, committed: bool, name: str | None, ts: int = TS) -> TopicRemoval:
    return TopicRemoval(topic_id, offset, ts, committed, name)


def _id(value: uuid.UUID) -> str:
    return uuid_to_topic_id(value)


def test_a_removal_after_the_snapshot_is_pending(tmp_path: Path) -> None:
    with MetadataLogWriter(tmp_path) as log:
        log.append(TOPIC_FOO, topic_record("bar", BAR))
        log.snapshot(2, [TOPIC_FOO, topic_record("bar", BAR)])
        log.append(REMOVE_FOO, timestamp=TS + 5)
    meta = read_cluster_metadata(log.path)
    assert meta == ClusterMetadata(
        path=log.path,
        snapshot_end_offset=2,
        end_offset=3,
        removals={FOO_ID: _removal(FOO_ID, 2, committed=False, name="foo", ts=TS + 5)},
        topics={BAR_ID: "bar"},
        unreadable=0,
    )


def test_a_removal_below_the_snapshot_is_committed_with_its_name(tmp_path: Path) -> None:
    with MetadataLogWriter(tmp_path) as log:
        log.append(TOPIC_FOO)
        log.append(topic_record("bar", BAR))
        log.roll()
        log.append(REMOVE_FOO, timestamp=TS + 7)
        log.snapshot(3, [topic_record("bar", BAR)])
        log.append(topic_record("baz", BAZ))
    meta = read_cluster_metadata(log.path)
    assert meta.snapshot_end_offset == 3
    assert meta.removals == {FOO_ID: _removal(FOO_ID, 2, committed=True, name="foo", ts=TS + 7)}
    assert meta.topics == {BAR_ID: "bar", _id(BAZ): "baz"}
    assert (meta.end_offset, meta.unreadable) == (4, 0)


def test_a_committed_removal_whose_topic_record_is_gone_has_no_name(tmp_path: Path) -> None:
    # The segments below offset 10 were deleted after an earlier snapshot.
    with MetadataLogWriter(tmp_path, start_offset=10) as log:
        log.append(REMOVE_FOO)
        log.snapshot(11, [])
    meta = read_cluster_metadata(log.path)
    assert meta.removals == {FOO_ID: _removal(FOO_ID, 10, committed=True, name=None)}
    assert (meta.topics, meta.end_offset, meta.unreadable) == ({}, 11, 0)


def test_a_topic_created_again_under_its_name_has_a_new_id(tmp_path: Path) -> None:
    with MetadataLogWriter(tmp_path) as log:
        log.append(TOPIC_FOO)
        log.append(REMOVE_FOO)
        log.append(topic_record("foo", FOO_AGAIN))
    meta = read_cluster_metadata(log.path)
    assert meta.snapshot_end_offset is None
    assert meta.removals == {FOO_ID: _removal(FOO_ID, 1, committed=False, name="foo")}
    assert meta.topics == {_id(FOO_AGAIN): "foo"}


def test_a_snapshot_image_is_replayed_whole(tmp_path: Path) -> None:
    bad = metadata_record(2, 0, b"\x7f", frame_version=0)
    with MetadataLogWriter(tmp_path) as log:
        log.append(TOPIC_FOO, topic_record("bar", BAR), REMOVE_FOO, topic_record("baz", BAZ), bad)
        log.snapshot(5, [TOPIC_FOO, topic_record("bar", BAR), REMOVE_FOO, topic_record("baz", BAZ), bad])
    meta = read_cluster_metadata(log.path)
    # below the snapshot only the log's removal counts; each bad record is counted where it is
    assert meta.topics == {BAR_ID: "bar", _id(BAZ): "baz"}
    assert meta.removals == {FOO_ID: _removal(FOO_ID, 2, committed=True, name="foo")}
    assert meta.unreadable == 2  # the bad record of the snapshot and of the log


def test_the_latest_snapshot_is_the_highest_end_offset_then_epoch(tmp_path: Path) -> None:
    with MetadataLogWriter(tmp_path, leader_epoch=3) as log:
        log.append(TOPIC_FOO, topic_record("bar", BAR))
        log.snapshot(2, [TOPIC_FOO], epoch=1)
        log.snapshot(2, [topic_record("bar", BAR)], epoch=3)
        log.snapshot(1, [TOPIC_FOO], epoch=9)
    meta = read_cluster_metadata(log.path)
    assert (meta.snapshot_end_offset, meta.topics) == (2, {BAR_ID: "bar"})


def test_part_and_deleted_snapshots_are_ignored(tmp_path: Path) -> None:
    with MetadataLogWriter(tmp_path) as log:
        log.append(TOPIC_FOO)
        log.append(REMOVE_FOO)
        log.snapshot(1, [TOPIC_FOO])
        log.snapshot(2, [], suffix=".checkpoint.part")
        log.snapshot(2, [], epoch=2, suffix=".checkpoint.deleted")
    meta = read_cluster_metadata(log.path)
    assert meta.snapshot_end_offset == 1
    assert meta.removals == {FOO_ID: _removal(FOO_ID, 1, committed=False, name="foo")}
    assert meta.unreadable == 0


def _truncate(path: Path, size: int) -> None:
    os.truncate(path, size)


def _flip(path: Path, position: int) -> None:
    data = bytearray(path.read_bytes())
    data[position] ^= 0xFF
    path.write_bytes(bytes(data))


def _cut_footer(path: Path) -> None:
    position, _ = batch_spans(path)[-1]
    _truncate(path, position)


def _flip_data(path: Path) -> None:
    position, size = batch_spans(path)[1]
    _flip(path, position + size - 1)


def _drop_header(path: Path) -> None:
    _, size = batch_spans(path)[0]
    path.write_bytes(path.read_bytes()[size:])


def _batch_after_footer(path: Path) -> None:
    with path.open("ab") as f:
        f.write(v2.encode_v2_batch([Record(9, TS, None, TOPIC_FOO)]))


@pytest.mark.parametrize(
    "damage",
    [_cut_footer, _flip_data, _drop_header, _batch_after_footer],
    ids=["no-footer", "crc", "no-header", "after-footer"],
)
def test_a_damaged_snapshot_falls_back_to_an_older_one(
    tmp_path: Path, damage: Callable[[Path], None]
) -> None:
    with MetadataLogWriter(tmp_path) as log:
        log.append(TOPIC_FOO)
        log.append(topic_record("bar", BAR))
        log.append(REMOVE_FOO)
        log.append(topic_record("baz", BAZ))
        log.snapshot(2, [TOPIC_FOO, topic_record("bar", BAR)])
        damage(log.snapshot(4, [topic_record("bar", BAR), topic_record("baz", BAZ)]))
    meta = read_cluster_metadata(log.path)
    assert meta.snapshot_end_offset == 2
    assert meta.removals == {FOO_ID: _removal(FOO_ID, 2, committed=False, name="foo")}
    assert meta.topics == {BAR_ID: "bar", _id(BAZ): "baz"}
    assert (meta.end_offset, meta.unreadable) == (4, 1)


def test_no_readable_snapshot_replays_the_log_alone(tmp_path: Path) -> None:
    with MetadataLogWriter(tmp_path) as log:
        log.append(TOPIC_FOO)
        _cut_footer(log.snapshot(1, [TOPIC_FOO]))
    meta = read_cluster_metadata(log.path)
    assert (meta.snapshot_end_offset, meta.topics, meta.unreadable) == (None, {FOO_ID: "foo"}, 1)


def _torn(path: Path) -> None:
    _truncate(path, path.stat().st_size - 5)


def _crc_at_tail(path: Path) -> None:
    _flip(path, path.stat().st_size - 1)


@pytest.mark.parametrize("damage", [_torn, _crc_at_tail], ids=["torn", "crc"])
def test_a_bad_last_batch_of_the_last_segment_ends_reading_quietly(
    tmp_path: Path, damage: Callable[[Path], None]
) -> None:
    with MetadataLogWriter(tmp_path) as log:
        log.append(TOPIC_FOO)
        log.roll()
        log.append(topic_record("bar", BAR))
        log.append(REMOVE_FOO)
    damage(log.last_segment())
    meta = read_cluster_metadata(log.path)
    assert (meta.removals, meta.topics) == ({}, {FOO_ID: "foo", BAR_ID: "bar"})
    assert (meta.end_offset, meta.unreadable) == (2, 0)


def _damage_first_batch_of_last(log: MetadataLogWriter) -> None:
    position, size = batch_spans(log.last_segment())[0]
    _flip(log.last_segment(), position + size - 1)


def _damage_tail_of_first(log: MetadataLogWriter) -> None:
    _torn(sorted(log.path.glob("*.log"))[0])


def _junk_after_first(log: MetadataLogWriter) -> None:
    with sorted(log.path.glob("*.log"))[0].open("ab") as f:
        f.write(bytes(10))  # no offset is missing, but the segment does not end with a whole batch


@pytest.mark.parametrize(
    "damage",
    [_damage_first_batch_of_last, _damage_tail_of_first, _junk_after_first],
    ids=["inside-last", "tail-of-earlier", "junk-after-earlier"],
)
def test_a_bad_batch_elsewhere_stops_reading_and_counts(
    tmp_path: Path, damage: Callable[[MetadataLogWriter], None]
) -> None:
    with MetadataLogWriter(tmp_path) as log:
        log.append(TOPIC_FOO)
        log.append(topic_record("bar", BAR))
        log.roll()
        log.append(REMOVE_FOO)
        log.append(remove_topic_record(BAR))
    damage(log)
    meta = read_cluster_metadata(log.path)
    assert meta.removals == {}
    assert meta.unreadable == 1
    assert FOO_ID in meta.topics


def test_a_gap_between_the_snapshot_and_the_log_stops_reading(tmp_path: Path) -> None:
    # The newest snapshot (end 5) is damaged and the segments below it were deleted already.
    with MetadataLogWriter(tmp_path, start_offset=5) as log:
        log.append(REMOVE_FOO)
        log.snapshot(3, [TOPIC_FOO])
        _cut_footer(log.snapshot(5, []))
    meta = read_cluster_metadata(log.path)
    assert (meta.snapshot_end_offset, meta.end_offset) == (3, 3)
    assert (meta.removals, meta.topics, meta.unreadable) == ({}, {FOO_ID: "foo"}, 2)


def test_an_aborted_transaction_drops_its_removal(tmp_path: Path) -> None:
    with MetadataLogWriter(tmp_path) as log:
        log.append(TOPIC_FOO, topic_record("bar", BAR))  # 0-1
        log.append(BEGIN, REMOVE_FOO)  # 2-3
        log.append(ABORT)  # 4
        log.append(topic_record("qux", QUX), END)  # 5-6: no transaction open
        log.append(BEGIN_NAMED)  # 7
        log.append(remove_topic_record(BAR), timestamp=TS + 1)  # 8
        log.append(END)  # 9
        log.append(BEGIN, topic_record("baz", BAZ))  # 10-11, never ended
    meta = read_cluster_metadata(log.path)
    assert meta.removals == {BAR_ID: _removal(BAR_ID, 8, committed=False, name="bar", ts=TS + 1)}
    assert meta.topics == {FOO_ID: "foo", _id(QUX): "qux"}
    assert (meta.end_offset, meta.unreadable) == (12, 0)


def test_an_abort_whose_begin_was_deleted_drops_what_the_log_applied(tmp_path: Path) -> None:
    # The segment holding the Begin (offset 9) is gone: the log now starts inside the transaction.
    with MetadataLogWriter(tmp_path, start_offset=10) as log:
        log.append(REMOVE_FOO)  # 10
        log.append(ABORT)  # 11
        log.append(remove_topic_record(BAR))  # 12
        log.append(END)  # 13: no transaction open, nothing to drop
        log.snapshot(12, [TOPIC_FOO])
    meta = read_cluster_metadata(log.path)
    assert meta.removals == {BAR_ID: _removal(BAR_ID, 12, committed=False, name=None)}
    assert (meta.topics, meta.unreadable) == ({FOO_ID: "foo"}, 0)


def test_an_abort_whose_begin_is_unreadable_drops_what_followed_it(tmp_path: Path) -> None:
    with MetadataLogWriter(tmp_path) as log:
        log.append(TOPIC_FOO, topic_record("bar", BAR), remove_topic_record(BAR), BEGIN, END)  # 0-4
        log.append(metadata_record(23, 0, b"\x00", frame_version=0), REMOVE_FOO, ABORT)  # 5-7
    meta = read_cluster_metadata(log.path)
    assert meta.removals == {BAR_ID: _removal(BAR_ID, 2, committed=False, name="bar")}
    assert meta.unreadable == 1


def test_a_transaction_begun_again_drops_the_open_one(tmp_path: Path) -> None:
    with MetadataLogWriter(tmp_path) as log:
        log.append(TOPIC_FOO, BEGIN, REMOVE_FOO, BEGIN, END)
    meta = read_cluster_metadata(log.path)
    assert (meta.removals, meta.topics) == ({}, {FOO_ID: "foo"})


def test_the_first_removal_of_an_id_is_kept(tmp_path: Path) -> None:
    with MetadataLogWriter(tmp_path) as log:
        log.append(TOPIC_FOO, REMOVE_FOO)
        log.snapshot(2, [])
        log.append(REMOVE_FOO)
    meta = read_cluster_metadata(log.path)
    assert meta.removals == {FOO_ID: _removal(FOO_ID, 1, committed=True, name="foo")}


def test_control_batches_in_the_log_are_skipped(tmp_path: Path) -> None:
    path = tmp_path / CLUSTER_METADATA_DIR
    records = [Record(1, TS, None, TOPIC_FOO), Record(2, TS + 3, None, REMOVE_FOO)]
    write_segment(path, [leader_change_batch(0, leader_id=1, epoch=1), v2.encode_v2_batch(records)])
    meta = read_cluster_metadata(path)
    assert meta.removals == {FOO_ID: _removal(FOO_ID, 2, committed=False, name="foo", ts=TS + 3)}
    assert (meta.topics, meta.end_offset, meta.unreadable) == ({}, 3, 0)


def test_records_that_do_not_parse_are_skipped_and_counted(tmp_path: Path) -> None:
    with MetadataLogWriter(tmp_path) as log:
        log.append(metadata_record(2, 0, b"\x04foo", frame_version=0), TOPIC_FOO, REMOVE_FOO[:8])
    meta = read_cluster_metadata(log.path)
    assert (meta.topics, meta.removals, meta.unreadable) == ({FOO_ID: "foo"}, {}, 2)


def test_an_empty_directory_has_nothing(tmp_path: Path) -> None:
    path = tmp_path / CLUSTER_METADATA_DIR
    path.mkdir()
    assert read_cluster_metadata(path) == ClusterMetadata(path, None, 0, {}, {}, 0)


def test_a_missing_directory_is_not_found(tmp_path: Path) -> None:
    path = tmp_path / CLUSTER_METADATA_DIR
    with pytest.raises(NotFoundError, match=str(path)):
        read_cluster_metadata(path)


def test_find_cluster_metadata(tmp_path: Path) -> None:
    a, b, c = (tmp_path / name for name in "abc")
    for log_dir in (a, b, c):
        log_dir.mkdir()
    for log_dir in (b, c):
        (log_dir / CLUSTER_METADATA_DIR).mkdir()
    (a / CLUSTER_METADATA_DIR).write_text("not a directory")
    assert find_cluster_metadata([a, b, c]) == b / CLUSTER_METADATA_DIR
    assert find_cluster_metadata([a, b, c], metadata_log_dir=c) == c / CLUSTER_METADATA_DIR
    assert find_cluster_metadata([b, c], metadata_log_dir=a) is None
    assert find_cluster_metadata([a]) is None
    assert find_cluster_metadata([]) is None


# -- the helper, cross-checked ---------------------------------------------------------------


def _kafka_python_batches(path: Path) -> list[DefaultRecordBatch]:
    data = path.read_bytes()
    return [DefaultRecordBatch(data[pos : pos + size]) for pos, size in batch_spans(path)]


def test_kafka_python_reads_what_the_helper_writes(tmp_path: Path) -> None:
    values = [TOPIC_FOO, topic_record("bar", BAR), REMOVE_FOO]
    with MetadataLogWriter(tmp_path, leader_epoch=4) as log:
        log.append(*values[:2])
        log.append(values[2], timestamp=TS + 9)
        snapshot = log.snapshot(3, values[1:2])

    batches = _kafka_python_batches(log.last_segment())
    assert [b.base_offset for b in batches] == [0, 2]
    assert all(b.validate_crc() and b.leader_epoch == 4 and not b.is_control_batch for b in batches)
    assert [(r.offset, r.key, r.value) for b in batches for r in b] == [
        (i, None, v) for i, v in enumerate(values)
    ]
    assert batches[1].max_timestamp == TS + 9

    batches = _kafka_python_batches(snapshot)
    assert all(b.validate_crc() and b.leader_epoch == 4 for b in batches)
    assert [b.is_control_batch for b in batches] == [True, False, True]
    header, data, footer = ([(r.offset, r) for r in b] for b in batches)
    assert [(offset, r.type) for offset, r in header] == [(0, ControlType.SNAPSHOT_HEADER)]
    assert [(offset, r.value) for offset, r in data] == [(1, values[1])]
    assert [(offset, r.type) for offset, r in footer] == [(2, ControlType.SNAPSHOT_FOOTER)]
    # SnapshotHeaderRecord v0: Version 0, LastContainedLogTimestamp, no tagged fields
    assert header[0][1].value == struct.pack(">hqb", 0, TS, 0)
    assert snapshot.read_bytes() == snapshot_bytes(values[1:2], epoch=4)


def test_a_removal_in_a_transaction_is_committed_with_the_transactions_end(tmp_path: Path) -> None:
    with MetadataLogWriter(tmp_path) as log:
        log.append(TOPIC_FOO, BEGIN, REMOVE_FOO)  # 0-2
        log.append(END)  # 3
        log.snapshot(3, [TOPIC_FOO])  # the image of 0..2: the transaction still open, foo live
    pending = read_cluster_metadata(log.path)
    log.snapshot(4, [])
    committed = read_cluster_metadata(log.path)

    assert pending.removals == {FOO_ID: _removal(FOO_ID, 2, committed=False, name="foo")}
    assert committed.removals == {FOO_ID: _removal(FOO_ID, 2, committed=True, name="foo")}
    assert latest_snapshot(log.path) == "00000000000000000004-0000000001.checkpoint"


#: The first batch of a metadata log a Kafka 3.9 broker wrote (``metadata.version`` 20), byte for
#: byte as a public dissection of one shows it: Kafka's own CRC, one FeatureLevelRecord.
KAFKA_WRITTEN_BATCH = bytes.fromhex(
    "0000000000000000" "0000004f" "00000001" "02" "b069457c" "0000" "00000000"
    "00000191e05af818" "00000191e05af818" "ffffffffffffffff" "ffff" "ffffffff" "00000001"
    "3a000000012e" "010c0011" + b"metadata.version".hex() + "0014" "00" "00"
)  # fmt: skip


def test_a_batch_kafka_wrote_reads_whole(tmp_path: Path) -> None:
    directory = tmp_path / CLUSTER_METADATA_DIR
    directory.mkdir()
    (directory / "00000000000000000000.log").write_bytes(KAFKA_WRITTEN_BATCH)

    meta = read_cluster_metadata(directory)

    assert (meta.end_offset, meta.unreadable, dict(meta.removals), dict(meta.topics)) == (1, 0, {}, {})
    assert decode_record(KAFKA_WRITTEN_BATCH[-24:-1]) == MetadataRecord(api_key=12, version=0)


@pytest.fixture(scope="module")
def busy_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A metadata log with every case at once: committed and pending removals, an aborted one,
    a committed transaction, two segments and two snapshots."""
    root = tmp_path_factory.mktemp("busy")
    with MetadataLogWriter(root) as log:
        log.append(TOPIC_FOO, topic_record("bar", BAR), topic_record("qux", QUX))  # 0-2
        log.snapshot(3, [TOPIC_FOO, topic_record("bar", BAR), topic_record("qux", QUX)])
        log.append(BEGIN, remove_topic_record(QUX))  # 3-4
        log.append(ABORT)  # 5
        log.append(REMOVE_FOO)  # 6
        log.roll()
        log.append(BEGIN_NAMED, topic_record("baz", BAZ), END)  # 7-9
        log.snapshot(10, [topic_record("bar", BAR), topic_record("qux", QUX), topic_record("baz", BAZ)])
        log.append(remove_topic_record(BAR))  # 10: pending
    return root / CLUSTER_METADATA_DIR


def test_the_busy_log_reads_as_written(busy_log: Path) -> None:
    meta = read_cluster_metadata(busy_log)
    assert {r.topic_id: r.committed for r in meta.removals.values()} == {FOO_ID: True, BAR_ID: False}
    assert (meta.snapshot_end_offset, meta.end_offset, meta.unreadable) == (10, 11, 0)


@given(data=st.data())
def test_damage_anywhere_never_raises_nor_invents_a_removal(busy_log: Path, data: st.DataObject) -> None:
    """Bytes flipped or cut anywhere in any file: the reader never raises, and every removal it
    finds is one the undamaged log holds, committed only if it was committed there."""
    whole = read_cluster_metadata(busy_log)
    names = sorted(p.name for p in busy_log.iterdir() if p.suffix in (".log", ".checkpoint"))
    name = data.draw(st.sampled_from(names))
    with tempfile.TemporaryDirectory() as scratch:
        copy = Path(shutil.copytree(busy_log, Path(scratch) / CLUSTER_METADATA_DIR))
        target = copy / name
        raw = bytearray(target.read_bytes())
        if data.draw(st.booleans()):
            at = data.draw(st.integers(0, len(raw) - 1))
            raw[at] ^= data.draw(st.integers(1, 255))
        else:
            del raw[data.draw(st.integers(0, len(raw) - 1)) :]
        target.write_bytes(bytes(raw))

        damaged = read_cluster_metadata(copy)

    for topic_id, removal in damaged.removals.items():
        assert topic_id in whole.removals
        assert not removal.committed or whole.removals[topic_id].committed


@pytest.mark.parametrize("moved_to", [0, 2])
def test_a_batch_whose_base_offset_is_out_of_place_stops_reading(tmp_path: Path, moved_to: int) -> None:
    # The base offset lies outside the CRC: damaged, it must not move a pending removal below the
    # snapshot's end (0: behind the batch before it) nor leave a hole (2).
    with MetadataLogWriter(tmp_path) as log:
        log.append(TOPIC_FOO)  # 0
        log.snapshot(1, [TOPIC_FOO])
        log.append(REMOVE_FOO)  # 1: pending
        log.append(topic_record("bar", BAR))  # 2
    segment = log.last_segment()
    _, (position, _), _ = batch_spans(segment)
    raw = bytearray(segment.read_bytes())
    struct.pack_into(">q", raw, position, moved_to)
    segment.write_bytes(bytes(raw))

    meta = read_cluster_metadata(log.path)

    assert (dict(meta.removals), meta.end_offset, meta.unreadable) == ({}, 1, 1)


# -- config overrides (ConfigRecord) --------------------------------------------------------


def test_config_records_decode() -> None:
    expected = MetadataRecord(4, 0, config=ConfigChange(2, "foo", "retention.ms", "-1"))
    assert decode_record(CONFIG_FOO) == expected
    assert decode_record(CONFIG_FOO_DELETED).config == ConfigChange(2, "foo", "retention.ms", None)
    broker_default = decode_record(config_record("", "log.retention.ms", "5", resource_type=4))
    assert broker_default.config == ConfigChange(4, "", "log.retention.ms", "5")
    assert config_record("foo", "retention.ms", "-1") == CONFIG_FOO
    assert config_record("foo", "retention.ms", None) == CONFIG_FOO_DELETED


@pytest.mark.parametrize(
    "value",
    [
        bytes.fromhex("01 04 00"),  # no ResourceType
        bytes.fromhex("01 04 00 02 00 01 00 00"),  # null ResourceName
        bytes.fromhex("01 04 00 02 04 666f6f 00 00 00"),  # null Name
        bytes.fromhex("01 04 00 02 04 666f6f 03 6162 7f 00"),  # Value runs past the end
        bytes.fromhex("01 04 00 02 04 666f6f 03 6162 02 61"),  # no tagged fields
        CONFIG_FOO + b"\x00",  # bytes after the tagged fields
    ],
)
def test_malformed_config_records_raise(value: bytes) -> None:
    with pytest.raises(CorruptRecordError):
        decode_record(value)


def test_config_overrides_replay_snapshot_then_log(tmp_path: Path) -> None:
    with MetadataLogWriter(tmp_path) as log:
        log.append(TOPIC_FOO, config_record("foo", "retention.ms", "1000"))  # 0-1
        log.append(topic_record("bar", BAR), config_record("bar", "retention.bytes", "5"))  # 2-3
        log.snapshot(
            4,
            [
                TOPIC_FOO,
                config_record("foo", "retention.ms", "1000"),
                topic_record("bar", BAR),
                config_record("bar", "retention.bytes", "5"),
                config_record("", "log.retention.ms", "9", resource_type=4),  # a broker's: not a topic's
            ],
        )
        log.append(config_record("foo", "retention.ms", "-1"), config_record("bar", "retention.bytes", None))
    meta = read_cluster_metadata(log.path)
    assert meta.committed_configs == {"foo": {"retention.ms": "1000"}, "bar": {"retention.bytes": "5"}}
    assert meta.configs == {"foo": {"retention.ms": "-1"}}  # bar's only override deleted
    assert meta.unreadable == 0


def test_a_log_without_a_snapshot_has_only_pending_configs(tmp_path: Path) -> None:
    with MetadataLogWriter(tmp_path) as log:
        log.append(TOPIC_FOO, config_record("foo", "retention.ms", "-1"))
    meta = read_cluster_metadata(log.path)
    assert (meta.committed_configs, meta.configs) == ({}, {"foo": {"retention.ms": "-1"}})


def test_a_removed_topic_loses_its_configs(tmp_path: Path) -> None:
    with MetadataLogWriter(tmp_path) as log:
        log.append(TOPIC_FOO, config_record("foo", "retention.ms", "-1"))  # 0-1
        log.snapshot(2, [TOPIC_FOO, config_record("foo", "retention.ms", "-1")])
        log.append(REMOVE_FOO)  # 2
        log.append(topic_record("foo", FOO_AGAIN))  # 3: created again, no override
    meta = read_cluster_metadata(log.path)
    assert meta.committed_configs == {"foo": {"retention.ms": "-1"}}
    assert meta.configs == {}


def test_config_records_of_an_aborted_transaction_do_not_count(tmp_path: Path) -> None:
    with MetadataLogWriter(tmp_path) as log:
        log.append(TOPIC_FOO)
        log.append(BEGIN, config_record("foo", "retention.ms", "1"), ABORT)
        log.append(BEGIN, config_record("foo", "retention.bytes", "2"), END)
    assert read_cluster_metadata(log.path).configs == {"foo": {"retention.bytes": "2"}}


def test_undecodable_config_records_are_skipped_and_counted(tmp_path: Path) -> None:
    with MetadataLogWriter(tmp_path) as log:
        log.append(TOPIC_FOO, CONFIG_FOO[:-3], config_record("foo", "retention.bytes", "7"))
    meta = read_cluster_metadata(log.path)
    assert (meta.configs, meta.unreadable) == ({"foo": {"retention.bytes": "7"}}, 1)
