"""Map-side work of the Spark compaction (no Spark): what each segment's task hands the shuffles.

Both stages read a segment's facts (the task of :func:`~rlm.pipeline.compact.facts.facts_stage`) and reduce
them with Arrow compute before anything crosses into the JVM, so that Spark sees few, narrow rows:
a partition and a segment are numbers (:attr:`SegmentIds.ids`), not strings.

* :class:`FewFacts` (stage ``read keys``): the rows the compactable end and the transaction rules
  need: error rows, control records, transactional data records, empty batches, the
  partition's last record, one row per batch of facts with its first young offset (kind
  :data:`YOUNG`) and one per producer with its last data batch's last offset (kind
  :data:`PRODUCER_LAST`).
* :class:`Candidates` (stage ``pick winners``, once the ends are known): each key's best
  candidate in the segment (highest ``(o1, o2, offset)``, with ``held_any``: whether a held
  candidate of the key is among them) and one row counting the segment's records and those
  touched (``key`` null; or the segment's error, ``error`` set). Spark's hash aggregation then
  takes the best over segments, so its memory holds keys, not records.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import pyarrow as pa
import pyarrow.compute as pc

from rlm.pipeline.compact.facts import ERROR_KIND
from rlm.pipeline.compact.rules import Kind
from rlm.pipeline.stage import Task, arrow_schema
from rlm.remote_tier.read_plan import SegmentSummary
from rlm.storage.protocol import RemoteStorage

#: ``kind`` of a row holding the first young offset of a run of records.
YOUNG = -2
#: ``kind`` of a row holding a producer's highest batch end in a segment.
PRODUCER_LAST = -3
FEW_SCHEMA = arrow_schema(
    pa.field("part", pa.int32()),
    pa.field("seg", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("batch_last", pa.int64()),
    pa.field("kind", pa.int8()),
    pa.field("producer_id", pa.int64()),
    pa.field("transactional", pa.bool_()),
    pa.field("aborted", pa.bool_()),
    pa.field("tombstone", pa.bool_()),
    pa.field("horizon_passed", pa.bool_()),
    pa.field("has_horizon", pa.bool_()),
    pa.field("held", pa.bool_()),
    pa.field("error", pa.string()),
)
CANDIDATE_SCHEMA = arrow_schema(
    pa.field("part", pa.int32()),
    pa.field("seg", pa.int32()),
    pa.field("key", pa.binary()),
    pa.field("o1", pa.int64()),
    pa.field("o2", pa.int64()),
    pa.field("offset", pa.int64()),
    pa.field("tombstone", pa.bool_()),
    pa.field("horizon_passed", pa.bool_()),
    pa.field("has_horizon", pa.bool_()),
    pa.field("held", pa.bool_()),
    pa.field("held_any", pa.bool_()),
    pa.field("total", pa.int64()),
    pa.field("touched", pa.int64()),
    pa.field("error", pa.string()),
)
_BEST_FIRST: list[tuple[str, Literal["ascending", "descending"]]] = [
    ("key", "ascending"),
    ("o1", "descending"),
    ("o2", "descending"),
    ("offset", "descending"),
]


def _int8(value: int) -> pa.Scalar[Any]:
    return pa.scalar(value, pa.int8())


def _int64(value: int) -> pa.Scalar[Any]:
    return pa.scalar(value, pa.int64())


@dataclass(frozen=True)
class SegmentIds:
    """Numbers for a job's partitions and segments; picklable."""

    ids: Mapping[str, tuple[int, int]]
    """Segment id → (partition number, segment number)."""
    read: Task
    """The task of :func:`~rlm.pipeline.compact.facts.facts_stage`: a segment's facts."""


@dataclass(frozen=True)
class FewFacts(SegmentIds):
    """The ``read keys`` task."""

    lasts: Mapping[int, int]
    """Partition number → its highest tiered offset."""

    def __call__(self, storage: RemoteStorage, summary: SegmentSummary) -> Iterator[pa.RecordBatch]:
        part, seg = self.ids[summary.segment_id]
        last = self.lasts.get(part, -1)
        for batch in self.read(storage, summary):
            for rows in few_rows(batch, part, seg, last):
                if rows.num_rows:
                    yield rows


