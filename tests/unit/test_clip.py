"""rlm.log.clip: a stored batch cut short at an offset, read back with kafka-python.

The batch cut short must be a batch kafka-python reads (CRC, framing, codec) holding exactly the
records kafka-python reads from the whole batch up to the offset, with the header fields of the
whole batch but those that describe what it holds."""

from __future__ import annotations

import types
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.memory_records import MemoryRecords

from rlm.errors import CorruptRecordError
from rlm.log.batches import parse_header
from rlm.log.clip import batch_up_to
from rlm.log.legacy import encode_legacy_batch
from rlm.log.model import Codec, Record, TimestampType
from rlm.log.v2 import decode_v2, encode_v2_batch

Read = tuple[int, int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]
"""A record as kafka-python reads it: offset, timestamp, key, value, headers."""


def _read(data: bytes) -> tuple[Any, list[Read]]:
    """The one batch of ``data`` as kafka-python reads it, and its records."""
    memory = MemoryRecords(data)
    batch: Any = memory.next_batch()
    assert batch is not None and not memory.has_next()
    assert batch.validate_crc()  # before iterating: iteration decompresses in place
    records = [
        (r.offset, r.timestamp, r.key, r.value, tuple((k, v) for k, v in getattr(r, "headers", ())))
        for r in batch
    ]
    return batch, records


@st.composite
def _records(draw: st.DrawFn, headers: bool) -> list[Record]:
    """2-8 records with increasing offsets, gaps between some (as compaction leaves them)."""
    count = draw(st.integers(2, 8))
    gaps = draw(st.lists(st.integers(1, 3), min_size=count, max_size=count))
    offset = draw(st.integers(0, 1000))
    out = []
    for i, gap in enumerate(gaps):
        offset += gap
        value = draw(st.one_of(st.none(), st.binary(max_size=40)))
        header: tuple[tuple[str, bytes | None], ...] = (
            (("h", b"v"), ("clé", None)) if headers and i % 2 else ()
        )
        timestamp = 1_700_000_000_000 + draw(st.integers(-5000, 5000))
        out.append(Record(offset, timestamp, b"k%d" % i, value, header))
    return out


