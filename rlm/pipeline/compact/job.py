"""``rlm spark compact``, the driver's side: leases, cleanup, plan, stages, swap, report.

Per partition of a topic whose ``cleanup.policy`` has ``compact``:

1. take the partition's compaction lease (a partition another job holds is skipped, reported);
2. clean up after killed jobs: outputs recorded and never swapped in lose their objects, and
   segments a swap replaced lose theirs once ``remote.compaction.delete.delay.ms`` has passed;
3. plan the finished segments (from the remote log start offset to the highest tiered offset);
4. the engine's stages decide what each segment loses; consecutive changed segments are grouped
   into outputs up to ``segment.bytes``; the outputs are recorded, then written by the engine;
5. the swap, per partition in one transaction: the outputs finished, the replaced segments
   ``DELETE_SEGMENT_STARTED``, only if those are all still finished; otherwise (retention or
   another job got there) the partition's outputs are deleted and nothing else changes. The
   outputs are uploaded marked ``pending`` and marked ``swapped`` after their swap (see
   :mod:`rlm.storage.description`), so that a rebuild of the metadata chooses what the database
   held.

A partition of a topic whose policy no longer has ``compact`` is only cleaned up after (step 2),
when killed jobs left outputs of it: no job compacts it again to do so.

A partition whose segment cannot be read, or whose cleanup fails, fails alone, untouched; the
others go on. With ``dry_run`` the job reads and decides, builds the outputs in memory to count
what they would drop, and writes nothing (no lease, no cleanup, no object, no row).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rlm.arguments import INT64_MAX
from rlm.config import Settings
from rlm.errors import RlmError, StaleLeaseError
from rlm.metastore.compaction import CompactionLease, CompactionOutput, CompactionStore
from rlm.metastore.model import PartitionRecord, RemoteSegment, SegmentState, TopicPartition
from rlm.pipeline.compact.engine import Engine, GroupResult, PartitionDecision
from rlm.pipeline.compact.facts import FactOptions
from rlm.pipeline.compact.rewrite import Counts, RewriteParams
from rlm.pipeline.compact.rules import Strategy
from rlm.pipeline.compact.segment import OutputPlan, group_segments
from rlm.pipeline.storage import StorageSpec
from rlm.pipeline.transactions import attach_aborted
from rlm.remote_tier.read_plan import PartitionPlan, plan_partition, select_partitions
from rlm.storage.marks import mark_swapped
from rlm.storage.protocol import RemoteStorage
from rlm.tiering.deletion import deferred, delete_segment

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CompactOptions:
    """What ``rlm spark compact`` compacts, and how."""

    topics: tuple[str, ...] = ()
    """Only these topics (every topic with ``compact`` in its policy when empty)."""
    partitions: tuple[int, ...] = ()
    dry_run: bool = False


@dataclass
class PartitionReport:
    """What the job did to one partition."""

    topic_partition: TopicPartition
    status: str
    """``compacted``, ``unchanged``, ``would compact`` (dry run), ``skipped``, ``discarded``, ``failed``."""
    reason: str | None = None
    segments_in: int = 0
    segments_out: int = 0
    counts: Counts = field(default_factory=Counts)
    seconds: float = 0.0
    """From the job's start to the partition's swap (its stages ran alongside the others')."""

    def to_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic_partition.topic,
            "partition": self.topic_partition.partition,
            "status": self.status,
            "reason": self.reason,
            "segments_in": self.segments_in,
            "segments_out": self.segments_out,
            **self.counts.to_json(),
            "seconds": round(self.seconds, 3),
        }


@dataclass
class CompactReport:
    """What a compaction job did."""

    dry_run: bool
    partitions: list[PartitionReport]
    seconds: float
    cleaned_objects: int = 0
    """Objects of killed jobs' outputs and of replaced segments deleted by the cleanup."""

    @property
    def failed(self) -> bool:
        return any(p.status == "failed" for p in self.partitions)

    def to_json(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "failed": self.failed,
            "seconds": round(self.seconds, 3),
            "cleaned_objects": self.cleaned_objects,
            "partitions": [p.to_json() for p in self.partitions],
        }


