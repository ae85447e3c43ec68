"""``rlm spark verify``, the driver's side: plan, run the per-segment stage, judge the rest, report.

The driver reads metadata (and, while the stage runs, lists object keys for the orphan check); the
per-segment checks run as one stage, one task per finished segment, and come back as one small row
each. The stage is run by whatever ``collect`` is given: Spark's, or
:func:`rlm.pipeline.stage.run_in_process`.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Collection
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from rlm.metastore.compaction import CompactionStore
from rlm.metastore.model import RemoteSegment, SegmentState, SkippedRange, TopicPartition
from rlm.pipeline.reader import DEFAULT_CHUNK_BYTES
from rlm.pipeline.stage import Collect
from rlm.pipeline.storage import StorageSpec
from rlm.pipeline.verify.continuity import continuity_problems
from rlm.pipeline.verify.inventory import (
    DEFAULT_CLEANUP_HORIZON_MS,
    LIVE_STATES,
    orphan_objects,
    output_keys,
    referenced_keys,
    stale_rows,
    stored_keys,
)
from rlm.pipeline.verify.problems import Problem, problem_from_row
from rlm.pipeline.verify.segment import verify_stage
from rlm.remote_tier.read_plan import SegmentSummary, plan_partition, select_partitions
from rlm.storage.protocol import RemoteStorage


@dataclass(frozen=True)
class VerifyOptions:
    """What ``rlm spark verify`` checks."""

    deep: bool = False
    """Read every byte (CRCs, offsets, indexes, epochs); otherwise HEADs and metadata only."""
    topics: tuple[str, ...] = ()
    """Only these topics (all when empty)."""
    partitions: tuple[int, ...] = ()
    """Only these partition numbers (all when empty)."""
    cleanup_horizon_ms: int = DEFAULT_CLEANUP_HORIZON_MS
    """A STARTED row older than this is reported."""
    chunk_bytes: int = DEFAULT_CHUNK_BYTES
    """Bytes per ranged read of a ``.log`` object."""

    def __post_init__(self) -> None:
        if self.cleanup_horizon_ms < 0:
            raise ValueError(f"the cleanup horizon must not be negative, not {self.cleanup_horizon_ms}")


@dataclass(frozen=True)
class VerifyReport:
    """What a verification found."""

    deep: bool
    partitions: int
    segments: int
    """Finished segments checked."""
    bytes_read: int
    batches: int
    seconds: float
    problems: list[Problem] = field(default_factory=list)
    skipped: list[SkippedRange] = field(default_factory=list)
    """The verified partitions' skipped ranges: offsets the remote tier accounts for without
    holding them (``rlm copy skip``, or gone from the broker before they were tiered). A gap they
    cover is explained, not a problem; they are listed so that it is never silent."""

    @property
    def healthy(self) -> bool:
        return not self.problems

    def counts(self) -> dict[tuple[str, str], int]:
        """Problems per (kind, partition), ordered by kind then partition."""
        found = Counter((p.kind.value, p.partition_name) for p in self.problems)
        return dict(sorted(found.items()))

    def to_json(self) -> dict[str, Any]:
        return {
            "healthy": self.healthy,
            "deep": self.deep,
            "partitions": self.partitions,
            "segments": self.segments,
            "batches": self.batches,
            "bytes_read": self.bytes_read,
            "seconds": round(self.seconds, 3),
            "counts": [
                {"kind": kind, "partition": partition, "problems": count}
                for (kind, partition), count in self.counts().items()
            ],
            "problems": [p.to_json() for p in self.problems],
            "skipped_ranges": [skipped_json(r) for r in self.skipped],
        }


def skipped_json(skipped: SkippedRange) -> dict[str, Any]:
    """A skipped range as a JSON object."""
    tp = skipped.topic_partition
    return {
        "topic": tp.topic,
        "partition": tp.partition,
        "start_offset": skipped.start_offset,
        "end_offset": skipped.end_offset,
        "kind": skipped.kind.value,
        "reason": skipped.reason,
        "recorded_at_ms": skipped.recorded_at_ms,
    }


def verify(
    store: CompactionStore,
    storage: RemoteStorage,
    spec: StorageSpec,
    collect: Collect,
    options: VerifyOptions,
    *,
    now_ms: int | None = None,
) -> VerifyReport:
    """Verify the remote tier of the partitions ``options`` selects.

    Args:
        store: The metadata store (read only; compaction jobs' recorded outputs are no orphans).
        storage: The driver's storage client, for listing keys.
        spec: How executors open the same storage.
        collect: Runs the per-segment stage and brings its rows back.
        options: What to check.
        now_ms: The wall clock (tests pass one), for the age of STARTED rows.

    Raises:
        NotFoundError: A topic asked for is unknown to the store.
        RlmError: The store or the listing failed.
    """
    started = time.monotonic()
    now_ms = time.time_ns() // 1_000_000 if now_ms is None else now_ms
    records = select_partitions(store, options.topics, options.partitions)
    problems: list[Problem] = []
    summaries: list[SegmentSummary] = []
    rows: list[RemoteSegment] = []
    skipped: list[SkippedRange] = []
    for record in records:
        plan = plan_partition(store, record, from_log_start=False)
        summaries.extend(plan.segments)
        skips = store.list_skipped_ranges(plan.topic_partition)
        skipped += skips
        after = store.get_partition(plan.topic_partition)  # retention may have run since
        problems += continuity_problems(
            plan.topic_partition,
            [s.segment for s in plan.segments],
            record,
            skips,
            log_start_after=None if after is None else after.remote_log_start_offset,
        )
        rows += store.list_segments(plan.topic_partition, states=LIVE_STATES)
    problems += stale_rows(rows, now_ms=now_ms, horizon_ms=options.cleanup_horizon_ms)
    filtered = bool(options.topics or options.partitions)
    chosen = {r.topic_partition for r in records} if filtered else None
    bytes_read = batches = 0
    # The store's keys are listed while the executors check the segments (nothing the stage
    # does changes them): the listing's round trips add nothing to the run's time.
    with ThreadPoolExecutor(1, "rlm-verify-listing") as pool:
        listed = pool.submit(lambda: list(stored_keys(storage, chosen)))
        if summaries:
            stage = verify_stage(spec, deep=options.deep, chunk_bytes=options.chunk_bytes)
            found: list[Problem] = []
            for result in collect(stage, summaries).to_pylist():
                bytes_read += result["bytes_read"]
                batches += result["batches"]
                found += [problem_from_row(p) for p in result["problems"]]
            problems += _still_finished(store, found)
        problems += _orphans(store, storage, listed.result(), chosen)
    problems.sort(
        key=lambda p: (
            p.kind.value,
            p.partition_name,
            -1 if p.offset is None else p.offset,
            p.object_key or "",
        )
    )
    return VerifyReport(
        options.deep,
        len(records),
        len(summaries),
        bytes_read,
        batches,
        time.monotonic() - started,
        problems,
        skipped,
    )


def _still_finished(store: CompactionStore, found: list[Problem]) -> list[Problem]:
    """The problems of the segments still finished once checked: retention, or the deferred
    deletion of segments a compaction replaced, may have deleted a segment planned as finished
    before its check read it (a deep run takes hours); it left the tier, and its objects' absence
    is no problem."""
    states = {
        segment_id: store.get_segment(UUID(segment_id))
        for segment_id in {p.segment_id for p in found if p.segment_id is not None}
    }
    return [
        p
        for p in found
        if p.segment_id is None
        or ((row := states[p.segment_id]) is not None and row.state is SegmentState.COPY_SEGMENT_FINISHED)
    ]


def _orphans(
    store: CompactionStore,
    storage: RemoteStorage,
    keys: list[str],
    chosen: Collection[TopicPartition] | None,
) -> list[Problem]:
    """The orphans among ``keys``, listed before this is called.

    What references an object is read after the listing: a copy writes its row, and a compaction
    job records its outputs, before their objects, so an object listed that is not an orphan is
    referenced now (read earlier, a copy that started since would make orphans of its objects).
    Of an output swapped in meanwhile the row is read: the outputs are read first. An object no
    live row references may have been deleted since it was listed (its row then finished its
    deletion): only those still there are orphans.
    """
    candidates = orphan_objects(keys, _referenced(store, chosen))
    return [p for p in candidates if p.object_key is None or storage.object_size(p.object_key) is not None]


def _referenced(store: CompactionStore, chosen: Collection[TopicPartition] | None) -> set[str]:
    """The keys of the objects that are not orphans: those of the outputs compaction jobs recorded
    and of the live rows, of the ``chosen`` partitions, or, when ``None``, of every partition,
    those being deleted included."""
    partitions = (
        list(chosen) if chosen is not None else [record.topic_partition for record in store.list_partitions()]
    )
    outputs = [output for tp in partitions for output in store.compaction_outputs(tp)]
    rows = [row for tp in partitions for row in store.list_segments(tp, states=LIVE_STATES)]
    return output_keys(outputs) | referenced_keys(rows)
