"""Running a :class:`~rlm.pipeline.stage.Stage` on Spark: one task per segment.

The driver pickles the :class:`~rlm.remote_tier.read_plan.SegmentSummary` list into the function it ships
to executors (PySpark broadcasts a function that large instead of sending it with every task) and
runs it over ``n`` numbers split into ``n`` partitions: task ``i`` runs the stage on summary
``i``, reading the objects itself.

:func:`map_segments` gives what the stage yields as a DataFrame (``mapInArrow`` over
``spark.range``): records stay on executors unless a job collects them. :func:`collect_stage`,
for small per-segment results, runs the stage as an RDD job instead and brings its batches to the
driver as Arrow IPC streams: a job that only collects needs no query plan, and Spark SQL's
planning of one (on the driver's JVM, which compiles more of its own code at each new plan) costs
more CPU than the job's few rows.

An executor's Python worker runs many tasks one after another, and PySpark's daemon runs a full
garbage collection after each of them: over every object of the process, the imported modules and
the storage client (botocore's service models) included, some 60-90 ms of CPU per task. Before a
task a worker opens the storage client (once) and freezes what it holds (``gc.freeze``) when it
has imported modules since it last did (:func:`prepare_worker`), so that the collections after a
task look only at what tasks made.
"""

from __future__ import annotations

import gc
import pickle
import sys
import threading
from collections.abc import Iterable, Iterator, Sequence

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import from_arrow_schema

from rlm.pipeline.spark.progress import StageProgress
from rlm.pipeline.stage import Stage
from rlm.pipeline.storage import StorageSpec, executor_storage
from rlm.remote_tier.read_plan import SegmentSummary

_freeze_lock = threading.Lock()
#: ``len(sys.modules)`` when the objects of this process were last frozen.
_frozen_at = [0]


def spark_arrow_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` as Spark takes Arrow batches: timestamps in microseconds, Spark's only unit
    (a stage may keep Kafka's milliseconds; values are converted on the way to Spark)."""
    return pa.schema(
        [
            f.with_type(pa.timestamp("us", tz=f.type.tz)) if isinstance(f.type, pa.TimestampType) else f
            for f in schema
        ]
    )


def prepare_worker(storage: StorageSpec) -> None:
    """Before a task: open the storage client of ``storage`` (once per executor process), and
    freeze every object the process holds whenever modules were imported since the last time
    (see the module's description).

    A worker runs tasks of several kinds (RDD jobs, ``mapInArrow``, ``applyInArrow``), and the
    first of a kind imports what PySpark needs for it (pandas and pyarrow serializers among them):
    frozen once before that, the worker would walk those modules' objects after each later task,
    some 25 ms of CPU per task."""
    executor_storage(storage)
    with _freeze_lock:
        modules = len(sys.modules)
        if modules != _frozen_at[0]:
            gc.freeze()
            _frozen_at[0] = modules


class _RunStage:
    """The function shipped to executors: runs the stage on the summaries whose numbers it gets,
    as ``mapInArrow``'s function (:meth:`__call__`) or an RDD's (:meth:`ipc_streams`)."""

    def __init__(self, stage: Stage, summaries: Sequence[SegmentSummary]) -> None:
        self.stage = stage
        self.summaries = [pickle.dumps(s, protocol=pickle.HIGHEST_PROTOCOL) for s in summaries]
        self.schema = spark_arrow_schema(stage.schema)

    def _run(self, number: int) -> Iterator[pa.RecordBatch]:
        prepare_worker(self.stage.storage)
        summary: SegmentSummary = pickle.loads(self.summaries[number])
        return self.stage.run(summary)

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        convert = not self.schema.equals(self.stage.schema)
        for batch in batches:
            for number in batch.column("id").to_pylist():
                assert isinstance(number, int)  # spark.range's ids are never null
                for out in self._run(number):
                    yield out.cast(self.schema) if convert else out

    def ipc_streams(self, numbers: Iterable[int]) -> Iterator[bytes]:
        """One Arrow IPC stream (of the stage's own schema) per summary."""
        for number in numbers:
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, self.stage.schema) as writer:
                for out in self._run(number):
                    writer.write_batch(out)
            yield sink.getvalue().to_pybytes()


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
    """Run ``stage`` over ``summaries`` and bring what it yields to the driver, in the order of
    ``summaries``.

    For per-segment results (a row or a few per segment), not records. ``progress`` shows a
    progress line (by default on a terminal).
    """
    run = _RunStage(stage, summaries)
    numbers = session.sparkContext.parallelize(range(len(summaries)), max(1, len(summaries)))
    with StageProgress(session, stage.name, len(summaries), enabled=progress):
        streams = numbers.mapPartitions(run.ipc_streams).collect()
    batches = [batch for stream in streams for batch in pa.ipc.open_stream(stream)]
    return pa.Table.from_batches(batches, schema=stage.schema)
