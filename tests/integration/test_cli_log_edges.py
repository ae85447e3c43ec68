"""``rlm log`` commands on hand-made segments: the edges a generated log directory does not reach."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from rlm.cli import main
from rlm.log.checkpoints import write_offset_checkpoint
from rlm.log.index import OffsetIndex, TimeIndex
from rlm.log.model import ControlType, Record
from rlm.log.txnindex import AbortedTxn, TransactionIndex
from rlm.log.v2 import encode_control_batch, encode_v2_batch

INT32_MAX = 2**31 - 1


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def _batch(base_sequence: int, records: int, *, producer_id: int = 7) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=producer_id,
        producer_epoch=0,
        base_sequence=base_sequence,
        batch_size=1 << 20,
    )
    for i in range(records):
        builder.append(i, timestamp=1_700_000_000_000 + i, key=None, value=b"v", headers=[])
    return bytes(builder.build())


def test_dump_gives_the_last_sequence_wrapped_as_kafka_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Sequences wrap from INT32_MAX to 0 (DefaultRecordBatch.incrementSequence): a batch of five
    # from INT32_MAX - 1 holds the sequences INT32_MAX - 1, INT32_MAX, 0, 1, 2.
    log = tmp_path / "t-0" / "00000000000000000000.log"
    log.parent.mkdir()
    log.write_bytes(_batch(INT32_MAX - 1, 5))
    code, out, _ = _run(capsys, "log", "dump", str(log), "--json")
    assert code == 0
    batch = json.loads(out)
    assert batch["base_sequence"] == INT32_MAX - 1
    assert batch["last_sequence"] == 2
    code, out, _ = _run(capsys, "log", "dump", str(log))
    assert "last_sequence: 2 " in out


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("-5", "argument --index-interval-bytes: must be from 0 to 2147483647, not -5"),
        ("4k", "argument --index-interval-bytes: '4k' is not an integer"),
    ],
)
def test_reindex_refuses_an_index_interval_kafka_would_not_take(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str, message: str
) -> None:
    # Kafka's index.interval.bytes is at least 0; a negative one indexed every batch from
    # position 0, and the broker's indexes were rewritten with it.
    partition = tmp_path / "t-0"
    partition.mkdir()
    (partition / "00000000000000000000.log").write_bytes(_batch(0, 3) + _batch(3, 3))
    with pytest.raises(SystemExit) as exited:
        main(["log", "reindex", str(partition), "--force", "--index-interval-bytes", value])
    assert exited.value.code == 2
    assert message in capsys.readouterr().err
    assert sorted(p.name for p in partition.iterdir()) == ["00000000000000000000.log"]


def _segment_with_a_marker_kafka_cannot_read(partition: Path) -> int:
    """Two segments; the first holds a transaction whose COMMIT marker has a 2-byte key (its CRC
    matches: only reading the marker tells), then one more batch. Both have their indexes, as
    the broker wrote them. Returns the marker batch's position."""
    first = encode_v2_batch(
        [Record(0, 1000, b"k", b"v"), Record(1, 2000, b"k", b"v")],
        producer_id=3,
        producer_epoch=0,
        base_sequence=0,
        is_transactional=True,
    )
    marker = encode_v2_batch(
        [Record(2, 2500, b"\x00\x00", b"\x00\x00\x00\x00\x00\x00")],
        producer_id=3,
        producer_epoch=0,
        is_transactional=True,
        is_control=True,
    )
    last = encode_v2_batch([Record(3, 3000, b"k", b"v")])
    partition.mkdir()
    (partition / "00000000000000000000.log").write_bytes(first + marker + last)
    (partition / "00000000000000000004.log").write_bytes(encode_v2_batch([Record(4, 4000, b"k", b"v")]))
    for base, (timestamp, offset) in ((0, (3000, 3)), (4, (4000, 4))):
        OffsetIndex(base).write(partition / f"{base:020d}.index")
        times = TimeIndex(base)
        times.maybe_append(timestamp, offset, skip_full_check=True)
        times.write(partition / f"{base:020d}.timeindex")
    return len(first)


