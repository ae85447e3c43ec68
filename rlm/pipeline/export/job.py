"""``rlm spark export``, the driver's side: plan, bound, write to staging, commit, report.

The driver reads metadata, the transaction indexes (a stage), for ``read_committed`` the last
segment's producer snapshot per partition (the tier's last stable offset, see
:mod:`rlm.pipeline.export.bounds`) and, for ``--from``/``--to``, a few index entries and batch
headers per partition; executors read the ``.log`` objects and write the rows. Spark's part
comes in as two callables: ``collect`` (small per-segment results) and ``write`` (the rows of a
stage, as Parquet files under a directory).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any
from urllib.parse import urlparse
from uuid import UUID

from rlm.errors import InvalidArgumentError
from rlm.metastore.model import TopicPartition
from rlm.metastore.protocol import MetadataStore
from rlm.pipeline.export.bounds import NO_END, Range, narrow, next_offsets, partition_range
from rlm.pipeline.export.commit import (
    Manifest,
    Settled,
    data_files,
    finish,
    new_run_id,
    settle,
    staging_dir,
    write_manifest,
)
from rlm.pipeline.export.files import LOCK_NAME, Files
from rlm.pipeline.export.rows import Isolation, export_stage
from rlm.pipeline.stage import Collect, Stage
from rlm.pipeline.storage import StorageSpec
from rlm.pipeline.transactions import attach_aborted
from rlm.remote_tier.read_plan import PartitionPlan, SegmentSummary, plan_partition, select_partitions
from rlm.remote_tier.stable import tiered_stable_offset
from rlm.storage.protocol import RemoteStorage

log = logging.getLogger(__name__)

#: Partitions whose bounds (last stable offset, ``--from``/``--to`` offsets) are looked up at once.
BOUND_THREADS = 8

Write = Callable[[Stage, Sequence[SegmentSummary], str], int]
"""Writes the rows ``stage`` yields over the summaries as Parquet files under a directory,
partitioned by topic, partition and date; returns how many rows it wrote."""


class ExportFormat(Enum):
    PARQUET = "parquet"
    ICEBERG = "iceberg"


@dataclass(frozen=True)
class ExportOptions:
    """What ``rlm spark export`` writes."""

    output: str
    """Where: a directory path or URI (Parquet), or an Iceberg table ``namespace.table``."""
    format: ExportFormat = ExportFormat.PARQUET
    topics: tuple[str, ...] = ()
    partitions: tuple[int, ...] = ()
    from_ms: int | None = None
    """Start at the first offset whose timestamp is ≥ this (see :mod:`rlm.pipeline.export.bounds`)."""
    to_ms: int | None = None
    """Stop before the first offset whose timestamp is ≥ this."""
    isolation: Isolation = Isolation.READ_COMMITTED
    incremental: bool = False
    """Start where the previous run to the same output stopped (the ledger)."""

    def __post_init__(self) -> None:
        if self.from_ms is not None and self.to_ms is not None and self.to_ms < self.from_ms:
            raise InvalidArgumentError("--to", f"{self.to_ms} is before --from {self.from_ms}")


@dataclass(frozen=True)
class PartitionExport:
    """What a run exported of one partition."""

    topic_partition: TopicPartition
    offsets: Range
    segments: int
    next_offset: int | None

    def to_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic_partition.topic,
            "partition": self.topic_partition.partition,
            "start_offset": None if self.offsets.start == NO_END else self.offsets.start,
            "stop_offset": None if self.offsets.stop == NO_END else self.offsets.stop,
            "segments": self.segments,
            "next_offset": self.next_offset,
        }


@dataclass(frozen=True)
class ExportReport:
    """What a run did."""

    output: str
    format: ExportFormat
    run_id: str
    rows: int
    files: int
    seconds: float
    partitions: list[PartitionExport] = field(default_factory=list)
    settled: Settled = field(default_factory=Settled)
    snapshot_id: int | None = None
    """The Iceberg snapshot the run appended (Iceberg only)."""
    diverged: dict[TopicPartition, int] = field(default_factory=dict)
    """Partitions whose copies were replaced after this run (or an earlier one it completed)
    planned, with the offset their ledger was held at: the rows exported from there on are of
    the replaced copies (see :func:`record_offsets`)."""

    @property
    def segments(self) -> int:
        return sum(p.segments for p in self.partitions)

    def to_json(self) -> dict[str, Any]:
        return {
            "output": self.output,
            "format": self.format.value,
            "run_id": self.run_id,
            "rows": self.rows,
            "files": self.files,
            "segments": self.segments,
            "seconds": round(self.seconds, 3),
            "snapshot_id": self.snapshot_id,
            "discarded_runs": list(self.settled.discarded),
            "completed_runs": list(self.settled.completed),
            "partitions": [p.to_json() for p in self.partitions],
            "diverged_partitions": [
                {"topic": tp.topic, "partition": tp.partition, "held_at": offset}
                for tp, offset in sorted(self.diverged.items())
            ],
        }


def output_uri(output: str) -> str:
    """The output as the ledger keys it: a URI (a local path made absolute, as ``file://``)."""
    if urlparse(output).scheme:
        return output.rstrip("/")
    return Path(output).resolve().as_uri()


@dataclass(frozen=True)
class ExportPlan:
    """What a run reads: per partition, its range and the segments read for it."""

    plans: dict[TopicPartition, PartitionPlan]
    ranges: dict[TopicPartition, Range]
    narrowed: dict[TopicPartition, PartitionPlan]

    @property
    def summaries(self) -> list[SegmentSummary]:
        return [s for plan in self.narrowed.values() for s in plan.segments]

    def next_offsets(self) -> dict[TopicPartition, int]:
        return next_offsets(self.plans, self.ranges)

    def topic_ids(self) -> dict[TopicPartition, UUID | None]:
        """The topic id each partition's remote state belonged to when planned: the id of the
        offsets the run exports (see :mod:`metadata.exports`)."""
        return {tp: None if plan.record is None else plan.record.topic_id for tp, plan in self.plans.items()}

    def lineages(self) -> dict[TopicPartition, int]:
        """Each partition's lineage when planned (read before its segments were): copies
        replaced since hold the run's offsets back (see :mod:`metadata.exports`)."""
        return {tp: 0 if plan.record is None else plan.record.lineage for tp, plan in self.plans.items()}

    def partitions(self) -> list[PartitionExport]:
        following = self.next_offsets()
        return [
            PartitionExport(tp, self.ranges[tp], len(self.narrowed[tp].segments), following.get(tp))
            for tp in self.plans
        ]


def plan_export(
    store: MetadataStore,
    storage: RemoteStorage,
    spec: StorageSpec,
    collect: Collect,
    options: ExportOptions,
    ledger: dict[TopicPartition, int],
) -> ExportPlan:
    """Decide what a run reads: the partitions chosen, their aborted transactions, their ranges
    (under ``read_committed`` up to each partition's tiered last stable offset).

    Raises:
        NotFoundError: A topic asked for is unknown to the store.
        CorruptDataError: An index or batch read for the bounds is not valid.
    """
    records = select_partitions(store, options.topics, options.partitions)
    plans = attach_aborted([plan_partition(store, r) for r in records], spec, collect)
    by_tp = {plan.topic_partition: plan for plan in plans}

    def bounds(plan: PartitionPlan) -> Range:
        tp = plan.topic_partition
        resume_at = ledger.get(tp) if options.incremental else None
        committed = options.isolation is Isolation.READ_COMMITTED
        return partition_range(
            storage,
            plan,
            from_ms=options.from_ms,
            to_ms=options.to_ms,
            resume_at=resume_at,
            stable_end=tiered_stable_offset(storage, plan) if committed else None,
        )

    # The bounds take a few ranged reads per partition: partitions are looked at side by side.
    with ThreadPoolExecutor(max(1, min(BOUND_THREADS, len(by_tp))), "rlm-export-bounds") as pool:
        ranges = dict(zip(by_tp, pool.map(bounds, by_tp.values()), strict=True))
    narrowed = {tp: narrow(plan, ranges[tp]) for tp, plan in by_tp.items()}
    return ExportPlan(by_tp, ranges, narrowed)


def record_offsets(
    store: MetadataStore,
    ledger_key: str,
    offsets: Mapping[TopicPartition, int],
    topic_ids: Mapping[TopicPartition, UUID | None] | None,
    lineages: Mapping[TopicPartition, int | None] | None = None,
    *,
    quiet: bool = False,
) -> dict[TopicPartition, int]:
    """Advance the ledger of ``ledger_key`` to ``offsets``, each of the topic id ``topic_ids``
    gives, planned at the lineage ``lineages`` gives (absent: 0). ``topic_ids`` ``None``: offsets
    a manifest or snapshot written before ids were recorded, of unknown topics: they only raise
    an offset the ledger holds for the partition's current topic, and never bring back one it
    forgot (the topic was created again since, see
    :meth:`~rlm.metastore.protocol.MetadataStore.adopt_topic_id`).

    Returns the partitions whose copies were replaced after the run planned (the broker's log
    diverged from them), with the offset their ledger was held at: the run's rows from there on
    are of the replaced copies (each is logged, unless ``quiet``)."""
    if topic_ids is None:
        known = store.export_offsets(ledger_key)
        offsets = {tp: offset for tp, offset in offsets.items() if tp in known}
    if not offsets:
        return {}
    held = store.record_export_offsets(ledger_key, offsets, topic_ids, lineages)
    if quiet:
        return held
    for tp, offset in sorted(held.items()):
        log.warning(
            "export to %s: %s's copies from offset %d on were replaced after the run planned (the "
            "broker's log diverged from them): its rows from %d to %d are the replaced copies', "
            "and the next incremental run exports the broker's records from %d",
            ledger_key,
            tp,
            offset,
            offset,
            offsets[tp] - 1,
            offset,
        )
    return held


def check_ledger(
    output: str, options: ExportOptions, ledger: dict[TopicPartition, int], settled: Settled | None = None
) -> None:
    """A run that is not incremental writes to an output no run wrote to.

    Raises:
        InvalidArgumentError: The output holds an export already; the message says what to do
            (and, when this run completed a killed run's commit, that it did).
    """
    if ledger and not options.incremental:
        completed = (
            f" (the commit of run {', '.join(settled.completed)}, killed before it ended, was "
            "completed now: the output holds every row that run exported)"
            if settled is not None and settled.completed
            else ""
        )
        raise InvalidArgumentError(
            "--output",
            f"{output} holds an export already ({len(ledger)} partitions){completed}: pass "
            "--incremental to continue it, or choose another output",
        )


def export_parquet(
    store: MetadataStore,
    storage: RemoteStorage,
    spec: StorageSpec,
    collect: Collect,
    write: Write,
    files: Files,
    options: ExportOptions,
) -> ExportReport:
    """Export the records ``options`` select as Parquet files under ``options.output``.

    Raises:
        InvalidArgumentError: Not incremental, and the output holds an export already; or
            another run to the output is running.
        NotFoundError: A topic asked for is unknown to the store.
        RlmError: The store, the storage or the output failed; nothing of this run is visible
            unless it reached its commit point (see :mod:`rlm.pipeline.export.commit`).
    """
    started = time.monotonic()
    output = output_uri(options.output)
    with files.exclusive(output) as held:
        if not held:
            raise InvalidArgumentError(
                "--output",
                f"another export to {output} is running (it holds {LOCK_NAME}): one run per output at a time",
            )

        diverged: dict[TopicPartition, int] = {}

        def advance(committed: Manifest) -> None:
            diverged.update(
                record_offsets(
                    store, output, committed.next_offsets, committed.recorded_ids, committed.lineages
                )
            )

        settled = settle(files, output, advance)
        ledger = store.export_offsets(output)
        check_ledger(output, options, ledger, settled)
        plan = plan_export(store, storage, spec, collect, options, ledger)
        run_id = new_run_id()
        staged = staging_dir(output, run_id)
        summaries = plan.summaries
        rows = write(export_stage(spec, options.isolation), summaries, staged) if summaries else 0
        manifest = Manifest(
            run_id,
            tuple(data_files(files, staged)),
            plan.next_offsets(),
            plan.topic_ids(),
            lineages=plan.lineages(),
        )
        write_manifest(files, output, manifest)
        finish(files, output, manifest, advance)
        return ExportReport(
            output,
            ExportFormat.PARQUET,
            run_id,
            rows,
            len(manifest.files),
            time.monotonic() - started,
            plan.partitions(),
            settled,
            diverged=diverged,
        )
