"""A stored batch cut short: its records up to an offset, the ones after it left out.

After an unclean leader election a diverged remote copy may keep one batch that holds offsets on
both sides of its cut (:mod:`rlm.tiering.trim`): its records up to the cut are the partition's
(held nowhere else), its records past it the old leader's, where the log holds others. A read
gives out that batch cut at the last offset the copy answers
(:func:`rlm.lookup.answer_end.remote_answer_end`), whatever it gives it out as: records, or raw
Kafka batches, whose consumers would otherwise take the old leader's records for the log's.

The batch cut short keeps the stored records' bytes (the first ones, compressed again with the
batch's codec when it has one) and every header field but those that describe what it holds:

* v2: ``lastOffsetDelta`` says the offset it is cut at, so a consumer goes on from the offset
  after it (records compaction left out below it are absent as before); ``recordsCount``,
  ``maxTimestamp`` (the kept records' largest; a LogAppendTime batch keeps its append time),
  ``batchLength`` and the CRC-32C follow. Base offset, leader epoch, producer id, epoch and base
  sequence, base timestamp (or delete horizon) and attributes stay.
* v0/v1, a compressed wrapper: its inner messages kept, byte for byte; its offset is the last
  kept one's (as a wrapper's is its last inner message's), its timestamp the kept messages'
  largest (a LogAppendTime wrapper keeps its own), its CRC-32 computed again. An uncompressed
  v0/v1 message holds one record: it is whole or left out.
"""

from __future__ import annotations

from rlm.errors import CorruptDataError, CorruptRecordError
from rlm.log import codecs, legacy
from rlm.log.batches import Buffer, decode_batch, parse_header
from rlm.log.model import V2_HEADER_SIZE, BatchHeader, Codec, TimestampType
from rlm.log.v2 import CRC_OFFSET, HEADER, compute_crc, records_of
from rlm.log.varint import read_varint

_CRC_BYTES = 4


def batch_up_to(data: Buffer, header: BatchHeader, last: int) -> tuple[BatchHeader, bytes] | None:
    """The batch ``header`` describes (``header.position`` indexes ``data``) holding only its
    records at or below offset ``last``, and its header (with ``header``'s position); None when
    it holds none of them. A batch that ends at or below ``last`` is returned as it is.

    Raises:
        CorruptRecordError: the batch fails its checksum or cannot be decoded.
    """
    records = decode_batch(data, header)
    kept = 0
    while kept < len(records) and records[kept].offset <= last:
        kept += 1
    start, end = header.position, header.end_position
    if kept == 0:
        return None
    if kept == len(records) and header.last_offset <= last:
        return header, bytes(memoryview(data)[start:end])
    if header.magic >= 2:
        log_append = header.timestamp_type is TimestampType.LOG_APPEND_TIME
        max_timestamp = header.max_timestamp if log_append else max(r.timestamp for r in records[:kept])
        out = _v2_up_to(data, header, kept, last, max_timestamp)
    else:
        out = legacy.legacy_up_to(memoryview(data), header, kept, records[kept - 1].offset)
    return parse_header(out, 0, position=start), out


def cut_short(header: BatchHeader, data: bytes, last: int, name: str) -> tuple[BatchHeader, bytes] | None:
    """:func:`batch_up_to` of a batch read alone (``data`` holds it from its first byte;
    ``header.position`` is where it lies in ``name``, which the header returned keeps).

    Raises:
        CorruptDataError: the batch cannot be read, named at its position in ``name``.
    """
    try:
        clipped = batch_up_to(data, header._replace(position=0), last)
    except CorruptDataError as exc:
        raise exc.at(name, header.position) from exc
    return None if clipped is None else (clipped[0]._replace(position=header.position), clipped[1])


def _v2_up_to(data: Buffer, header: BatchHeader, kept: int, last: int, max_timestamp: int) -> bytes:
    """The v2 batch with its first ``kept`` records, cut at offset ``last``."""
    buf, pos, _, _, _, _, _, compressed = records_of(data, header, verify_crc=False)
    start = pos
    for _ in range(kept):
        length, pos = read_varint(buf, pos)
        if length < 0:
            raise CorruptRecordError(f"v2 record has a negative length {length}")
        pos += length
    payload = bytes(memoryview(buf)[start:pos])
    if compressed:
        payload = codecs.compress(Codec(header.codec), payload)
    out = bytearray(V2_HEADER_SIZE + len(payload))
    HEADER.pack_into(
        out,
        0,
        header.base_offset,
        V2_HEADER_SIZE - 12 + len(payload),
        header.leader_epoch,
        2,
        0,
        header.attributes,
        last - header.base_offset,
        header.base_timestamp,
        max_timestamp,
        header.producer_id,
        header.producer_epoch,
        header.base_sequence,
        kept,
    )
    out[V2_HEADER_SIZE:] = payload
    out[CRC_OFFSET : CRC_OFFSET + _CRC_BYTES] = compute_crc(out, 0, len(out)).to_bytes(_CRC_BYTES, "big")
    return bytes(out)
