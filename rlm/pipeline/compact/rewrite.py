"""Rewriting batches and segments with only the records compaction keeps (no Spark).

Offsets never change: a rewritten batch keeps its base offset, last offset delta, producer id,
epoch and base sequence, partition leader epoch, timestamp type and codec (its records are
compressed again); its max timestamp is recomputed from the records kept (LogAppendTime batches
keep theirs). A batch that keeps a tombstone, or a transaction marker of an emptied transaction,
gets a delete horizon (attribute bit 6, ``baseTimestamp`` = now + ``delete.retention.ms``) unless
it has one. A data batch emptied of records stays as an empty, header-only batch when it is its
producer's last data batch (the producer's sequence and epoch live there), else it goes, and so
does an empty batch of an earlier run that no longer is; an emptied control batch goes. Batches
past the compactable end, legacy batches and the other empty batches are copied byte for byte.

Records are read with :func:`rlm.pipeline.columns.decode_columns`, the pipeline's one decoder.
The kept records of a batch encoded again are decoded once more as records that keep their header
keys' bytes (:func:`rlm.log.v2.decode_v2` with ``raw_header_keys``): the columns hold keys as
Kafka's client presents them, where a key that is not UTF-8 has lost its bytes to U+FFFD.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rlm.arguments import INT64_MAX
from rlm.log.aborted import AbortedIndex
from rlm.log.model import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    BatchHeader,
    Record,
    TimestampType,
)
from rlm.log.v2 import decode_v2, encode_v2_batch
from rlm.metastore.model import TopicPartition
from rlm.pipeline.columns import decode_columns
from rlm.pipeline.reader import RawBatch

#: The timestamp type's attribute bit (LogAppendTime when set).
_TIMESTAMP_TYPE_BIT = 0x08


@dataclass(frozen=True)
class RewriteParams:
    """The clock and settings a rewrite applies."""

    now_ms: int
    delete_retention_ms: int

    @property
    def new_horizon(self) -> int:
        """now + ``delete.retention.ms``, at most the largest timestamp a batch holds (a
        retention of Long.MAX_VALUE keeps tombstones for good, never wraps to a past horizon)."""
        return min(self.now_ms + self.delete_retention_ms, INT64_MAX)


@dataclass(frozen=True)
class Keep:
    """The decisions a rewrite applies to one range (see :class:`~.rules.Decisions`)."""

    end: int
    kept: frozenset[int]
    empty_markers: frozenset[int]
    last_batches: frozenset[int]


@dataclass
class Counts:
    """What a rewrite did, in records and bytes."""

    records_in: int = 0
    records_out: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    tombstones_kept: int = 0
    tombstones_dropped: int = 0
    aborted_dropped: int = 0
    null_keys_dropped: int = 0
    markers_dropped: int = 0
    batches_stamped: int = 0
    batches_emptied: int = 0
    last_header: BatchHeader | None = field(default=None, compare=False, repr=False)
    """The header of the last batch read (not a count)."""

    def add(self, other: Counts) -> None:
        for name in COUNT_NAMES:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def to_json(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in COUNT_NAMES}


COUNT_NAMES = tuple(name for name in Counts.__dataclass_fields__ if name != "last_header")


@dataclass
class _Batch:
    """What a rewrite needs of one batch's records, counted column-wise."""

    records: int = 0
    """Records decoded (v2 batches holding records; 0 for the others)."""
    kept: int = 0
    kept_tombstones: int = 0
    dropped_null_keys: int = 0
    dropped_tombstones: int = 0
    aborted: bool = False
    marks_empty: bool = False
    """A kept record is an empty transaction's marker."""
    rows: list[Record] = field(default_factory=list)
    """The kept records, made only when the batch is encoded again."""


def _offsets(values: frozenset[int]) -> pa.Array[Any]:
    return pa.array(sorted(values), pa.int64())