def compactable_topics(settings: Settings, topics: Sequence[str]) -> None:
    """Refuse topics asked for whose policy has no ``compact``.

    Raises:
        ConfigError: The message names the topic and its policy.
    """
    for topic in topics:
        Strategy.of(topic, settings.topic(topic))


def _clock() -> int:
    return time.time_ns() // 1_000_000


def compact(
    store: CompactionStore,
    storage: RemoteStorage,
    spec: StorageSpec,
    engine: Engine,
    settings: Settings,
    options: CompactOptions,
    *,
    now_ms: int | None = None,
) -> CompactReport:
    """Compact the partitions ``options`` selects.

    Raises:
        ConfigError: A topic asked for is not compacted (its policy has no ``compact``).
        NotFoundError: A topic asked for is unknown to the store.
        RlmError: The store failed outside any one partition's work.
    """
    started = time.monotonic()
    now = _clock() if now_ms is None else now_ms
    compactable_topics(settings, options.topics)
    records: list[PartitionRecord] = []
    uncompacted: list[PartitionRecord] = []
    for r in select_partitions(store, options.topics, options.partitions):
        compacted = "compact" in settings.topic(r.topic_partition.topic).cleanup_policy.split(",")
        (records if compacted else uncompacted).append(r)
    job = uuid.uuid4().hex
    cleaned = 0
    if not options.dry_run:
        for r in uncompacted:
            cleaned += _clean_uncompacted(store, storage, r.topic_partition, job, settings, now)
    reports: dict[TopicPartition, PartitionReport] = {}
    leases: dict[TopicPartition, CompactionLease] = {}
    try:
        plans: list[PartitionPlan] = []
        for record in records:
            tp = record.topic_partition
            if not options.dry_run:
                lease = store.acquire_compaction_lease(tp, job, settings.remote_compaction_lease_ttl_ms)
                if lease is None:
                    held = store.get_compaction_lease(tp)
                    owner = held.owner if held is not None else "another job"
                    reports[tp] = PartitionReport(
                        tp, "skipped", f"the compaction lease is held by job {owner}"
                    )
                    continue
                leases[tp] = lease
                try:
                    cleaned += cleanup(
                        store, storage, tp, now_ms=now, delay_ms=settings.remote_compaction_delete_delay_ms
                    )
                except (RlmError, OSError) as exc:
                    # The partition fails alone, untouched; what is left is the next job's to clean.
                    reports[tp] = PartitionReport(
                        tp, "failed", f"cleaning up after earlier jobs failed: {exc}"
                    )
                    continue
            plans.append(plan_partition(store, record))
        plans = attach_aborted(plans, spec, engine.collect)
        fact_options = FactOptions(
            strategies=tuple(
                (t, Strategy.of(t, settings.topic(t))) for t in {p.topic_partition.topic for p in plans}
            ),
            now_ms=now,
            min_compaction_lag_ms=tuple(
                (t, settings.topic(t).min_compaction_lag_ms) for t in {p.topic_partition.topic for p in plans}
            ),
        )
        decided = engine.decide(plans, fact_options) if plans else {}
        outputs: list[OutputPlan] = []
        owners: list[TopicPartition] = []
        for plan in plans:
            tp = plan.topic_partition
            decision = decided.get(tp, PartitionDecision())
            if decision.error is not None:
                reports[tp] = PartitionReport(tp, "failed", decision.error)
                continue
            topic = settings.topic(tp.topic)
            changes = [decision.changes.get(s.segment_id) for s in plan.segments]
            groups = (
                group_segments(
                    plan.segments, [c for c in changes if c is not None], decision.end, topic.segment_bytes
                )
                if all(c is not None for c in changes)
                else []
            )
            if not groups:
                reports[tp] = PartitionReport(tp, "unchanged", "nothing to remove or stamp")
                continue
            params = RewriteParams(now, topic.delete_retention_ms)
            for group in groups:
                outputs.append(OutputPlan(tuple(group), uuid.uuid4(), params))
                owners.append(tp)
        if not outputs:
            return CompactReport(options.dry_run, _ordered(reports), time.monotonic() - started, cleaned)
        if not options.dry_run:
            lost = _renew(store, leases, settings.remote_compaction_lease_ttl_ms)
            for tp, reason in lost.items():
                reports[tp] = PartitionReport(tp, "skipped", reason)
            kept = [i for i, owner in enumerate(owners) if owner not in lost]
            outputs, owners = [outputs[i] for i in kept], [owners[i] for i in kept]
            _record_outputs(store, leases, outputs, owners, now)
        results = engine.write(outputs, now_ms=now, write=not options.dry_run)
        by_partition: dict[TopicPartition, list[tuple[OutputPlan, GroupResult]]] = {}
        for result in results:
            by_partition.setdefault(owners[result.index], []).append((outputs[result.index], result))
        for tp, done in by_partition.items():
            # The replaced segments' delay runs from the swap, not from the job's start: the reads
            # that picked them before the swap may have started long after the job did.
            swapped_at = now if now_ms is not None else max(now, _clock())
            reports[tp] = _finish(
                store,
                storage,
                leases.get(tp),
                done,
                options.dry_run,
                now,
                swapped_at + settings.remote_compaction_delete_delay_ms,
            )
            reports[tp].seconds = time.monotonic() - started
    finally:
        for lease in leases.values():
            try:
                store.release_compaction_lease(lease)
            except RlmError as exc:
                log.warning("releasing the compaction lease of %s failed: %s", lease.topic_partition, exc)
    return CompactReport(options.dry_run, _ordered(reports), time.monotonic() - started, cleaned)


