"""An export's rows written by Spark as Parquet files: partitioned by topic, partition and date
(a Parquet export), or every column in the files (an Iceberg table's data files)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import pyarrow.compute as pc
from pyspark.sql import Observation, SparkSession
from pyspark.sql.functions import count, lit

from rlm.pipeline.export.parquet import files_stage, writes_directly
from rlm.pipeline.export.rows import DATE_COLUMN, PARTITION_COLUMNS
from rlm.pipeline.spark.progress import StageProgress
from rlm.pipeline.spark.stage import collect_stage, map_segments
from rlm.pipeline.stage import Stage
from rlm.remote_tier.read_plan import SegmentSummary


def write_parquet(
    session: SparkSession,
    stage: Stage,
    summaries: Sequence[SegmentSummary],
    directory: str,
    *,
    table_files: bool = False,
    progress: bool | None = None,
) -> int:
    """Run ``stage`` over ``summaries``, one task per segment, writing its rows under
    ``directory`` (which must not exist); returns the rows written.

    By default the files are partitioned by topic, partition and date, with timestamps as
    Parquet's ``TIMESTAMP(MILLIS, UTC)`` (Kafka's precision; pyarrow, DuckDB and pandas read UTC
    timestamps). ``table_files`` writes an Iceberg table's data files instead: every column in
    the files but ``date``, timestamps in microseconds (Iceberg's unit).

    A partitioned export to a local path or ``file://`` URI is written by the executors with
    pyarrow instead (:mod:`rlm.pipeline.export.parquet`), the same layout and types.
    """
    if not table_files and writes_directly(directory):
        # Executors write the files with pyarrow; only one row per file comes back.
        written_files = collect_stage(session, files_stage(stage, directory), summaries, progress=progress)
        return int(pc.sum(written_files.column("rows")).as_py() or 0)
    unit = "TIMESTAMP_MICROS" if table_files else "TIMESTAMP_MILLIS"
    written = Observation("rlm export")
    frame = map_segments(session, stage, summaries).observe(written, count(lit(1)).alias("rows"))
    conf = {**WRITE_CONF, "spark.sql.parquet.outputTimestampType": unit}
    with (
        _write_conf(session, conf),
        StageProgress(session, stage.name, len(summaries), enabled=progress),
    ):
        if table_files:
            frame.drop(DATE_COLUMN).write.mode("errorifexists").parquet(directory)
        else:
            frame.write.partitionBy(*PARTITION_COLUMNS).mode("errorifexists").parquet(directory)
    return int(written.get["rows"])


#: How Spark writes an export's files. A task's rows are one segment's: one topic and partition,
#: a day or two. Spark's planned write would sort every task's rows by the partition columns
#: first (copying every key and value once more); instead each task keeps a writer open per
#: directory, up to this many, and sorts only the rows beyond them.
WRITE_CONF = {
    "spark.sql.optimizer.plannedWrite.enabled": "false",
    "spark.sql.maxConcurrentOutputFileWriters": "8",
}


@contextmanager
def _write_conf(session: SparkSession, conf: dict[str, str]) -> Iterator[None]:
    """``conf`` set on the session while writing, the session's own values restored after."""
    before = {key: session.conf.get(key, None) for key in conf}
    for key, value in conf.items():
        session.conf.set(key, value)
    try:
        yield
    finally:
        for key, old in before.items():
            if old is None:
                session.conf.unset(key)
            else:
                session.conf.set(key, old)