def decode_kept(
    tp: TopicPartition, batches: Sequence[RawBatch], keep: Keep, aborted: AbortedIndex, name: str
) -> list[_Batch]:
    """Per batch its records' counts against ``keep`` (through ``decode_columns``, with Arrow
    compute); the kept records as :class:`Record`, header keys' bytes as stored, only for
    batches that change (a record removed, or a delete horizon to stamp)."""
    out = [_Batch() for _ in batches]
    wanted = [
        i
        for i, b in enumerate(batches)
        if b.header.magic >= 2 and b.header.record_count > 0 and b.header.last_offset <= keep.end
    ]
    if not wanted:
        return out
    table = decode_columns(
        tp, [batches[i] for i in wanted], aborted, first_offset=0, last_offset=2**63 - 1, name=name
    )
    offsets = table.column("offset")
    kept = pc.is_in(offsets, value_set=_offsets(keep.kept)).to_numpy(zero_copy_only=False)
    marker = pc.is_in(offsets, value_set=_offsets(keep.empty_markers)).to_numpy(zero_copy_only=False)
    tombstone = pc.is_null(table.column("value")).to_numpy(zero_copy_only=False)
    null_key = pc.is_null(table.column("key")).to_numpy(zero_copy_only=False)
    flags = table.column("aborted").fill_null(False).to_numpy(zero_copy_only=False)
    ends = np.searchsorted(offsets.to_numpy(), [batches[i].header.last_offset for i in wanted], side="right")
    changed: list[tuple[int, int, int]] = []  # (batch, first row, end row) of batches encoded again
    lo = 0
    for i, hi in zip(wanted, ends.tolist(), strict=True):
        h, b = batches[i].header, out[i]
        k, t = kept[lo:hi], tombstone[lo:hi]
        b.records, b.kept = hi - lo, int(k.sum())
        b.kept_tombstones = int((k & t).sum())
        dropped = ~k
        b.dropped_null_keys = int((dropped & null_key[lo:hi]).sum())
        b.dropped_tombstones = int((dropped & ~null_key[lo:hi] & t).sum())
        b.aborted = bool(flags[hi - 1]) if hi > lo else False
        b.marks_empty = bool((k & marker[lo:hi]).any())
        if b.kept > 0 and (b.kept < b.records or _stamps(h, b)):
            changed.append((i, lo, hi))
        lo = hi
    numbers = offsets.to_numpy()
    for i, lo, hi in changed:
        b, raw = out[i], batches[i]
        wanted_offsets = frozenset(numbers[lo:hi][kept[lo:hi]].tolist())
        records = decode_v2(raw.data, raw.header._replace(position=0), verify_crc=False, raw_header_keys=True)
        b.rows = [r for r in records if r.offset in wanted_offsets]
    return out


def _stale(h: BatchHeader, keep: Keep) -> bool:
    """An empty data batch of a producer that is no longer its producer's last data batch: it goes
    (Kafka's ``DELETE_EMPTY``; a later batch holds the producer's state)."""
    return not h.is_control and h.producer_id >= 0 and h.last_offset not in keep.last_batches


def _stamps(h: BatchHeader, b: _Batch) -> bool:
    """The batch gets a delete horizon: it keeps a tombstone or an empty transaction's marker."""
    if h.has_delete_horizon:
        return False
    return b.marks_empty if h.is_control else b.kept_tombstones > 0


