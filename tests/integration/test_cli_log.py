"""The ``rlm log`` commands on a generated log directory, checked against kafka-python."""

from __future__ import annotations

import base64
import json
import os
import random
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kafka.record import MemoryRecords

from rlm.cli import main
from rlm.log.checkpoints import epoch_for_offset
from rlm.log.logdir import LogDir, PartitionDir
from rlm.log.produce import ProduceSummary
from rlm.log.segment import Segment

RECORD_FIELDS = [
    "offset",
    "timestamp",
    "timestamp_type",
    "key",
    "value",
    "headers",
    "leader_epoch",
    "is_control",
]
INDEX_SUFFIXES = (".index", ".timeindex", ".txnindex")


@pytest.fixture
def logs(sample_logdir: tuple[Path, ProduceSummary], tmp_path: Path) -> Path:
    copy = tmp_path / "logs"
    shutil.copytree(sample_logdir[0], copy)
    return copy


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def test_dump_records_json_matches_kafka_python(logs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    partition = LogDir(logs).partition("clicks", 0)
    segment = partition.segments()[0]
    code, out, _ = _run(capsys, "log", "dump", str(segment.log_path), "--records", "--json")
    assert code == 0
    rows = [json.loads(line) for line in out.splitlines()]
    assert all(list(row) == RECORD_FIELDS for row in rows)
    expected = []
    records = MemoryRecords(segment.log_path.read_bytes())
    while records.has_next():
        batch = records.next_batch()
        assert batch.validate_crc()
        for r in batch:
            if batch.is_control_batch:
                continue
            expected.append(
                {
                    "offset": r.offset,
                    "timestamp": r.timestamp,
                    "timestamp_type": "LogAppendTime" if r.timestamp_type == 1 else "CreateTime",
                    "key": _b64(r.key),
                    "value": _b64(r.value),
                    "headers": [[k, _b64(v)] for k, v in r.headers],
                }
            )
    data_rows = [{k: row[k] for k in RECORD_FIELDS[:6]} for row in rows if not row["is_control"]]
    assert data_rows == expected
    assert any(row["is_control"] for row in rows)
    assert {row["timestamp_type"] for row in rows} == {"LogAppendTime"}


def test_dump_batches_text_and_json(logs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    partition_dir = logs / "orders-0"
    code, out, _ = _run(capsys, "log", "dump", str(partition_dir))
    assert code == 0
    assert "crc_valid: true" in out and "magic: 1" in out and "magic: 2" in out
    code, out, _ = _run(capsys, "log", "dump", str(partition_dir), "--json")
    batches = [json.loads(line) for line in out.splitlines()]
    assert {b["codec"] for b in batches} == {"none", "gzip", "snappy", "lz4", "zstd"}
    assert all(b["crc_valid"] for b in batches)
    assert any(b["is_transactional"] and b["is_control"] for b in batches)
    index = sorted(partition_dir.glob("*.timeindex"))[0]
    code, out, _ = _run(capsys, "log", "dump", str(index), "--json")
    entries = [json.loads(line) for line in out.splitlines()]
    assert entries and all(set(e) == {"timestamp", "offset"} for e in entries)


def test_dump_of_a_log_dir_says_it_is_not_a_partition_directory(
    logs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _run(capsys, "log", "dump", str(logs))
    assert code == 1 and out == ""
    assert err.startswith(f"rlm: error: {logs} is not a partition directory (it holds the partition")
    assert "orders-0" in err


def test_dump_reports_the_bytes_it_cannot_read(logs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    segment = LogDir(logs).partition("orders", 0).segments()[0]
    batches = len(list(segment.headers()))
    size = segment.size()
    with open(segment.log_path, "ab") as log:
        log.write(bytes(range(7, 107)))
    code, out, err = _run(capsys, "log", "dump", str(segment.log_path), "--json")
    assert code == 1
    assert len(out.splitlines()) == batches
    assert err == f"{segment.log_path}: position {size}: 100 trailing bytes after the last whole batch\n"
    garbage = segment.directory / "00000000000000900000.log"
    garbage.write_bytes(random.Random(3).randbytes(3000))
    code, out, err = _run(capsys, "log", "dump", str(garbage))
    assert code == 1 and out.startswith(f"Dumping {garbage}")
    assert err.startswith(f"{garbage}: position 0: ")


def test_verify_passes_then_names_file_and_position_of_corruption(
    logs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = _run(capsys, "log", "verify", str(logs))
    assert code == 0 and "OK" in out
    segment = LogDir(logs).partition("orders", 1).segments()[1]
    batches = list(segment.headers())
    target = batches[len(batches) // 2]
    data = bytearray(segment.log_path.read_bytes())
    data[target.position + 40] ^= 0x01  # inside the CRC-covered header
    segment.log_path.write_bytes(bytes(data))
    code, _, err = _run(capsys, "log", "verify", str(logs))
    assert code == 1
    assert f"{segment.log_path}: position {target.position}: CRC mismatch" in err


def test_verify_of_a_partitions_copy_not_named_as_kafka_names_it_is_refused(
    logs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Read as a log directory, it held no partition and verified "OK" whatever its segments held."""
    copy = tmp_path / "damaged"
    shutil.copytree(logs / "orders-0", copy)
    code, out, err = _run(capsys, "log", "verify", str(copy))
    assert code == 1 and out == ""
    assert f"{copy} holds segments but is not named as Kafka names a partition's directory" in err


def test_verify_reports_bad_index_and_reindex_repairs_it(
    logs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    partition = LogDir(logs).partition("clicks", 1)
    segment = partition.segments()[0]
    good = segment.time_index_path.read_bytes()
    segment.time_index_path.write_bytes(good[:12] + b"\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x01")
    segment.index_path.unlink()
    code, _, err = _run(capsys, "log", "verify", str(partition.path))
    assert code == 1
    assert str(segment.index_path) in err and "missing" in err
    assert str(segment.time_index_path) in err
    code, out, _ = _run(capsys, "log", "reindex", str(partition.path))
    assert code == 0 and "rebuilt" in out
    assert segment.time_index_path.read_bytes() == good
    code, _, _ = _run(capsys, "log", "verify", str(partition.path))
    assert code == 0


def _damaged_before_an_abort(partition: PartitionDir) -> tuple[Segment, int]:
    """A rolled segment with an aborted transaction whose marker follows another batch, damaged
    inside that earlier batch's records; returns the segment and the damaged batch's position."""
    for segment in partition.segments()[:-1]:
        if not segment.txn_index_path.exists():
            continue
        aborted = list(segment.transaction_index().entries())
        headers = list(segment.headers())
        if not aborted or len(headers) < 2:
            continue
        target = next(h for h in headers if h.last_offset < aborted[-1].last_offset)
        data = bytearray(segment.log_path.read_bytes())
        data[target.position + 70] ^= 0xFF  # inside the records: only the CRC tells
        segment.log_path.write_bytes(bytes(data))
        return segment, target.position
    raise AssertionError("the sample has no rolled segment with an aborted transaction")


def _index_files(partition: PartitionDir) -> dict[str, bytes]:
    return {
        path.name: path.read_bytes()
        for path in sorted(partition.path.iterdir())
        if path.suffix in INDEX_SUFFIXES
    }


def test_verify_reports_the_corrupt_batch_and_not_the_indexes_past_it(
    logs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    partition = LogDir(logs).partition("orders", 1)
    segment, position = _damaged_before_an_abort(partition)
    code, _, err = _run(capsys, "log", "verify", str(partition.path))
    assert code == 1
    *problems, total = err.splitlines()
    assert total == f"1 problem(s) found in {partition.path}"
    assert len(problems) == 1
    assert problems[0].startswith(f"{segment.log_path}: position {position}: CRC mismatch")


def test_reindex_leaves_every_index_of_a_corrupt_segment_as_it_is(
    logs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    partition = LogDir(logs).partition("orders", 1)
    segment, position = _damaged_before_an_abort(partition)
    before = _index_files(partition)
    code, out, err = _run(capsys, "log", "reindex", str(partition.path))
    assert code == 1
    assert f"{segment.log_path}: position {position}: CRC mismatch" in err
    assert "left as they are" in err
    assert "rebuilt" not in out
    assert _index_files(partition) == before


def test_reindex_of_a_corrupt_segment_rebuilds_the_others_indexes(
    logs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    partition = LogDir(logs).partition("orders", 1)
    segment, _ = _damaged_before_an_abort(partition)
    others = [s for s in partition.segments() if s.base_offset != segment.base_offset]
    before = _index_files(partition)
    for other in others:
        other.time_index_path.unlink()
    code, out, _ = _run(capsys, "log", "reindex", str(partition.path))
    assert code == 1
    assert out.count("rebuilt") == len(others)
    # The segments after the damaged one start from their producer snapshots: their transaction
    # indexes are not rewritten from transactions lost in the damage.
    assert _index_files(partition) == before


def test_find_offset_json_and_not_found(logs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    partition = LogDir(logs).partition("orders", 0)
    expected = partition.find_offset_by_timestamp(1_700_000_030_000)
    assert expected is not None
    code, out, _ = _run(
        capsys, "log", "find-offset", str(partition.path), "--timestamp", "2023-11-14T22:13:50Z", "--json"
    )
    assert code == 0
    assert json.loads(out) == {
        "offset": expected.offset,
        "timestamp": expected.timestamp,
        "leader_epoch": expected.leader_epoch,
    }
    code, out, _ = _run(
        capsys, "log", "find-offset", str(partition.path), "--timestamp", "4000000000000", "--json"
    )
    assert json.loads(out) == {"offset": -1, "timestamp": -1, "leader_epoch": -1}
    code, _, err = _run(capsys, "log", "find-offset", str(partition.path), "--timestamp", "yesterday-ish")
    assert code == 1 and "yesterday-ish" in err


def test_find_offset_of_the_special_timestamps_gives_the_epochs_lookups_give(
    logs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    partition = LogDir(logs).partition("orders", 0)
    epochs = partition.leader_epochs()
    start = partition.segments()[0].base_offset
    hw = partition.high_watermark()
    latest = partition.log_end_offset() if hw is None else hw
    expected = {
        "latest": (latest, -1, epochs[-1].epoch),
        "earliest": (start, -1, epoch_for_offset(epochs, start)),
        "earliest-local": (start, -1, epoch_for_offset(epochs, start)),
        "latest-tiered": (-1, -1, -1),
    }
    assert expected["latest"][2] > 0  # the sample has leader changes
    for name, answer in expected.items():
        code, out, _ = _run(capsys, "log", "find-offset", str(partition.path), "--timestamp", name, "--json")
        found = json.loads(out)
        assert code == 0 and (found["offset"], found["timestamp"], found["leader_epoch"]) == answer, name


def test_unknown_path_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, "log", "verify", str(tmp_path / "nope"))
    assert code == 1 and "does not exist" in err


def test_console_script_produce_and_dump(tmp_path: Path) -> None:
    out = tmp_path / "generated"
    rlm = [sys.executable, "-m", "rlm"]
    produced = subprocess.run(
        [
            *rlm,
            "log",
            "produce",
            str(out),
            "--topics",
            "1",
            "--partitions",
            "1",
            "--records",
            "500",
            "--quiet",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "wrote 500 records" in produced.stdout
    dumped = subprocess.run(
        [*rlm, "log", "dump", str(out / "orders-0"), "--records", "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    offsets = [json.loads(line)["offset"] for line in dumped.stdout.splitlines()]
    assert offsets == sorted(offsets) and len(offsets) >= 500


def test_reindex_gives_rewritten_and_new_indexes_the_owner_and_mode_of_the_brokers_files(
    logs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if os.geteuid() != 0:
        pytest.skip("giving files another owner takes root")
    partition = LogDir(logs).partition("clicks", 1)
    segment = partition.segments()[0]
    for path in partition.path.iterdir():
        os.chown(path, 4321, 4322)  # the broker's user, as the broker left them
        path.chmod(0o640)
    good = segment.time_index_path.read_bytes()
    segment.time_index_path.write_bytes(good[:12])
    segment.index_path.unlink()
    code, out, err = _run(capsys, "log", "reindex", str(partition.path))
    assert code == 0 and "rebuilt" in out, err
    assert segment.time_index_path.read_bytes() == good
    for path in (segment.time_index_path, segment.index_path):
        mode = path.stat()
        assert (mode.st_uid, mode.st_gid, stat.S_IMODE(mode.st_mode)) == (4321, 4322, 0o640), path


def _hold_broker_lock(log_dir: Path) -> subprocess.Popen[str]:
    """A process that holds ``log_dir/.lock`` as a running broker does (Java's FileChannel.tryLock:
    an fcntl lock on Linux)."""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, sys\n"
            f"f = open({str(log_dir / '.lock')!r}, 'a+')\n"
            "fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
            "print('locked', flush=True)\n"
            "sys.stdin.read()\n",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
    return holder


def test_reindex_is_refused_while_the_broker_holds_the_log_dir_lock(
    logs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    partition = LogDir(logs).partition("clicks", 1)
    segment = partition.segments()[0]
    segment.index_path.unlink()
    holder = _hold_broker_lock(logs)
    try:
        code, out, err = _run(capsys, "log", "reindex", str(partition.path))
        assert code == 1 and out == ""
        assert f"{logs / '.lock'}" in err and "stop the broker" in err
        assert not segment.index_path.exists()
        code, out, err = _run(capsys, "log", "reindex", "--force", str(partition.path))
        assert code == 1 and not segment.index_path.exists()
        code, out, err = _run(capsys, "log", "reindex", "--skip-lock-check", str(partition.path))
        assert code == 0 and segment.index_path.exists(), err
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=30)
    segment.index_path.unlink()
    code, out, err = _run(capsys, "log", "reindex", str(partition.path))  # the broker stopped
    assert code == 0 and segment.index_path.exists(), err


def test_ctrl_c_ends_a_command_with_130_and_no_traceback(tmp_path: Path) -> None:
    out = tmp_path / "generated"
    # As in a terminal, Ctrl-C is not ignored. A test run started in the background by a shell
    # (`make test &`) ignores SIGINT, and a process inherits that: Python then keeps ignoring it.
    start = (
        "import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
        "sys.argv[0] = 'rlm'; runpy.run_module('rlm', run_name='__main__', alter_sys=True)"
    )
    command = [sys.executable, "-c", start, "log", "produce", str(out), "--records", "50000000", "--quiet"]
    # faulthandler: a command that never ends is made to say where it is (SIGABRT, below).
    env = {**os.environ, "PYTHONFAULTHANDLER": "1"}
    running = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    err = ""
    try:
        while not out.exists() and running.poll() is None:  # the command is under way
            time.sleep(0.02)
        # Python drops a KeyboardInterrupt raised while a finalizer runs ("Exception ignored"):
        # a user then presses Ctrl-C again.
        for _ in range(24):
            running.send_signal(signal.SIGINT)
            try:
                _, err = running.communicate(timeout=5)
                break
            except subprocess.TimeoutExpired:
                continue
        else:
            running.send_signal(signal.SIGABRT)
            _, err = running.communicate(timeout=30)
    finally:
        running.kill()
    assert running.returncode == 130, err
    assert err.endswith("rlm: interrupted\n")
    assert "Traceback" not in err.split("Exception ignored")[-1]


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--max-batch-records", "0", "argument --max-batch-records: must be from 1 to 2147483647, not 0"),
        ("--records", "-5", "argument --records: must be from 0 to 2147483647, not -5"),
        ("--topics", "-1", "argument --topics: must be from 1 to 2147483647, not -1"),
        ("--partitions", "0", "argument --partitions: must be from 1 to 2147483647, not 0"),
        ("--segment-bytes", "13", "argument --segment-bytes: must be from 14 to 2147483647, not 13"),
        ("--value-bytes", "-1", "argument --value-bytes: must be from 0 to 2147483647, not -1"),
        ("--legacy-batches", "-1", "argument --legacy-batches: must be from 0 to 2147483647, not -1"),
        ("--records", "ten", "argument --records: 'ten' is not an integer"),
    ],
)
def test_produce_refuses_counts_out_of_range(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str, value: str, message: str
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["log", "produce", str(tmp_path / "out"), "--quiet", option, value])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()