@pytest.mark.parametrize("shallow", [False, True])
def test_verify_reports_a_transaction_marker_kafka_recovery_cannot_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], shallow: bool
) -> None:
    # Kafka's recovery reads every transaction marker (ProducerAppendInfo) and truncates the
    # segment at one it cannot read; reindex leaves such a segment's indexes as they are. Verify
    # passed it as sound.
    partition = tmp_path / "t-0"
    position = _segment_with_a_marker_kafka_cannot_read(partition)
    log = partition / "00000000000000000000.log"
    code, _, err = _run(capsys, "log", "verify", str(partition), *(["--shallow"] if shallow else []))
    assert code == 1
    assert f"{log}: position {position}: control record at offset 2 has a short key" in err
    code, _, err = _run(capsys, "log", "reindex", str(partition))
    assert code == 1
    assert f"{log}: position {position}: control record at offset 2 has a short key" in err


def test_dump_names_control_records_as_kafka_dump_log_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # kafka-dump-log: "endTxnMarker: COMMIT coordinatorEpoch: 5" for a transaction marker,
    # "controlType: LEADER_CHANGE(2)" for any other control record (KRaft's metadata log).
    log = tmp_path / "t-0" / "00000000000000000000.log"
    log.parent.mkdir()
    commit = encode_control_batch(
        0, ControlType.COMMIT, producer_id=3, producer_epoch=0, timestamp=1000, coordinator_epoch=5
    )
    leader_change = encode_v2_batch([Record(1, 2000, b"\x00\x00\x00\x02", b"\x00\x00")], is_control=True)
    log.write_bytes(commit + leader_change)
    code, out, _ = _run(capsys, "log", "dump", str(log), "--records")
    assert code == 0
    records = [line for line in out.splitlines() if line.startswith("| ")]
    assert records[0].endswith(" endTxnMarker: COMMIT coordinatorEpoch: 5")
    assert records[1].endswith(" controlType: LEADER_CHANGE(2)")


def test_dump_names_the_file_and_position_of_a_marker_it_cannot_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    partition = tmp_path / "t-0"
    position = _segment_with_a_marker_kafka_cannot_read(partition)
    log = partition / "00000000000000000000.log"
    code, _, err = _run(capsys, "log", "dump", str(log), "--records")
    assert code == 1
    assert f"rlm: error: {log}, position {position}: control record at offset 2 has a short key" in err


def test_verify_of_a_directory_that_is_no_log_directory_verifies_nothing_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The parent of the broker's log directories (a path one level too high), or an empty
    # directory: nothing in it is the broker's, and "OK" told the operator it was verified.
    partition = tmp_path / "data" / "t-0"
    partition.mkdir(parents=True)
    (partition / "00000000000000000000.log").write_bytes(_batch(0, 3))
    (tmp_path / "data" / "meta.properties").write_text("version=1\nnode.id=1\n")
    code, out, err = _run(capsys, "log", "verify", str(tmp_path))
    assert code == 1 and out == ""
    assert f"rlm: error: {tmp_path} is not a Kafka log directory" in err
    empty = tmp_path / "empty"
    empty.mkdir()
    code, out, err = _run(capsys, "log", "verify", str(empty))
    assert code == 1 and out == ""
    assert f"rlm: error: {empty} is not a Kafka log directory" in err


def test_verify_of_a_log_directory_holding_no_partition_yet_is_ok(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "meta.properties").write_text("version=1\nnode.id=1\n")
    code, out, _ = _run(capsys, "log", "verify", str(tmp_path))
    assert code == 0 and out == f"{tmp_path}: OK\n"


