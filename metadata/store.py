"""``SqlMetadataStore``: rlm's :class:`~rlm.metastore.MetadataStore` over PostgreSQL or SQLite."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from types import TracebackType
from typing import TYPE_CHECKING, Any
from uuid import UUID

from sqlalchemy import Connection, Engine, Row, delete, insert, select, update

from metadata import (
    claims,
    cluster,
    compaction,
    exports,
    listing,
    partitions,
    search,
    summaries,
    tier_summaries,
    topic_ids,
    tree,
    truncation,
    uploads,
)
from metadata import skipped as skipped_ranges
from metadata.db_clock import DatabaseClock, wall_clock_ms
from metadata.engine import Deadlines, create_engine_for_url
from metadata.models import EpochOffsetRow, PartitionRow, SegmentEpochRow, SegmentRow
from metadata.rows import (
    epoch_values,
    lease_from_row,
    partition_from_row,
    segment_from_row,
    segment_values,
)
from metadata.schema import check_schema
from metadata.transaction import ErrorListener, transaction
from rlm.errors import (
    DuplicateSegmentError,
    InvalidStateTransitionError,
    NotFoundError,
    StateConflictError,
)
from rlm.metastore.compaction import CompactionLease, CompactionOutput, CompactionStore
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
    check_transition,
)

Segment = SegmentRow
FINISHED = SegmentState.COPY_SEGMENT_FINISHED
END_OFFSET = tree.Measure.END_OFFSET
MAX_TIMESTAMP = tree.Measure.MAX_TIMESTAMP
#: Segments ``list_segments`` fetches per statement.
DEFAULT_LIST_PAGE_SIZE = 500


class SqlMetadataStore:
    """The metadata store over a SQLAlchemy engine; see :class:`rlm.metastore.MetadataStore`.

    Args:
        engine: From :func:`metadata.engine.create_engine_for_url`; the store owns it and
            disposes of it on :meth:`close`.
        clock: Current time in milliseconds, for lease expiry and the times of claims. By
            default the database server's clock on PostgreSQL (:mod:`metadata.db_clock`: the one
            clock every sidecar's store shares), this host's on SQLite; a
            :class:`~metadata.db_clock.DatabaseClock` given is kept up to date the same way.
        list_page_size: Segments ``list_segments`` reads per statement.
        on_error: Told of every call that fails for want of an answer (to count them).
    """

    def __init__(
        self,
        engine: Engine,
        *,
        clock: Callable[[], int] | None = None,
        list_page_size: int = DEFAULT_LIST_PAGE_SIZE,
        on_error: ErrorListener | None = None,
    ) -> None:
        if list_page_size < 1:
            raise ValueError(f"list page size must be positive, got {list_page_size}")
        self._engine = engine
        if isinstance(clock, DatabaseClock):
            self._db_clock: DatabaseClock | None = clock
        else:
            pg = clock is None and engine.dialect.name == "postgresql"
            self._db_clock = DatabaseClock() if pg else None
        self._clock: Callable[[], int] = clock or self._db_clock or wall_clock_ms
        self._list_page_size = list_page_size
        self._on_error = on_error

    @classmethod
    def open(
        cls,
        url: str,
        *,
        clock: Callable[[], int] | None = None,
        pool_size: int = 5,
        deadlines: Deadlines | None = None,
        on_error: ErrorListener | None = None,
    ) -> SqlMetadataStore:
        """Connect to ``url`` and check that its schema is the one this rlm needs.

        Raises:
            SchemaMismatchError: The schema is missing (an SQLite file too), older or newer; the
                message says what to run.
            MetadataUnavailableError: The database cannot be reached.
            ConfigError: The URL is not usable.
        """
        engine = create_engine_for_url(url, pool_size=pool_size, deadlines=deadlines, create=False)
        try:
            check_schema(engine)
        except BaseException:
            engine.dispose()
            raise
        return cls(engine, clock=clock, on_error=on_error)

    @property
    def engine(self) -> Engine:
        """The engine the store runs on."""
        return self._engine

    def close(self) -> None:
        """Close every pooled connection. Idempotent."""
        self._engine.dispose()

    @property
    def clock_offset_ms(self) -> int | None:
        """The database server's clock minus this host's, as last read (PostgreSQL, with no clock
        given); None when not read."""
        return None if self._db_clock is None else self._db_clock.offset_ms

    @contextmanager
    def _transaction(self, *, write: bool, snapshot: bool = True) -> Iterator[Connection]:
        with transaction(self._engine, write=write, snapshot=snapshot, on_error=self._on_error) as conn:
            if self._db_clock is not None:
                self._db_clock.observe(conn)
            yield conn

    @contextmanager
    def _fenced(self, tp: TopicPartition, fence: Lease | None) -> Iterator[tuple[Connection, Row[Any]]]:
        """A write transaction holding the lock of ``tp``'s row, which it yields, fenced by
        ``fence`` (see :func:`metadata.partitions.check_fence`)."""
        with self._transaction(write=True) as conn:
            part = partitions.lock(conn, tp)
            partitions.check_fence(part, fence)
            yield conn, part

    def __enter__(self) -> SqlMetadataStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    # -- segments: writes ---------------------------------------------------------------------

    def add_segment(self, segment: RemoteSegment, *, fence: Lease | None = None) -> None:
        """See :meth:`rlm.metastore.MetadataStore.add_segment`."""
        tp = segment.topic_partition
        what = f"segment {segment.segment_id} of {tp}"
        if segment.state is not SegmentState.COPY_SEGMENT_STARTED:
            # A segment enters the store as COPY_SEGMENT_STARTED, nothing else.
            raise InvalidStateTransitionError("no state", segment.state.value, subject=what)
        with self._fenced(tp, fence) as (conn, part):
            if part.deletion_state is not None:
                raise StateConflictError(f"cannot add {what}: the partition is {part.deletion_state}")
            stored = conn.execute(
                select(Segment.__table__).where(Segment.segment_id == segment.segment_id)
            ).first()
            if stored is not None:
                if stored.partition_id == part.id and _same_copy(segment_from_row(stored, tp), segment):
                    return
                raise DuplicateSegmentError(f"{what} is already stored with other metadata")
            conn.execute(insert(Segment).values(segment_values(segment, part.id)))
            conn.execute(insert(SegmentEpochRow), epoch_values(segment, part.id))
            topic_ids.segment_added(conn, part, segment.topic_id)

    def update_segment_state(
        self,
        segment_id: UUID,
        state: SegmentState,
        *,
        event_time_ms: int,
        expected: SegmentState | None = None,
        fence: Lease | None = None,
    ) -> StateUpdate:
        """See :meth:`rlm.metastore.MetadataStore.update_segment_state`."""
        with self._transaction(write=True) as conn:
            # Lock first, then read: the state read below is the one this transaction changes.
            part = _lock_partition_of(conn, segment_id, fence)
            tp = partitions.topic_partition(part)
            row = conn.execute(select(Segment.__table__).where(Segment.segment_id == segment_id)).first()
            if row is None:  # purged while this call waited for the lock
                raise NotFoundError(f"no remote segment {segment_id}")
            segment = segment_from_row(row, tp)
            current = segment.state
            if current is state:
                return StateUpdate(segment, changed=False)
            what = f"segment {segment_id} of {tp}"
            if expected is not None and current is not expected:
                raise StateConflictError(f"{what} is {current.value}, not {expected.value}")
            check_transition(current, state, subject=what)
            conn.execute(
                update(Segment)
                .where(Segment.segment_id == segment_id)
                .values(state=state.value, event_time_ms=event_time_ms)
            )
            if state is FINISHED:
                summaries.segment_finished(conn, part, segment)
            elif current is FINISHED:
                summaries.segment_unfinished(conn, part, segment)
            if state in (FINISHED, SegmentState.DELETE_SEGMENT_FINISHED):
                uploads.forget(conn, segment_id)
            return StateUpdate(segment.with_state(state, event_time_ms), changed=True)

    def add_pending_upload(
        self, segment_id: UUID, upload: PendingUpload, *, fence: Lease | None = None
    ) -> None:
        """See :meth:`rlm.metastore.MetadataStore.add_pending_upload`."""
        with self._transaction(write=True) as conn:
            # Under the partition's lock: a cleanup moving the segment on waits for this, or this
            # sees the state it left.
            part = _lock_partition_of(conn, segment_id, fence)
            state = conn.execute(select(Segment.state).where(Segment.segment_id == segment_id)).scalar()
            if state is None:  # purged while this call waited for the lock
                raise NotFoundError(f"no remote segment {segment_id}")
            if state != SegmentState.COPY_SEGMENT_STARTED.value:
                tp = partitions.topic_partition(part)
                raise StateConflictError(
                    f"cannot record an upload of {upload.key!r}: segment {segment_id} of {tp} is {state}, "
                    f"not {SegmentState.COPY_SEGMENT_STARTED.value}"
                )
            uploads.add(conn, segment_id, upload)

    # -- segments: reads ----------------------------------------------------------------------

    def get_segment(self, segment_id: UUID) -> RemoteSegment | None:
        """See :meth:`rlm.metastore.MetadataStore.get_segment`."""
        with self._transaction(write=False, snapshot=False) as conn:
            row = conn.execute(
                select(Segment.__table__, PartitionRow.topic, PartitionRow.partition)
                .join(PartitionRow, PartitionRow.id == Segment.partition_id)
                .where(Segment.segment_id == segment_id)
            ).first()
        if row is None:
            return None
        return segment_from_row(row, TopicPartition(row.topic, int(row.partition)))

    def pending_uploads(self, segment_id: UUID) -> list[PendingUpload]:
        """See :meth:`rlm.metastore.MetadataStore.pending_uploads`."""
        with self._transaction(write=False, snapshot=False) as conn:
            return uploads.of_segment(conn, segment_id)

    def segment_for_offset(
        self, tp: TopicPartition, offset: int, *, leader_epoch: int | None = None
    ) -> RemoteSegment | None:
        """See :meth:`rlm.metastore.MetadataStore.segment_for_offset`."""
        if offset < 0:
            return None
        with self._transaction(write=False, snapshot=leader_epoch is not None) as conn:
            cursor: search.Cursor | None = search.through_offset(offset)
            # Finished segments holding `offset`, last in offset order first: one search each.
            while cursor is not None:
                row = search.last_until(conn, tp, cursor, END_OFFSET, offset)
                if row is None:
                    return None
                segment = segment_from_row(row, tp)
                if leader_epoch is None:
                    return segment
                epoch_range = segment.epoch_range(leader_epoch)
                if epoch_range is not None and epoch_range[0] <= offset <= epoch_range[1]:
                    return segment
                cursor = search.before(row)
        return None

    def first_segment_for_timestamp(
        self, tp: TopicPartition, timestamp_ms: int, *, from_offset: int = 0
    ) -> RemoteSegment | None:
        """See :meth:`rlm.metastore.MetadataStore.first_segment_for_timestamp`."""
        low = max(from_offset, 0)
        with self._transaction(write=False) as conn:
            # Segments starting before `low` that reach it come first in offset order: walk them
            # (as many as overlap at `low`, usually one or none) until one is recent enough.
            cursor = search.at_offset(0)
            while low > 0:
                row = search.first_from(conn, tp, cursor, END_OFFSET, low)
                if row is None or row.start_offset >= low:
                    break
                if row.max_timestamp_ms >= timestamp_ms:
                    return segment_from_row(row, tp)
                cursor = search.after(row)
            # Every other candidate starts at or after `low`, so it ends there or later.
            row = search.first_from(conn, tp, search.at_offset(low), MAX_TIMESTAMP, timestamp_ms)
            return None if row is None else segment_from_row(row, tp)

    def max_timestamp(self, tp: TopicPartition) -> int | None:
        """See :meth:`rlm.metastore.MetadataStore.max_timestamp`."""
        with self._transaction(write=False, snapshot=False) as conn:
            return tree.max_timestamp(conn, tp.topic, tp.partition)

    def remote_tier_summaries(
        self, tps: Collection[TopicPartition]
    ) -> dict[TopicPartition, RemoteTierSummary]:
        """See :meth:`rlm.metastore.MetadataStore.remote_tier_summaries`."""
        if not tps:
            return {}
        ordered = sorted(set(tps))
        with self._transaction(write=False, snapshot=len(ordered) > tier_summaries.CHUNK) as conn:
            return tier_summaries.read(conn, ordered)

    def highest_copied_offset(self, tp: TopicPartition, *, leader_epoch: int | None = None) -> int:
        """See :meth:`rlm.metastore.MetadataStore.highest_copied_offset`."""
        with self._transaction(write=False, snapshot=False) as conn:
            if leader_epoch is None:
                value = conn.execute(
                    select(PartitionRow.highest_copied_offset).where(
                        PartitionRow.topic == tp.topic, PartitionRow.partition == tp.partition
                    )
                ).scalar()
            else:
                value = conn.execute(
                    select(EpochOffsetRow.highest_offset).where(
                        EpochOffsetRow.partition_id == tree.partition_id_of(tp.topic, tp.partition),
                        EpochOffsetRow.leader_epoch == leader_epoch,
                    )
                ).scalar()
        return -1 if value is None else int(value)

    def list_segments(
        self,
        tp: TopicPartition,
        *,
        states: Collection[SegmentState] | None = None,
        leader_epoch: int | None = None,
    ) -> Iterator[RemoteSegment]:
        """See :meth:`rlm.metastore.MetadataStore.list_segments`."""
        # Every page in one snapshot (metadata.listing): the transaction and its pooled
        # connection last until the listing is exhausted, closed or dropped.
        with self._transaction(write=False) as conn:
            for row in listing.rows(conn, tp, states, leader_epoch, self._list_page_size):
                yield segment_from_row(row, tp)

    def remote_log_size(self, tp: TopicPartition) -> int:
        """See :meth:`rlm.metastore.MetadataStore.remote_log_size`."""
        record = self.get_partition(tp)
        return 0 if record is None else record.remote_log_size_bytes

    # -- partitions ---------------------------------------------------------------------------

    def get_partition(self, tp: TopicPartition) -> PartitionRecord | None:
        """See :meth:`rlm.metastore.MetadataStore.get_partition`."""
        with self._transaction(write=False, snapshot=False) as conn:
            row = partitions.find(conn, tp)
        return None if row is None else partition_from_row(row)

    def list_partitions(self, *, deletion_state: PartitionState | None = None) -> list[PartitionRecord]:
        """See :meth:`rlm.metastore.MetadataStore.list_partitions`."""
        query = select(PartitionRow.__table__).order_by(PartitionRow.topic, PartitionRow.partition)
        if deletion_state is not None:
            query = query.where(PartitionRow.deletion_state == deletion_state.value)
        with self._transaction(write=False, snapshot=False) as conn:
            return [partition_from_row(row) for row in conn.execute(query)]

    def advance_log_start_offset(self, tp: TopicPartition, offset: int, *, fence: Lease | None = None) -> int:
        """See :meth:`rlm.metastore.MetadataStore.advance_log_start_offset`."""
        with self._fenced(tp, fence) as (conn, part):
            current = int(part.remote_log_start_offset)
            if offset <= current:
                return current
            conn.execute(
                update(PartitionRow).where(PartitionRow.id == part.id).values(remote_log_start_offset=offset)
            )
            return offset

    def update_partition_state(
        self,
        tp: TopicPartition,
        state: PartitionState,
        *,
        event_time_ms: int,
        fence: Lease | None = None,
    ) -> PartitionRecord:
        """See :meth:`rlm.metastore.MetadataStore.update_partition_state`."""
        with self._fenced(tp, fence) as (conn, part):
            current = None if part.deletion_state is None else PartitionState(part.deletion_state)
            if check_transition(current, state, subject=f"partition {tp}"):
                conn.execute(
                    update(PartitionRow)
                    .where(PartitionRow.id == part.id)
                    .values(deletion_state=state.value, deletion_event_time_ms=event_time_ms)
                )
            row = partitions.find(conn, tp)
            assert row is not None  # locked above
            return partition_from_row(row)

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
        """See :meth:`rlm.metastore.MetadataStore.adopt_topic_id`."""
        with self._transaction(write=False, snapshot=False) as conn:
            row = partitions.find(conn, tp)
        if row is not None and row.topic_id == topic_id:
            # The usual case, every copier pass: confirmed by a read, no write transaction.
            partitions.check_fence(row, fence)
            return TopicIdChange(topic_id, 0, reset=False)
        with self._fenced(tp, fence) as (conn, part):
            return topic_ids.adopt(conn, part, topic_id, event_time_ms, written_ms, log_start_offset)

    def topic_id_retirees(
        self,
        tp: TopicPartition,
        topic_id: UUID,
        *,
        fence: Lease | None = None,
        written_ms: int | None = None,
    ) -> list[RemoteSegment] | None:
        """See :meth:`rlm.metastore.MetadataStore.topic_id_retirees`."""
        # Every copier and retention pass asks (as adopt_topic_id's usual read did): no snapshot;
        # under the lease nothing else changes the rows it reads.
        with self._transaction(write=False, snapshot=False) as conn:
            row = partitions.find(conn, tp)
            if row is None:
                return []
            partitions.check_fence(row, fence)
            return topic_ids.retirees(conn, row, topic_id, written_ms)

    def truncate_copies(
        self,
        tp: TopicPartition,
        from_offset: int,
        *,
        event_time_ms: int,
        fence: Lease | None = None,
    ) -> int:
        """See :meth:`rlm.metastore.MetadataStore.truncate_copies`."""
        with self._fenced(tp, fence) as (conn, part):
            return truncation.truncate(conn, part, from_offset, event_time_ms)

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
        """See :meth:`rlm.metastore.MetadataStore.trim_copies`."""
        with self._fenced(tp, fence) as (conn, part):
            return truncation.trim(conn, part, kept, replacement, from_offset, event_time_ms)

    def finish_overlay(
        self,
        tp: TopicPartition,
        segment_id: UUID,
        *,
        event_time_ms: int,
        fence: Lease | None = None,
    ) -> None:
        """See :meth:`rlm.metastore.MetadataStore.finish_overlay`."""
        with self._fenced(tp, fence) as (conn, part):
            truncation.overlay(conn, part, segment_id, event_time_ms)

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
        """See :meth:`rlm.metastore.MetadataStore.acquire_lease`."""
        _check_ttl(ttl_ms)
        # Most calls come from brokers whose sidecar does not hold the lease, at every pass: a read
        # refuses them without the write transaction (the lock, a commit) that taking it needs.
        with self._transaction(write=False, snapshot=False) as conn:
            row = partitions.find(conn, tp)
        if row is not None and partitions.withheld(
            row,
            owner,
            self._clock(),
            incarnation=incarnation,
            replace_own_incarnation=replace_own_incarnation,
        ):
            return None
        with self._transaction(write=True) as conn:
            lease = partitions.acquire(
                conn,
                tp,
                owner,
                ttl_ms,
                self._clock(),
                incarnation=incarnation,
                replace_own_incarnation=replace_own_incarnation,
            )
            if lease is not None:
                claims.withdraw(conn, tp, owner)
            return lease

    def renew_lease(self, lease: Lease, ttl_ms: int, *, refresh_after_ms: int | None = None) -> Lease:
        """See :meth:`rlm.metastore.MetadataStore.renew_lease`."""
        _check_ttl(ttl_ms)
        if refresh_after_ms is not None:
            with self._transaction(write=False, snapshot=False) as conn:
                row = partitions.find(conn, lease.topic_partition)
            kept = partitions.renewed_since(row, lease, ttl_ms, self._clock() - refresh_after_ms)
            if kept is not None:
                return kept
        with self._transaction(write=True) as conn:
            return partitions.renew(conn, lease, ttl_ms, self._clock())

    def release_lease(self, lease: Lease) -> bool:
        """See :meth:`rlm.metastore.MetadataStore.release_lease`."""
        with self._transaction(write=True) as conn:
            return partitions.release(conn, lease, self._clock())

    def get_lease(self, tp: TopicPartition) -> Lease | None:
        """See :meth:`rlm.metastore.MetadataStore.get_lease`."""
        with self._transaction(write=False, snapshot=False) as conn:
            row = partitions.find(conn, tp)
        return None if row is None else lease_from_row(row)

    def lease_released_at_ms(self, tp: TopicPartition) -> int | None:
        """See :meth:`rlm.metastore.MetadataStore.lease_released_at_ms`."""
        with self._transaction(write=False, snapshot=False) as conn:
            row = partitions.find(conn, tp)
        return None if row is None else partitions.released_at_ms(row)

    def claim_lease(
        self,
        tp: TopicPartition,
        broker_id: int,
        position: LogPosition,
        *,
        forget_after_ms: int | None = None,
        refresh_after_ms: int | None = None,
    ) -> bool:
        """See :meth:`rlm.metastore.MetadataStore.claim_lease`."""
        if refresh_after_ms is not None:
            with self._transaction(write=False, snapshot=False) as conn:
                recent = claims.recent(conn, tp, self._clock() - refresh_after_ms)
            if any(c.broker_id == broker_id and c.position == position for c in recent):
                return False
        with self._transaction(write=True) as conn:
            part = partitions.lock(conn, tp)
            now = self._clock()
            claims.record(conn, int(part.id), broker_id, position, now)
            if forget_after_ms is not None:
                claims.forget_before(conn, int(part.id), now - forget_after_ms)
        return True

    def lease_claims(self, tp: TopicPartition, *, max_age_ms: int) -> list[LeaseClaim]:
        """See :meth:`rlm.metastore.MetadataStore.lease_claims`."""
        with self._transaction(write=False, snapshot=False) as conn:
            return claims.recent(conn, tp, self._clock() - max_age_ms)

    def claim_cluster(self, cluster_id: str, broker_id: int) -> ClusterClaim:
        """See :meth:`rlm.metastore.MetadataStore.claim_cluster`."""
        with self._transaction(write=True) as conn:
            return cluster.claim(conn, cluster_id, broker_id, self._clock())

    # -- compaction (rlm.metastore.compaction) -------------------------------------------------

    def acquire_compaction_lease(self, tp: TopicPartition, owner: str, ttl_ms: int) -> CompactionLease | None:
        """See :meth:`rlm.metastore.compaction.CompactionStore.acquire_compaction_lease`."""
        _check_ttl(ttl_ms)
        with self._transaction(write=True) as conn:
            return compaction.acquire(conn, tp, owner, ttl_ms, self._clock())

    def renew_compaction_lease(self, lease: CompactionLease, ttl_ms: int) -> CompactionLease:
        """See :meth:`rlm.metastore.compaction.CompactionStore.renew_compaction_lease`."""
        _check_ttl(ttl_ms)
        with self._transaction(write=True) as conn:
            return compaction.renew(conn, lease, ttl_ms, self._clock())

    def release_compaction_lease(self, lease: CompactionLease) -> bool:
        """See :meth:`rlm.metastore.compaction.CompactionStore.release_compaction_lease`."""
        with self._transaction(write=True) as conn:
            return compaction.release(conn, lease)

    def get_compaction_lease(self, tp: TopicPartition) -> CompactionLease | None:
        """See :meth:`rlm.metastore.compaction.CompactionStore.get_compaction_lease`."""
        with self._transaction(write=False, snapshot=False) as conn:
            return compaction.get(conn, tp)

    def add_compaction_outputs(self, lease: CompactionLease, outputs: Sequence[CompactionOutput]) -> None:
        """See :meth:`rlm.metastore.compaction.CompactionStore.add_compaction_outputs`."""
        with self._transaction(write=True) as conn:
            compaction.add_outputs(conn, lease, outputs)

    def compaction_outputs(self, tp: TopicPartition) -> list[CompactionOutput]:
        """See :meth:`rlm.metastore.compaction.CompactionStore.compaction_outputs`."""
        with self._transaction(write=False, snapshot=False) as conn:
            return compaction.outputs(conn, tp)

    def forget_compaction_outputs(self, tp: TopicPartition, segment_ids: Sequence[UUID]) -> None:
        """See :meth:`rlm.metastore.compaction.CompactionStore.forget_compaction_outputs`."""
        with self._transaction(write=True) as conn:
            compaction.forget_outputs(conn, tp, segment_ids)

    def swap_compacted(
        self,
        lease: CompactionLease,
        new: Sequence[RemoteSegment],
        replaced: Sequence[UUID],
        *,
        now_ms: int,
        delete_after_ms: int,
    ) -> bool:
        """See :meth:`rlm.metastore.compaction.CompactionStore.swap_compacted`."""
        with self._transaction(write=True) as conn:
            return compaction.swap(conn, lease, new, replaced, now_ms, delete_after_ms)

    # -- skipped ranges -----------------------------------------------------------------------

    def add_skipped_range(self, skipped: SkippedRange, *, fence: Lease | None = None) -> SkippedRange:
        """See :meth:`rlm.metastore.MetadataStore.add_skipped_range`."""
        with self._fenced(skipped.topic_partition, fence) as (conn, part):
            return skipped_ranges.add(conn, part, skipped)

    def list_skipped_ranges(self, tp: TopicPartition) -> list[SkippedRange]:
        """See :meth:`rlm.metastore.MetadataStore.list_skipped_ranges`."""
        with self._transaction(write=False, snapshot=False) as conn:
            partition_id = partitions.find_id(conn, tp)
            return [] if partition_id is None else skipped_ranges.ranges(conn, partition_id, tp)

    # -- maintenance --------------------------------------------------------------------------

    def purge_deleted_segments(
        self,
        tp: TopicPartition,
        *,
        deleted_before_ms: int,
        limit: int = 1000,
        fence: Lease | None = None,
    ) -> int:
        """See :meth:`rlm.metastore.MetadataStore.purge_deleted_segments`."""
        if limit < 1:
            raise ValueError(f"limit must be positive, got {limit}")
        with self._transaction(write=True) as conn:
            if partitions.find_id(conn, tp) is None:
                return 0
            part = partitions.lock(conn, tp)
            partitions.check_fence(part, fence)
            # The partition row keeps the highest copied offset and rlm_epoch_offset the
            # per-epoch ones: neither is derived from these rows again, so nothing falls.
            ids = list(
                conn.execute(
                    select(Segment.segment_id)
                    .where(
                        Segment.partition_id == part.id,
                        Segment.state == SegmentState.DELETE_SEGMENT_FINISHED.value,
                        Segment.event_time_ms < deleted_before_ms,
                    )
                    .order_by(Segment.start_offset, Segment.segment_id)
                    .limit(limit)
                ).scalars()
            )
            if ids:
                conn.execute(delete(SegmentEpochRow).where(SegmentEpochRow.segment_id.in_(ids)))
                conn.execute(delete(Segment).where(Segment.segment_id.in_(ids)))
            return len(ids)

    # -- export ledger ------------------------------------------------------------------------

    def export_offsets(self, output: str) -> dict[TopicPartition, int]:
        """See :meth:`rlm.metastore.MetadataStore.export_offsets`."""
        with self._transaction(write=False, snapshot=False) as conn:
            return exports.of_output(conn, output)

    def record_export_offsets(
        self,
        output: str,
        offsets: Mapping[TopicPartition, int],
        topic_ids: Mapping[TopicPartition, UUID | None] | None = None,
        lineages: Mapping[TopicPartition, int | None] | None = None,
    ) -> dict[TopicPartition, int]:
        """See :meth:`rlm.metastore.MetadataStore.record_export_offsets`."""
        with self._transaction(write=True) as conn:
            return exports.record(conn, output, offsets, self._clock(), topic_ids, lineages)

    def rebuild_summaries(self, tp: TopicPartition) -> None:
        """Recompute what is derived from the partition's segment rows: its offset tree, its
        remote log size and its per-epoch highest offsets (which never fall). For bulk loads
        that write segment rows directly, and for repair."""
        with self._transaction(write=True) as conn:
            part = partitions.lock(conn, tp)
            summaries.rebuild(conn, part)


def _lock_partition_of(conn: Connection, segment_id: UUID, fence: Lease | None) -> Row[Any]:
    """Lock the row of the segment's partition and check the writer's lease.

    Raises:
        NotFoundError: No segment has this id.
        StaleLeaseError: ``fence`` is not the partition's lease.
    """
    partition_id = conn.execute(select(Segment.partition_id).where(Segment.segment_id == segment_id)).scalar()
    if partition_id is None:
        raise NotFoundError(f"no remote segment {segment_id}")
    part = partitions.lock_by_id(conn, partition_id)
    partitions.check_fence(part, fence)
    return part


def _check_ttl(ttl_ms: int) -> None:
    if ttl_ms <= 0:
        raise ValueError(f"lease time to live must be positive, got {ttl_ms} ms")


def _same_copy(stored: RemoteSegment, offered: RemoteSegment) -> bool:
    """Whether ``offered`` repeats the add of ``stored`` (state and event time aside)."""
    return stored.with_state(offered.state, offered.event_time_ms) == offered


if TYPE_CHECKING:

    def _implements_the_protocol(store: SqlMetadataStore) -> CompactionStore:
        """Checked by mypy: the adapter offers every method of rlm's store protocol."""
        return store
