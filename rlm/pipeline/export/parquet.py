"""An export's Parquet files written by the executors themselves, with pyarrow.

Each task writes its segment's rows (:func:`~rlm.pipeline.export.rows.export_task`) straight to
``<directory>/topic=…/partition=…/date=…/part-<directory name>-<segment id>.parquet``, the
layout Spark's partitioned writer makes, and yields one small row per file. The rows never travel
to the JVM: no Arrow to Spark row conversion, no sort, no second encoding. File names follow from
the directory (a run's own staging directory) and the segment, so a task that Spark retries
writes the same files again. On a local disk each file is ``fsync``-ed when written. Only for
outputs pyarrow writes without Hadoop (:func:`writes_directly`); others are written by Spark.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from rlm.pipeline.export.rows import DATE_COLUMN, EXPORT_SCHEMA, PARTITION_COLUMNS
from rlm.pipeline.stage import Stage, Task, arrow_schema, batch_of
from rlm.remote_tier.read_plan import SegmentSummary
from rlm.storage.protocol import RemoteStorage

#: What a file-writing task yields: one row per file it wrote, relative to the directory.
FILES_SCHEMA = arrow_schema(pa.field("path", pa.string()), pa.field("rows", pa.int64()))
#: The columns in the files (the partition columns are in the directory names).
FILE_SCHEMA = pa.schema([f for f in EXPORT_SCHEMA if f.name not in PARTITION_COLUMNS])
#: The column a file keeps without dictionary encoding and without min/max statistics: a record's
#: value is an opaque payload (often compressed or encrypted by its producer), so a dictionary of
#: values only hashes them until it falls back to plain encoding, and their bounds select no row
#: group. Writing an export's rows without both costs about a third less CPU (1.5-1.7 instead of
#: 2.3-2.5 CPU s/GB of 1000-byte values with pyarrow 2x); every other column keeps both.
PAYLOAD_COLUMN = "value"


def _leaf_paths(schema: pa.Schema) -> list[str]:
    """The Parquet column paths of ``schema``'s leaves (lists as Parquet's ``list.element``)."""

    def leaves(name: str, kind: pa.DataType) -> list[str]:
        if pa.types.is_list(kind):
            return leaves(f"{name}.list.element", kind.value_type)
        if pa.types.is_struct(kind):
            return [path for field in kind for path in leaves(f"{name}.{field.name}", field.type)]
        return [name]

    return [path for field in schema for path in leaves(field.name, field.type)]


#: The columns written with dictionary encoding and statistics: all but :data:`PAYLOAD_COLUMN`.
INDEXED_COLUMNS = [path for path in _leaf_paths(FILE_SCHEMA) if path != PAYLOAD_COLUMN]
#: Spark's (Hive's) directory name for a null partition value: records without a timestamp.
NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"


def writes_directly(directory: str) -> bool:
    """Whether executors write under ``directory`` with pyarrow: a local path or ``file://``."""
    return urlparse(directory).scheme in ("", "file")


def _by_date(rows: pa.RecordBatch) -> Iterator[tuple[str, pa.RecordBatch]]:
    """``rows`` split by their ``date``, each part with its directory value."""
    days = rows.column(DATE_COLUMN)
    if days.null_count == 0:
        bounds = pc.min_max(days)
        if bounds["min"] == bounds["max"]:
            yield str(bounds["min"].as_py()), rows
            return
    for day in pc.unique(days).to_pylist():
        keep = pc.is_null(days) if day is None else pc.equal(days, pa.scalar(day, pa.date32()))
        yield (NULL_PARTITION if day is None else str(day)), rows.filter(keep)


def files_task(
    rows_task: Task, directory: str, storage: RemoteStorage, summary: SegmentSummary
) -> Iterator[pa.RecordBatch]:
    """The stage task: write the segment's rows as Parquet files under ``directory``; yields
    one row per file (its path relative to ``directory`` and its rows)."""
    filesystem, root = pafs.FileSystem.from_uri(directory)
    tp = summary.topic_partition
    # The run's staging directory is named after the run: a later run writing the rest of a
    # segment (incremental) never meets this run's names.
    name = f"part-{root.rstrip('/').rpartition('/')[2]}-{summary.segment_id}.parquet"
    writers: dict[str, pq.ParquetWriter] = {}
    counts: dict[str, int] = {}
    try:
        for rows in rows_task(storage, summary):
            for day, part in _by_date(rows):
                relative = f"topic={tp.topic}/partition={tp.partition}/date={day}/{name}"
                writer = writers.get(relative)
                if writer is None:
                    filesystem.create_dir(f"{root}/{relative.rpartition('/')[0]}", recursive=True)
                    writer = pq.ParquetWriter(
                        f"{root}/{relative}",
                        FILE_SCHEMA,
                        filesystem=filesystem,
                        use_dictionary=INDEXED_COLUMNS,  # type: ignore[arg-type]  # a list, as documented
                        write_statistics=INDEXED_COLUMNS,
                    )
                    writers[relative] = writer
                    counts[relative] = 0
                writer.write_batch(part.select(FILE_SCHEMA.names))
                counts[relative] += part.num_rows
    finally:
        for writer in writers.values():
            writer.close()
    if isinstance(filesystem, pafs.LocalFileSystem):
        # The bytes reach the disk before the commit journal names the files (see
        # rlm.pipeline.export.commit), here, side by side with the other tasks' work.
        for relative in writers:
            with open(f"{root}/{relative}", "rb") as written:
                os.fsync(written.fileno())
    yield batch_of(FILES_SCHEMA, [{"path": path, "rows": n} for path, n in counts.items()])


def files_stage(rows: Stage, directory: str) -> Stage:
    """The stage that writes what ``rows`` (the export's rows stage) yields as files under
    ``directory``."""
    return Stage("export", FILES_SCHEMA, functools.partial(files_task, rows.task, directory), rows.storage)
