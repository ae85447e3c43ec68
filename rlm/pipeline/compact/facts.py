"""The first stage of compaction: one task per input segment reads it and emits, per record, what
the rules need (:class:`~rlm.pipeline.compact.rules.Fact`) as Arrow rows of :data:`FACT_SCHEMA`.

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

from rlm.errors import CorruptDataError, RlmError
from rlm.pipeline.columns import decode_columns
from rlm.pipeline.compact.rules import Fact, Kind, Strategy, order_key
from rlm.pipeline.plan import SegmentSummary
from rlm.pipeline.reader import RawBatch, SegmentReader
from rlm.pipeline.stage import Stage, arrow_schema
from rlm.pipeline.storage import StorageSpec
from rlm.pipeline.transactions import AbortedIndex
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
    for batch in reader.batches():
        h = batch.header
        if h.last_offset < summary.read_from or h.record_count == 0:
            continue
        if h.base_offset > summary.read_to:
            break
        pending.append(batch)
        if len(pending) >= _BATCHES_PER_DECODE:
            yield _decode(summary, pending, aborted, options)
            pending = []
    if pending:
        yield _decode(summary, pending, aborted, options)


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
    strategy = options.strategy(tp.topic)
    lag = options.lag_ms(tp.topic)
    young_after = options.now_ms - lag
    lasts = [b.header.last_offset for b in batches]
    offsets: list[Any] = table.column("offset").to_pylist()
    stamps: list[Any] = table.column("timestamp").cast(pa.int64()).to_pylist()
    keys: list[Any] = table.column("key").to_pylist()
    values: list[Any] = table.column("value").to_pylist()
    headers: list[Any] | None = table.column("headers").to_pylist() if strategy.kind == "header" else None
    flags: list[Any] = table.column("aborted").to_pylist()
    columns: dict[str, list[Any]] = {name: [] for name in FACT_SCHEMA.names}
    for i, offset in enumerate(offsets):
        h = batches[bisect.bisect_left(lasts, offset)].header
        ts = -1 if stamps[i] is None else stamps[i]
        hs = () if headers is None else tuple((x["key"], x["value"]) for x in headers[i])
        fact = Fact(
            offset=offset,
            batch_last=h.last_offset,
            kind=Kind.LEGACY if h.magic < 2 else (Kind.CONTROL if h.is_control else Kind.DATA),
            key=keys[i],
            order=order_key(strategy, offset, ts, hs),
            tombstone=values[i] is None,
            aborted=bool(flags[i]),
            producer_id=h.producer_id if h.magic >= 2 else -1,
            transactional=h.is_transactional,
            horizon_passed=h.has_delete_horizon and h.base_timestamp <= options.now_ms,
            has_horizon=h.has_delete_horizon,
            young=lag > 0 and ts > young_after,
        )
        add_fact(columns, fact)
    rows = len(columns["offset"])
    columns["topic"] = [tp.topic] * rows
    columns["partition"] = [tp.partition] * rows
    columns["segment_id"] = [summary.segment_id] * rows
    columns["error"] = [None] * rows
    return pa.RecordBatch.from_arrays(
        [pa.array(columns[f.name], type=f.type) for f in FACT_SCHEMA], schema=FACT_SCHEMA
    )


def add_fact(columns: dict[str, list[Any]], fact: Fact) -> None:
    """Append one fact to column lists."""
    for name in ("offset", "batch_last", "kind", "key", "tombstone", "aborted", "producer_id"):
        columns[name].append(getattr(fact, name))
    for name in ("transactional", "horizon_passed", "has_horizon", "young"):
        columns[name].append(getattr(fact, name))
    columns["o1"].append(fact.order[0])
    columns["o2"].append(fact.order[1])


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
    )


def facts_stage(storage: StorageSpec, options: FactOptions) -> Stage:
    """The stage that reads segments into fact rows."""
    return Stage("read keys", FACT_SCHEMA, functools.partial(fact_rows, options=options), storage)
