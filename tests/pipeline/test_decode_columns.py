"""decode_columns on hand-made batches: the cases a produced log rarely holds (a record without a
timestamp, an offset range cutting a batch, a corrupt batch among good ones), without Spark."""

from __future__ import annotations

import pyarrow as pa
import pytest

from rlm.errors import CorruptDataError
from rlm.log.aborted import AbortedIndex
from rlm.log.batches import parse_header
from rlm.log.legacy import encode_legacy_batch
from rlm.log.model import Codec, ControlType, Record
from rlm.log.v2 import encode_control_batch, encode_v2_batch, parse_v2_header
from rlm.metastore.model import TopicPartition
from rlm.pipeline.columns import RECORD_SCHEMA, decode_columns
from rlm.pipeline.reader import RawBatch

TP = TopicPartition("orders", 3)


def _raw(batches: list[bytes]) -> list[RawBatch]:
    data = b"".join(batches)
    out, pos = [], 0
    for batch in batches:
        header = parse_v2_header(batch, 0)._replace(position=pos)
        out.append(RawBatch(header, memoryview(data)[pos : pos + len(batch)]))
        pos += len(batch)
    return out


def _decode(batches: list[RawBatch], first: int = 0, last: int = 10**6) -> list[dict[str, object]]:
    table = decode_columns(TP, batches, AbortedIndex([]), first_offset=first, last_offset=last, name="k.log")
    assert table.schema == RECORD_SCHEMA
    millis = table.column("timestamp").cast(pa.int64())
    return [{**row, "timestamp": ms} for row, ms in zip(table.to_pylist(), millis.to_pylist(), strict=True)]


def test_rows_of_batches_of_every_kind() -> None:
    plain = encode_v2_batch(
        [Record(10, -1, None, b"v0"), Record(11, 5000, b"k", None, (("h", b"x"), ("n", None)))],
        leader_epoch=4,
        codec=Codec.LZ4,
    )
    txn = encode_v2_batch(
        [Record(12, 6000, b"t", b"1")], producer_id=9, producer_epoch=0, is_transactional=True
    )
    marker = encode_control_batch(13, ControlType.COMMIT, producer_id=9, producer_epoch=0, timestamp=6001)
    rows = _decode(_raw([plain, txn, marker]))
    assert [r["offset"] for r in rows] == [10, 11, 12, 13]
    assert [r["timestamp"] for r in rows] == [None, 5000, 6000, 6001]  # -1: no timestamp
    assert rows[1]["headers"] == [{"key": "h", "value": b"x"}, {"key": "n", "value": None}]
    assert [r["leader_epoch"] for r in rows] == [4, 4, None, None]
    assert [r["producer_id"] for r in rows] == [None, None, 9, 9]
    assert [r["is_control"] for r in rows] == [False, False, False, True]
    assert [r["is_transactional"] for r in rows] == [False, False, True, True]
    assert {r["topic"] for r in rows} == {"orders"} and {r["partition"] for r in rows} == {3}


def test_an_offset_range_cuts_batches() -> None:
    batches = [encode_v2_batch([Record(o, 1000 + o, None, b"v") for o in range(b, b + 5)]) for b in (0, 5)]
    assert [r["offset"] for r in _decode(_raw(batches), first=3, last=6)] == [3, 4, 5, 6]
    assert _decode(_raw(batches), first=20, last=30) == []


def test_a_legacy_batch_among_v2_batches() -> None:
    legacy = encode_legacy_batch(
        [Record(0, 100, b"a", b"1"), Record(1, 101, None, b"2")], magic=1, codec=Codec.GZIP
    )
    modern = encode_v2_batch([Record(2, 102, b"c", b"3")])
    data = legacy + modern
    first = parse_header(data, 0)
    raws = [RawBatch(first, memoryview(data)[: len(legacy)]), _raw([modern])[0]]
    rows = _decode(raws)
    assert [(r["offset"], r["timestamp"], r["key"]) for r in rows] == [
        (0, 100, b"a"),
        (1, 101, None),
        (2, 102, b"c"),
    ]
    assert [r["leader_epoch"] for r in rows] == [None, None, None]


def test_a_corrupt_batch_names_the_object_and_its_position() -> None:
    good = encode_v2_batch([Record(0, 1, b"k", b"v")])
    bad = bytearray(encode_v2_batch([Record(1, 2, b"k", b"v" * 20)]))
    bad[-3] ^= 0xFF
    with pytest.raises(CorruptDataError, match="CRC mismatch") as caught:
        _decode(_raw([good, bytes(bad)]))
    assert caught.value.path == "k.log" and caught.value.position == len(good)
