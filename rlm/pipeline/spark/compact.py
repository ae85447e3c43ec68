"""Compaction on Spark: the :class:`~rlm.pipeline.compact.engine.Engine` whose stages are Spark's.

1. ``read keys``: one task per input segment reads it and hands Spark only what the compactable
   end and the transaction rules need (:class:`~rlm.pipeline.compact.partial.FewFacts`: control
   and transactional records and empty batches, first young offsets, producers' last data
   batches). One job gives the
   failed segments, then one the end per partition.
2. ``pick winners``: one task per segment reads it again and hands Spark each key's best record
   in the segment (:class:`~rlm.pipeline.compact.partial.Candidates`); the winner per (partition,
   key) is a hash aggregation (``max`` of ``(o1, o2, offset, ...)``) over a shuffle, whose memory
   holds keys, not records (it spills); the same aggregation says whether a key has a held record
   (see :mod:`~rlm.pipeline.compact.rules`). Each transaction marker's liveness is a window over
   the transactional records only. One job brings what changes per segment to the driver.
3. ``write segments``: the kept offsets, empty transactions' markers and producers' last batches
   are shuffled to the output segment holding them; one task per output segment (``applyInArrow``)
   rereads its inputs, keeps those offsets, writes the segment and its index object, and returns
   its metadata row.

Partitions and segments are numbers in Spark's rows (their position in the job's plans), and
records cross into the JVM only as per-segment reductions: what Spark caches is small. The rules
are those of :func:`rlm.pipeline.compact.rules.decide` (the reference); the tests run both on the
same logs and compare what they write.
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
from rlm.pipeline.compact.partial import (
    CANDIDATE_SCHEMA,
    FEW_SCHEMA,
    PRODUCER_LAST,
    YOUNG,
    Candidates,
    FewFacts,
)
from rlm.pipeline.compact.rewrite import COUNT_NAMES, Counts, Keep
from rlm.pipeline.compact.rules import Kind
from rlm.pipeline.compact.segment import OutputPlan, SegmentChange, write_output
from rlm.pipeline.spark.progress import StageProgress
from rlm.pipeline.spark.stage import collect_stage, map_segments, prepare_worker
from rlm.pipeline.stage import Collect, Stage, arrow_schema
from rlm.pipeline.storage import StorageSpec, executor_storage
from rlm.remote_tier.read_plan import PartitionPlan

RESULT_SCHEMA = arrow_schema(
    pa.field("group", pa.int64()),
    pa.field("row", pa.binary()),
    pa.field("counts", pa.string()),
    pa.field("error", pa.string()),
)
RESULT_DDL = "group long, row binary, counts string, error string"
#: What a row shipped to an output's task says of its offset.
KEPT, EMPTY_MARKER, LAST_BATCH, NOTHING = 0, 1, 2, -1
PART = "part"


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
        self._cached: list[DataFrame] = []
        self._kept: DataFrame | None = None
        self._last_batches: DataFrame | None = None
        self._parts: dict[TopicPartition, int] = {}
        self._ends: dict[TopicPartition, int] = {}

    def _shuffle_partitions(self) -> None:
        """Spark's default of 200 shuffle partitions, left unchanged by the user, becomes three per
        core: the shuffles here are of small rows, and each partition costs a task."""
        key = "spark.sql.shuffle.partitions"
        if self.session.conf.get(key) == "200":
            self.session.conf.set(key, str(max(1, 3 * self.session.sparkContext.defaultParallelism)))

    def _progress(self, label: str, total: int) -> StageProgress:
        return StageProgress(self.session, label, total, enabled=self.progress)

    def _cache(self, frame: DataFrame) -> DataFrame:
        self._cached.append(frame.persist(StorageLevel.MEMORY_AND_DISK))
        return frame

    def _frame(self, rows: list[tuple[Any, ...]], ddl: str) -> DataFrame:
        return sf.broadcast(self.session.createDataFrame(rows, ddl))

    def decide(
        self, plans: Sequence[PartitionPlan], options: FactOptions
    ) -> dict[TopicPartition, PartitionDecision]:
        out: dict[TopicPartition, PartitionDecision] = {p.topic_partition: PartitionDecision() for p in plans}
        summaries = [s for plan in plans for s in plan.segments]
        if not summaries:
            return out
        self._shuffle_partitions()
        self._parts = {p.topic_partition: i for i, p in enumerate(plans)}
        ids = {s.segment_id: (i, n) for i, p in enumerate(plans) for n, s in enumerate(p.segments)}
        lasts = {i: max(s.read_to for s in p.segments) for i, p in enumerate(plans) if p.segments}
        few = self._cache(
            map_segments(
                self.session,
                Stage(
                    "read keys",
                    FEW_SCHEMA,
                    FewFacts(ids, facts_stage(self.storage, options).task, lasts),
                    self.storage,
                ),
                summaries,
            )
        )
        kind = sf.col("kind")
        with self._progress("read keys", len(summaries)):
            errors = few.filter(kind == ERROR_KIND).select(PART, "error").collect()
        failed: dict[int, list[str]] = {}
        for e in errors:
            failed.setdefault(e[PART], []).append(e["error"])
        good = [i for i in lasts if i not in failed]
        bounds = self._frame([(i, lasts[i]) for i in good], "part int, last long")
        ends = self._ends_of(few.join(bounds, PART), bounds)
        with self._progress("pick winners: ends", len(good)):
            end_of = {r[PART]: r["end"] for r in ends.collect()}
        if good:
            failed.update(self._pick(plans, options, ids, few, end_of, lasts, out))
        for i, messages in failed.items():
            out[plans[i].topic_partition] = PartitionDecision(error="; ".join(messages))
        self._ends = {plans[i].topic_partition: end for i, end in end_of.items() if i not in failed}
        return out

    @staticmethod
    def _ends_of(few: DataFrame, bounds: DataFrame) -> DataFrame:
        """Per partition the compactable end: before the first young record or record of an
        undecided transaction."""
        kind = sf.col("kind")
        young = few.filter(kind == YOUNG).groupBy(PART).agg(sf.min("offset").alias("young"))
        txn = few.filter(sf.col("transactional") & kind.isin(int(Kind.DATA), int(Kind.CONTROL)))
        markers = txn.groupBy(PART, "producer_id").agg(
            sf.max(sf.when(kind == Kind.CONTROL, sf.col("offset"))).alias("marker")
        )
        undecided = (
            txn.filter(kind == Kind.DATA)
            .join(markers, [PART, "producer_id"])
            .filter(sf.col("marker").isNull() | (sf.col("offset") > sf.col("marker")))
            .groupBy(PART)
            .agg(sf.min("offset").alias("open"))
        )
        last = sf.col("last")
        return (
            bounds.join(young, PART, "left")
            .join(undecided, PART, "left")
            .select(
                PART,
                sf.least(
                    last, sf.coalesce(sf.col("young") - 1, last), sf.coalesce(sf.col("open") - 1, last)
                ).alias("end"),
            )
        )

    def _pick(
        self,
        plans: Sequence[PartitionPlan],
        options: FactOptions,
        ids: dict[str, tuple[int, int]],
        few: DataFrame,
        end_of: dict[int, int],
        lasts: dict[int, int],
        out: dict[TopicPartition, PartitionDecision],
    ) -> dict[int, list[str]]:
        """Stage 2: the winners, the markers kept, what changes per segment (into ``out``); the
        partitions whose segments failed this time."""
        summaries = [s for i in end_of for s in plans[i].segments]
        stage = Stage(
            "pick winners",
            CANDIDATE_SCHEMA,
            Candidates(ids, facts_stage(self.storage, options).task, end_of),
            self.storage,
        )
        candidates = map_segments(self.session, stage, summaries)
        key = sf.col("key")
        packed = (
            sf.col("seg").cast("long") * 16
            + _flag(sf.col("held")) * 8
            + _flag(sf.col("tombstone")) * 4
            + _flag(sf.col("horizon_passed")) * 2
            + _flag(sf.col("has_horizon"))
        )
        if all(strategy.kind == "offset" for _, strategy in options.strategies):
            # the order is the offset: a hash aggregation of longs
            best = [sf.max("offset").alias("offset"), sf.max_by(packed, sf.col("offset")).alias("packed")]
        else:
            order = sf.max(sf.struct("o1", "o2", "offset", packed.alias("packed")))
            best = [order["offset"].alias("offset"), order["packed"].alias("packed")]
        reduced = self._cache(
            # grouped by the error too: a string aggregate would turn the hash aggregation to a sort
            candidates.groupBy(
                PART, "key", sf.when(key.isNull(), sf.col("seg")).alias("counted"), "error"
            ).agg(
                *best,
                sf.max(_flag(sf.col("held_any"))).alias("held_any"),
                sf.sum("total").alias("total"),
                sf.sum("touched").alias("touched"),
            )
        )
        winners = reduced.filter(key.isNotNull()).select(
            PART,
            "offset",
            (sf.col("packed") / 16).cast("int").alias("seg"),
            ((sf.col("packed").bitwiseAND(8)) != 0).alias("held"),
            (sf.col("held_any") == 1).alias("held_any"),
            ((sf.col("packed").bitwiseAND(4)) != 0).alias("tombstone"),
            ((sf.col("packed").bitwiseAND(2)) != 0).alias("horizon_passed"),
            ((sf.col("packed").bitwiseAND(1)) != 0).alias("has_horizon"),
        )
        limits = self._frame(
            [(i, end, lasts[i]) for i, end in end_of.items()], "part int, end long, last long"
        )
        kind, offset = sf.col("kind"), sf.col("offset")
        records = few.filter(kind >= 0).join(limits, PART)
        held = (kind == Kind.LEGACY) | sf.coalesce(sf.col("held"), sf.lit(False))
        touch = ~held & (sf.col("batch_last") <= sf.col("end"))
        last_kept = records.filter((kind == Kind.DATA) & touch & (offset == sf.col("last")))
        shape = [PART, "offset", "seg", "tombstone", "has_horizon"]
        # a held winner stays as it is; a tombstone stays while a held record of its key does
        gone = sf.col("tombstone") & sf.col("horizon_passed") & ~sf.col("held_any")
        kept_data = (
            winners.filter(~sf.col("held") & ~gone)
            .select(*shape)
            .unionByName(last_kept.select(*shape))
            .dropDuplicates([PART, "offset"])
        )
        self._last_batches = self._cache(
            few.filter(kind == PRODUCER_LAST)
            .join(limits, PART)
            .groupBy(PART, "producer_id")
            .agg(sf.max("batch_last").alias("offset"))
        )
        controls = self._controls(records.withColumn("touch", touch), kept_data, self._last_batches)
        kept = self._cache(
            kept_data.select(*shape, sf.lit(False).alias("empty_marker")).unionByName(
                controls.select(*shape, "empty_marker")
            )
        )
        self._kept = kept
        stamped = sf.col("has_horizon").__invert__() & (sf.col("empty_marker") | sf.col("tombstone"))
        # empty batches kept (their producer's last data batch) count as kept rows of their segment
        empty_kept = (
            records.filter((kind == Kind.EMPTY) & touch)
            .join(self._last_batches.select(PART, sf.col("offset").alias("batch_last")), [PART, "batch_last"])
            .select(*shape, sf.lit(False).alias("empty_marker"))
        )
        per_segment = (
            kept.unionByName(empty_kept)
            .groupBy(PART, "seg")
            .agg(sf.count(sf.lit(1)).alias("kept"), sf.sum(_flag(stamped)).alias("stamped"))
        )
        counted = reduced.filter(key.isNull()).select(
            PART, sf.col("counted").alias("seg"), "total", "touched", "error"
        )
        changes = counted.join(per_segment, [PART, "seg"], "left")
        with self._progress("pick winners", len(summaries)):
            rows = changes.collect()
        failed: dict[int, list[str]] = {}
        found: dict[int, dict[int, SegmentChange]] = {}
        for r in rows:
            if r["error"] is not None:
                failed.setdefault(r[PART], []).append(r["error"])
                continue
            kept_touched, touched = r["kept"] or 0, int(r["touched"])
            removed = touched - kept_touched
            found.setdefault(r[PART], {})[r["seg"]] = SegmentChange(
                removed, int(r["stamped"] or 0), int(r["total"]) - removed, int(r["total"])
            )
        empty = SegmentChange(0, 0, 0, 0)
        for i, end in end_of.items():
            plan = plans[i]
            changes_of = found.get(i, {})
            out[plan.topic_partition] = PartitionDecision(
                end, {s.segment_id: changes_of.get(n, empty) for n, s in enumerate(plan.segments)}
            )
        return failed

    @staticmethod
    def _controls(records: DataFrame, kept_data: DataFrame, last_batches: DataFrame) -> DataFrame:
        """The control records kept, with ``empty_marker`` (their transaction has no batch left):
        windows over the transactional batches (records and empty batches) and markers only."""
        kind, offset = sf.col("kind"), sf.col("offset")
        data = kind.isin(int(Kind.DATA), int(Kind.EMPTY))
        lasts = last_batches.select(
            PART, sf.col("offset").alias("batch_last"), sf.lit(True).alias("last_batch")
        )
        txn = (
            records.filter((kind == Kind.CONTROL) | (data & sf.col("transactional")))
            .join(kept_data.select(PART, "offset", sf.lit(True).alias("kept_data")), [PART, "offset"], "left")
            .join(lasts, [PART, "batch_last"], "left")
        )
        above = (
            Window.partitionBy(PART, "producer_id")
            .orderBy(sf.desc("offset"))
            .rowsBetween(Window.unboundedPreceding, Window.currentRow)
        )
        txn = txn.withColumn(
            "marker_of",
            sf.when(sf.col("transactional"), sf.min(sf.when(kind == Kind.CONTROL, offset)).over(above)),
        )
        # a batch stays: not touched, a record kept, its producer's last data batch
        stays = (
            ~sf.col("touch")
            | sf.coalesce(sf.col("kept_data"), sf.lit(False))
            | sf.coalesce(sf.col("last_batch"), sf.lit(False))
        )
        alive = data & sf.col("transactional") & stays
        transaction = Window.partitionBy(PART, "producer_id", "marker_of")
        txn = txn.withColumn("live", sf.max(_flag(alive)).over(transaction) == 1)
        # the last marker of a producer with no data batch holds its epoch (rules.last_markers)
        fencing = (
            records.filter((kind == Kind.CONTROL) & (sf.col("producer_id") >= 0))
            .join(last_batches.select(PART, "producer_id"), [PART, "producer_id"], "left_anti")
            .groupBy(PART, "producer_id")
            .agg(sf.max("offset").alias("offset"))
            .select(PART, "offset", sf.lit(True).alias("fencing"))
        )
        txn = txn.join(fencing, [PART, "offset"], "left")
        kept_control = (
            (kind == Kind.CONTROL)
            & sf.col("touch")
            & (
                sf.col("live")
                | (offset == sf.col("last"))
                | sf.coalesce(sf.col("fencing"), sf.lit(False))
                | ~sf.col("horizon_passed")
            )
        )
        return txn.filter(kept_control).select(
            PART, "offset", "seg", "tombstone", "has_horizon", (~sf.col("live")).alias("empty_marker")
        )

    def write(self, outputs: Sequence[OutputPlan], *, now_ms: int, write: bool) -> list[GroupResult]:
        if not outputs:
            return []
        assert self._kept is not None and self._last_batches is not None, "decide() first"
        ranges = self._frame(
            [
                (i, self._parts[o.inputs[0].topic_partition], o.start_offset, o.end_offset)
                for i, o in enumerate(outputs)
            ],
            "group long, part int, start long, stop long",
        )
        kept = self._kept
        needed = (
            kept.select(PART, "offset", sf.lit(KEPT).alias("what"))
            .unionByName(
                kept.filter("empty_marker").select(PART, "offset", sf.lit(EMPTY_MARKER).alias("what"))
            )
            .unionByName(self._last_batches.select(PART, "offset", sf.lit(LAST_BATCH).alias("what")))
        )
        tagged = needed.join(
            ranges,
            (needed[PART] == ranges[PART]) & needed["offset"].between(ranges["start"], ranges["stop"]),
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
        for cached in self._cached:
            cached.unpersist()
        self._cached = []
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
        prepare_worker(self.storage)
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