def test_find_offset_answers_nothing_at_or_above_the_high_watermark(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Kafka's ListOffsets answers a consumer's timestamp (and MAX_TIMESTAMP) only with an offset
    # below the last fetchable offset, the high watermark its LATEST gives: records above it are
    # not committed and may be truncated away.
    partition = tmp_path / "t-0"
    partition.mkdir()
    batches = [
        encode_v2_batch([Record(base + i, ts, b"k", b"v") for i in range(3)])
        for base, ts in ((0, 1000), (3, 2000), (6, 3000))
    ]
    (partition / "00000000000000000000.log").write_bytes(b"".join(batches))
    write_offset_checkpoint(tmp_path / "replication-offset-checkpoint", {("t", 0): 6})

    def find(timestamp: str) -> dict[str, int]:
        code, out, _ = _run(capsys, "log", "find-offset", str(partition), "--timestamp", timestamp, "--json")
        assert code == 0
        answer: dict[str, int] = json.loads(out)
        return answer

    assert find("latest")["offset"] == 6
    assert find("1500") == {"offset": 3, "timestamp": 2000, "leader_epoch": -1}
    assert find("2500") == {"offset": -1, "timestamp": -1, "leader_epoch": -1}
    assert find("max-timestamp") == {"offset": -1, "timestamp": -1, "leader_epoch": -1}
    write_offset_checkpoint(tmp_path / "replication-offset-checkpoint", {("t", 0): 9})
    assert find("2500")["offset"] == 6
    assert find("max-timestamp")["offset"] == 6


def test_verify_of_a_log_directory_reports_a_directory_the_broker_would_refuse_to_start_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Kafka's LogManager fails the whole log directory on any directory in it not named as a
    # partition's (UnifiedLog.parseTopicPartitionName): an ext4 lost+found, a stray copy.
    (tmp_path / "meta.properties").write_text("version=1\nnode.id=1\n")
    partition = tmp_path / "t-0"
    partition.mkdir()
    (partition / "00000000000000000000.log").write_bytes(_batch(0, 3))
    assert _run(capsys, "log", "reindex", str(partition))[0] == 0
    for kept in ("t-1.0123456789abcdef0123456789abcdef-delete", "remote-log-index-cache", "t-2"):
        (tmp_path / kept).mkdir()
    (tmp_path / "notes.txt").write_text("files are not looked at")
    code, out, err = _run(capsys, "log", "verify", str(tmp_path))
    assert code == 0, err
    for refused in ("lost+found", "t-0-copy", "t-x.y-future"):
        (tmp_path / refused).mkdir()
    code, out, err = _run(capsys, "log", "verify", str(tmp_path))
    assert code == 1 and out == ""
    *problems, total = err.splitlines()
    assert total == f"3 problem(s) found in {tmp_path}"
    for refused in ("lost+found", "t-0-copy", "t-x.y-future"):
        assert any(p.startswith(f"{tmp_path / refused}: not named TOPIC-PARTITION") for p in problems)


def _partition_after_retention(log_dir: Path) -> Path:
    """A partition whose first segment (base 5) holds the ABORT marker of a transaction begun at
    offset 2, in a segment retention deleted; the broker indexed the abort in the segment's
    transaction index. Like a broker's, the first segment has no producer snapshot (Kafka keeps
    those of the last two segments only)."""
    partition = log_dir / "t-0"
    partition.mkdir()
    abort = encode_control_batch(5, ControlType.ABORT, producer_id=3, producer_epoch=0, timestamp=5000)
    data = encode_v2_batch([Record(6, 6000, b"k", b"v")])
    (partition / "00000000000000000005.log").write_bytes(abort + data)
    (partition / "00000000000000000007.log").write_bytes(encode_v2_batch([Record(7, 7000, b"k", b"v")]))
    txns = TransactionIndex(5)
    txns.append(AbortedTxn(3, 2, 5, 6))
    txns.write(partition / "00000000000000000005.txnindex")
    for base, (timestamp, offset) in ((5, (6000, 6)), (7, (7000, 7))):
        OffsetIndex(base).write(partition / f"{base:020d}.index")
        times = TimeIndex(base)
        times.maybe_append(timestamp, offset, skip_full_check=True)
        times.write(partition / f"{base:020d}.timeindex")
    write_offset_checkpoint(log_dir / "log-start-offset-checkpoint", {("t", 0): 5})
    return partition


def test_reindex_keeps_the_abort_of_a_transaction_begun_before_the_first_segment(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Without a snapshot at the first segment's base, the transactions open at its start are
    # unknown: taken as none, the abort looked unindexed-for, verify called the index wrong and
    # reindex rewrote it empty, handing the aborted records to read_committed consumers.
    partition = _partition_after_retention(tmp_path)
    txnindex = partition / "00000000000000000005.txnindex"
    before = txnindex.read_bytes()
    code, _, err = _run(capsys, "log", "verify", str(partition))
    assert code == 0, err
    code, out, err = _run(capsys, "log", "reindex", str(partition))
    assert code == 0, err
    assert txnindex.read_bytes() == before
    code, out, _ = _run(capsys, "log", "reindex", str(partition), "--force")
    assert code == 0
    assert "transaction index left as it is" in out
    assert txnindex.read_bytes() == before
