"""A range stream's group of batches decoded in one walk: the same NDJSON lines and Arrow messages
as the batches decoded one by one, and a corrupt batch named in its object as before."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlm.errors import CorruptDataError
from rlm.log.aborted import AbortedIndex
from rlm.log.model import Codec, Record, TimestampType
from rlm.log.v2 import encode_v2_batch, parse_v2_header
from rlm.metastore.model import TopicPartition
from rlm.pipeline.columns import decode_columns
from rlm.pipeline.reader import RawBatch
from rlm.stream.arrow import (
    END_OF_STREAM,
    SCHEMA_MESSAGE,
    STREAM_COLUMNS,
    STREAM_SCHEMA,
    MessageWriter,
    message,
    record_batch,
)
from rlm.stream.chunks import StreamBatch
from rlm.stream.ndjson import lines, ndjson_lines
from rlm.stream.plan import RangePlan
from rlm.stream.records import _decode_each

TP = TopicPartition("t", 0)
Spec = tuple[
    list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]], TimestampType, int, Codec
]
"""A batch's records (key, value, headers), timestamp type, leader epoch and codec."""
blobs = st.none() | st.binary(max_size=30)
batch_specs = st.lists(
    st.tuples(
        st.lists(
            st.tuples(blobs, blobs, st.lists(st.tuples(st.text(max_size=5), blobs), max_size=2)),
            min_size=1,
            max_size=5,
        ),
        st.sampled_from([TimestampType.CREATE_TIME, TimestampType.LOG_APPEND_TIME]),
        st.sampled_from([-1, 3, 4]),
        st.sampled_from([Codec.NONE, Codec.GZIP, Codec.LZ4, Codec.ZSTD, Codec.SNAPPY]),
    ),
    min_size=1,
    max_size=6,
)


def stream_batches(
    specs: list[Spec],
) -> list[StreamBatch]:
    """v2 batches of ``specs`` (records, timestamp type, leader epoch, codec), one after the other,
    as a stream reads them from an object ``"obj"``."""
    out = []
    offset = position = 0
    for records_spec, kind, epoch, codec in specs:
        records = [
            Record(offset + i, 1_700_000_000_000 + i, key, value, tuple(headers))
            for i, (key, value, headers) in enumerate(records_spec)
        ]
        data = encode_v2_batch(
            records,
            codec=codec,
            timestamp_type=kind,
            log_append_time=1_800_000_000_000 if kind is TimestampType.LOG_APPEND_TIME else None,
            leader_epoch=epoch,
        )
        out.append(StreamBatch(parse_v2_header(data, 0)._replace(position=position), data, "remote", "obj"))
        offset += len(records)
        position += len(data)
    return out


def arrow_one_by_one(plan: RangePlan, batches: list[StreamBatch]) -> pa.RecordBatch:
    decoded = decode_columns(
        TP,
        [RawBatch(b.header, b.data) for b in batches],
        AbortedIndex(()),
        first_offset=plan.start,
        last_offset=plan.end - 1,
        name="obj",
    )
    return decoded.select(list(STREAM_COLUMNS))


@settings(max_examples=60, deadline=None)
@given(batch_specs, st.integers(0, 8), st.integers(1, 40))
def test_a_group_decoded_in_one_walk_gives_the_bytes_of_its_batches_one_by_one(
    specs: list[Spec],
    start: int,
    length: int,
) -> None:
    batches = stream_batches(specs)
    plan = RangePlan(TP, start, start + length, 2**62, None, None)
    cols, spans = _decode_each(plan, batches)
    assert ndjson_lines(plan, batches) == (lines(cols, spans) if cols.rows else b"")
    assert record_batch(plan, batches).serialize() == arrow_one_by_one(plan, batches).serialize()


def in_two_chunks(batches: list[StreamBatch], cut: int) -> list[StreamBatch]:
    """The batches as views of two chunks they were read in: those before ``cut``, and the rest."""
    out = []
    for part in (batches[:cut], batches[cut:]):
        chunk = memoryview(b"".join(bytes(b.data) for b in part))
        at = 0
        for batch in part:
            out.append(batch._replace(data=chunk[at : at + len(batch.data)]))
            at += len(batch.data)
    return out


@settings(max_examples=60, deadline=None)
@given(batch_specs, st.integers(0, 8), st.integers(1, 40), st.integers(0, 6))
def test_a_group_read_in_two_chunks_gives_the_bytes_of_its_batches_one_by_one(
    specs: list[Spec], start: int, length: int, cut: int
) -> None:
    batches = in_two_chunks(stream_batches(specs), cut)
    plan = RangePlan(TP, start, start + length, 2**62, None, None)
    cols, spans = _decode_each(plan, batches)
    assert ndjson_lines(plan, batches) == (lines(cols, spans) if cols.rows else b"")
    assert record_batch(plan, batches).serialize() == arrow_one_by_one(plan, batches).serialize()


@pytest.mark.parametrize("codec", [Codec.NONE, Codec.ZSTD])
def test_a_corrupt_batch_of_a_group_is_named_in_its_object(codec: Codec) -> None:
    specs: list[Spec] = [([(b"k", b"v%d" % i, [])], TimestampType.CREATE_TIME, 1, codec) for i in range(3)]
    batches = stream_batches(specs)
    broken = bytearray(batches[1].data)
    broken[-1] ^= 0xFF  # the CRC no longer holds
    batches[1] = batches[1]._replace(data=bytes(broken))
    plan = RangePlan(TP, 0, 100, 2**62, None, None)
    for encode in (ndjson_lines, record_batch):
        with pytest.raises(CorruptDataError) as raised:
            encode(plan, batches)
        assert (raised.value.path, raised.value.position) == ("obj", batches[1].header.position)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(batch_specs, max_size=4),
    st.integers(0, 8),
    st.sampled_from([1, 100, 1 << 20]),
    st.lists(st.booleans(), min_size=4, max_size=4),
)
def test_the_arrow_stream_is_the_serialized_messages_one_after_the_other(
    groups: list[list[Spec]], start: int, value_bytes: int, plain: list[bool]
) -> None:
    plan = RangePlan(TP, start, 2**62, 2**62, None, None)
    writer = MessageWriter()
    sent: list[bytes | memoryview] = [SCHEMA_MESSAGE]
    expected, batches = [STREAM_SCHEMA.serialize().to_pybytes()], []
    for group, uncompressed in zip(groups, plain, strict=False):
        specs = group
        if uncompressed:  # a group of uncompressed batches: serialized where it is encoded
            specs = [(records, kind, epoch, Codec.NONE) for records, kind, epoch, _ in group]
        if specs:  # values of every size: views of the columns' buffers and gathered small parts
            specs[0][0].append((None, b"v" * value_bytes, []))
        made = message(plan, stream_batches(specs))
        batch = record_batch(plan, stream_batches(specs))
        assert (made is None) == (batch.num_rows == 0)
        if made is not None:
            compressed = any(codec is not Codec.NONE for *_, codec in specs)
            assert isinstance(made, pa.RecordBatch if compressed else pa.Buffer)
            expected.append(batch.serialize().to_pybytes())
            batches.append(batch)
        sent += writer.parts(made)
    sent.append(END_OF_STREAM)
    assert b"".join(sent) == b"".join(expected) + END_OF_STREAM
    read = pa.ipc.open_stream(b"".join(sent))
    assert read.schema == STREAM_SCHEMA
    assert read.read_all() == pa.Table.from_batches(batches, schema=STREAM_SCHEMA)