def rewrite_batch(
    batch: RawBatch, decoded: _Batch, keep: Keep, params: RewriteParams, counts: Counts
) -> bytes | None:
    """The batch as compaction leaves it: its bytes (the same bytes when nothing changes), or
    ``None`` when it goes."""
    h = batch.header
    counts.last_header = h
    data = bytes(batch.data)
    counts.bytes_in += len(data)
    counts.records_in += max(h.record_count, 0) if h.magic >= 2 else decoded.records
    if h.magic < 2 or h.last_offset > keep.end or (h.record_count == 0 and not _stale(h, keep)):
        counts.records_out += h.record_count if h.magic >= 2 else 0
        counts.bytes_out += len(data)
        return data
    if h.record_count == 0:
        return None
    dropped = decoded.records - decoded.kept
    if not h.is_control:
        counts.tombstones_kept += decoded.kept_tombstones
    if h.is_control:
        counts.markers_dropped += dropped
    elif decoded.aborted:
        counts.aborted_dropped += dropped
    else:
        counts.null_keys_dropped += decoded.dropped_null_keys
        counts.tombstones_dropped += decoded.dropped_tombstones
    stamp = _stamps(h, decoded)
    if not decoded.kept:
        if h.is_control or h.producer_id < 0 or h.last_offset not in keep.last_batches:
            return None
        counts.batches_emptied += 1
        out = _encode(h, [], None)
    elif decoded.kept == decoded.records and not stamp:
        out = data
    else:
        counts.batches_stamped += stamp
        horizon = h.base_timestamp if h.has_delete_horizon else (params.new_horizon if stamp else None)
        out = _encode(h, decoded.rows, horizon)
    counts.records_out += decoded.kept
    counts.bytes_out += len(out)
    return out


def _encode(h: BatchHeader, records: list[Record], horizon: int | None) -> bytes:
    log_append = h.timestamp_type is TimestampType.LOG_APPEND_TIME
    return encode_v2_batch(
        records,
        base_offset=h.base_offset,
        codec=h.codec,
        timestamp_type=h.timestamp_type,
        log_append_time=h.max_timestamp if log_append else None,
        leader_epoch=h.leader_epoch,
        producer_id=h.producer_id,
        producer_epoch=h.producer_epoch,
        base_sequence=h.base_sequence,
        is_transactional=h.is_transactional,
        is_control=h.is_control,
        delete_horizon=horizon,
        last_offset_delta=h.last_offset - h.base_offset,
        max_timestamp=h.max_timestamp if not records else None,
    )


def empty_batch(h: BatchHeader) -> bytes:
    """A header-only batch in place of the batch ``h`` heads when every batch of an output went:
    its offsets, leader epoch and timestamp type, no timestamp and no producer. The producer
    fields of a batch that went would say what the log no longer does: read by a broker's
    recovery, those of a marker or a transactional batch open a transaction that nothing closes,
    those of an idempotent one a sequence the producer is past (Kafka's cleaner keeps a
    producer's fields only in its last data batch, which compaction keeps). Its max timestamp
    would be that of records that went, the segment's largest timestamp for retention and
    lookups (Kafka's cleaner appends nothing when no batch is retained)."""
    plain = h._replace(
        attributes=h.attributes & _TIMESTAMP_TYPE_BIT,
        max_timestamp=NO_TIMESTAMP,
        producer_id=NO_PRODUCER_ID,
        producer_epoch=NO_PRODUCER_EPOCH,
        base_sequence=NO_SEQUENCE,
    )
    return _encode(plain, [], None)


def rewrite_batches(
    tp: TopicPartition,
    batches: Iterable[RawBatch],
    keep: Keep,
    params: RewriteParams,
    aborted: AbortedIndex,
    name: str,
    counts: Counts,
    *,
    chunk: int = 256,
) -> Iterable[bytes]:
    """Every batch of ``batches`` as compaction leaves it, in order (those that go left out)."""
    pending: list[RawBatch] = []

    def flush() -> Iterable[bytes]:
        decoded = decode_kept(tp, pending, keep, aborted, name)
        for raw, dec in zip(pending, decoded, strict=True):
            out = rewrite_batch(raw, dec, keep, params, counts)
            if out is not None:
                yield out

    for batch in batches:
        pending.append(RawBatch(batch.header, bytes(batch.data)))
        if len(pending) >= chunk:
            yield from flush()
            pending = []
    if pending:
        yield from flush()
