"""Compaction on Spark: the :class:`~rlm.pipeline.compact.engine.Engine` whose stages are Spark's.

1. ``read keys``: one task per input segment emits a fact row per record (``mapInArrow``).
2. ``pick winners``: per partition the compactable end (young records, undecided transactions);
   the winner per (partition, key) by a window over a shuffle (memory bounded by Spark's shuffle,
   which spills, not by a dedupe buffer); each transaction marker's liveness by a window over
   (partition, producer); per segment what changes. Only per-partition ends and per-segment
   counts reach the driver.
3. ``write segments``: the kept offsets, empty transactions' markers and producers' last batches
   are shuffled to the output segment holding them; one task per output segment (``applyInArrow``)
   rereads its inputs, keeps those offsets, writes the segment and its index object, and returns
   its metadata row.

The rules are those of :func:`rlm.pipeline.compact.rules.decide` (the reference); the tests run
both on the same logs and compare what they write.
"""

from __future__ import annotations

import json
import pickle
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as sf

from rlm.errors import RlmError
from rlm.metastore.model import TopicPartition
from rlm.pipeline.compact.engine import GroupResult, PartitionDecision
from rlm.pipeline.compact.facts import ERROR_KIND, FactOptions, facts_stage
from rlm.pipeline.compact.rewrite import COUNT_NAMES, Counts, Keep
from rlm.pipeline.compact.rules import Kind
from rlm.pipeline.compact.segment import OutputPlan, SegmentChange, write_output
from rlm.pipeline.plan import PartitionPlan
from rlm.pipeline.spark.progress import StageProgress
from rlm.pipeline.spark.stage import collect_stage, map_segments
from rlm.pipeline.stage import Collect, arrow_schema
from rlm.pipeline.storage import StorageSpec, executor_storage

TP = ["topic", "partition"]
RESULT_SCHEMA = arrow_schema(
    pa.field("group", pa.int64()),
    pa.field("row", pa.binary()),
    pa.field("counts", pa.string()),
    pa.field("error", pa.string()),
)
RESULT_DDL = "group long, row binary, counts string, error string"
#: What a row shipped to an output's task says of its offset.
KEPT, EMPTY_MARKER, LAST_BATCH, NOTHING = 0, 1, 2, -1


def _flag(condition: Column) -> Column:
    return sf.when(condition, 1).otherwise(0)


