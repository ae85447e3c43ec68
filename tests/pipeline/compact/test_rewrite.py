"""Rewriting a batch keeps what Kafka keeps of a record, byte for byte."""

from __future__ import annotations

import struct

import crc32c
import kafka.errors
import pytest
from kafka.record import MemoryRecords

from rlm.log.aborted import AbortedIndex
from rlm.log.batches import decode_batch, parse_header
from rlm.log.model import Codec, Record
from rlm.log.v2 import decode_v2, encode_v2_batch
from rlm.metastore.model import TopicPartition
from rlm.pipeline.compact.rewrite import Counts, Keep, RewriteParams, rewrite_batches
from rlm.pipeline.reader import RawBatch

BAD_KEY = b"\xff\xfebin"  # not UTF-8: Go and C producers send header keys as raw bytes


def _batch_with_raw_header_key(codec: Codec) -> bytes:
    """A valid batch of three records whose second record's header key is ``BAD_KEY``."""
    marker = "\u00e9bin"  # as many bytes as BAD_KEY, replaced after encoding
    records = [
        Record(10, 1000, b"a", b"1", (("ok", b"x"),)),
        Record(11, 1001, b"b", b"2", ((marker, b"y"), ("ok", None))),
        Record(12, 1002, b"a", b"3"),
    ]
    plain = bytearray(encode_v2_batch(records))
    at = plain.index(marker.encode())
    plain[at : at + len(BAD_KEY)] = BAD_KEY
    struct.pack_into(">I", plain, 17, crc32c.crc32c(bytes(plain[21:])))
    if codec is Codec.NONE:
        return bytes(plain)
    decoded = decode_v2(bytes(plain), parse_header(bytes(plain), 0), raw_header_keys=True)
    return encode_v2_batch(decoded, codec=codec)


def _kafka_python_header_key(batch: bytes) -> bytes:
    """The bytes kafka-python finds as the second record's first header key (it decodes header
    keys strictly, so a key that is not UTF-8 stops it there with the key's bytes)."""
    (kp_batch,) = [b for b in iter(MemoryRecords(batch).next_batch, None)]
    assert kp_batch.validate_crc()
    with pytest.raises(kafka.errors.CorruptRecordError) as failure:
        list(kp_batch)
    cause = failure.value.__context__  # kafka-python raises it while handling the decode error
    assert isinstance(cause, UnicodeDecodeError)
    return bytes(cause.object)


@pytest.mark.parametrize("codec", [Codec.NONE, Codec.ZSTD])
def test_a_kept_record_keeps_its_header_key_bytes_when_its_batch_is_rewritten(codec: Codec) -> None:
    batch = _batch_with_raw_header_key(codec)
    assert _kafka_python_header_key(batch) == BAD_KEY
    keep = Keep(end=12, kept=frozenset({11, 12}), empty_markers=frozenset(), last_batches=frozenset())
    counts = Counts()
    (out,) = rewrite_batches(
        TopicPartition("t", 0),
        [RawBatch(parse_header(batch, 0), batch)],
        keep,
        RewriteParams(now_ms=5000, delete_retention_ms=1000),
        AbortedIndex([]),
        "00000000000000000010.log",
        counts,
    )
    assert counts.records_out == 2 and out != batch
    assert _kafka_python_header_key(out) == BAD_KEY
    header = parse_header(out, 0)
    assert [r.offset for r in decode_batch(out, header)] == [11, 12]
    assert decode_batch(out, header)[0].headers == (("\ufffd\ufffdbin", b"y"), ("ok", None))
    raw = decode_v2(out, header, raw_header_keys=True)[0].headers[0][0]
    assert raw.encode("utf-8", "surrogateescape") == BAD_KEY


def test_a_delete_retention_of_long_max_keeps_the_tombstone_for_good() -> None:
    # delete.retention.ms = Long.MAX_VALUE (keep tombstones forever): now + it is past what a
    # batch's base timestamp holds, and the horizon stamped is the farthest one there is.
    batch = encode_v2_batch([Record(10, 1000, b"a", b"1"), Record(11, 1001, b"a", None)], base_offset=10)
    keep = Keep(end=11, kept=frozenset({11}), empty_markers=frozenset(), last_batches=frozenset())
    counts = Counts()
    (out,) = rewrite_batches(
        TopicPartition("t", 0),
        [RawBatch(parse_header(batch, 0), batch)],
        keep,
        RewriteParams(now_ms=1_700_000_000_000, delete_retention_ms=2**63 - 1),
        AbortedIndex([]),
        "00000000000000000010.log",
        counts,
    )
    header = parse_header(out, 0)
    assert header.has_delete_horizon and header.base_timestamp == 2**63 - 1
    assert [(r.offset, r.timestamp, r.value) for r in decode_batch(out, header)] == [(11, 1001, None)]
    assert counts.batches_stamped == 1 and counts.tombstones_kept == 1
