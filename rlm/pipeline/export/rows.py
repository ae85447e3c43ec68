"""The export's per-segment stage: one row per record, of :data:`EXPORT_SCHEMA`.

Rows come from the records stage (:func:`rlm.pipeline.columns.records_task`, the pipeline's one
decoder); control records (transaction markers) are dropped, and so, under ``read_committed``,
are the records of aborted transactions. ``date`` (the UTC day of the record's timestamp, null
without one) is what Parquet output is partitioned by, besides ``topic`` and ``partition``.

Kafka takes any CreateTime a producer sets, and one set in microseconds by mistake lies tens of
thousands of years on. No date past 9999-12-31 (nor before year 1) is one that Python, Spark or a
Hive partition name holds: such a row's ``date`` is null too (its ``timestamp`` is kept), or the
run would fail on it, and so would every later run of the output.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from enum import Enum
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from rlm.pipeline.columns import EXPORT_COLUMNS, RECORD_SCHEMA, records_task
from rlm.pipeline.stage import Stage, arrow_schema
from rlm.pipeline.storage import StorageSpec
from rlm.remote_tier.read_plan import SegmentSummary
from rlm.storage.protocol import RemoteStorage

#: The column Parquet output is partitioned by, besides ``topic`` and ``partition``.
DATE_COLUMN = "date"
EXPORT_SCHEMA = arrow_schema(
    *(RECORD_SCHEMA.field(name) for name in EXPORT_COLUMNS), pa.field(DATE_COLUMN, pa.date32())
)
#: The columns Parquet output is partitioned by, in directory order.
PARTITION_COLUMNS = ("topic", "partition", DATE_COLUMN)
_TIMESTAMP_TYPE = EXPORT_SCHEMA.field("timestamp").type
#: The first and last instants (ms) a ``date`` names: 0001-01-01 and the end of 9999-12-31.
_FIRST_DATED = pa.scalar(-62_135_596_800_000, _TIMESTAMP_TYPE)
_LAST_DATED = pa.scalar(253_402_300_799_999, _TIMESTAMP_TYPE)
_NO_DATE = pa.scalar(None, pa.date32())


class Isolation(Enum):
    """Which records of transactions an export keeps (Kafka's consumer ``isolation.level``)."""

    READ_COMMITTED = "read_committed"
    """Leave out the records of aborted transactions."""
    READ_UNCOMMITTED = "read_uncommitted"
    """Keep every data record."""


def export_rows(records: pa.RecordBatch, isolation: Isolation) -> pa.RecordBatch:
    """The rows of ``records`` (of :data:`RECORD_SCHEMA`) an export writes, of :data:`EXPORT_SCHEMA`."""
    drop = records.column("is_control")
    if isolation is Isolation.READ_COMMITTED:
        drop = pc.or_(drop, records.column("aborted"))
    # Most batches hold no control record nor aborted one: filtering would copy every key and
    # value for nothing.
    kept = records.filter(pc.invert(drop)) if pc.any(drop).as_py() else records
    days = export_days(kept.column("timestamp"))
    columns = [kept.column(name) for name in EXPORT_COLUMNS]
    return pa.RecordBatch.from_arrays([*columns, days], schema=EXPORT_SCHEMA)


def export_days(timestamps: pa.Array[Any]) -> pa.Array[Any]:
    """The ``date`` of each timestamp: its UTC day, null without one or past the dates (module
    docstring; a cast alone would wrap such a day around, to one no date holds)."""
    days = pc.cast(timestamps, pa.date32())
    undated = pc.or_(pc.less(timestamps, _FIRST_DATED), pc.greater(timestamps, _LAST_DATED))
    return pc.if_else(undated, _NO_DATE, days) if pc.any(undated).as_py() else days


def export_task(
    isolation: Isolation, storage: RemoteStorage, summary: SegmentSummary
) -> Iterator[pa.RecordBatch]:
    """The stage task: the exported rows of the segment's read range."""
    for records in records_task(storage, summary):
        rows = export_rows(records, isolation)
        if rows.num_rows:
            yield rows


def export_stage(storage: StorageSpec, isolation: Isolation) -> Stage:
    """The stage that reads segments' records as exported rows."""
    return Stage("export", EXPORT_SCHEMA, functools.partial(export_task, isolation), storage)