class SparkEngine:
    """Compaction's stages on a SparkSession."""

    def __init__(self, session: SparkSession, storage: StorageSpec, *, progress: bool | None = None) -> None:
        self.session = session
        self.storage = storage
        self.progress = progress
        self.collect: Collect = lambda stage, summaries: collect_stage(
            session, stage, summaries, progress=progress
        )
        self._facts: DataFrame | None = None
        self._flags: DataFrame | None = None
        self._last_batches: DataFrame | None = None
        self._ends: dict[TopicPartition, int] = {}

    def _shuffle_partitions(self) -> None:
        """Spark's default of 200 shuffle partitions, left unchanged by the user, becomes three per
        core: the shuffles here are of small rows, and each partition costs a task."""
        key = "spark.sql.shuffle.partitions"
        if self.session.conf.get(key) == "200":
            self.session.conf.set(key, str(max(1, 3 * self.session.sparkContext.defaultParallelism)))

    def _progress(self, label: str, total: int) -> StageProgress:
        return StageProgress(self.session, label, total, enabled=self.progress)

    def decide(
        self, plans: Sequence[PartitionPlan], options: FactOptions
    ) -> dict[TopicPartition, PartitionDecision]:
        summaries = [s for plan in plans for s in plan.segments]
        out: dict[TopicPartition, PartitionDecision] = {p.topic_partition: PartitionDecision() for p in plans}
        if not summaries:
            return out
        self._shuffle_partitions()
        facts = map_segments(self.session, facts_stage(self.storage, options), summaries).persist(
            StorageLevel.MEMORY_AND_DISK
        )
        self._facts = facts
        with self._progress("read keys", len(summaries)):
            errors = facts.filter(sf.col("kind") == ERROR_KIND).select(*TP, "error").collect()
        failed: dict[TopicPartition, list[str]] = {}
        for e in errors:
            failed.setdefault(TopicPartition(e["topic"], e["partition"]), []).append(e["error"])
        for tp, messages in failed.items():
            out[tp] = PartitionDecision(error="; ".join(messages))
        lasts = [
            (p.topic_partition.topic, p.topic_partition.partition, max(s.read_to for s in p.segments))
            for p in plans
            if p.segments and p.topic_partition not in failed
        ]
        if not lasts:
            return out
        bounds = self.session.createDataFrame(lasts, "topic string, partition int, last long")
        good = facts.filter(sf.col("kind") != ERROR_KIND).join(sf.broadcast(bounds), TP)
        young = good.filter("young").groupBy(*TP).agg(sf.min("offset").alias("young"))
        txn = good.filter(sf.col("transactional") & (sf.col("kind") != Kind.LEGACY))
        markers = txn.groupBy(*TP, "producer_id").agg(
            sf.max(sf.when(sf.col("kind") == Kind.CONTROL, sf.col("offset"))).alias("marker")
        )
        undecided = (
            txn.filter(sf.col("kind") == Kind.DATA)
            .join(markers, [*TP, "producer_id"])
            .filter(sf.col("marker").isNull() | (sf.col("offset") > sf.col("marker")))
            .groupBy(*TP)
            .agg(sf.min("offset").alias("open"))
        )
        last = sf.col("last")
        ends = (
            bounds.join(young, TP, "left")
            .join(undecided, TP, "left")
            .select(
                *TP,
                sf.least(
                    last, sf.coalesce(sf.col("young") - 1, last), sf.coalesce(sf.col("open") - 1, last)
                ).alias("end"),
            )
        )
        with self._progress("pick winners: ends", len(lasts)):
            self._ends = {TopicPartition(r["topic"], r["partition"]): r["end"] for r in ends.collect()}
        ends_frame = self.session.createDataFrame(
            [(tp.topic, tp.partition, end) for tp, end in self._ends.items()],
            "topic string, partition int, end long",
        )
        flags = self._flags_of(good.join(sf.broadcast(ends_frame), TP)).persist(StorageLevel.MEMORY_AND_DISK)
        self._flags = flags
        self._last_batches = (
            flags.filter(sf.col("producer_id") >= 0)
            .groupBy(*TP, "producer_id")
            .agg(sf.max("batch_last").alias("offset"))
            .select(*TP, "offset", sf.lit(LAST_BATCH).alias("what"))
        )
        removed = sf.col("touch") & ~sf.col("kept")
        stamped = (
            sf.col("touch")
            & sf.col("kept")
            & ~sf.col("has_horizon")
            & (sf.col("empty_marker") | ((sf.col("kind") == Kind.DATA) & sf.col("tombstone")))
        )
        changes = flags.groupBy(*TP, "segment_id").agg(
            sf.sum(_flag(removed)).alias("removed"),
            sf.sum(_flag(stamped)).alias("stamped"),
            sf.sum(_flag(~removed)).alias("kept"),
            sf.count(sf.lit(1)).alias("total"),
        )
        with self._progress("pick winners", len(summaries)):
            rows = changes.collect()
        per_partition: dict[TopicPartition, dict[str, SegmentChange]] = {}
        for r in rows:
            tp = TopicPartition(r["topic"], r["partition"])
            per_partition.setdefault(tp, {})[r["segment_id"]] = SegmentChange(
                int(r["removed"]), int(r["stamped"]), int(r["kept"]), int(r["total"])
            )
        for plan in plans:
            tp = plan.topic_partition
            if tp in self._ends:
                found = per_partition.get(tp, {})
                empty = SegmentChange(0, 0, 0, 0)
                out[tp] = PartitionDecision(
                    self._ends[tp], {s.segment_id: found.get(s.segment_id, empty) for s in plan.segments}
                )
        return out

    @staticmethod
    def _flags_of(rows: DataFrame) -> DataFrame:
        """Per record: touched (in a batch at or below the end, not legacy), kept, empty marker."""
        kind, offset = sf.col("kind"), sf.col("offset")
        touch = (kind != Kind.LEGACY) & (sf.col("batch_last") <= sf.col("end"))
        candidate = (kind == Kind.DATA) & touch & sf.col("key").isNotNull() & ~sf.col("aborted")
        by_key = Window.partitionBy(*TP, "key", "candidate").orderBy(
            sf.desc("o1"), sf.desc("o2"), sf.desc("offset")
        )
        rows = rows.withColumn("touch", touch).withColumn("candidate", candidate)
        rows = rows.withColumn("winner", sf.col("candidate") & (sf.row_number().over(by_key) == 1))
        kept_data = (
            (kind == Kind.DATA)
            & sf.col("touch")
            & (
                (offset == sf.col("last"))
                | (sf.col("winner") & ~(sf.col("tombstone") & sf.col("horizon_passed")))
            )
        )
        rows = rows.withColumn("kept_data", kept_data)
        above = (
            Window.partitionBy(*TP, "producer_id")
            .orderBy(sf.desc("offset"))
            .rowsBetween(Window.unboundedPreceding, Window.currentRow)
        )
        rows = rows.withColumn(
            "marker_of",
            sf.when(sf.col("transactional"), sf.min(sf.when(kind == Kind.CONTROL, offset)).over(above)),
        )
        alive = (kind == Kind.DATA) & sf.col("transactional") & (~sf.col("touch") | sf.col("kept_data"))
        transaction = Window.partitionBy(*TP, "producer_id", "marker_of")
        rows = rows.withColumn("live", sf.max(_flag(alive)).over(transaction) == 1)
        kept_control = (
            (kind == Kind.CONTROL)
            & sf.col("touch")
            & (sf.col("live") | (offset == sf.col("last")) | ~sf.col("horizon_passed"))
        )
        rows = rows.withColumn("kept_control", kept_control)
        return rows.select(
            *TP,
            "segment_id",
            "offset",
            "batch_last",
            "kind",
            "tombstone",
            "has_horizon",
            "producer_id",
            "touch",
            (sf.col("kept_data") | sf.col("kept_control")).alias("kept"),
            (sf.col("kept_control") & ~sf.col("live")).alias("empty_marker"),
        )

    def write(self, outputs: Sequence[OutputPlan], *, now_ms: int, write: bool) -> list[GroupResult]:
        if not outputs:
            return []
        assert self._flags is not None and self._last_batches is not None, "decide() first"
        ranges = self.session.createDataFrame(
            [
                (
                    i,
                    o.inputs[0].topic_partition.topic,
                    o.inputs[0].topic_partition.partition,
                    o.start_offset,
                    o.end_offset,
                )
                for i, o in enumerate(outputs)
            ],
            "group long, topic string, partition int, start long, stop long",
        )
        flags = self._flags
        needed = (
            flags.filter(sf.col("touch") & sf.col("kept"))
            .select(*TP, "offset", sf.lit(KEPT).alias("what"))
            .unionByName(
                flags.filter("empty_marker").select(*TP, "offset", sf.lit(EMPTY_MARKER).alias("what"))
            )
            .unionByName(self._last_batches)
        )
        tagged = needed.join(
            sf.broadcast(ranges),
            (needed["topic"] == ranges["topic"])
            & (needed["partition"] == ranges["partition"])
            & needed["offset"].between(ranges["start"], ranges["stop"]),
        ).select("group", "what", "offset")
        every = self.session.createDataFrame(
            [(i, NOTHING, -1) for i in range(len(outputs))], "group long, what int, offset long"
        )
        task = _WriteOutputs(outputs, self.storage, self._ends, now_ms, write)

        def write_group(table: pa.Table) -> pa.Table:  # typed: Spark picks the UDF kind by the hints
            return task(table)

        # One task per output segment (two may share one when their numbers hash alike).
        by_output = tagged.unionByName(every).repartition(len(outputs), "group")
        frame = by_output.groupBy("group").applyInArrow(write_group, RESULT_DDL)
        with self._progress("write segments", len(outputs)):
            table = frame.toArrow()
        for cached in (self._flags, self._facts):
            if cached is not None:
                cached.unpersist()
        results = []
        for r in table.to_pylist():
            row = None if r["row"] is None else pickle.loads(r["row"])
            counts = Counts(**json.loads(r["counts"])) if r["counts"] else Counts()
            results.append(GroupResult(int(r["group"]), row, counts, r["error"]))
        return sorted(results, key=lambda g: g.index)