V2_ARGS = st.fixed_dictionaries(
    {
        "codec": st.sampled_from(list(Codec)),
        "timestamp_type": st.sampled_from([TimestampType.CREATE_TIME, TimestampType.LOG_APPEND_TIME]),
        "leader_epoch": st.integers(0, 9),
        "producer": st.sampled_from([(-1, -1, -1), (4321, 3, 17)]),
        "transactional": st.booleans(),
    }
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(records=_records(headers=True), args=V2_ARGS, data=st.data())
def test_a_v2_batch_cut_short_is_its_records_up_to_the_offset_and_says_it_ends_there(
    kafka_python_codecs: types.ModuleType, records: list[Record], args: dict[str, Any], data: st.DataObject
) -> None:
    pid, epoch, sequence = args["producer"]
    log_append = args["timestamp_type"] is TimestampType.LOG_APPEND_TIME
    whole = encode_v2_batch(
        records,
        codec=args["codec"],
        timestamp_type=args["timestamp_type"],
        log_append_time=1_800_000_000_000 if log_append else None,
        leader_epoch=args["leader_epoch"],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=sequence,
        is_transactional=args["transactional"] and pid >= 0,
    )
    header = parse_header(whole, 0)
    last = data.draw(st.integers(records[0].offset, records[-1].offset - 1), label="last")
    clipped = batch_up_to(whole, header, last)
    assert clipped is not None
    clipped_header, out = clipped
    theirs, wanted = _read(whole)
    batch, got = _read(out)
    assert got == [r for r in wanted if r[0] <= last]
    assert batch.base_offset == theirs.base_offset
    assert batch.last_offset == last, "a consumer goes on from the offset after the cut"
    assert batch.records_count == len(got)
    kept = ("leader_epoch", "producer_id", "producer_epoch", "base_sequence", "attributes", "first_timestamp")
    for name in kept:
        assert getattr(batch, name) == getattr(theirs, name), name
    assert batch.max_timestamp == (theirs.max_timestamp if log_append else max(r[1] for r in got))
    assert clipped_header == parse_header(out, 0)
    if args["codec"] is Codec.NONE:  # the kept records' bytes, as stored
        assert out[61:] in whole


@pytest.mark.parametrize(("magic", "log_append"), [(0, False), (1, False), (1, True)])  # v0: no timestamps
@pytest.mark.parametrize("codec", [Codec.GZIP, Codec.SNAPPY, Codec.LZ4])
def test_a_legacy_wrapper_cut_short_is_its_inner_messages_up_to_the_offset(
    kafka_python_codecs: types.ModuleType, magic: int, codec: Codec, log_append: bool
) -> None:
    records = [Record(o, 1_700_000_000_000 - 10 * o, b"k", b"v%d" % o) for o in (40, 41, 43, 44, 47)]
    whole = encode_legacy_batch(
        records,
        magic=magic,
        codec=codec,
        timestamp_type=TimestampType.LOG_APPEND_TIME if log_append else TimestampType.CREATE_TIME,
        log_append_time=1_800_000_000_000 if log_append else None,
    )
    _, wanted = _read(whole)
    for last in (40, 42, 44, 46):
        clipped = batch_up_to(whole, parse_header(whole, 0), last)
        assert clipped is not None
        header, out = clipped
        batch, got = _read(out)
        assert got == [r for r in wanted if r[0] <= last], last
        assert header.last_offset == got[-1][0], "a wrapper's offset is its last inner message's"
        if magic == 1:
            assert batch._timestamp == (1_800_000_000_000 if log_append else max(r[1] for r in got))


def test_a_batch_ending_at_the_offset_is_returned_whole_and_one_starting_past_it_not_at_all() -> None:
    records = [Record(o, 1_700_000_000_000, None, b"x") for o in (10, 12, 15)]
    whole = encode_v2_batch(records, codec=Codec.GZIP)
    header = parse_header(whole, 0)
    assert batch_up_to(whole, header, 15) == (header, whole)
    assert batch_up_to(whole, header, 9) is None
    # Compaction left offsets 10..11 of a batch based at 8 (its first record at 10).
    based_lower = encode_v2_batch(records, base_offset=8)
    assert batch_up_to(based_lower, parse_header(based_lower, 0), 9) is None


def test_a_batch_at_a_position_of_its_buffer_is_cut_there() -> None:
    first = encode_v2_batch([Record(o, 1_700_000_000_000, None, b"a") for o in (0, 1)])
    second = encode_v2_batch([Record(o, 1_700_000_000_000, None, b"b") for o in (2, 3, 4)], codec=Codec.ZSTD)
    buf = first + second
    header = parse_header(buf, len(first))
    clipped = batch_up_to(buf, header, 3)
    assert clipped is not None
    assert clipped[0].position == len(first) and clipped[0].last_offset == 3
    assert [r[0] for r in _read(clipped[1])[1]] == [2, 3]


@pytest.mark.parametrize("codec", list(Codec))
def test_a_header_key_not_utf8_keeps_its_bytes(codec: Codec) -> None:
    # kafka-python cannot read such a key (Kafka's Java client reads it, replacing the bytes).
    records = [Record(o, 1_700_000_000_000, None, b"x", (("k\udcff", b"v"),)) for o in (0, 1, 2)]
    whole = encode_v2_batch(records, codec=codec)
    clipped = batch_up_to(whole, parse_header(whole, 0), 1)
    assert clipped is not None
    assert decode_v2(clipped[1], clipped[0]._replace(position=0), raw_header_keys=True) == records[:2]


def test_a_corrupt_batch_is_not_cut_but_refused() -> None:
    whole = bytearray(encode_v2_batch([Record(o, 1_700_000_000_000, None, b"x") for o in (0, 1, 2)]))
    whole[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="CRC"):
        batch_up_to(whole, parse_header(whole, 0), 1)
