"""An export's rows written by Spark: Parquet files partitioned by topic, partition and date."""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import SparkSession

from rlm.pipeline.export.rows import PARTITION_COLUMNS
from rlm.pipeline.plan import SegmentSummary
from rlm.pipeline.spark.progress import StageProgress
from rlm.pipeline.spark.stage import map_segments
from rlm.pipeline.stage import Stage


def write_parquet(
    session: SparkSession,
    stage: Stage,
    summaries: Sequence[SegmentSummary],
    directory: str,
    *,
    progress: bool | None = None,
) -> int:
    """Run ``stage`` over ``summaries``, one task per segment, writing its rows under
    ``directory`` (which must not exist); returns the rows written.

    Timestamps are written as Parquet's ``TIMESTAMP(MILLIS, UTC)``: Kafka's precision, and what
    pyarrow, DuckDB and pandas read as UTC timestamps.
    """
    session.conf.set("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MILLIS")
    frame = map_segments(session, stage, summaries)
    with StageProgress(session, stage.name, len(summaries), enabled=progress):
        frame.write.partitionBy(*PARTITION_COLUMNS).mode("errorifexists").parquet(directory)
    return int(session.read.parquet(directory).count())