class _WriteOutputs:
    """The function ``applyInArrow`` ships: writes the output segment of one group."""

    def __init__(
        self,
        outputs: Sequence[OutputPlan],
        storage: StorageSpec,
        ends: dict[TopicPartition, int],
        now_ms: int,
        write: bool,
    ) -> None:
        self.outputs = [pickle.dumps(o, protocol=pickle.HIGHEST_PROTOCOL) for o in outputs]
        self.storage = storage
        self.ends = dict(ends)
        self.now_ms = now_ms
        self.write = write

    def __call__(self, table: pa.Table) -> pa.Table:
        groups: list[Any] = table.column("group").to_pylist()
        whats: list[Any] = table.column("what").to_pylist()
        offsets: list[Any] = table.column("offset").to_pylist()
        index = int(groups[0])
        plan: OutputPlan = pickle.loads(self.outputs[index])
        sets: dict[int, set[int]] = {KEPT: set(), EMPTY_MARKER: set(), LAST_BATCH: set()}
        for what, offset in zip(whats, offsets, strict=True):
            if what != NOTHING:
                sets[what].add(offset)
        keep = Keep(
            self.ends[plan.inputs[0].topic_partition],
            frozenset(sets[KEPT]),
            frozenset(sets[EMPTY_MARKER]),
            frozenset(sets[LAST_BATCH]),
        )
        row: bytes | None = None
        counts = Counts()
        error: str | None = None
        try:
            written = write_output(
                executor_storage(self.storage), plan, keep, now_ms=self.now_ms, write=self.write
            )
            row, counts = pickle.dumps(written.row), written.counts
        except (RlmError, OSError) as exc:
            error = f"{plan.describe()}: {exc}"
        document = json.dumps({name: getattr(counts, name) for name in COUNT_NAMES})
        return pa.Table.from_pylist(
            [{"group": index, "row": row, "counts": document, "error": error}], schema=RESULT_SCHEMA
        )
