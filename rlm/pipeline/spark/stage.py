"""Running a :class:`~rlm.pipeline.stage.Stage` on Spark: one task per segment, with ``mapInArrow``.

The driver pickles the :class:`~rlm.pipeline.plan.SegmentSummary` list into the function it ships
to executors (PySpark broadcasts a function that large instead of sending it with every task) and
runs it over ``spark.range(n)`` split into ``n`` partitions: task ``i`` runs the stage on summary
``i``, reading the objects itself. What the stage yields is the DataFrame :func:`map_segments`
returns: records stay on executors unless a job collects them (:func:`collect_stage` is for small,
per-segment results).
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import from_arrow_schema

from rlm.pipeline.plan import SegmentSummary
from rlm.pipeline.spark.progress import StageProgress
from rlm.pipeline.stage import Stage


def spark_arrow_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` as Spark takes Arrow batches: timestamps in microseconds, Spark's only unit
    (a stage may keep Kafka's milliseconds; values are converted on the way to Spark)."""
    return pa.schema(
        [
            f.with_type(pa.timestamp("us", tz=f.type.tz)) if isinstance(f.type, pa.TimestampType) else f
            for f in schema
        ]
    )


class _RunStage:
    """The function ``mapInArrow`` ships to executors: runs the stage on the summaries whose
    numbers it gets."""

    def __init__(self, stage: Stage, summaries: Sequence[SegmentSummary]) -> None:
        self.stage = stage
        self.summaries = [pickle.dumps(s, protocol=pickle.HIGHEST_PROTOCOL) for s in summaries]
        self.schema = spark_arrow_schema(stage.schema)

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        convert = not self.schema.equals(self.stage.schema)
        for batch in batches:
            for number in batch.column("id").to_pylist():
                assert isinstance(number, int)  # spark.range's ids are never null
                summary: SegmentSummary = pickle.loads(self.summaries[number])
                for out in self.stage.run(summary):
                    yield out.cast(self.schema) if convert else out


def map_segments(session: SparkSession, stage: Stage, summaries: Sequence[SegmentSummary]) -> DataFrame:
    """The DataFrame of everything ``stage`` yields over ``summaries`` (lazy: nothing runs yet)."""
    run = _RunStage(stage, summaries)
    schema = from_arrow_schema(run.schema, prefer_timestamp_ntz=False)
    return session.range(0, len(summaries), 1, max(1, len(summaries))).mapInArrow(run, schema)


def collect_stage(
    session: SparkSession,
    stage: Stage,
    summaries: Sequence[SegmentSummary],
    *,
    progress: bool | None = None,
) -> pa.Table:
    """Run ``stage`` over ``summaries`` and bring what it yields to the driver.

    For per-segment results (a row or a few per segment), not records. ``progress`` shows a
    progress line (by default on a terminal).
    """
    frame = map_segments(session, stage, summaries)
    with StageProgress(session, stage.name, len(summaries), enabled=progress):
        table = frame.toArrow()
    return table
