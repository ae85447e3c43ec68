"""How a compaction job runs its stages: the contract, and the in-process engine.

The driver (:mod:`rlm.pipeline.compact.job`) decides nothing about records itself; an
:class:`Engine` reads the segments, applies the rules and writes the output segments. Two engines
implement it: Spark's (:class:`rlm.pipeline.spark.compact.SparkEngine`: shuffles, records never
reach the driver) and :class:`InProcessEngine`, the reference compaction: every record in this
process, the rules applied by :func:`~rlm.pipeline.compact.rules.decide`. Both share the first
stage (:mod:`~rlm.pipeline.compact.facts`) and the rewriter (:mod:`~rlm.pipeline.compact.segment`),
so comparing their outputs tests the Spark job's decisions against the reference.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from rlm.errors import RlmError
from rlm.metastore.model import RemoteSegment, TopicPartition
from rlm.pipeline.compact.facts import ERROR_KIND, FactOptions, fact_from_row, facts_stage
from rlm.pipeline.compact.rewrite import Counts, Keep
from rlm.pipeline.compact.rules import Decisions, Fact, Kind, decide
from rlm.pipeline.compact.segment import OutputPlan, SegmentChange, write_output
from rlm.pipeline.stage import Collect, run_in_process
from rlm.pipeline.storage import StorageSpec, executor_storage
from rlm.remote_tier.read_plan import PartitionPlan


@dataclass(frozen=True)
class PartitionDecision:
    """What the driver learns of one partition from the first two stages."""

    end: int = -1
    """The compactable end."""
    changes: dict[str, SegmentChange] = field(default_factory=dict)
    """Per input segment id."""
    error: str | None = None
    """Why the partition cannot be compacted (a segment could not be read)."""


@dataclass(frozen=True)
class GroupResult:
    """What writing one output segment gave."""

    index: int
    """The output's position in the list given to :meth:`Engine.write`."""
    row: RemoteSegment | None
    counts: Counts
    error: str | None = None


class Engine(Protocol):
    """Runs a compaction job's stages."""

    collect: Collect
    """Runs a small per-segment stage (the transaction indexes) and brings its rows back."""

    def decide(
        self, plans: Sequence[PartitionPlan], options: FactOptions
    ) -> dict[TopicPartition, PartitionDecision]:
        """Stages 1 and 2: read every segment of ``plans``, pick the winners; per partition what
        changes in each segment."""
        ...

    def write(self, outputs: Sequence[OutputPlan], *, now_ms: int, write: bool) -> list[GroupResult]:
        """Stage 3: write each output segment (only build it when ``write`` is false); after
        :meth:`decide` of the same plans."""
        ...


def segment_change(facts: Sequence[Fact], decisions: Decisions) -> SegmentChange:
    """What the decisions change in one segment whose facts are ``facts``."""
    removed = stamped = kept = total = 0
    for f in facts:
        total += 1
        touched = not f.is_held and f.batch_last <= decisions.end
        # an empty batch (no record) stays while it is its producer's last data batch
        gone = (
            f.batch_last not in decisions.last_batches
            if f.kind == Kind.EMPTY
            else f.offset not in decisions.kept
        )
        if touched and gone:
            removed += 1
            continue
        kept += 1
        marker = f.kind == Kind.CONTROL and f.offset in decisions.empty_markers
        tombstone = f.kind == Kind.DATA and f.tombstone
        if touched and not f.has_horizon and (marker or tombstone):
            stamped += 1
    return SegmentChange(removed, stamped, kept, total)


def keep_for(decisions: Decisions, plan: OutputPlan) -> Keep:
    """The decisions restricted to one output's offsets."""
    low, high = plan.start_offset, plan.end_offset
    return Keep(
        decisions.end,
        frozenset(o for o in decisions.kept if low <= o <= high),
        frozenset(o for o in decisions.empty_markers if low <= o <= high),
        frozenset(o for o in decisions.last_batches if low <= o <= high),
    )


class InProcessEngine:
    """The reference compaction: every stage in this process, one segment after another."""

    def __init__(self, storage: StorageSpec) -> None:
        self.storage = storage
        self.collect: Collect = run_in_process
        self.decisions: dict[TopicPartition, Decisions] = {}

    def decide(
        self, plans: Sequence[PartitionPlan], options: FactOptions
    ) -> dict[TopicPartition, PartitionDecision]:
        summaries = [s for plan in plans for s in plan.segments]
        table = run_in_process(facts_stage(self.storage, options), summaries)
        by_partition: dict[TopicPartition, list[dict[str, object]]] = defaultdict(list)
        for row in table.to_pylist():
            by_partition[TopicPartition(str(row["topic"]), int(str(row["partition"])))].append(row)
        out: dict[TopicPartition, PartitionDecision] = {}
        for plan in plans:
            rows = by_partition.get(plan.topic_partition, [])
            errors = [str(r["error"]) for r in rows if r["kind"] == ERROR_KIND]
            if errors:
                out[plan.topic_partition] = PartitionDecision(error="; ".join(errors))
                continue
            if not plan.segments:
                out[plan.topic_partition] = PartitionDecision()
                continue
            per_segment: dict[str, list[Fact]] = defaultdict(list)
            for r in rows:
                per_segment[str(r["segment_id"])].append(fact_from_row(r))
            facts = sorted((f for found in per_segment.values() for f in found), key=lambda f: f.offset)
            last = max(s.read_to for s in plan.segments)
            decisions = decide(facts, last)
            self.decisions[plan.topic_partition] = decisions
            changes = {
                s.segment_id: segment_change(per_segment.get(s.segment_id, []), decisions)
                for s in plan.segments
            }
            out[plan.topic_partition] = PartitionDecision(decisions.end, changes)
        return out

    def write(self, outputs: Sequence[OutputPlan], *, now_ms: int, write: bool) -> list[GroupResult]:
        storage = executor_storage(self.storage)
        results = []
        for index, plan in enumerate(outputs):
            keep = keep_for(self.decisions[plan.inputs[0].topic_partition], plan)
            try:
                written = write_output(storage, plan, keep, now_ms=now_ms, write=write)
            except (RlmError, OSError) as exc:
                results.append(GroupResult(index, None, Counts(), f"{plan.describe()}: {exc}"))
                continue
            results.append(GroupResult(index, written.row, written.counts))
        return results
