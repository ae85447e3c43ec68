"""The first stage of compaction: one task per input segment reads it and emits, per record, what
the rules need (:class:`~rlm.pipeline.compact.rules.Fact`) as Arrow rows of :data:`FACT_SCHEMA`,
and one row per empty data batch of a producer (:attr:`~rlm.pipeline.compact.rules.Kind.EMPTY`).

Records are decoded by :func:`rlm.pipeline.columns.decode_columns`. A segment that cannot be read
(a CRC mismatch, a batch that does not decode, a missing object) yields one *error row* instead
(``kind`` = :data:`ERROR_KIND`, ``error`` holding the message, which names the object and the
offset): the job then leaves that segment's partition untouched and goes on with the others.
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from rlm.errors import CorruptDataError, RlmError
from rlm.log.aborted import AbortedIndex
from rlm.log.model import BatchHeader
from rlm.pipeline.columns import decode_columns
from rlm.pipeline.compact.rules import Fact, Kind, Strategy, order_key
from rlm.pipeline.reader import RawBatch, SegmentReader
from rlm.pipeline.stage import Stage, arrow_schema
from rlm.pipeline.storage import StorageSpec
from rlm.remote_tier.read_plan import SegmentSummary
from rlm.storage.protocol import RemoteStorage

#: ``kind`` of an error row.
ERROR_KIND = -1
FACT_SCHEMA = arrow_schema(
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("segment_id", pa.string()),
    pa.field("offset", pa.int64()),
    pa.field("batch_last", pa.int64()),
    pa.field("kind", pa.int8()),
    pa.field("key", pa.binary()),
    pa.field("o1", pa.int64()),
    pa.field("o2", pa.int64()),
    pa.field("tombstone", pa.bool_()),
    pa.field("aborted", pa.bool_()),
    pa.field("producer_id", pa.int64()),
    pa.field("transactional", pa.bool_()),
    pa.field("horizon_passed", pa.bool_()),
    pa.field("has_horizon", pa.bool_()),
    pa.field("young", pa.bool_()),
    pa.field("held", pa.bool_()),
    pa.field("error", pa.string()),
)
_BATCHES_PER_DECODE = 256


@dataclass(frozen=True)
class FactOptions:
    """What the first stage needs besides the segment: per topic strategy and the clock."""

    strategies: tuple[tuple[str, Strategy], ...]
    """Strategy per topic."""
    now_ms: int
    min_compaction_lag_ms: tuple[tuple[str, int], ...] = ()

    def strategy(self, topic: str) -> Strategy:
        return dict(self.strategies).get(topic, Strategy())

    def lag_ms(self, topic: str) -> int:
        return dict(self.min_compaction_lag_ms).get(topic, 0)


def fact_rows(
    storage: RemoteStorage, summary: SegmentSummary, options: FactOptions
) -> Iterator[pa.RecordBatch]:
    """The stage task: fact rows of every record the segment is read for."""
    try:
        yield from _facts(storage, summary, options)
    except (RlmError, OSError) as exc:
        yield error_batch(summary, str(exc))


def error_batch(summary: SegmentSummary, message: str) -> pa.RecordBatch:
    """The one row saying a segment could not be read."""
    tp = summary.topic_partition
    row: dict[str, Any] = {name: None for name in FACT_SCHEMA.names}
    row.update(
        topic=tp.topic,
        partition=tp.partition,
        segment_id=summary.segment_id,
        offset=summary.segment.start_offset,
        kind=ERROR_KIND,
        error=f"{summary.describe()}: {message}",
    )
    return pa.RecordBatch.from_pylist([row], schema=FACT_SCHEMA)


def _facts(storage: RemoteStorage, summary: SegmentSummary, options: FactOptions) -> Iterator[pa.RecordBatch]:
    if summary.read_from > summary.read_to:
        return
    reader = SegmentReader(storage, summary)
    aborted = AbortedIndex(summary.aborted)
    pending: list[RawBatch] = []
    empty: list[BatchHeader] = []
    for batch in reader.batches():
        h = batch.header
        if h.last_offset < summary.read_from:
            continue
        if h.base_offset > summary.read_to:
            break
        if h.record_count == 0:
            if h.magic >= 2 and not h.is_control and h.producer_id >= 0 and h.last_offset <= summary.read_to:
                empty.append(h)
            continue
        pending.append(batch)
        if len(pending) >= _BATCHES_PER_DECODE:
            yield _decode(summary, pending, aborted, options)
            pending = []
    if pending:
        yield _decode(summary, pending, aborted, options)
    if empty:
        yield empty_batch_facts(summary, empty, aborted)


def empty_batch_facts(
    summary: SegmentSummary, headers: Sequence[BatchHeader], aborted: AbortedIndex
) -> pa.RecordBatch:
    """One row per empty data batch with a producer id (:attr:`~rlm.pipeline.compact.rules.Kind.EMPTY`),
    at its last offset: it holds no record, but may hold its producer's state and transaction."""
    tp = summary.topic_partition
    rows = [
        {
            "topic": tp.topic,
            "partition": tp.partition,
            "segment_id": summary.segment_id,
            "offset": h.last_offset,
            "batch_last": h.last_offset,
            "kind": Kind.EMPTY,
            "key": None,
            "o1": 0,
            "o2": 0,
            "tombstone": False,
            "aborted": aborted.is_aborted(h),
            "producer_id": h.producer_id,
            "transactional": h.is_transactional,
            "horizon_passed": False,
            "has_horizon": h.has_delete_horizon,
            "young": False,
            "held": not summary.read_whole,
            "error": None,
        }
        for h in headers
    ]
    return pa.RecordBatch.from_pylist(rows, schema=FACT_SCHEMA)