def _numbered(batch: pa.RecordBatch | pa.Table, part: int, seg: int, schema: pa.Schema) -> pa.RecordBatch:
    rows = batch.num_rows
    columns: dict[str, Any] = {
        "part": pa.repeat(pa.scalar(part, pa.int32()), rows),
        "seg": pa.repeat(pa.scalar(seg, pa.int32()), rows),
    }
    for name in batch.schema.names:
        column = batch.column(name)
        columns.setdefault(name, column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column)
    arrays = [columns[f.name].cast(f.type) if f.name in columns else pa.nulls(rows, f.type) for f in schema]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def few_rows(batch: pa.RecordBatch, part: int, seg: int, last: int) -> list[pa.RecordBatch]:
    """The rows of one batch of facts that the ends and the transaction rules need."""
    kind = batch.column("kind")
    offset = batch.column("offset")
    data = pc.or_(pc.equal(kind, _int8(Kind.DATA)), pc.equal(kind, _int8(Kind.EMPTY)))
    wanted = pc.or_(
        pc.or_(pc.equal(kind, _int8(ERROR_KIND)), pc.equal(kind, _int8(Kind.CONTROL))),
        pc.or_(
            pc.or_(pc.and_(data, batch.column("transactional")), pc.equal(kind, _int8(Kind.EMPTY))),
            pc.equal(offset, _int64(last)),
        ),
    )
    parts = [_numbered(batch.filter(wanted), part, seg, FEW_SCHEMA)]
    young = pc.min(pc.filter(offset, batch.column("young"))).as_py()
    if young is not None:
        row = pa.table({"offset": [young], "kind": pa.array([YOUNG], pa.int8())})
        parts.append(_numbered(row, part, seg, FEW_SCHEMA))
    producers = pa.table(
        {"producer_id": batch.column("producer_id"), "batch_last": batch.column("batch_last")}
    )
    # a producer's last data batch: markers are not data batches (see rules.last_data_batches)
    producers = producers.filter(pc.and_(data, pc.greater_equal(producers.column("producer_id"), _int64(0))))
    if producers.num_rows:
        lasts = producers.group_by("producer_id").aggregate([("batch_last", "max")])
        lasts = lasts.rename_columns({"batch_last_max": "batch_last"})
        lasts = lasts.append_column("kind", pa.repeat(pa.scalar(PRODUCER_LAST, pa.int8()), lasts.num_rows))
        parts.append(_numbered(lasts, part, seg, FEW_SCHEMA))
    return parts


@dataclass(frozen=True)
class Candidates(SegmentIds):
    """The ``pick winners`` task."""

    ends: Mapping[int, int]
    """Partition number → its compactable end."""

    def __call__(self, storage: RemoteStorage, summary: SegmentSummary) -> Iterator[pa.RecordBatch]:
        part, seg = self.ids[summary.segment_id]
        end = self.ends.get(part)
        if end is None:  # the partition failed (or has nothing to compact)
            return
        best: list[pa.Table] = []
        total = touched = 0
        for batch in self.read(storage, summary):
            if pc.any(pc.equal(batch.column("kind"), _int8(ERROR_KIND))).as_py():
                # read by the first stage, failing now: the partition fails (no winner is missing)
                yield _numbered(batch.select(["error"]), part, seg, CANDIDATE_SCHEMA)
                return
            kind = batch.column("kind")
            held = pc.or_(batch.column("held"), pc.equal(kind, _int8(Kind.LEGACY)))
            in_range = pc.less_equal(batch.column("batch_last"), _int64(end))
            touch = pc.and_(in_range, pc.invert(held))
            total += batch.num_rows
            touched += pc.sum(touch.cast(pa.int64())).as_py() or 0
            # held records compete too: a tombstone stays while one of its key does
            candidate = pc.and_(
                pc.and_(in_range, pc.not_equal(kind, _int8(Kind.CONTROL))),
                pc.and_(pc.is_valid(batch.column("key")), pc.invert(batch.column("aborted"))),
            )
            rows = batch.set_column(batch.schema.get_field_index("held"), "held", held).filter(candidate)
            rows = rows.append_column("held_any", rows.column("held"))
            best.append(best_per_key(pa.Table.from_batches([rows])))
        found = best_per_key(pa.concat_tables(best)) if best else None
        if found is not None and found.num_rows:
            for chunk in found.to_batches(max_chunksize=65536):
                yield _numbered(chunk, part, seg, CANDIDATE_SCHEMA)
        counts = pa.table({"total": [total], "touched": [touched]})
        yield _numbered(counts, part, seg, CANDIDATE_SCHEMA)


def best_per_key(table: pa.Table) -> pa.Table:
    """Each key's row with the highest ``(o1, o2, offset)``, its ``held_any`` true when that of any
    row of the key is."""
    table = table.select(
        ["key", "o1", "o2", "offset", "tombstone", "horizon_passed", "has_horizon", "held", "held_any"]
    )
    if table.num_rows < 2:
        return table
    ordered = table.take(pc.sort_indices(table, sort_keys=_BEST_FIRST))
    keys = ordered.column("key").combine_chunks()
    changes = pc.not_equal(keys.slice(1), keys.slice(0, len(keys) - 1))
    first = pa.concat_arrays([pa.array([True]), changes])
    # each key's rows are a run: the run's number (a cumulative count of its starts) says which
    # rows share a key, and a run holds a held row when its count of held rows is not zero
    run = pc.subtract(pc.cumulative_sum(first.cast(pa.int64())), _int64(1))
    held = ordered.column("held_any").combine_chunks().cast(pa.int64())
    per_run = pa.table({"run": run, "held": held}).group_by("run").aggregate([("held", "sum")])
    by_run = per_run.sort_by("run").column("held_sum")
    best = ordered.filter(first)
    return best.set_column(best.schema.get_field_index("held_any"), "held_any", pc.greater(by_run, _int64(0)))
