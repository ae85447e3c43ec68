"""A per-segment stage of a job: a function run once per segment, on an executor, yielding Arrow.

A :class:`Stage` names the function, the Arrow schema of what it yields and the storage it reads.
The function must be picklable (a module-level function, or a ``functools.partial`` of one with
picklable arguments): Spark ships it to executors. It gets the executor's storage client and one
:class:`~rlm.remote_tier.read_plan.SegmentSummary`, and yields record batches of exactly the stage's
schema: per record rows (export, compaction's first stage) or one small row per segment (verify).

:func:`rlm.pipeline.spark.stage.map_segments` runs a stage on Spark, one task per segment;
:func:`run_in_process` runs the same stage here, one segment after another.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from rlm.pipeline.storage import StorageSpec, executor_storage
from rlm.remote_tier.read_plan import SegmentSummary
from rlm.storage.protocol import RemoteStorage

Task = Callable[[RemoteStorage, SegmentSummary], Iterator[pa.RecordBatch]]
"""What a stage runs per segment: ``(storage, summary) -> record batches``."""
Collect = Callable[["Stage", Sequence[SegmentSummary]], pa.Table]
"""Runs a stage over segments and brings its (small) output to the driver: Spark's
:func:`~rlm.pipeline.spark.stage.collect_stage` bound to a session, or :func:`run_in_process`."""


@dataclass(frozen=True)
class Stage:
    """One per-segment step of a job."""

    name: str
    """Short name, shown in progress lines (``verify``, ``read records``)."""
    schema: pa.Schema
    """The schema of every batch the task yields."""
    task: Task
    """The per-segment function; picklable."""
    storage: StorageSpec
    """The remote tier the task reads."""

    def run(self, summary: SegmentSummary) -> Iterator[pa.RecordBatch]:
        """Run the task on one segment with this process's storage client.

        Raises:
            TypeError: The task yielded a batch of another schema.
        """
        storage = executor_storage(self.storage)
        for batch in self.task(storage, summary):
            if not batch.schema.equals(self.schema):
                raise TypeError(
                    f"stage {self.name!r} yielded a batch of schema {batch.schema}, not {self.schema}"
                )
            yield batch


def run_in_process(stage: Stage, summaries: Sequence[SegmentSummary]) -> pa.Table:
    """Run ``stage`` on every segment in this process, one after another; all output as one table."""
    batches = [batch for summary in summaries for batch in stage.run(summary)]
    return pa.Table.from_batches(batches, schema=stage.schema)


def arrow_schema(*fields: pa.Field[Any]) -> pa.Schema:
    """A schema of ``fields`` (typed for mypy, which cannot join fields of different types)."""
    return pa.schema(list(fields))


def batch_of(schema: pa.Schema, rows: Sequence[dict[str, Any]]) -> pa.RecordBatch:
    """A record batch of ``schema`` holding ``rows`` (dicts keyed by column name)."""
    return pa.RecordBatch.from_pylist(list(rows), schema=schema)
