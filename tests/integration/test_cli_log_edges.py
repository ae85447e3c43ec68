"""``rlm log`` commands on hand-made segments: the edges a generated log directory does not reach."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from rlm.cli import main

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
