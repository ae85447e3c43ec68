"""Retention of the remote tier, by time, by size and by log start offset (KIP-405 / KIP-32).

Per partition, oldest segment first, a ``COPY_SEGMENT_FINISHED`` segment is deleted when

* time: its max timestamp ≤ now - ``retention.ms`` (the largest record timestamp, never mtimes;
  for a segment whose records carry no timestamp, when it was tiered:
  :meth:`~rlm.metastore.model.RemoteSegment.age_ms`);
* size: the partition (remote finished + local-only segments: as Kafka counts them, those from the
  one starting at the highest tiered offset on) is over ``retention.bytes`` and stays at or over it
  without this segment;
* log start offset: it lies wholly below the remote log start offset (a pass that advanced it
  and then died or failed left it behind), or, with ``remote.log.start.offset.from.broker`` on,
  below the log start offset the broker checkpointed (DeleteRecords). That is off by default: a
  follower checkpoints the leader's log start offset, which the leader's local retention moves;

and the pass stops at the first segment that breaches none, or at the first copy the broker's log
diverged from (an unclean leader election) that is not wholly below that log start offset: the
copier retires it and tiers the broker's log there again first (:mod:`rlm.tiering.lineage_keeper`).
Time and size apply only to topics whose ``cleanup.policy`` has ``delete`` (as Kafka's
``UnifiedLog.deleteOldSegments``): a topic that is only ``compact`` keeps its segments whatever
``retention.ms`` and ``retention.bytes`` say, and loses them only to the log start offset. The
remote log start offset advances past the deleted segments (not past a kept copy's other records
there: :func:`log_start_after`) *before* anything is deleted, so readers never look for data that is
going away, and is written beside the segments (:mod:`rlm.storage.log_start`, for a metadata store
rebuilt from the objects); each segment then goes ``DELETE_SEGMENT_STARTED`` → objects deleted →
``DELETE_SEGMENT_FINISHED``. Segments still being copied are never counted nor deleted; a delete
left half done by a crash is finished by the next pass. Only the lease holder runs it.

Rows of segments whose deletion finished are kept for
``remote.log.metadata.deleted.segments.retention.ms`` (a verification or an orphan scan that
listed a segment before it went still finds why its objects are gone), then purged by the pass.
The partition's highest copied offset, which counts deleted segments, is kept with the partition.

Each topic's ``retention.ms`` and ``retention.bytes`` are rlm's topic settings over the topic's
own configs in the broker's KRaft metadata log (:mod:`rlm.tiering.topic_retention`).

A full pass also deletes the partitions of the topics the cluster deleted, as Kafka does
(:mod:`rlm.tiering.removed_topics`), and forgets the rows of deleted partitions' segments.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from uuid import UUID

from rlm.config import Settings, TopicSettings
from rlm.errors import RlmError, StaleLeaseError
from rlm.log.broker_dirs import LocalPartitions, group_partitions
from rlm.log.checkpoints import epoch_for_offset
from rlm.log.logdir import PartitionDir
from rlm.log.model import never_tiered
from rlm.log.segment import Segment
from rlm.metastore.compaction import CompactionStore
from rlm.metastore.model import Lease, PartitionState, RemoteSegment, SegmentState, TopicPartition
from rlm.metastore.protocol import MetadataStore
from rlm.metrics import Metrics
from rlm.storage.log_start import write_marker
from rlm.storage.protocol import RemoteStorage
from rlm.tiering.cluster_guard import ClusterGuard
from rlm.tiering.copier import Clock, wall_clock_ms
from rlm.tiering.deletion import Step, deferred, delete_segment, no_step
from rlm.tiering.leases import LeaseKeeper
from rlm.tiering.lineage import find_divergence
from rlm.tiering.local_partitions import LogDirLister, duplicated
from rlm.tiering.overview import remote_log_start
from rlm.tiering.removed_topics import RemovedTopics
from rlm.tiering.topic_identity import adopt_local_topic_id
from rlm.tiering.topic_retention import TopicRetention

log = logging.getLogger("rlm.retention")


@dataclass(frozen=True)
class RetentionOutcome:
    """What one pass did for one partition."""

    topic_partition: TopicPartition
    deleted_segments: int = 0
    deleted_bytes: int = 0
    log_start_offset: int = -1
    """The first offset the remote tier answers for after the pass (-1 while nothing is tiered)."""
    skipped: str | None = None
    error: RlmError | OSError | None = None
    purged_rows: int = 0
    """Rows of long-deleted segments forgotten."""
    partition_deleted: bool = False
    """The partition of a topic the cluster deleted, deleted from the remote tier
    (:mod:`rlm.tiering.removed_topics`)."""


def breaching_segments(
    finished: list[RemoteSegment],
    topic: TopicSettings,
    *,
    now_ms: int,
    local_only_bytes: int,
    log_start_offset: int | None,
) -> list[RemoteSegment]:
    """The oldest segments, in offset order, that retention deletes (pure: no I/O)."""
    deletes = "delete" in topic.cleanup_policy.split(",")  # not a compacted-only topic
    over = -1
    if deletes and topic.retention_bytes >= 0:
        over = sum(s.size_bytes for s in finished) + local_only_bytes - topic.retention_bytes
    expired_before = now_ms - topic.retention_ms if deletes and topic.retention_ms >= 0 else None
    chosen = []
    for segment in finished:
        by_time = expired_before is not None and segment.age_ms() <= expired_before
        by_size = over > 0 and over - segment.size_bytes >= 0
        by_start = log_start_offset is not None and segment.end_offset < log_start_offset
        if not (by_time or by_size or by_start):
            break
        over -= segment.size_bytes  # whatever the reason it goes, the partition shrinks by it
        chosen.append(segment)
    return chosen


def log_start_after(doomed: list[RemoteSegment], kept: list[RemoteSegment], *, floor: int = -1) -> int:
    """The remote log start offset once ``doomed`` (the first finished segments, in offset order)
    are deleted and ``kept`` (the others, in offset order) stay (pure: no I/O).

    As Kafka has it, past the last offset a doomed segment holds: a kept copy starting inside one
    (a takeover copied from mid-segment) holds the same records there, which go with it. Not where
    the kept copy holds other records than the doomed one at the same offsets (leader epochs
    differ: after an unclean election the broker's log was tiered from inside a copy kept below it,
    :mod:`rlm.tiering.join`): reads answer those offsets from the kept copy, and its records there
    are not the doomed segment's, so nothing said they expired. The log then starts at the first
    of them, or at ``floor`` (the log start offset retention deletes below) when that is higher.
    """
    start = max(s.end_offset for s in doomed) + 1
    for later in kept:
        if later.start_offset >= start:
            break
        for gone in doomed:
            first, last = max(later.start_offset, gone.start_offset), min(gone.end_offset, later.end_offset)
            edges = {e.start_offset for e in (*gone.leader_epochs, *later.leader_epochs)}
            for offset in sorted({first} | {o for o in edges if first < o <= last}):
                if offset > last or offset >= start:
                    break
                if epoch_for_offset(gone.leader_epochs, offset) != epoch_for_offset(
                    later.leader_epochs, offset
                ):
                    start = max(offset, min(floor, start))
                    break
    return start


def mark_log_start(
    store: MetadataStore, storage: RemoteStorage, tp: TopicPartition, topic_id: UUID | None, offset: int
) -> None:
    """Write ``offset``, which the metadata store's remote log start offset of ``tp`` has reached,
    as the partition's marker (:mod:`rlm.storage.log_start`), and leave the marker at the
    metadata store's value.

    The lease fences the advance in the metadata store, not the marker's write: a sidecar that
    advanced the offset, then stalled past its lease, writes its lower value after the next
    holder advanced further, wrote its marker and deleted the segments in between. So after each
    write the offset is read again, and while it is higher, it is written. The last marker write
    of all is followed by its writer's read, and any advance after that read is followed by its
    own marker write: the marker ends at the metadata store's value (both remote stores keep the
    last write of an object). Once the partition's remote state is another topic's (deleted and
    created again under the same name), its offset is not this marker's.

    Raises:
        StorageError: The remote store refused the write.
        MetadataUnavailableError: The metadata store could not be read.
    """
    while True:
        write_marker(storage, tp, topic_id, offset)
        record = store.get_partition(tp)
        if record is None or record.remote_log_start_offset <= offset:
            return
        if None not in (record.topic_id, topic_id) and record.topic_id != topic_id:
            return
        offset = record.remote_log_start_offset


def _before_divergence(
    doomed: list[RemoteSegment], partition: PartitionDir, finished: list[RemoteSegment], log_start: int
) -> list[RemoteSegment]:
    """``doomed`` up to the first copy the broker's log diverged from (an unclean leader election:
    :func:`rlm.tiering.lineage.find_divergence`), but for those wholly below ``log_start``.

    The copier retires that copy and the ones after it and tiers the broker's log again from its
    start (:mod:`rlm.tiering.lineage_keeper`); deleted first, it would count as tiered, and the
    broker's records there, which nothing said expired, would never be tiered.
    """
    epochs = partition.leader_epochs()
    checkpointed = partition.high_watermark()
    if not doomed or not epochs or checkpointed is None:
        return doomed
    found = find_divergence(
        finished,
        epochs,
        log_start_offset=max(partition.log_start_offset(), log_start),
        high_watermark=min(checkpointed, partition.log_end_offset()),
    )
    if found is None:
        return doomed
    for kept, segment in enumerate(doomed):
        if segment.start_offset >= found.replace_from and segment.end_offset >= log_start:
            return doomed[:kept]
    return doomed


def _size(segment: Segment) -> int:
    """The bytes of a local segment's ``.log``; 0 once the broker deleted it after the listing."""
    try:
        return segment.size()
    except FileNotFoundError:
        return 0


