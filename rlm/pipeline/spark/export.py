"""An export's rows written by Spark as Parquet files: partitioned by topic, partition and date
(a Parquet export), or every column in the files (an Iceberg table's data files)."""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import SparkSession

from rlm.pipeline.export.commit import data_files
from rlm.pipeline.export.rows import DATE_COLUMN, PARTITION_COLUMNS
from rlm.pipeline.plan import SegmentSummary
from rlm.pipeline.spark.files import HadoopFiles
from rlm.pipeline.spark.progress import StageProgress
from rlm.pipeline.spark.stage import map_segments
from rlm.pipeline.stage import Stage


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
    """
    unit = "TIMESTAMP_MICROS" if table_files else "TIMESTAMP_MILLIS"
    session.conf.set("spark.sql.parquet.outputTimestampType", unit)
    frame = map_segments(session, stage, summaries)
    with StageProgress(session, stage.name, len(summaries), enabled=progress):
        if table_files:
            frame.drop(DATE_COLUMN).write.mode("errorifexists").parquet(directory)
        else:
            frame.write.partitionBy(*PARTITION_COLUMNS).mode("errorifexists").parquet(directory)
    if not data_files(HadoopFiles(session), directory):
        return 0  # every row read was left out (control records, aborted transactions)
    return int(session.read.parquet(directory).count())