def _ordered(reports: dict[TopicPartition, PartitionReport]) -> list[PartitionReport]:
    return [reports[tp] for tp in sorted(reports)]


def _renew(
    store: CompactionStore, leases: dict[TopicPartition, CompactionLease], ttl_ms: int
) -> dict[TopicPartition, str]:
    """Renew every lease held (the stages took a while); the partitions whose lease was lost."""
    lost = {}
    for tp, lease in list(leases.items()):
        try:
            leases[tp] = store.renew_compaction_lease(lease, ttl_ms)
        except StaleLeaseError as exc:
            del leases[tp]
            lost[tp] = f"the compaction lease was lost: {exc}"
    return lost


def _record_outputs(
    store: CompactionStore,
    leases: dict[TopicPartition, CompactionLease],
    outputs: Sequence[OutputPlan],
    owners: Sequence[TopicPartition],
    now: int,
) -> None:
    for tp, lease in leases.items():
        mine = [o for o, owner in zip(outputs, owners, strict=True) if owner == tp]
        if mine:
            store.add_compaction_outputs(
                lease, [CompactionOutput(o.segment_id, *o.object_keys(), lease.epoch, now) for o in mine]
            )


def _finish(
    store: CompactionStore,
    storage: RemoteStorage,
    lease: CompactionLease | None,
    done: list[tuple[OutputPlan, GroupResult]],
    dry_run: bool,
    now: int,
    delete_after_ms: int,
) -> PartitionReport:
    """Swap one partition's outputs in (or discard them) and report; the replaced segments' objects
    may go from ``delete_after_ms`` on."""
    tp = done[0][0].inputs[0].topic_partition
    counts = Counts()
    for _, result in done:
        counts.add(result.counts)
    report = PartitionReport(
        tp,
        "would compact" if dry_run else "compacted",
        segments_in=sum(len(plan.inputs) for plan, _ in done),
        segments_out=len(done),
        counts=counts,
    )
    errors = [r.error for _, r in done if r.error is not None]
    if dry_run:
        if errors:
            report.status, report.reason = "failed", "; ".join(errors)
        return report
    assert lease is not None
    reason = "; ".join(errors) if errors else None
    if reason is None:
        rows = [r.row for _, r in done if r.row is not None]
        replaced = [s.segment.segment_id for plan, _ in done for s in plan.inputs]
        try:
            # Long.MAX_VALUE keeps the replaced objects for good, never past what a BIGINT holds.
            delete_after = min(delete_after_ms, INT64_MAX)
            if store.swap_compacted(lease, rows, replaced, now_ms=now, delete_after_ms=delete_after):
                _mark_swapped(store, storage, tp, rows, now)
                return report
            reason = "a replaced segment is no longer finished (retention or another job changed it)"
        except StaleLeaseError as exc:
            reason = str(exc)
        except RlmError as exc:
            # The swap may have landed: its outputs stay recorded, and the next job's cleanup
            # keeps those swapped in and deletes the others.
            report.status, report.reason = "failed", f"the swap failed: {exc}"
            return report
    _discard(store, storage, tp, [plan for plan, _ in done])
    report.status = "failed" if errors else "discarded"
    report.reason = reason
    return report


