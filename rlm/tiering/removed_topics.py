"""Deleting the remote log of the topics the cluster deleted, as Kafka does, without the operator.

A KRaft cluster records a topic's deletion in its metadata log (a ``RemoveTopicRecord`` naming the
topic's id), which every broker keeps in ``__cluster_metadata-0`` under ``metadata.log.dir``
(:mod:`rlm.log.cluster_metadata` reads it). Each full retention pass looks at it, and every
partition the store records under a removed topic's id is deleted from the remote tier as
``rlm retention delete-topic`` deletes it (:func:`rlm.tiering.partition_deletion.delete_partition`),
with the same checks: a partition the store records under another id (the topic created again)
is left alone, one this broker's log directories still hold under that id is left for a later
pass, and one whose copy lease a sidecar held or claimed within ten lease times to live is waited
for. A partition recording no id because its segments name two topics (a store rebuilt while a
deleted topic's segments lay beside its successor's) is deleted once every id they name is a
removed topic's; while one is live, the sidecar that adopts it retires the others' segments.

Only a removal the cluster committed counts: one below the end offset of the broker's latest
metadata snapshot (``<offset>-<epoch>.checkpoint``). Brokers write snapshots of committed records
only, while the log's tail may hold records past the quorum's high watermark that a new leader
truncates. So a deletion waits for the broker's next snapshot (``metadata.log.max.snapshot.
interval.ms``, an hour by default, or sooner after ``metadata.log.max.record.bytes.between.
snapshots``), and only a new snapshot can make a removal committed. Each pass reads the log on
from where the last one stopped (what was appended since: pending records, config overrides),
and reads it whole again only when the latest snapshot changed, the log was truncated or the last
read was incomplete (:class:`~rlm.log.cluster_metadata.ClusterMetadataReader`). A removed topic
with nothing left to delete is passed over until the next whole read, so that passes in between
list no partitions of the store (a broker that was away may still tier a partition of it on its
return: the next whole read looks again).

A removal the broker's log no longer holds (the sidecar was away longer than the broker keeps
its metadata log after a snapshot, ``metadata.max.retention.ms``) is not found: the operator's
command deletes that topic. ZooKeeper-era brokers have no metadata log: nothing happens.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from uuid import UUID

from rlm.errors import NotFoundError, RlmError, StateConflictError
from rlm.log.checkpoints import topic_id_to_uuid, uuid_to_topic_id
from rlm.log.cluster_metadata import (
    ClusterMetadata,
    ClusterMetadataReader,
    TopicRemoval,
    find_cluster_metadata,
)
from rlm.metastore.compaction import CompactionStore
from rlm.metastore.model import PartitionState, RemoteSegment, TopicPartition
from rlm.metrics import Metrics
from rlm.storage.protocol import RemoteStorage
from rlm.tiering.copier import Clock, wall_clock_ms
from rlm.tiering.deletion import Step, no_step
from rlm.tiering.leases import LeaseKeeper
from rlm.tiering.partition_deletion import GOING, PartitionDeletion, delete_partition

log = logging.getLogger("rlm.retention")


@dataclass
class RemovedTopics:
    """Finds the topics the cluster deleted and deletes their partitions from the remote tier."""

    store: CompactionStore
    storage: RemoteStorage
    leases: LeaseKeeper
    metrics: Metrics
    log_dirs: Sequence[Path]
    metadata_log_dir: Path | None = None
    """``metadata.log.dir``; None: the first log directory holding a metadata log."""
    idle_ms: int = 600_000
    """How long no sidecar may have held or claimed a partition's copy lease before it is deleted."""
    clock: Clock = wall_clock_ms
    step: Step = no_step
    on_deleted: Callable[[RemoteSegment], None] = lambda segment: None
    """Called for each segment deleted (the index cache drops its entries)."""
    _reader: ClusterMetadataReader | None = field(default=None, init=False)
    _read: ClusterMetadata | None = field(default=None, init=False)
    _current: ClusterMetadata | None = field(default=None, init=False)
    """What the last :meth:`refresh` found (None: no metadata log)."""
    _missing_said: bool = field(default=False, init=False)
    _done: set[str] = field(default_factory=set, init=False)
    """Removed topic ids with nothing left to delete, as of the last full read of the metadata
    log: passes skip them (and list no partitions when all are), until it is read whole again."""

    @property
    def has_read(self) -> bool:
        """Whether a metadata log was read (found) since the process started."""
        return self._reader is not None

    def refresh(self) -> ClusterMetadata | None:
        """The broker's metadata log as it now is (read on from where the last refresh stopped,
        or whole again when its latest snapshot changed, it was truncated or the last read was
        incomplete: :class:`~rlm.log.cluster_metadata.ClusterMetadataReader`); None when there is
        none.

        Raises:
            NotFoundError: a metadata log read before is gone (or its directory cannot be read).
        """
        path = find_cluster_metadata(list(self.log_dirs), self.metadata_log_dir)
        self._current = None
        if path is None and self._reader is not None:
            # Read before, gone now (its log directory offline, a volume unmounted): not a cluster
            # without one. Failing leaves the last read's overrides in force (rlm's defaults may
            # be shorter than the broker's) and deletes no removed topic until it is back.
            raise NotFoundError(f"the cluster metadata log {self._reader.path} read before is gone")
        if path is None:
            if self.metadata_log_dir is not None and not self._missing_said:
                self._missing_said = True  # a volume not mounted, a wrong path: said once
                log.warning(
                    "metadata.log.dir %s holds no KRaft metadata log (__cluster_metadata-0): deleted "
                    "topics and the topics' retention overrides are not found until it does; meanwhile "
                    "retention by time and size is off but for topics whose rlm entry sets both keys",
                    self.metadata_log_dir,
                )
            return None
        self._missing_said = False
        reader = self._reader
        if reader is None or reader.path != path:
            reader = self._reader = ClusterMetadataReader(path)
        last = self._read
        read = self._read = reader.read()
        if read is not last:
            before = last.unreadable if last is not None else 0
            if not reader.resumed or _committed(read) != _committed(last):
                self._done.clear()  # looked at again once per read: a lagging sidecar may have tiered more
            self.metrics.cluster_metadata_unreadable.set(read.unreadable)
            self.metrics.cluster_metadata_snapshot_offset.set(
                -1 if read.snapshot_end_offset is None else read.snapshot_end_offset
            )
            if read.unreadable and read.unreadable != before:  # said once, not every pass
                log.warning(
                    "%s: %d parts of the cluster metadata log could not be read; the deleted topics "
                    "found may be incomplete until they can",
                    path,
                    read.unreadable,
                )
        self._current = read
        return read

    def removals(self, *, refresh: bool = True) -> dict[str, TopicRemoval]:
        """The committed removals of the broker's metadata log, by topic id (:meth:`refresh` first,
        unless ``refresh`` is off: then as the pass's refresh found them)."""
        read = self.refresh() if refresh else self._current
        if read is None:
            return {}
        return {topic_id: r for topic_id, r in read.removals.items() if r.committed}

    def run_once(self, *, refresh: bool = True) -> list[PartitionDeletion]:
        """Delete every partition of a removed topic the store still holds (``refresh``: as
        :meth:`removals`); never raises (a failure is logged and counted in
        ``rlm_loop_errors_total{loop="retention"}``)."""
        try:
            removed = {k: r for k, r in self.removals(refresh=refresh).items() if k not in self._done}
            if not removed:
                return []
            records = self.store.list_partitions()
        except (RlmError, OSError) as exc:
            self.metrics.loop_errors.labels("retention").inc()
            log.warning("finding the topics the cluster deleted failed: %s", exc)
            return []
        outcomes = []
        left: set[str] = set()  # removed ids with a partition still to delete
        removed_ids = {topic_id_to_uuid(topic_id) for topic_id in removed}
        for record in records:
            if record.deletion_state is PartitionState.DELETE_PARTITION_FINISHED:
                continue
            tp = record.topic_partition
            topic_id = record.topic_id
            if topic_id is None:  # a store rebuilt while two topics' segments lay side by side
                try:
                    topic_id = self._removed_id_named(tp, removed_ids)
                except RlmError as exc:
                    self.metrics.loop_errors.labels("retention").inc()
                    log.warning("listing the segments of %s failed: %s", tp, exc)
                    left |= removed.keys()  # which removed topics it holds is unknown yet
                    continue
            removal = None if topic_id is None else removed.get(uuid_to_topic_id(topic_id))
            if topic_id is None or removal is None:
                continue
            try:
                outcome = delete_partition(
                    self.store,
                    self.storage,
                    self.leases,
                    tp,
                    topic_id,
                    clock=self.clock,
                    log_dirs=self.log_dirs,
                    step=self.step,
                    idle_ms=self.idle_ms,
                    live_topics=self._read.topics if self._read is not None else None,
                    on_deleted=self.on_deleted,
                    removed=removed_ids,
                )
            except StateConflictError as exc:
                # This broker still holds it under that id: its own deletion is on its way.
                log.info("%s of the deleted topic %s is not deleted yet: %s", tp, removal.topic_id, exc)
                outcome = PartitionDeletion(tp, skipped=str(exc), run_again=True)
            except (RlmError, OSError) as exc:
                self.metrics.loop_errors.labels("retention").inc()
                log.warning("deleting %s of the deleted topic %s failed: %s", tp, removal.topic_id, exc)
                outcome = PartitionDeletion(tp, skipped=str(exc), run_again=True)
            else:
                if outcome.skipped is None:
                    self.metrics.deleted_partitions.labels(tp.topic).inc()
                    log.info(
                        "%s: its topic was deleted at offset %d of the cluster metadata log (%d ms); "
                        "deleted from the remote tier",
                        tp,
                        removal.offset,
                        removal.timestamp_ms,
                    )
            if outcome.skipped is not None:
                left.add(removal.topic_id)
            outcomes.append(outcome)
        self._done |= removed.keys() - left
        return outcomes

    def _removed_id_named(self, tp: TopicPartition, removed_ids: set[UUID]) -> UUID | None:
        """Of a partition recording no topic id, one its segments not deleted yet name when every
        one they name is a removed topic's (they may name two topics, both deleted); else None
        (the sidecar that adopts the live topic's id retires the deleted one's segments)."""
        named = {s.topic_id for s in self.store.list_segments(tp, states=GOING)}
        if not named or not named <= removed_ids:
            return None
        return min((i for i in named if i is not None), key=str)


def _committed(read: ClusterMetadata | None) -> set[str]:
    """The ids of the committed removals ``read`` found."""
    return set() if read is None else {k for k, r in read.removals.items() if r.committed}
