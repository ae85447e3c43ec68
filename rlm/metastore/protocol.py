"""The metadata store contract: Kafka's ``RemoteLogMetadataManager`` plus leases.

The store is the source of truth for what is on the remote tier. rlm's core depends only on this
protocol; ``metadata.SqlMetadataStore`` implements it over PostgreSQL or SQLite.

Conventions shared by every method:

* Each call is one transaction: it happens entirely or not at all.
* "Not found" is ``None`` (or Kafka's ``-1`` for offsets), never an exception.
* Writes that take a ``fence`` are fenced by it, the writer's copy lease: when it is given and is
  not the partition's current lease (a newer holder exists, or the lease was released), the call
  changes nothing and raises :class:`~rlm.errors.StaleLeaseError`. The whole lease is compared:
  its partition, its epoch, its holder's broker id and incarnation, so that of an epoch handed out
  twice (a database failover that lost committed transactions) only the holder the store records
  writes. The copier passes its lease on every write; ``None`` writes unfenced.
* :class:`~rlm.errors.MetadataUnavailableError` (retriable) means the database could not be
  reached or aborted the transaction; nothing was changed and the call may be retried.
* "Offset order" sorts segments by start offset, then by segment id.
* Segments may overlap (a new copier may start mid-segment after a takeover).
* Every call has a deadline (the adapter's settings): a database that does not answer in time
  fails the call with :class:`~rlm.errors.MetadataUnavailableError`, it never hangs.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from typing import Protocol
from uuid import UUID

from rlm.metastore.model import (
    ClusterClaim,
    Lease,
    LeaseClaim,
    LogPosition,
    PartitionRecord,
    PartitionState,
    PendingUpload,
    RemoteSegment,
    RemoteTierSummary,
    SegmentState,
    SkippedRange,
    StateUpdate,
    TopicIdChange,
    TopicPartition,
)


class MetadataStore(Protocol):
    """Remote segment metadata, per-partition state and copy leases."""

    # -- segments: writes ---------------------------------------------------------------------

    def add_segment(self, segment: RemoteSegment, *, fence: Lease | None = None) -> None:
        """Record a segment whose copy is starting.

        Idempotent: adding the same segment again (same id, same fields) is a no-op. A partition
        with no topic id recorded takes the segment's (see :meth:`adopt_topic_id`), unless live
        segments of another id are stored; one with another id recorded is left with none, so
        that the next :meth:`adopt_topic_id` retires the segments that are not the broker's topic's.

        Raises:
            InvalidStateTransitionError: ``segment.state`` is not ``COPY_SEGMENT_STARTED``.
            DuplicateSegmentError: The id is already stored with different metadata.
            StateConflictError: The partition is being deleted.
            StaleLeaseError: ``fence`` is not the partition's lease.
        """
        ...

    def update_segment_state(
        self,
        segment_id: UUID,
        state: SegmentState,
        *,
        event_time_ms: int,
        expected: SegmentState | None = None,
        fence: Lease | None = None,
    ) -> StateUpdate:
        """Move a segment to ``state``; concurrent callers are serialized, none is lost.

        Idempotent: when the segment already is in ``state`` nothing changes and
        ``changed`` is false, so retries and racing duplicates are safe. Otherwise ``expected``,
        when given, must be the current state (compare-and-set), and the state machine must allow
        the move.

        Raises:
            NotFoundError: No segment has this id.
            StateConflictError: The segment is neither in ``state`` nor in ``expected``.
            InvalidStateTransitionError: The move is not allowed; the message names both states.
            StaleLeaseError: ``fence`` is not the partition's lease.
        """
        ...

    def add_pending_upload(
        self, segment_id: UUID, upload: PendingUpload, *, fence: Lease | None = None
    ) -> None:
        """Record an unfinished upload of one of a segment's objects, whose copy is under way.

        The copier records each multipart upload as soon as the store created it, before any of
        its bytes are sent, so a copy killed mid-upload leaves no upload the cleanup cannot name.
        Idempotent: recording the same upload again is a no-op. Moving the segment to
        ``COPY_SEGMENT_FINISHED`` or ``DELETE_SEGMENT_FINISHED`` forgets its uploads (they were
        completed, or aborted as far as the store allows).

        Raises:
            NotFoundError: No segment has this id.
            StateConflictError: The segment is no longer ``COPY_SEGMENT_STARTED``: its cleanup may
                have run already, so the upload must be aborted rather than recorded.
            StaleLeaseError: ``fence`` is not the partition's lease.
        """
        ...

    # -- segments: reads ----------------------------------------------------------------------

    def pending_uploads(self, segment_id: UUID) -> list[PendingUpload]:
        """The uploads recorded for the segment, in the order recorded; empty when there are none."""
        ...

    def get_segment(self, segment_id: UUID) -> RemoteSegment | None:
        """The segment with this id, in any state, or ``None``."""
        ...

    def segment_for_offset(
        self, tp: TopicPartition, offset: int, *, leader_epoch: int | None = None
    ) -> RemoteSegment | None:
        """The ``COPY_SEGMENT_FINISHED`` segment holding ``offset``, or ``None``.

        With ``leader_epoch``, only a segment in which that epoch wrote ``offset`` qualifies.
        When several overlapping segments qualify, the one last in offset order is returned.
        O(log n) in the number of segments.
        """
        ...

    def first_segment_for_timestamp(
        self, tp: TopicPartition, timestamp_ms: int, *, from_offset: int = 0
    ) -> RemoteSegment | None:
        """The first ``COPY_SEGMENT_FINISHED`` segment, in offset order, that may hold a record
        at or after ``from_offset`` with a timestamp ≥ ``timestamp_ms``.

        That is: ``max_timestamp_ms >= timestamp_ms`` and ``end_offset >= from_offset``. ``None``
        when there is none. O(log n) in the number of segments.
        """
        ...

    def max_timestamp(self, tp: TopicPartition) -> int | None:
        """KIP-1075's maxTimestamp: the largest max timestamp of the ``COPY_SEGMENT_FINISHED``
        segments, or ``None`` when there are none. O(1) in the number of segments."""
        ...

    def remote_tier_summaries(
        self, tps: Collection[TopicPartition]
    ) -> dict[TopicPartition, RemoteTierSummary]:
        """The remote-tier summary of each partition of ``tps`` the store has a record of
        (partitions it never saw are left out): its record, the start offset of its first
        ``COPY_SEGMENT_FINISHED`` segment and :meth:`max_timestamp`, as those calls would answer.

        For many partitions at once (a ListOffsets request's): all are read in one snapshot, with
        one query per up to a thousand partitions, never one per partition.
        """
        ...

    def highest_copied_offset(self, tp: TopicPartition, *, leader_epoch: int | None = None) -> int:
        """The highest offset ever copied (of ``leader_epoch`` when given), or -1.

        Counts segments that reached ``COPY_SEGMENT_FINISHED``, even if since deleted, so the
        copier never copies an offset range twice. Never decreases, but when
        :meth:`adopt_topic_id` retires a deleted topic's remote state.
        """
        ...

    def list_segments(
        self,
        tp: TopicPartition,
        *,
        states: Collection[SegmentState] | None = None,
        leader_epoch: int | None = None,
    ) -> Iterator[RemoteSegment]:
        """The partition's segments in offset order, fetched page by page as they are consumed.

        Filters: ``states`` keeps segments in one of those states; ``leader_epoch`` keeps segments
        that epoch wrote records in. One listing is one snapshot: it shows the partition as it was
        when the first segment was read, whatever changes (a compaction swap, retention, a
        truncation) commit while it runs, so each segment appears once and no offset the partition
        covered then goes missing. The snapshot holds a database connection until the listing is
        exhausted, closed or dropped: consume it promptly, and do not keep one part-read.
        """
        ...

    def remote_log_size(self, tp: TopicPartition) -> int:
        """Total ``size_bytes`` of the ``COPY_SEGMENT_FINISHED`` segments; 0 when none."""
        ...

    # -- partitions ---------------------------------------------------------------------------

    def get_partition(self, tp: TopicPartition) -> PartitionRecord | None:
        """The partition's record, or ``None`` if the store has never seen the partition."""
        ...

    def list_partitions(self, *, deletion_state: PartitionState | None = None) -> list[PartitionRecord]:
        """Every known partition (in one deletion state when given), ordered by topic/partition."""
        ...

    def advance_log_start_offset(self, tp: TopicPartition, offset: int, *, fence: Lease | None = None) -> int:
        """Raise the remote log start offset to ``offset``; returns the stored value.

        Never lowers it: an ``offset`` at or below the stored one is a no-op.

        Raises:
            StaleLeaseError: ``fence`` is not the partition's lease.
        """
        ...

    def update_partition_state(
        self,
        tp: TopicPartition,
        state: PartitionState,
        *,
        event_time_ms: int,
        fence: Lease | None = None,
    ) -> PartitionRecord:
        """Move the partition's deletion state; repeating the current state is a no-op.

        Raises:
            InvalidStateTransitionError: The move is not allowed; the message names both states.
            StaleLeaseError: ``fence`` is not the partition's lease.
        """
        ...

    def adopt_topic_id(
        self,
        tp: TopicPartition,
        topic_id: UUID,
        *,
        event_time_ms: int,
        fence: Lease | None = None,
        written_ms: int | None = None,
        log_start_offset: int = -1,
    ) -> TopicIdChange:
        """Make ``topic_id`` (the broker's ``partition.metadata``) the id the partition's remote
        state belongs to, as Kafka keys remote state by ``TopicIdPartition``.

        * Already recorded: nothing changes (one read of the partition).
        * None recorded (a new partition, or one copied from a broker without
          ``partition.metadata``): the id is adopted; segments without an id stay the
          partition's.
        * Another id recorded (the topic was deleted and created again under the same name), or none
          recorded while segments of another id are live: in one transaction, every
          ``COPY_SEGMENT_STARTED`` and ``COPY_SEGMENT_FINISHED`` segment of another id (and, when
          another id was recorded, every one without an id: it was copied before) moves to
          ``DELETE_SEGMENT_STARTED``, so lookups stop finding it at once and the usual deletion
          removes its objects; and what the partition records is set back to what its remaining
          finished segments say (none, usually): the highest copied offset, per epoch too (the only
          way it falls), the remote log size, the remote log start offset (``log_start_offset``: -1,
          or the one ``topic_id``'s own retention wrote beside its segments, read back), the skipped
          ranges (none) and the deletion state (none); and the export ledger forgets the partition's
          offsets not recorded for ``topic_id`` (see :meth:`export_offsets`), so the next
          incremental export starts at the new topic's log start. The ids whose segments were
          retired (the id recorded before among them, when it had any, or when retention had deleted
          them all, copied more than a minute before ``written_ms``) are remembered as retired.
        * A retired id: refused, nothing changes. A topic's id never comes back; the broker that
          names it holds a stale replica of the deleted topic, and adopting it would retire the
          live topic's segments.

        * With ``written_ms`` (when the broker wrote ``partition.metadata``): refused, nothing
          changes, when a segment it would retire was first copied more than a minute (clock
          skew) after it. A topic created again is created after the deleted one's copies; a
          stale replica of a topic the store never saw was created before the live one's. Rows
          rebuilt from objects without a description (no copy time) do not count.

        Raises:
            RetiredTopicIdError: ``topic_id`` was retired from the partition (the error says when,
                and for which id).
            OlderTopicIdError: ``written_ms`` is older than the segments it would retire.
            StaleLeaseError: ``fence`` is not the partition's lease.
        """
        ...

    def topic_id_retirees(
        self,
        tp: TopicPartition,
        topic_id: UUID,
        *,
        fence: Lease | None = None,
        written_ms: int | None = None,
    ) -> list[RemoteSegment] | None:
        """What :meth:`adopt_topic_id` of ``topic_id`` would retire now, changing nothing (one
        read): None when ``topic_id`` is the one recorded (adopting it changes nothing); else the
        live segments it would move to ``DELETE_SEGMENT_STARTED`` (maybe none), by start offset.
        The copier marks their objects retired before it adopts the id
        (:mod:`rlm.tiering.topic_identity`); under its lease nothing else retires or adds them.

        Raises:
            RetiredTopicIdError, OlderTopicIdError: As :meth:`adopt_topic_id` would refuse.
            StaleLeaseError: ``fence`` is not the partition's lease.
        """
        ...

    def truncate_copies(
        self,
        tp: TopicPartition,
        from_offset: int,
        *,
        event_time_ms: int,
        fence: Lease | None = None,
    ) -> int:
        """Retire every ``COPY_SEGMENT_STARTED`` and ``COPY_SEGMENT_FINISHED`` segment of ``tp``
        starting at or above ``from_offset``, in one transaction, so that the broker's log is
        tiered again from there: its records diverged from the copies' (an unclean leader
        election, see :mod:`rlm.tiering.lineage`).

        The segments move to ``DELETE_SEGMENT_STARTED`` (lookups stop finding them at once, the
        usual deletion removes their objects); the highest copied offset, per epoch too, and the
        remote log size fall to what the segments left say; skipped ranges from ``from_offset``
        on are forgotten and one reaching over it ends below it; the export ledger's offsets of
        ``tp`` above ``from_offset`` fall to it, and the partition's
        :attr:`~rlm.metastore.model.PartitionRecord.lineage` grows by one (an export planned
        before is held below ``from_offset``, see :meth:`record_export_offsets`). Returns how many
        segments were retired (0: nothing changed).

        Raises:
            StaleLeaseError: ``fence`` is not the partition's lease.
        """
        ...

    def trim_copies(
        self,
        tp: TopicPartition,
        kept: UUID,
        replacement: UUID,
        from_offset: int,
        *,
        event_time_ms: int,
        fence: Lease | None = None,
    ) -> int:
        """Replace ``kept``, a ``COPY_SEGMENT_FINISHED`` segment of ``tp``, by ``replacement``, a
        ``COPY_SEGMENT_STARTED`` copy of its first offsets (the same start offset, a lower end
        offset), and retire the copies from ``from_offset`` on as :meth:`truncate_copies` does, in
        one transaction: a diverged copy whose first offsets the broker's log no longer has keeps
        those, and the broker's log is tiered again from ``from_offset``, which lies inside the
        replacement (the broker's copy from there overlaps it) or just past it (see
        :mod:`rlm.tiering.trim`).

        ``replacement`` moves to ``COPY_SEGMENT_FINISHED`` keeping its event time; ``kept`` and
        every live segment starting at or above ``from_offset`` move to
        ``DELETE_SEGMENT_STARTED``. Returns how many segments were retired, ``kept`` included.

        Raises:
            StaleLeaseError: ``fence`` is not the partition's lease.
            StateConflictError: ``kept``, ``replacement`` or ``from_offset`` is not as described;
                nothing changed.
        """
        ...

    def finish_overlay(
        self,
        tp: TopicPartition,
        segment_id: UUID,
        *,
        event_time_ms: int,
        fence: Lease | None = None,
    ) -> None:
        """Move ``segment_id``, a ``COPY_SEGMENT_STARTED`` copy of ``tp`` starting inside a
        ``COPY_SEGMENT_FINISHED`` one and reaching past it, to ``COPY_SEGMENT_FINISHED``: a copy of
        the broker's log whose records answer from its start on in place of a diverged copy's
        kept below it (see :mod:`rlm.tiering.join`). In the same transaction the remote tier's
        records from its start on count as replaced, as :meth:`truncate_copies` from there has it:
        the export ledger's offsets of ``tp`` above its start fall to it, and the partition's
        :attr:`~rlm.metastore.model.PartitionRecord.lineage` grows by one.

        Raises:
            StaleLeaseError: ``fence`` is not the partition's lease.
            StateConflictError: ``segment_id`` is not a started copy of ``tp`` starting inside a
                finished one; nothing changed.
        """
        ...

    # -- leases -------------------------------------------------------------------------------

    def acquire_lease(
        self,
        tp: TopicPartition,
        owner: int,
        ttl_ms: int,
        *,
        incarnation: UUID | None = None,
        replace_own_incarnation: bool = True,
    ) -> Lease | None:
        """Take the copy lease of ``tp`` for process ``incarnation`` of broker ``owner`` for ``ttl_ms``.

        Succeeds when the lease is free (never taken, or released), expired (a takeover), or
        already held by ``owner``: by the same incarnation, or by another one when
        ``replace_own_incarnation`` (a restarted sidecar fences its previous incarnation at once).
        Every success returns a lease with a higher epoch than any before, recording
        ``incarnation``, and withdraws ``owner``'s claim (:meth:`claim_lease`). Returns ``None``
        while another broker holds an unexpired lease, or another incarnation of ``owner`` does and
        ``replace_own_incarnation`` is false.
        """
        ...

    def renew_lease(self, lease: Lease, ttl_ms: int, *, refresh_after_ms: int | None = None) -> Lease:
        """Extend a held lease to now + ``ttl_ms``, keeping its epoch.

        A lease that expired but was not taken over may still be renewed. With
        ``refresh_after_ms``, a lease still current that was taken or renewed (for ``ttl_ms``)
        less than that ago, by the store's time, is returned as the store has it, found so by a
        read alone: nothing is written.

        Raises:
            StaleLeaseError: The lease was taken over or released: the partition records another
                lease (an epoch, broker id or incarnation of its own), or none.
        """
        ...

    def release_lease(self, lease: Lease) -> bool:
        """Give the lease up so another broker may take it at once; :meth:`lease_released_at_ms`
        then says when.

        Idempotent: returns ``False`` (and changes nothing) when ``lease`` is no longer current
        (the partition records another epoch, broker id or incarnation, or no holder).
        """
        ...

    def get_lease(self, tp: TopicPartition) -> Lease | None:
        """The current lease of ``tp``, expired or not, or ``None`` when nobody holds it."""
        ...

    def lease_released_at_ms(self, tp: TopicPartition) -> int | None:
        """When nobody holds the lease of ``tp`` (:meth:`get_lease` is None): when its last holder
        released it, by the store's time, or when that lease expired if it expired first. ``None``
        while somebody holds it, and when nobody ever did (or the release predates this record)."""
        ...

    def claim_lease(
        self,
        tp: TopicPartition,
        broker_id: int,
        position: LogPosition,
        *,
        forget_after_ms: int | None = None,
        refresh_after_ms: int | None = None,
    ) -> bool:
        """Record, at the store's time (the one leases expire by), that broker ``broker_id`` wants
        the copy lease of ``tp`` and how far its log reaches; replaces its previous claim. With
        ``forget_after_ms``, the partition's claims recorded longer ago than that are deleted
        (those of brokers that stopped claiming: removed, or holding the lease since). With
        ``refresh_after_ms``, a claim of ``broker_id`` of the same position recorded less than that
        ago is kept as it is, found so by a read alone, and nothing is written. Returns whether
        the claim was recorded.

        A claim grants nothing and fences nothing: the holder reads the claims
        (:meth:`lease_claims`) and may give the lease up. Taking the lease withdraws the taker's
        claim; the others grow old.
        """
        ...

    def lease_claims(self, tp: TopicPartition, *, max_age_ms: int) -> list[LeaseClaim]:
        """The claims on the copy lease of ``tp`` recorded less than ``max_age_ms`` ago (by the
        store's time), one per broker, by broker id; empty when there are none."""
        ...

    def claim_cluster(self, cluster_id: str, broker_id: int) -> ClusterClaim:
        """Record that the store holds the remote tier of Kafka cluster ``cluster_id`` (its
        brokers' ``meta.properties``), claimed by broker ``broker_id``'s sidecar, unless a cluster
        is recorded already; returns the one recorded (another cluster's when the store is not
        this one's). Concurrent first claims agree on one."""
        ...

    # -- skipped ranges -----------------------------------------------------------------------

    def add_skipped_range(self, skipped: SkippedRange, *, fence: Lease | None = None) -> SkippedRange:
        """Record that the remote tier will never hold ``skipped``'s offsets; the copier then
        copies on above them. Returns the range as stored.

        Idempotent: the same range (same offsets and kind) recorded again is a no-op that
        returns the stored one.

        Raises:
            InvalidSkipRangeError: The range overlaps offsets already copied (at or below the
                highest copied offset, or below the remote log start offset), a copy under way,
                or another skipped range; the message says which.
            StateConflictError: The partition is being deleted.
            StaleLeaseError: ``fence`` is not the partition's lease.
        """
        ...

    def list_skipped_ranges(self, tp: TopicPartition) -> list[SkippedRange]:
        """The partition's skipped ranges in offset order (empty when none)."""
        ...

    # -- maintenance --------------------------------------------------------------------------

    def purge_deleted_segments(
        self,
        tp: TopicPartition,
        *,
        deleted_before_ms: int,
        limit: int = 1000,
        fence: Lease | None = None,
    ) -> int:
        """Forget up to ``limit`` of the partition's ``DELETE_SEGMENT_FINISHED`` segments whose
        deletion finished before ``deleted_before_ms``; returns how many.

        Their objects are gone, so only their rows go. What is derived from them is kept:
        :meth:`highest_copied_offset` (per epoch too) does not change.

        Raises:
            StaleLeaseError: ``fence`` is not the partition's lease.
        """
        ...

    # -- export ledger ------------------------------------------------------------------------

    def export_offsets(self, output: str) -> dict[TopicPartition, int]:
        """Per partition, the offset the next incremental export to ``output`` (a URI) starts at:
        past the last one earlier runs exported; partitions never exported there are absent, and
        so are those whose offset was recorded for another topic id than the one the partition's
        remote state now belongs to (a topic deleted and created again: see
        :meth:`adopt_topic_id`, which forgets them)."""
        ...

    def record_export_offsets(
        self,
        output: str,
        offsets: Mapping[TopicPartition, int],
        topic_ids: Mapping[TopicPartition, UUID | None] | None = None,
        lineages: Mapping[TopicPartition, int | None] | None = None,
    ) -> dict[TopicPartition, int]:
        """Record where the next export to ``output`` starts in each partition given, as an offset
        of the topic id ``topic_ids`` gives (the id the partition had when the run planned it),
        else (``None``, or absent) of the partition's current one.

        An offset never goes down within one topic id: a lower one than recorded (a commit
        replayed) changes nothing. One of the partition's current id replaces one recorded under
        another, lower or not; one of another id than the partition's current one (a run planned
        before the topic was created again) is not recorded.

        ``lineages`` gives the :attr:`~rlm.metastore.model.PartitionRecord.lineage` each
        partition had when the run planned (``None``, or absent: 0, before every replacement).
        Where the copies were replaced since (:meth:`truncate_copies`), the offset recorded is held
        at the lowest offset replaced: the run's rows from there on are of the replaced copies,
        and the next run exports the broker's records there. Returns the partitions held so, with
        the offset recorded for each."""
        ...

    # -- lifecycle ----------------------------------------------------------------------------

    def close(self) -> None:
        """Release the store's connections. Idempotent."""
        ...