def _mark_swapped(
    store: CompactionStore,
    storage: RemoteStorage,
    tp: TopicPartition,
    rows: Sequence[RemoteSegment],
    now: int,
) -> None:
    """Mark the swapped-in outputs' objects swapped. A failure leaves them pending: a rebuild
    then chooses the segments they replaced (the same offsets, uncompacted) while those last.

    The mark stores the index object again: a segment retention deleted meanwhile (between the
    mark's read and its put) would get it back, orphaned, so it is deleted again then."""
    try:
        for row in rows:
            mark_swapped(storage, row)
            current = store.get_segment(row.segment_id)
            if current is None or (
                current.state is not SegmentState.COPY_SEGMENT_FINISHED and not deferred(current, now)
            ):
                storage.delete_objects([row.layout.index_key])
    except (RlmError, OSError) as exc:
        log.warning("marking the compacted segments of %s swapped failed: %s", tp, exc)


def _discard(
    store: CompactionStore, storage: RemoteStorage, tp: TopicPartition, plans: Sequence[OutputPlan]
) -> None:
    """Delete the objects of outputs never swapped in, then forget them."""
    keys = [key for plan in plans for key in plan.object_keys()]
    try:
        storage.abort_incomplete_puts(keys)
        storage.delete_objects(keys)
        store.forget_compaction_outputs(tp, [plan.segment_id for plan in plans])
    except (RlmError, OSError) as exc:
        log.warning("discarding the outputs of %s failed (the next job cleans them up): %s", tp, exc)


def _clean_uncompacted(
    store: CompactionStore, storage: RemoteStorage, tp: TopicPartition, job: str, settings: Settings, now: int
) -> int:
    """Clean up after killed jobs of ``tp``, whose topic is no longer compacted (its policy lost
    ``compact``): no job compacts it again to do it; the number of objects deleted."""
    if not store.compaction_outputs(tp):
        return 0
    lease = store.acquire_compaction_lease(tp, job, settings.remote_compaction_lease_ttl_ms)
    if lease is None:  # another job holds it: it cleans up, or the next one does
        return 0
    try:
        return cleanup(store, storage, tp, now_ms=now, delay_ms=settings.remote_compaction_delete_delay_ms)
    except (RlmError, OSError) as exc:
        log.warning(
            "cleaning up after earlier compaction jobs of %s failed (the next job retries): %s", tp, exc
        )
        return 0
    finally:
        try:
            store.release_compaction_lease(lease)
        except RlmError as exc:
            log.warning("releasing the compaction lease of %s failed: %s", tp, exc)


def cleanup(
    store: CompactionStore, storage: RemoteStorage, tp: TopicPartition, *, now_ms: int, delay_ms: int
) -> int:
    """Remove what killed jobs left of ``tp`` and the replaced segments whose delay passed;
    the number of objects deleted. Run under the partition's compaction lease."""
    deleted = 0
    leftovers = []
    for output in store.compaction_outputs(tp):
        row = store.get_segment(output.segment_id)
        if row is None:
            keys = [output.log_key, output.index_key]
            storage.abort_incomplete_puts(keys)
            storage.delete_objects(keys)
            deleted += 2
        leftovers.append(output.segment_id)
    store.forget_compaction_outputs(tp, leftovers)
    for segment in list(store.list_segments(tp, states=[SegmentState.DELETE_SEGMENT_STARTED])):
        if not deferred(segment, now_ms) and delete_segment(
            store, storage, segment, now_ms=now_ms, fence=None
        ):
            deleted += 2
    return deleted