def _decode(
    summary: SegmentSummary, batches: Sequence[RawBatch], aborted: AbortedIndex, options: FactOptions
) -> pa.RecordBatch:
    tp = summary.topic_partition
    try:
        table = decode_columns(
            tp,
            batches,
            aborted,
            first_offset=summary.read_from,
            last_offset=summary.read_to,
            name=summary.log_key,
        )
    except CorruptDataError as exc:
        base = next((b.header.base_offset for b in batches if b.header.position == exc.position), None)
        where = "" if base is None else f" (the batch at offset {base})"
        raise CorruptDataError(f"{exc}{where}", path=exc.path, position=exc.position) from exc
    return fact_batch(summary, batches, table, options)


def fact_batch(
    summary: SegmentSummary, batches: Sequence[RawBatch], table: pa.RecordBatch, options: FactOptions
) -> pa.RecordBatch:
    """The fact rows of decoded records, column by column (Arrow compute; only the ``header``
    strategy reads each record's headers in Python)."""
    tp = summary.topic_partition
    strategy = options.strategy(tp.topic)
    lag = options.lag_ms(tp.topic)
    rows = table.num_rows
    offsets = table.column("offset")
    # each record's batch: offsets and batches are both in order, so the records of batch i are
    # those after batch i - 1's last offset up to its own
    offset_list: list[Any] = offsets.to_pylist()
    ordinals: list[int] = []
    done = 0
    for i, raw in enumerate(batches):
        upto = bisect.bisect_right(offset_list, raw.header.last_offset, lo=done)
        ordinals += [i] * (upto - done)
        done = upto
    ordinal = pa.array(ordinals, pa.int32())
    headers = [b.header for b in batches]

    def per_batch(values: list[Any], kind: pa.DataType) -> pa.Array[Any]:
        return pa.array(values, kind).take(ordinal)

    stamps: pa.Array[Any] = table.column("timestamp").cast(pa.int64()).fill_null(-1)
    zeros = pa.repeat(pa.scalar(0, pa.int64()), rows)
    o1: pa.Array[Any] = stamps if strategy.kind == "timestamp" else zeros
    o2: pa.Array[Any] = zeros
    if strategy.kind == "header":
        order = [
            order_key(strategy, offset, 0, tuple((x["key"], x["value"]) for x in hs or ()))
            for offset, hs in zip(offset_list, table.column("headers").to_pylist(), strict=True)
        ]
        o1 = pa.array([o[0] for o in order], pa.int64())
        o2 = pa.array([o[1] for o in order], pa.int64())
    # Kafka's cleaner judges the lag by a segment's largest timestamp, or its last modification
    # when no record has one: a record without a timestamp is as young as its segment
    aged: pa.Array[Any] = pc.if_else(
        pc.equal(stamps, pa.scalar(-1, pa.int64())), summary.segment.age_ms(), stamps
    )
    young: pa.Array[Any] = (
        pc.greater(aged, pa.scalar(options.now_ms - lag, pa.int64()))
        if lag > 0
        else pa.repeat(pa.scalar(False), rows)
    )
    columns: dict[str, pa.Array[Any]] = {
        "topic": pa.repeat(pa.scalar(tp.topic, pa.string()), rows),
        "partition": pa.repeat(pa.scalar(tp.partition, pa.int32()), rows),
        "segment_id": pa.repeat(pa.scalar(summary.segment_id, pa.string()), rows),
        "offset": offsets,
        "batch_last": per_batch([h.last_offset for h in headers], pa.int64()),
        "kind": per_batch(
            [Kind.LEGACY if h.magic < 2 else (Kind.CONTROL if h.is_control else Kind.DATA) for h in headers],
            pa.int8(),
        ),
        "key": table.column("key"),
        "o1": o1,
        "o2": o2,
        "tombstone": pc.is_null(table.column("value")),
        "aborted": table.column("aborted").fill_null(False),
        "producer_id": per_batch([h.producer_id if h.magic >= 2 else -1 for h in headers], pa.int64()),
        "transactional": per_batch([h.is_transactional for h in headers], pa.bool_()),
        "horizon_passed": per_batch(
            [h.has_delete_horizon and h.base_timestamp <= options.now_ms for h in headers], pa.bool_()
        ),
        "has_horizon": per_batch([h.has_delete_horizon for h in headers], pa.bool_()),
        "young": young,
        # a segment read only in part is never rewritten: all its records stay as they are
        "held": per_batch([h.magic < 2 or not summary.read_whole for h in headers], pa.bool_()),
        "error": pa.nulls(rows, pa.string()),
    }
    return pa.RecordBatch.from_arrays([columns[f.name] for f in FACT_SCHEMA], schema=FACT_SCHEMA)


def fact_from_row(row: dict[str, Any]) -> Fact:
    """A fact back from one row (for the in-process reference)."""
    return Fact(
        offset=row["offset"],
        batch_last=row["batch_last"],
        kind=row["kind"],
        key=row["key"],
        order=(row["o1"], row["o2"], row["offset"]),
        tombstone=row["tombstone"],
        aborted=row["aborted"],
        producer_id=row["producer_id"],
        transactional=row["transactional"],
        horizon_passed=row["horizon_passed"],
        has_horizon=row["has_horizon"],
        young=row["young"],
        held=row["held"],
    )


def facts_stage(storage: StorageSpec, options: FactOptions) -> Stage:
    """The stage that reads segments into fact rows."""
    return Stage("read keys", FACT_SCHEMA, functools.partial(fact_rows, options=options), storage)
