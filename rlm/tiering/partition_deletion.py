"""Deleting a deleted topic's partitions from the remote tier: Kafka's partition deletion,
``DELETE_PARTITION_MARKED → DELETE_PARTITION_STARTED → DELETE_PARTITION_FINISHED``.

Kafka deletes a topic's remote segments with the topic. A partition directory that goes away may
have moved to another broker: its absence proves nothing, and the copier and retention never
delete a partition on it. Retention learns of a deletion from the broker's KRaft metadata log
(:mod:`rlm.tiering.removed_topics`); where that cannot tell, the operator says it
(``rlm retention delete-topic TOPIC --topic-id ID``), naming the deleted topic's id
(``kafka-topics --describe`` printed it; ``GET /v1/topics`` gives it as each partition's
``remote_topic_id``). Either way, this module deletes it. Topic ids are never reused:
a partition whose remote state the store records under that id is the deleted topic's, and one
recorded under another id (the topic created again under its name, its id adopted) is refused.
So is a partition this broker's log directories still hold under that id, and any while one of
them cannot be read (what it holds is unknown: :mod:`rlm.log.broker_dirs`).

A partition whose copy lease some sidecar held (until it expired, or gave it back), or claimed,
within ``idle_ms`` (ten lease times to live by default) is waited for before its deletion begins:
the sidecars of the brokers that hold a live topic renew and claim its leases every pass, and take
them again when restarted; a deleted topic's stop. This catches a live topic's id given by mistake
even on a broker that does not hold the partition.

Per partition, under its copy lease, once its record, read again, still names the deleted
topic's id (the topic created again may have been adopted since the checks):

1. ``DELETE_PARTITION_MARKED``: from then on the store refuses new segments of the partition,
   copies and compaction swaps alike (the compaction job discards its outputs), so the segments
   listed next are all the partition will have.
2. Each live segment's index object is marked retired (``topic-deleted``, :mod:`rlm.storage.marks`),
   so that a store rebuilt from the objects never makes it a row again.
3. The remote log start offset moves past the last segment (as retention moves it before it
   deletes): reads stop finding the partition's remote records at once.
4. ``DELETE_PARTITION_STARTED``; every segment of the partition is deleted, oldest first
   (compaction's delete delay does not apply: there are no readers to let finish), then the
   outputs compaction jobs wrote and never swapped in (a job that died before its swap: they
   hold the topic's records too, and a rebuild from the objects would make them rows again),
   then the partition's remote-log-start marker.
5. ``DELETE_PARTITION_FINISHED``; the lease is given back.

Every step may be run again: a run that died anywhere is finished by the next. The topic created
again under the name is tiered as any new topic: adopting its id clears the deletion state.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from uuid import UUID

from rlm.errors import NotFoundError, StateConflictError
from rlm.log.broker_dirs import offline_problem
from rlm.log.checkpoints import uuid_to_topic_id
from rlm.log.logdir import LogDir
from rlm.lookup.topic_ids import local_topic_id
from rlm.metastore.compaction import CompactionStore
from rlm.metastore.model import PartitionRecord, PartitionState, RemoteSegment, SegmentState, TopicPartition
from rlm.metastore.protocol import MetadataStore
from rlm.storage.description import TOPIC_DELETED
from rlm.storage.log_start import marker_key
from rlm.storage.marks import mark_retired
from rlm.storage.protocol import RemoteStorage
from rlm.tiering.deletion import Step, delete_segment, no_step
from rlm.tiering.leases import LeaseKeeper

log = logging.getLogger("rlm.retention")

LIVE = (SegmentState.COPY_SEGMENT_STARTED, SegmentState.COPY_SEGMENT_FINISHED)
GOING = (*LIVE, SegmentState.DELETE_SEGMENT_STARTED)


@dataclass(frozen=True)
class PartitionDeletion:
    """What deleting one partition did."""

    topic_partition: TopicPartition
    deleted_segments: int = 0
    deleted_bytes: int = 0
    skipped: str | None = None
    """Why nothing was done (deleted already; a sidecar held or claimed the lease lately)."""
    run_again: bool = False
    """Nothing was done and the deletion is still to do (a sidecar held or claimed the lease
    lately: see :func:`delete_partition`)."""


def deleted_topic_partitions(store: MetadataStore, topic: str) -> list[TopicPartition]:
    """The partitions of ``topic`` the store knows, in order.

    Raises:
        NotFoundError: it knows none.
    """
    found = [r.topic_partition for r in store.list_partitions() if r.topic_partition.topic == topic]
    if not found:
        raise NotFoundError(f"the remote tier holds no partition of topic {topic!r}")
    return found


def delete_partition(
    store: CompactionStore,
    storage: RemoteStorage,
    leases: LeaseKeeper,
    tp: TopicPartition,
    topic_id: UUID,
    *,
    clock: Callable[[], int],
    log_dirs: Iterable[Path] = (),
    step: Step = no_step,
    dry_run: bool = False,
    idle_ms: int = 600_000,
    live_topics: Mapping[str, str] | None = None,
    on_deleted: Callable[[RemoteSegment], None] = lambda segment: None,
    removed: Collection[UUID] = (),
) -> PartitionDeletion:
    """Delete partition ``tp`` of the deleted topic ``topic_id`` from the remote tier; with
    ``dry_run``, check the same and count what would be deleted, changing nothing. A deletion
    not begun yet begins only once no sidecar held (or gave back) or claimed the partition's copy
    lease within ``idle_ms``.
    ``live_topics`` (topic id → name) are the topics the broker's KRaft metadata log holds live
    (:class:`~rlm.log.cluster_metadata.ClusterMetadata`): one of them is not deleted.
    ``on_deleted`` is called for each segment deleted.
    ``removed`` are other topic ids the cluster deleted: a partition recording no id because its
    segments name two topics (a store rebuilt while a deleted topic's segments lay beside its
    successor's) is deleted when they name only ``topic_id`` and ``removed`` ones.

    Raises:
        NotFoundError: The store knows no such partition.
        StateConflictError: The store records the partition under another topic id, or none
            (but for segments of ``topic_id`` and ``removed`` ones alone), or one of ``log_dirs``
            holds it under one of them or cannot be read, or ``live_topics`` has one (the topic
            is not deleted); nothing was changed.
        StaleLeaseError: The copy lease was taken over and taken again during the run (the topic
            created again may have been adopted meanwhile); the run can be repeated, and checks
            the topic id again.
        StorageError / MetadataError: The run can be repeated; it goes on where this one stopped.
    """
    record = store.get_partition(tp)
    if record is None:
        raise NotFoundError(f"the remote tier holds nothing of {tp}")
    topic_ids = _check_topic_id(store, record, topic_id, removed)
    if record.deletion_state is PartitionState.DELETE_PARTITION_FINISHED:
        return PartitionDeletion(
            tp, skipped=f"deleted already, at {record.deletion_event_time_ms} (epoch ms)"
        )
    for each in topic_ids:
        _check_not_held_locally(log_dirs, tp, each)
        live = (live_topics or {}).get(uuid_to_topic_id(each))
        if live is not None:
            raise StateConflictError(
                f"{tp}: the broker's KRaft metadata log holds topic {live!r} under id "
                f"{uuid_to_topic_id(each)}: the topic is not deleted; nothing was deleted"
            )
    # Checked before the deletion begins: a run that died past the mark gave the lease back (or
    # let it go), and the partition takes no new segment since.
    recently = _recently_held(store, tp, clock(), idle_ms) if record.deletion_state is None else None
    if recently is not None:
        return PartitionDeletion(
            tp,
            skipped=f"{recently}, within the last {idle_ms} ms: the sidecars of brokers that still "
            "hold a topic renew and claim its leases, a deleted topic's stop; run again once none has "
            "for that long",
            run_again=True,
        )
    if dry_run:
        going = list(store.list_segments(tp, states=GOING))
        return PartitionDeletion(tp, len(going), sum(s.size_bytes for s in going))
    lease = leases.hold(tp)
    if lease is None:  # taken since
        return PartitionDeletion(
            tp, skipped=f"the copy lease is held by {leases.holder(tp)}; run again", run_again=True
        )
    try:
        # Read again under the lease: the topic created again may have been adopted since the
        # checks above, by a sidecar that has given the lease back since (its adoption clears the
        # deletion state of a run that died): its segments are none of this deletion's.
        record = store.get_partition(tp)
        if record is None:
            raise NotFoundError(f"the remote tier holds nothing of {tp}")
        if _check_topic_id(store, record, topic_id, removed) != topic_ids:
            raise StateConflictError(f"{tp}: its segments changed topic ids meanwhile; run again")
        if record.deletion_state is None:  # else a run that died went as far
            store.update_partition_state(
                tp, PartitionState.DELETE_PARTITION_MARKED, event_time_ms=clock(), fence=lease
            )
        step("partition_marked")
        segments = list(store.list_segments(tp, states=GOING))
        for segment in segments:
            if segment.state in LIVE:
                mark_retired(storage, segment, now_ms=clock(), why=TOPIC_DELETED)
                # A lease taken anew (the topic created again may have been adopted and tiered
                # meanwhile) ends the run: the partition may be another topic's by now.
                lease = leases.keep(tp, lease, "the deleted topic's segments were marked retired")
        step("segments_marked")
        if segments:
            end = max(s.end_offset for s in segments)
            store.advance_log_start_offset(tp, end + 1, fence=lease)
        store.update_partition_state(
            tp, PartitionState.DELETE_PARTITION_STARTED, event_time_ms=clock(), fence=lease
        )
        step("partition_deletion_started")
        deleted = deleted_bytes = 0
        for segment in segments:
            if delete_segment(store, storage, segment, now_ms=clock(), fence=lease, step=step):
                on_deleted(segment)
                deleted += 1
                deleted_bytes += segment.size_bytes
            lease = leases.keep(tp, lease, "the deleted topic's segments were deleted")
        _delete_compaction_outputs(store, storage, tp)
        storage.delete_objects([marker_key(tp, each) for each in sorted(topic_ids)])
        store.update_partition_state(
            tp, PartitionState.DELETE_PARTITION_FINISHED, event_time_ms=clock(), fence=lease
        )
    finally:
        leases.release(tp)
    log.info(
        "%s: deleted from the remote tier, topic id %s (%d segments, %d bytes)",
        tp,
        uuid_to_topic_id(topic_id),
        deleted,
        deleted_bytes,
    )
    return PartitionDeletion(tp, deleted, deleted_bytes)


def _delete_compaction_outputs(store: CompactionStore, storage: RemoteStorage, tp: TopicPartition) -> None:
    """Delete the objects of the outputs compaction jobs recorded for ``tp`` and never swapped in,
    then forget them (the store swaps nothing into a partition being deleted)."""
    outputs = store.compaction_outputs(tp)
    if not outputs:
        return
    keys = [key for output in outputs for key in (output.log_key, output.index_key)]
    storage.abort_incomplete_puts(keys)
    storage.delete_objects(keys)
    store.forget_compaction_outputs(tp, [output.segment_id for output in outputs])


def _recently_held(store: MetadataStore, tp: TopicPartition, now_ms: int, idle_ms: int) -> str | None:
    """What says a sidecar held or claimed the copy lease of ``tp`` within ``idle_ms``; None."""
    lease = store.get_lease(tp)
    if lease is not None and lease.expires_at_ms > now_ms - idle_ms:
        return f"broker {lease.owner}'s sidecar held its copy lease until {lease.expires_at_ms} (epoch ms)"
    # A sidecar that stopped (a clean shutdown, a rolling restart) gave its lease back.
    released = store.lease_released_at_ms(tp) if lease is None else None
    if released is not None and released > now_ms - idle_ms:
        return f"a sidecar gave its copy lease back at {released} (epoch ms)"
    claims = store.lease_claims(tp, max_age_ms=idle_ms)
    if claims:
        claim = max(claims, key=lambda c: c.claimed_at_ms)
        when = claim.claimed_at_ms
        return f"broker {claim.broker_id}'s sidecar claimed its copy lease at {when} (epoch ms)"
    return None


def _check_topic_id(
    store: MetadataStore, record: PartitionRecord, topic_id: UUID, removed: Collection[UUID]
) -> set[UUID]:
    """The topic ids whose remote state deleting ``record``'s partition as ``topic_id``'s deletes
    (``topic_id``, and with no id recorded, the ``removed`` ids its segments name beside it).

    Raises:
        StateConflictError: The partition is another topic's, or one whose id cannot be told.
    """
    tp, given = record.topic_partition, uuid_to_topic_id(topic_id)
    if record.topic_id is None:
        named = {s.topic_id for s in store.list_segments(tp, states=GOING)}
        if named and named <= {topic_id, *removed}:
            return {i for i in named if i is not None}
        raise StateConflictError(
            f"{tp}: the remote tier records no topic id for it (copied from a broker without "
            f"partition.metadata, or its segments name two topics), so it cannot be checked to be "
            f"the deleted topic {given}'s: nothing was deleted"
        )
    if record.topic_id != topic_id:
        raise StateConflictError(
            f"{tp}: the remote tier holds topic id {uuid_to_topic_id(record.topic_id)}, not {given}: "
            "it is another topic of that name (created again after the deletion?); nothing was deleted"
        )
    return {topic_id}


def _check_not_held_locally(log_dirs: Iterable[Path], tp: TopicPartition, topic_id: UUID) -> None:
    """Raises StateConflictError when a log directory holds ``tp`` under ``topic_id`` or under no
    topic id it can tell (no ``partition.metadata``), or one cannot be read: what it holds is
    unknown (:mod:`rlm.log.broker_dirs`), so nothing may be deleted."""
    for path in log_dirs:
        log_dir = LogDir(path)
        problem = offline_problem(log_dir)
        if problem is None:
            try:
                partition = log_dir.partition(tp.topic, tp.partition)
            except NotFoundError:
                continue
            except OSError as exc:
                problem = f"log directory {path} is offline: {exc}"
            else:
                held = local_topic_id(partition)
                if held == topic_id:
                    raise StateConflictError(
                        f"{tp}: {partition.path} holds it under topic id {uuid_to_topic_id(topic_id)}: "
                        "the topic is not deleted on this broker; nothing was deleted"
                    )
                if held is None:  # a broker before Kafka 2.8 writes none: the topic may be this one
                    raise StateConflictError(
                        f"{tp}: {partition.path} holds it, with no partition.metadata to tell its topic "
                        "id: the topic may not be deleted on this broker; nothing was deleted"
                    )
                continue
        raise StateConflictError(
            f"{tp}: whether this broker holds it under topic id {uuid_to_topic_id(topic_id)} cannot be "
            f"told, {problem}; nothing was deleted"
        )
