"""Which topic a partition's remote state belongs to: the broker's ``partition.metadata`` decides.

Kafka keys remote state by ``TopicIdPartition``. A topic deleted and created again under the same
name is another topic: a new id in ``partition.metadata`` and offsets from 0 again, while rlm's
metadata, keyed by name, still holds the deleted topic's segments and offsets. Before the copier
or retention decides anything with that state, :func:`adopt_local_topic_id` has the store adopt
the broker's id (:meth:`~rlm.metastore.protocol.MetadataStore.adopt_topic_id`, fenced by the
lease): a changed id moves the deleted topic's live segments to ``DELETE_SEGMENT_STARTED``, whose
objects the usual deletion then removes (as Kafka deletes a deleted topic's remote segments), and
resets the partition's highest copied and remote log start offsets, so that the new topic is
tiered from its start. The remote log start offset is reset to the one the adopted topic's own
retention wrote beside its segments (:mod:`rlm.storage.log_start`), if any: a store rebuilt while
the deleted topic's segments were still there holds rows of both topics, and the adopted topic's
offsets below its log start must stay gone once the deleted topic's are retired.

Before that transaction, the index object of each segment it is to retire is marked retired
(:func:`rlm.storage.marks.mark_retired`, ``topic-deleted``): a store rebuilt from the objects
before they are deleted (the sidecar died in between) never makes the deleted topic's segments
rows beside the new topic's, where a query tier, which has no ``partition.metadata`` to tell them
apart, would answer the new topic's offsets with the deleted topic's records. A mark that fails
fails the pass before anything is retired; the next pass marks and retires again.

Only an id read from the broker's file counts: a partition without ``partition.metadata`` (older
brokers) is handled as before, and one whose file cannot be read is an error naming the file,
never a reason to delete anything.

A stale replica of the deleted topic (its broker was down while the topic was deleted and
created again, and has not removed the log as a stray yet) names the deleted topic's id. Adopting
it would retire the live topic's segments, so it is refused when the store retired that id
before, or when the broker wrote its ``partition.metadata`` before the segments it would retire
were first copied (the store never saw the id: that topic was never tiered). The sidecar then
gives the copy lease back at once, so the live replica's sidecar can take it, and tiers and
deletes nothing of the partition.
"""

from __future__ import annotations

import logging

from rlm.errors import OlderTopicIdError, RetiredTopicIdError, RlmError
from rlm.log.checkpoints import topic_id_to_uuid, uuid_to_topic_id
from rlm.log.logdir import PARTITION_METADATA, PartitionDir
from rlm.metastore.model import Lease, TopicIdChange, TopicPartition
from rlm.metastore.protocol import MetadataStore
from rlm.metrics import Metrics
from rlm.storage.description import TOPIC_DELETED
from rlm.storage.log_start import marker_key, read_marker
from rlm.storage.marks import mark_retired
from rlm.storage.protocol import RemoteStorage
from rlm.tiering.deletion import Step, no_step
from rlm.tiering.leases import LeaseKeeper

log = logging.getLogger("rlm.copier")


def adopt_local_topic_id(
    store: MetadataStore,
    storage: RemoteStorage,
    partition: PartitionDir,
    lease: Lease,
    leases: LeaseKeeper,
    *,
    now_ms: int,
    metrics: Metrics,
    step: Step = no_step,
) -> TopicIdChange | None:
    """Make the broker's topic id of ``partition`` the one its remote state belongs to.

    Returns what the store did, or None when the broker wrote no ``partition.metadata``.

    Raises:
        CorruptCheckpointError: ``partition.metadata`` cannot be parsed (the message names it).
        StaleReplicaError: the broker names a deleted topic's id, one the store retired
            (:class:`~rlm.errors.RetiredTopicIdError`) or one written before the remote segments
            it would retire were copied (:class:`~rlm.errors.OlderTopicIdError`); ``lease`` was
            given back, or left to expire when giving it back failed
            (the message says what to look at).
        StaleLeaseError: ``lease`` was lost, or taken over and taken again while segments were
            marked (nothing was retired: another holder may have changed what is to be retired).
        StorageError: Marking a segment to retire, or reading the adopted topic's remote log
            start marker, failed; nothing was retired.
        CorruptDataError: The adopted topic's remote log start marker is not one rlm wrote
            (the message names it); nothing was retired.
    """
    text = partition.topic_id()
    if text is None:
        return None
    tp = lease.topic_partition
    topic_id = topic_id_to_uuid(text)
    where = partition.path / PARTITION_METADATA
    try:
        written_ms = where.stat().st_mtime_ns // 1_000_000
        doomed = store.topic_id_retirees(tp, topic_id, fence=lease, written_ms=written_ms)
        if doomed is None:  # the usual case, every pass: the id recorded (one read)
            return TopicIdChange(topic_id, 0, reset=False)
        for segment in doomed:
            mark_retired(storage, segment, now_ms=now_ms, why=TOPIC_DELETED)
            # Renewed between marks (a deleted topic may have many segments), as between copies.
            # One taken anew (another holder had it meanwhile, and may have tiered or retired
            # segments) ends the pass: the segments to retire are listed again at the next.
            lease = leases.keep(tp, lease, "the deleted topic's segments were marked retired")
        if doomed:
            step("topic_segments_marked")
        own_start = read_marker(storage, marker_key(tp, topic_id))
        change = store.adopt_topic_id(
            tp,
            topic_id,
            event_time_ms=now_ms,
            fence=lease,
            written_ms=written_ms,
            log_start_offset=-1 if own_start is None else own_start,
        )
    except RetiredTopicIdError as exc:
        _give_back(leases, tp)
        raise RetiredTopicIdError(
            f"{tp}: {where} names topic id {text}, a deleted topic's: its remote state was retired "
            f"at {exc.retired_at_ms} ms, when the topic was created again as "
            f"{uuid_to_topic_id(exc.successor)}. {_STALE}",
            topic_id=exc.topic_id,
            successor=exc.successor,
            retired_at_ms=exc.retired_at_ms,
        ) from exc
    except OlderTopicIdError as exc:
        _give_back(leases, tp)
        other = "unknown" if exc.other is None else uuid_to_topic_id(exc.other)
        raise OlderTopicIdError(
            f"{tp}: {where} names topic id {text}, written at {written_ms} ms, before the remote "
            f"tier's segments of topic id {other} were first copied (at {exc.first_copied_ms} ms): "
            f"the broker's log is older than the topic the remote tier holds, so it is a deleted "
            f"topic's. {_STALE}",
            topic_id=exc.topic_id,
            other=exc.other,
            first_copied_ms=exc.first_copied_ms,
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


_STALE = (
    "This log directory holds a stale replica of the deleted topic (the broker removes it as a "
    "stray log once it loads the topic's metadata): nothing of it is tiered, no remote segment is "
    "deleted, and the copy lease is left to the live topic's replicas"
)


def _give_back(leases: LeaseKeeper, tp: TopicPartition) -> None:
    try:
        leases.release(tp)
    except RlmError as failed:
        # The stale replica is what to report: the lease expires instead.
        log.warning("%s: giving the copy lease back failed (it expires instead): %s", tp, failed)