class Retention:
    """Enforces retention on the remote tier for the partitions whose lease this sidecar holds."""

    def __init__(
        self,
        settings: Settings,
        store: CompactionStore,
        storage: RemoteStorage,
        metrics: Metrics,
        *,
        leases: LeaseKeeper | None = None,
        clock: Clock = wall_clock_ms,
        step: Step = no_step,
    ) -> None:
        self.settings = settings
        self.store = store
        self.storage = storage
        self.metrics = metrics
        ttl = settings.remote_log_manager_lease_ttl_ms
        self.leases = leases or LeaseKeeper(store, settings.broker_id, ttl, metrics=metrics)
        self.clock = clock
        self.step = step
        self.on_change: Callable[[TopicPartition], None] = lambda tp: None
        """Called after retention moved a partition's log start or deleted its segments."""
        self.on_deleted: Callable[[RemoteSegment], None] = lambda segment: None
        """Called for each segment deleted (the index cache drops its entries), its topic's
        deletion's included."""
        self.removed_topics = RemovedTopics(
            store,
            storage,
            self.leases,
            metrics,
            settings.log_dirs,
            settings.metadata_log_dir,
            idle_ms=10 * ttl,
            clock=clock,
            step=step,
        )
        """Deletes the partitions of the topics the cluster deleted (each full pass); its read of the
        broker's metadata log also gives the topics' retention overrides."""
        self.removed_topics.on_deleted = self._deleted
        self.topic_retention = TopicRetention(settings, metrics)
        """Each topic's retention: rlm's topic settings over the broker's topic configs."""
        self.cluster_guard = ClusterGuard(store, settings.log_dirs, settings.broker_id)
        """Refuses a pass with another Kafka cluster's metadata store."""
        self.lister = LogDirLister(settings.log_dirs, metrics, done="expired")
        """Lists the partitions of the log directories, reporting those that cannot be read."""
        self._never_tiered: set[TopicPartition] = set()
        """Partitions of never-tiered topics the store holds nothing of (see :meth:`enforce`)."""

    def _deleted(self, segment: RemoteSegment) -> None:
        self.on_deleted(segment)  # looked up at each call: on_deleted is set after construction

    def run_once(
        self, partitions: Iterable[PartitionDir] | LocalPartitions | None = None
    ) -> list[RetentionOutcome]:
        """One pass over ``partitions`` (default, or a listing of the log directories: every
        partition of the log directories, then
        the partitions of the topics the cluster deleted (:mod:`rlm.tiering.removed_topics`, unless
        ``remote.log.delete.removed.topics`` is off), then :meth:`purge_deleted_partitions`).
        Log directories that cannot be read are passed over (:mod:`rlm.tiering.local_partitions`),
        and a partition found in two log directories is skipped.

        Raises:
            ClusterMismatchError: the metadata store is another Kafka cluster's; nothing was done.
            LogDirsOfflineError: none of the log directories can be read; nothing was done.
        """
        self.cluster_guard.check()
        self._follow_cluster_metadata()
        if partitions is None:
            partitions = self.lister.list()
        everything = isinstance(partitions, LocalPartitions)
        found = partitions if isinstance(partitions, LocalPartitions) else group_partitions(partitions)
        outcomes = [RetentionOutcome(tp, skipped=duplicated(dirs)) for tp, dirs in found.duplicates.items()]
        todo = found.partitions
        if everything and not found.offline:
            self._forget_gone({p.tp for p in todo} | set(found.duplicates))
        workers = max(1, min(self.settings.remote_log_manager_copier_thread_pool_size, len(todo)))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="rlm-retention") as pool:
            outcomes = sorted([*outcomes, *pool.map(self.enforce, todo)], key=lambda o: o.topic_partition)
        if everything:
            if self.settings.remote_log_delete_removed_topics:
                for deletion in self.removed_topics.run_once(refresh=False):
                    if deletion.skipped is None:
                        self.on_change(deletion.topic_partition)
                    outcomes.append(
                        RetentionOutcome(
                            deletion.topic_partition,
                            deletion.deleted_segments,
                            deletion.deleted_bytes,
                            skipped=deletion.skipped,
                            partition_deleted=deletion.skipped is None,
                        )
                    )
            self.purge_deleted_partitions()
        return outcomes

    def _follow_cluster_metadata(self) -> None:
        """Read the broker's metadata log (once a pass, on from where the last read stopped) for
        the topics' retention overrides and the removed topics; a failure leaves the last read's
        overrides in force, or none known when nothing was read yet."""
        try:
            read = self.removed_topics.refresh()
        except (RlmError, OSError) as exc:
            self.metrics.loop_errors.labels("retention").inc()
            log.warning("reading the cluster metadata log failed: %s", exc)
            if not self.removed_topics.has_read:
                self.topic_retention.unknown()  # no last read's overrides to keep in force
            return
        if read is None and self.removed_topics.metadata_log_dir is not None:
            # Set and not there (a volume not mounted yet): not a cluster without one.
            self.topic_retention.unknown()
        else:
            self.topic_retention.update(read)

    def purge_deleted_partitions(self) -> int:
        """Forget the rows of segments of partitions deleted from the remote tier (their topic
        deleted: :mod:`rlm.tiering.partition_deletion`) once deleted longer ago than
        ``remote.log.metadata.deleted.segments.retention.ms``, as :meth:`enforce` forgets those of
        the partitions it enforces: no broker's log directories hold a deleted topic's. Unfenced,
        by any sidecar: they are rows of deleted segments only, and forgetting them twice is
        forgetting them once. Returns how many; never raises (a failure is logged and counted)."""
        kept_ms = self.settings.remote_log_metadata_deleted_segments_retention_ms
        if kept_ms < 0:
            return 0
        purged = 0
        try:
            for record in self.store.list_partitions(deletion_state=PartitionState.DELETE_PARTITION_FINISHED):
                tp = record.topic_partition
                count = self.store.purge_deleted_segments(tp, deleted_before_ms=self.clock() - kept_ms)
                if count:
                    self.metrics.purged_segments.labels(tp.topic, str(tp.partition)).inc(count)
                purged += count
        except RlmError as exc:
            self.metrics.loop_errors.labels("retention").inc()
            log.warning("forgetting the deleted segments of deleted partitions failed: %s", exc)
        return purged

    def enforce(self, partition: PartitionDir) -> RetentionOutcome:
        """Apply retention to one partition; never raises for a partition's error."""
        tp = TopicPartition(partition.topic, partition.partition)
        try:
            never = never_tiered(tp.topic)
            if never is not None and (tp in self._never_tiered or self.store.get_partition(tp) is None):
                # Nothing of it was ever tiered (earlier versions of rlm tiered internal topics:
                # those copies are still retained): no lease to take every pass, and, as nothing
                # tiers it now, no store read after the first.
                self._never_tiered.add(tp)
                return RetentionOutcome(tp, skipped=never)
            # With the log's reach, as the copier: retention's passes are short, so while another
            # broker holds the lease its claim stays fresh even when copier passes are long.
            lease = self.leases.hold_partition(partition)
            if lease is None:
                self._forget_size(tp)  # the holder exports it; this sidecar's last would stay
                return RetentionOutcome(tp, skipped=f"the copy lease is held by {self.leases.holder(tp)}")
            # A deleted topic's remote log start offset and segments are not this topic's.
            change = adopt_local_topic_id(
                self.store,
                self.storage,
                partition,
                lease,
                self.leases,
                now_ms=self.clock(),
                metrics=self.metrics,
                step=self.step,
            )
            if change is not None and change.reset:
                self.on_change(tp)
            outcome = self._enforce(partition, tp, lease)
            return dataclasses.replace(outcome, purged_rows=self._purge(tp, lease))
        except (RlmError, OSError) as exc:
            if isinstance(exc, StaleLeaseError):
                self.leases.forget(tp)
            self.metrics.loop_errors.labels("retention").inc()
            log.warning("retention of %s failed: %s", tp, exc)
            return RetentionOutcome(tp, error=exc)

    def _enforce(self, partition: PartitionDir, tp: TopicPartition, lease: Lease) -> RetentionOutcome:
        now = self.clock()
        for stuck in list(self.store.list_segments(tp, states=[SegmentState.DELETE_SEGMENT_STARTED])):
            if deferred(stuck, now):
                continue
            if delete_segment(self.store, self.storage, stuck, now_ms=now, fence=lease, step=self.step):
                self.on_deleted(stuck)  # a deletion begun earlier (a swap's, a retirement's, cut short)
        finished = list(self.store.list_segments(tp, states=[SegmentState.COPY_SEGMENT_FINISHED]))
        highest = max((s.end_offset for s in finished), default=-1)
        # As Kafka's onlyLocalLogSegmentsSize: from the segment starting at the highest tiered
        # offset on (one a replica rolled there holds untiered offsets after it).
        local_only = sum(_size(s) for s in partition.segments() if s.base_offset >= highest)
        record = self.store.get_partition(tp)
        remote_start = record.remote_log_start_offset if record is not None else -1
        # Finished segments below the remote log start offset are unreadable already (a pass
        # advanced it, then died or failed a delete): they go whatever the settings say now.
        log_start = remote_start
        if self.settings.remote_log_start_offset_from_broker:
            log_start = max(partition.checkpointed_log_start_offset() or -1, remote_start)
        doomed = breaching_segments(
            finished,
            self.topic_retention.topic(tp.topic),
            now_ms=now,
            local_only_bytes=local_only,
            log_start_offset=log_start if log_start >= 0 else None,
        )
        doomed = _before_divergence(doomed, partition, finished, log_start)
        labels = (tp.topic, str(tp.partition))
        if not doomed:
            self.metrics.remote_log_size_bytes.labels(*labels).set(sum(s.size_bytes for s in finished))
            return RetentionOutcome(tp, log_start_offset=remote_log_start(record, finished))
        new_start = log_start_after(doomed, finished[len(doomed) :], floor=log_start)
        start = self.store.advance_log_start_offset(tp, new_start, fence=lease)
        self.on_change(tp)  # no lookup here answers from the doomed segments any more
        # Before any object goes: the objects left then say where the log starts.
        mark_log_start(self.store, self.storage, tp, doomed[0].topic_id, start)
        self.step("log_start_advanced")
        deleted = deleted_bytes = 0
        for segment in doomed:
            if self._delete(segment, now, lease):
                self.on_deleted(segment)
                deleted += 1
                deleted_bytes += segment.size_bytes
                self.metrics.deleted_segments.labels(*labels).inc()
                self.metrics.deleted_bytes.labels(*labels).inc(segment.size_bytes)
        self.on_change(tp)
        remaining = sum(s.size_bytes for s in finished) - sum(s.size_bytes for s in doomed)
        self.metrics.remote_log_size_bytes.labels(*labels).set(remaining)
        return RetentionOutcome(tp, deleted, deleted_bytes, start)

    def _forget_gone(self, here: set[TopicPartition]) -> None:
        """Stop exporting the remote log size of the partitions no longer in the log directories
        (reassigned to other brokers, deleted): it would stay as last set."""
        for metric in self.metrics.remote_log_size_bytes.collect():
            for sample in metric.samples:
                tp = TopicPartition(sample.labels["topic"], int(sample.labels["partition"]))
                if tp not in here:
                    self._forget_size(tp)

    def _forget_size(self, tp: TopicPartition) -> None:
        """Stop exporting this sidecar's remote log size of ``tp``: another broker's sidecar
        enforces its retention now, and the dashboard takes the highest value over the sidecars."""
        with contextlib.suppress(KeyError):  # KeyError: never set here
            self.metrics.remote_log_size_bytes.remove(tp.topic, str(tp.partition))

    def _purge(self, tp: TopicPartition, lease: Lease) -> int:
        """Forget the rows of segments deleted longer ago than the setting says."""
        kept_ms = self.settings.remote_log_metadata_deleted_segments_retention_ms
        if kept_ms < 0:
            return 0
        purged = self.store.purge_deleted_segments(tp, deleted_before_ms=self.clock() - kept_ms, fence=lease)
        if purged:
            self.metrics.purged_segments.labels(tp.topic, str(tp.partition)).inc(purged)
        return purged

    def _delete(self, segment: RemoteSegment, now: int, lease: Lease) -> bool:
        return delete_segment(self.store, self.storage, segment, now_ms=now, fence=lease, step=self.step)
