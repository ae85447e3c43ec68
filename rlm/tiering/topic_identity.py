"""Which topic a partition's remote state belongs to: the broker's ``partition.metadata`` decides.

Kafka keys remote state by ``TopicIdPartition``. A topic deleted and created again under the same
name is another topic: a new id in ``partition.metadata`` and offsets from 0 again, while rlm's
metadata, keyed by name, still holds the deleted topic's segments and offsets. Before the copier
or retention decides anything with that state, :func:`adopt_local_topic_id` has the store adopt
the broker's id (:meth:`~rlm.metastore.protocol.MetadataStore.adopt_topic_id`, fenced by the
lease): a changed id moves the deleted topic's live segments to ``DELETE_SEGMENT_STARTED``, whose
objects the usual deletion then removes (as Kafka deletes a deleted topic's remote segments), and
resets the partition's highest copied and remote log start offsets, so that the new topic is
tiered from its start.

Only an id read from the broker's file counts: a partition without ``partition.metadata`` (older
brokers) is handled as before, and one whose file cannot be read is an error naming the file,
never a reason to delete anything.

An id the store retired is never adopted again: the broker naming it holds a stale replica of the
deleted topic (it was down while the topic was deleted and created again, and has not removed
the log as a stray yet). Its sidecar then gives the copy lease back at once, so the live
replica's sidecar can take it, and tiers and deletes nothing of the partition.
"""

from __future__ import annotations

import logging

from rlm.errors import RetiredTopicIdError, RlmError
from rlm.log.checkpoints import topic_id_to_uuid, uuid_to_topic_id
from rlm.log.logdir import PartitionDir
from rlm.metastore.model import Lease, TopicIdChange
from rlm.metastore.protocol import MetadataStore
from rlm.metrics import Metrics
from rlm.tiering.leases import LeaseKeeper

log = logging.getLogger("rlm.copier")


def adopt_local_topic_id(
    store: MetadataStore,
    partition: PartitionDir,
    lease: Lease,
    leases: LeaseKeeper,
    *,
    now_ms: int,
    metrics: Metrics,
) -> TopicIdChange | None:
    """Make the broker's topic id of ``partition`` the one its remote state belongs to.

    Returns what the store did, or None when the broker wrote no ``partition.metadata``.

    Raises:
        CorruptCheckpointError: ``partition.metadata`` cannot be parsed (the message names it).
        RetiredTopicIdError: the broker names a deleted topic's id; ``lease`` was given back, or
            left to expire when giving it back failed (the message says what to look at).
        StaleLeaseError: ``lease`` was lost.
    """
    text = partition.topic_id()
    if text is None:
        return None
    tp = lease.topic_partition
    try:
        change = store.adopt_topic_id(
            tp, topic_id_to_uuid(text), event_time_ms=now_ms, lease_epoch=lease.epoch
        )
    except RetiredTopicIdError as exc:
        try:
            leases.release(tp)
        except RlmError as failed:
            # The stale replica is what to report: the lease expires instead.
            log.warning("%s: giving the copy lease back failed (it expires instead): %s", tp, failed)
        raise RetiredTopicIdError(
            f"{tp}: {partition.path / 'partition.metadata'} names topic id {text}, a deleted "
            f"topic's: its remote state was retired at {exc.retired_at_ms} ms, when the topic "
            f"was created again as {uuid_to_topic_id(exc.successor)}. This log directory holds a "
            "stale replica of the deleted topic (the broker removes it as a stray log once it "
            "loads the topic's metadata): nothing of it is tiered, no remote segment is deleted, "
            "and the copy lease is left to the live topic's replicas",
            topic_id=exc.topic_id,
            successor=exc.successor,
            retired_at_ms=exc.retired_at_ms,
        ) from exc
    if change.reset:
        metrics.topic_id_changes.labels(tp.topic, str(tp.partition)).inc()
        previous = "not recorded" if change.previous is None else uuid_to_topic_id(change.previous)
        log.warning(
            "%s: the broker's topic id is %s, the remote tier's was %s: the topic was deleted and "
            "created again under the same name; %d remote segments of the deleted topic are being "
            "deleted and the partition is tiered again from its start",
            tp,
            text,
            previous,
            change.retired,
        )
    return change
