"""The copier: tiers the rolled segments of every partition this sidecar holds the lease for.

Per partition and pass:

1. take or renew the partition's copy lease (only one sidecar copies a partition; every write
   below carries the lease, so a sidecar that lost its lease cannot write), or claim it
   while another broker holds it; a holder gives it up to a claim ahead of its broker's log
   (its broker down, or a follower behind: :mod:`rlm.tiering.reach`);
   the broker's topic id (``partition.metadata``) is adopted for the remote state: a topic
   deleted and created again under the same name retires the deleted topic's segments and
   offsets (:mod:`rlm.tiering.topic_identity`);
2. clean up copies a previous holder or incarnation left in ``COPY_SEGMENT_STARTED``, and
   finish deletions left in ``DELETE_SEGMENT_STARTED``; retire the remote copies the broker's
   log diverged from (an unclean leader election), their objects marked retired first (a store
   rebuilt from the objects leaves them out) and deleted at once, so that step 3 tiers the log
   again from their start, trimming one that also holds offsets the broker's files no longer hold
   to those (:mod:`rlm.tiering.lineage_keeper`, :mod:`rlm.tiering.trim`), and tiering the log from there
   first in one copy that reaches past the one kept where that reaches past the cut
   (:mod:`rlm.tiering.join`); a log behind the remote tier (a newer leader epoch is tiered than
   its latest) tiers nothing;
3. plan (:mod:`rlm.tiering.copy_plan`): the rolled segments ending below the high watermark, from the
   first offset the remote tier does not account for yet (copied or skipped) on; a hole the
   broker left below its local log is recorded as skipped first;
4. for each, in order: check its bytes (:func:`rlm.tiering.prepare.prepare_segment`), then
   ``COPY_SEGMENT_STARTED`` → upload the ``.log`` and the index object →
   ``COPY_SEGMENT_FINISHED``. A segment that fails the checks stops the partition's copying there
   (an error naming the file and position, ``rlm_copy_blocked`` set, the copy lag growing): the
   copier never moves past an offset it did not copy, and tries again every pass until the
   segment is repaired or an operator skips it (``rlm copy skip``). A failed upload deletes what
   was uploaded and rolls the row forward to ``DELETE_SEGMENT_FINISHED``; a crash leaves a
   STARTED row for step 2 of a later pass, which also aborts the unfinished puts (S3 multipart
   uploads, filesystem temporary files) a crash in the middle of an upload leaves behind. Each
   multipart upload's id is recorded with the row (under the lease) before its parts are sent, so
   it is aborted by id: no listing needed.

Partitions are copied in parallel on a bounded pool; one partition's error (a corrupt segment, an
unreachable store) is reported and the others carry on. So does a log directory that cannot be
read, and a partition found in two log directories is not copied until one holds it
(:mod:`rlm.tiering.local_partitions`).
"""

from __future__ import annotations

import contextlib
import logging
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from uuid import UUID

from prometheus_client import Gauge

from rlm.config import Settings
from rlm.errors import CorruptDataError, RlmError, SegmentNotCopiedError, StaleLeaseError
from rlm.log.broker_dirs import LocalPartitions, group_partitions
from rlm.log.files import segment_file_name
from rlm.log.logdir import PartitionDir
from rlm.log.model import never_tiered
from rlm.metastore.model import (
    Lease,
    PendingUpload,
    RemoteSegment,
    SegmentState,
    SkipKind,
    SkippedRange,
    TopicPartition,
)
from rlm.metastore.protocol import MetadataStore
from rlm.metrics import Metrics
from rlm.storage.description import describe
from rlm.storage.marks import mark_retired
from rlm.storage.protocol import RemoteStorage
from rlm.storage.ratelimit import RateLimiter
from rlm.tiering.cluster_guard import ClusterGuard
from rlm.tiering.copy_plan import Candidate, Gap, covered_through, plan_copy, plan_join
from rlm.tiering.deletion import Step, deferred, delete_segment, no_step
from rlm.tiering.join import prepare_join
from rlm.tiering.leases import LeaseKeeper
from rlm.tiering.lineage_keeper import LineageKeeper, Trimmed
from rlm.tiering.local_partitions import LogDirLister, duplicated
from rlm.tiering.prepare import PreparedSegment, prepare_segment, producer_snapshot
from rlm.tiering.topic_identity import adopt_local_topic_id
from rlm.tiering.trim import trim_copy

log = logging.getLogger("rlm.copier")
Clock = Callable[[], int]
BEHIND = (
    "the broker's log is behind the remote tier, which holds records of a newer leader epoch than "
    "its latest (a follower behind it, or a replica that has not truncated to the new leader's log)"
)


def _waiting_to_join(cut: int, past: int) -> str:
    return (
        f"the broker's log is tiered from offset {cut} in one remote segment reaching past offset "
        f"{past} (a diverged remote segment is kept up to there), once its rolled segments below "
        "the high watermark reach there"
    )


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True)
class CopyOutcome:
    """What one pass did for one partition."""

    topic_partition: TopicPartition
    copied_segments: int = 0
    copied_bytes: int = 0
    cleaned_segments: int = 0
    lag_segments: int = 0
    lag_bytes: int = 0
    skipped: str | None = None
    """Why nothing was attempted (tiering disabled, lease held elsewhere)."""
    error: RlmError | OSError | None = None


class Copier:
    """Copies rolled segments to the remote tier; safe to run in several sidecars at once."""

    def __init__(
        self,
        settings: Settings,
        store: MetadataStore,
        storage: RemoteStorage,
        metrics: Metrics,
        *,
        clock: Clock = wall_clock_ms,
        step: Step = no_step,
        rate_limiter: RateLimiter | None = None,
        leases: LeaseKeeper | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.storage = storage
        self.metrics = metrics
        self.clock = clock
        self.step = step
        rate = settings.remote_log_manager_copy_max_bytes_per_second
        self.rate_limiter = rate_limiter or (RateLimiter(rate) if rate > 0 else None)
        self.leases = leases or LeaseKeeper(
            store, settings.broker_id, settings.remote_log_manager_lease_ttl_ms, metrics=metrics
        )
        self.stopping = threading.Event()
        """Set on shutdown: the segment in flight finishes, no other starts."""
        self.on_change: Callable[[TopicPartition], None] = lambda tp: None
        """Called after a segment of a partition finished copying (lookups refresh their view)."""
        self.on_deleted: Callable[[RemoteSegment], None] = lambda segment: None
        """Called for each segment its cleanup deleted (the index cache drops its entries)."""
        self.lineage = LineageKeeper(store, metrics, trim=self._trim, mark=self._mark_retired)
        self.cluster_guard = ClusterGuard(store, settings.log_dirs, settings.broker_id)
        """Refuses a pass with another Kafka cluster's metadata store."""
        self.lister = LogDirLister(settings.log_dirs, metrics, done="tiered")
        """Lists the partitions of the log directories, reporting those that cannot be read."""

    # -- passes ----------------------------------------------------------------------------

    def partitions(self) -> LocalPartitions:
        """The partitions of the configured log directories that can be read (the others are
        reported in :attr:`~rlm.log.broker_dirs.LocalPartitions.offline`).

        Raises:
            LogDirsOfflineError: none of them can be read.
        """
        return self.lister.list()

    def run_once(
        self,
        partitions: Iterable[PartitionDir] | LocalPartitions | None = None,
        progress: Callable[[CopyOutcome], None] | None = None,
    ) -> list[CopyOutcome]:
        """One pass over ``partitions`` (default: all), at most ``copier.thread.pool.size`` at once,
        in topic-partition order. A partition found in two log directories is skipped.

        Raises:
            ClusterMismatchError: the metadata store is another Kafka cluster's; nothing was done.
            LogDirsOfflineError: listing all, none of the log directories can be read.
        """
        self.cluster_guard.check()
        listed_all = partitions is None
        if partitions is None:
            partitions = self.partitions()
        found = partitions if isinstance(partitions, LocalPartitions) else group_partitions(partitions)
        outcomes = [CopyOutcome(tp, skipped=duplicated(dirs)) for tp, dirs in found.duplicates.items()]
        if progress is not None:
            for outcome in outcomes:
                progress(outcome)
        todo = found.partitions
        if listed_all and not found.offline:
            self._forget_gone({p.tp for p in todo} | set(found.duplicates))
        workers = max(1, min(self.settings.remote_log_manager_copier_thread_pool_size, len(todo)))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="rlm-copier") as pool:
            for outcome in pool.map(self.copy_partition, todo):
                outcomes.append(outcome)
                if progress is not None:
                    progress(outcome)
        return sorted(outcomes, key=lambda o: o.topic_partition)

    def copy_partition(self, partition: PartitionDir) -> CopyOutcome:
        """Tier every eligible segment of one partition; never raises for a partition's error."""
        tp = TopicPartition(partition.topic, partition.partition)
        never = never_tiered(tp.topic)
        if never is not None:
            return CopyOutcome(tp, skipped=never)
        if not self.settings.topic(tp.topic).remote_storage_enable:
            return CopyOutcome(tp, skipped="remote.storage.enable is false")
        try:
            lease = self.leases.hold_partition(partition)
            if lease is None:
                self._forget_gauges(tp)  # the holder exports them; this sidecar's last would stay
                return CopyOutcome(tp, skipped=f"the copy lease is held by {self.leases.holder(tp)}")
            # Before anything is decided with the remote state: it may be a deleted topic's.
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
            cleaned = self._cleanup(tp, lease)
            followed = self.lineage.follow(partition, lease, now_ms=self.clock())
            if followed.retired:
                self.on_change(tp)
                self.step("copies_retired")
                # Their objects (marked retired) go now rather than at the next pass.
                cleaned += self._cleanup(tp, lease)
            if followed.behind:
                return CopyOutcome(tp, cleaned_segments=cleaned, skipped=BEHIND)
            joined = 0
            if followed.join is not None:
                cut, past = followed.join
                try:
                    copied = self._copy_join(partition, lease, cut, past)
                except SegmentNotCopiedError as exc:  # counted and reported as it was raised
                    return CopyOutcome(tp, cleaned_segments=cleaned, error=exc)
                if copied is None:
                    return CopyOutcome(tp, cleaned_segments=cleaned, skipped=_waiting_to_join(cut, past))
                joined = copied
            return self._copy_eligible(partition, tp, lease, cleaned, joined=joined)
        except (RlmError, OSError) as exc:
            if isinstance(exc, StaleLeaseError):
                self.leases.forget(tp)
            self.metrics.copy_errors.labels(tp.topic, str(tp.partition)).inc()
            log.warning("copying %s failed: %s", tp, exc)
            return CopyOutcome(tp, error=exc)

    def _cleanup(self, tp: TopicPartition, lease: Lease) -> int:
        """Delete copies left unfinished (and deletes left half done) by earlier holders."""
        cleaned = 0
        states = (SegmentState.COPY_SEGMENT_STARTED, SegmentState.DELETE_SEGMENT_STARTED)
        for segment in list(self.store.list_segments(tp, states=states)):
            if deferred(segment, self.clock()):
                continue
            if delete_segment(
                self.store,
                self.storage,
                segment,
                now_ms=self.clock(),
                fence=lease,
                step=self.step,
            ):
                self.on_deleted(segment)
                cleaned += 1
                self.metrics.cleaned_segments.labels(tp.topic, str(tp.partition)).inc()
        return cleaned

    def _delete(self, segment: RemoteSegment, lease: Lease) -> bool:
        return delete_segment(
            self.store, self.storage, segment, now_ms=self.clock(), fence=lease, step=self.step
        )

    def _copy_join(self, partition: PartitionDir, lease: Lease, cut: int, past: int) -> int | None:
        """Tier the broker's log from ``cut`` in one copy reaching past offset ``past``
        (:mod:`rlm.tiering.join`); returns the bytes copied, None while its rolled segments below
        the high watermark do not reach there yet.

        Raises:
            SegmentNotCopiedError: a segment fails the checks.
        """
        tp = TopicPartition(partition.topic, partition.partition)
        run = plan_join(partition.segments(), start=cut, past=past, high_watermark=partition.high_watermark())
        if run is None:
            return None
        try:
            with tempfile.TemporaryDirectory(prefix="rlm-join-") as directory:
                prepared = prepare_join(
                    partition,
                    run,
                    broker_id=self.settings.broker_id,
                    now_ms=self.clock(),
                    epochs=partition.leader_epochs(),
                    directory=Path(directory),
                )

                def finish() -> None:  # and an export of the kept copy's records from the cut is redone
                    self.store.finish_overlay(
                        tp, prepared.remote.segment_id, event_time_ms=self.clock(), fence=lease
                    )

                self._copy(prepared, lease, finish=finish)
        except CorruptDataError as exc:
            raise self._blocked(tp, Candidate(run.segments[0], run.end_offset), exc) from exc
        labels = (tp.topic, str(tp.partition))
        self.on_change(tp)
        self.metrics.copied_segments.labels(*labels).inc()
        self.metrics.copied_bytes.labels(*labels).inc(prepared.remote.size_bytes)
        return prepared.remote.size_bytes

    def _copy_eligible(
        self, partition: PartitionDir, tp: TopicPartition, lease: Lease, cleaned: int, *, joined: int = 0
    ) -> CopyOutcome:
        """Tier the segments the plan names; ``joined``: bytes of a joined copy this pass made
        first (:meth:`_copy_join`), counted with them."""
        skipped = self.store.list_skipped_ranges(tp)
        plan = plan_copy(
            partition.segments(),
            high_watermark=partition.high_watermark(),
            covered=covered_through(self.store.highest_copied_offset(tp), skipped),
            log_start_offset=partition.checkpointed_log_start_offset(),
            skipped=skipped,
        )
        labels = (tp.topic, str(tp.partition))
        lag_segments, lag_bytes = plan.lag_segments, plan.lag_bytes()
        self._set_lag(labels, plan.candidates, lag_bytes)
        if plan.gap is not None:
            self._record_gap(tp, plan.gap, lease)
        copied, copied_bytes = (1, joined) if joined else (0, 0)
        epochs = partition.leader_epochs()
        for done, candidate in enumerate(plan.candidates, start=1):
            if self.stopping.is_set():
                break
            # Renew between segments (a backlog may take long); a lease lost meanwhile fences the
            # next write, which ends the pass with StaleLeaseError. One taken anew (another holder
            # had it meanwhile, and may have tiered or retired copies) ends the pass: the plan is
            # stale, and the next pass makes it again.
            renewed = self.leases.hold(tp)
            if renewed is not None and renewed.epoch != lease.epoch:
                break
            lease = renewed or lease
            try:
                prepared = prepare_segment(
                    partition,
                    candidate.segment,
                    next_base_offset=candidate.next_base_offset,
                    broker_id=self.settings.broker_id,
                    now_ms=self.clock(),
                    epochs=epochs,
                )
            except CorruptDataError as exc:
                error = self._blocked(tp, candidate, exc)
                return CopyOutcome(tp, copied, copied_bytes, cleaned, lag_segments, lag_bytes, error=error)
            self._copy(prepared, lease)
            copied += 1
            copied_bytes += prepared.remote.size_bytes
            lag_segments -= 1
            lag_bytes = max(0, lag_bytes - prepared.remote.size_bytes)
            self.on_change(tp)
            self.metrics.copied_segments.labels(*labels).inc()
            self.metrics.copied_bytes.labels(*labels).inc(prepared.remote.size_bytes)
            self._set_lag(labels, plan.candidates[done:], lag_bytes)
        self.metrics.copy_blocked.labels(*labels).set(0)
        return CopyOutcome(tp, copied, copied_bytes, cleaned, lag_segments, lag_bytes)

    def _forget_gone(self, here: set[TopicPartition]) -> None:
        """Stop exporting the per-partition gauges of the partitions no longer in the log
        directories (reassigned to other brokers, deleted): they would stay as last set."""
        gone = {
            TopicPartition(sample.labels["topic"], int(sample.labels["partition"]))
            for gauge in self._gauges()
            for metric in gauge.collect()
            for sample in metric.samples
        } - here
        for tp in gone:
            self._forget_gauges(tp)

    def _gauges(self) -> tuple[Gauge, ...]:
        m = self.metrics
        return (m.copy_blocked, m.copy_lag_segments, m.copy_lag_bytes, m.copy_lag_seconds, m.copies_diverged)

    def _forget_gauges(self, tp: TopicPartition) -> None:
        """Stop exporting this sidecar's per-partition gauges of ``tp``: another broker's sidecar
        tiers it now, and alerts take the highest value over the sidecars."""
        labels = (tp.topic, str(tp.partition))
        m = self.metrics
        for gauge in (
            m.copy_blocked,
            m.copy_lag_segments,
            m.copy_lag_bytes,
            m.copy_lag_seconds,
            m.copies_diverged,
        ):
            with contextlib.suppress(KeyError):  # KeyError: never set here
                gauge.remove(*labels)

    def _set_lag(self, labels: tuple[str, str], waiting: Sequence[Candidate], size: int) -> None:
        self.metrics.copy_lag_segments.labels(*labels).set(len(waiting))
        self.metrics.copy_lag_bytes.labels(*labels).set(size)
        self.metrics.copy_lag_seconds.labels(*labels).set(self._waited_s(waiting))

    def _record_gap(self, tp: TopicPartition, gap: Gap, lease: Lease) -> None:
        """Record offsets the broker deleted before they were tiered (see :mod:`rlm.tiering.copy_plan`)."""
        self.store.add_skipped_range(
            SkippedRange(
                tp, gap.start_offset, gap.end_offset, SkipKind.NOT_IN_LOCAL_LOG, gap.reason, self.clock()
            ),
            fence=lease,
        )
        self.metrics.copy_gaps.labels(tp.topic, str(tp.partition)).inc()
        log.warning(
            "%s: offsets %d..%d were never tiered and cannot be any more, they are %s; recorded as "
            "skipped, copying goes on above them",
            tp,
            gap.start_offset,
            gap.end_offset,
            gap.reason,
        )

    def _blocked(
        self, tp: TopicPartition, candidate: Candidate, exc: CorruptDataError
    ) -> SegmentNotCopiedError:
        """Stop the partition's copying at a segment that cannot be copied, and say so."""
        start, end = candidate.segment.base_offset, candidate.end_offset
        error = SegmentNotCopiedError(
            f"copying stops at segment {candidate.segment.log_path.name}: {exc}; offsets "
            f"{start}..{end} and everything after them stay untiered until the segment is repaired, "
            f"or skipped with `rlm copy skip {tp.topic} {tp.partition} --from-offset {start} "
            f"--to-offset {end} --reason ...`",
            path=exc.path,
            position=exc.position,
        )
        labels = (tp.topic, str(tp.partition))
        self.metrics.copy_errors.labels(*labels).inc()
        self.metrics.copy_blocked.labels(*labels).set(1)
        log.error("%s: %s", tp, error)
        return error

    def _waited_s(self, waiting: Sequence[Candidate]) -> float:
        """How long the oldest segment still waiting has waited since the broker last wrote it
        (when it rolled, or soon before); 0 when none waits or it is gone."""
        if not waiting:
            return 0.0
        try:
            written = waiting[0].segment.log_path.stat().st_mtime
        except OSError:  # deleted by the broker meanwhile: nothing left to wait for
            return 0.0
        return max(0.0, self.clock() / 1000 - written)

    def _trim(self, partition: PartitionDir, lease: Lease, copy: RemoteSegment, cut: int) -> Trimmed:
        """Replace ``copy`` by a copy of its batches holding offsets below ``cut`` and retire the
        copies from ``cut`` on (:mod:`rlm.tiering.trim`).

        Raises:
            CannotTrimError: ``copy`` cannot be cut there.
            CorruptDataError: its bytes kept fail the checks.
        """
        snapshot = partition.path / segment_file_name(cut, ".snapshot")
        retired = 0

        def swap() -> None:
            nonlocal retired
            self._mark_retired(copy.topic_partition, cut)
            retired = self.store.trim_copies(
                copy.topic_partition,
                copy.segment_id,
                prepared.remote.segment_id,
                cut,
                event_time_ms=self.clock(),
                fence=lease,
            )

        with tempfile.TemporaryDirectory(prefix="rlm-trim-") as directory:
            prepared = trim_copy(
                self.storage,
                copy,
                cut,
                snapshot=producer_snapshot(snapshot),
                broker_id=self.settings.broker_id,
                directory=Path(directory),
            )
            self._copy(prepared, lease, finish=swap)
        # Marked only now: a pass that failed before the swap deleted the replacement, and its
        # offsets below the cut were held by it alone. Until then, a store rebuilt from the objects
        # leaves it out for the replacement, which names it (rlm-replaces); the mark also keeps it
        # out of one whose replacement's metadata cannot be read, or is gone.
        mark_retired(self.storage, copy, now_ms=self.clock())
        return Trimmed(retired, prepared.remote.end_offset, prepared.remote.segment_id)

    def _mark_retired(self, tp: TopicPartition, from_offset: int) -> None:
        """Mark the objects of the copies the store is about to retire (every live copy of ``tp``
        starting at or above ``from_offset``) retired, so that a store rebuilt from the objects
        before they are deleted leaves them out (:func:`rlm.storage.marks.mark_retired`).

        Raises:
            StorageError: A mark failed; nothing is retired this pass.
        """
        live = (SegmentState.COPY_SEGMENT_STARTED, SegmentState.COPY_SEGMENT_FINISHED)
        doomed = [s for s in self.store.list_segments(tp, states=live) if s.start_offset >= from_offset]
        now_ms = self.clock()
        for segment in doomed:
            mark_retired(self.storage, segment, now_ms=now_ms)
            self.leases.hold(tp)  # renewed between marks, as between copies
        if doomed:
            self.step("copies_marked")

    def _copy(
        self, prepared: PreparedSegment, lease: Lease, finish: Callable[[], None] | None = None
    ) -> None:
        """Upload ``prepared`` and finish its row (``finish``, when given, does it instead)."""
        remote = prepared.remote
        layout = remote.layout
        started = time.perf_counter()
        self.store.add_segment(remote, fence=lease)
        self.step("copy_started")
        finishing = False
        record = partial(self._record_upload, remote.segment_id, lease)
        try:
            self.storage.put_object(
                layout.log_key,
                prepared.log_path,
                size=remote.size_bytes,
                crc32c=prepared.log_crc32c,
                rate_limiter=self.rate_limiter,
                on_upload=record,
            )
            self.step("log_uploaded")
            self.storage.put_object(
                layout.index_key,
                prepared.index_blob.data,
                on_upload=record,
                metadata=describe(remote, replaces=prepared.replaces),
            )
            self.step("indexes_uploaded")
            finishing = True
            if finish is not None:
                finish()
            else:
                self.store.update_segment_state(
                    remote.segment_id,
                    SegmentState.COPY_SEGMENT_FINISHED,
                    event_time_ms=self.clock(),
                    expected=SegmentState.COPY_SEGMENT_STARTED,
                    fence=lease,
                )
        except BaseException:
            self._abandon(prepared, lease, outcome_unknown=finishing)
            raise
        self.step("copy_finished")
        self.metrics.copy_seconds.observe(time.perf_counter() - started)

    def _record_upload(self, segment_id: UUID, lease: Lease, upload: PendingUpload) -> None:
        """Record an upload the copy started, before its bytes go (fenced: a stale holder aborts it)."""
        self.store.add_pending_upload(segment_id, upload, fence=lease)

    def _abandon(self, prepared: PreparedSegment, lease: Lease, *, outcome_unknown: bool) -> None:
        """Remove a failed copy's objects, unfinished puts and row; what fails is left to cleanup.

        The objects belong to this copy attempt alone (the segment id is in their keys), so they
        are deleted, and puts of them the failed put could not abort are aborted, even when the
        lease was lost. When the FINISHED update itself failed, its outcome is unknown: the commit
        may yet land, after any read of the row. A row read ``COPY_SEGMENT_STARTED`` is then moved
        out of that state first (fenced, from that state only), and the objects go only once that
        move holds; a row that finished, before or meanwhile, keeps them.
        """
        remote = prepared.remote
        keys = [remote.layout.log_key, remote.layout.index_key]
        try:
            current = self.store.get_segment(remote.segment_id) if outcome_unknown else None
            if current is not None and current.state is SegmentState.COPY_SEGMENT_FINISHED:
                return
            # A row read STARTED with the outcome unknown: delete_segment moves it before any
            # object goes, and the move fails if the commit lands first.
            if current is None or current.state is not SegmentState.COPY_SEGMENT_STARTED:
                self.storage.abort_incomplete_puts(keys, self.store.pending_uploads(remote.segment_id))
                self.storage.delete_objects(keys)
                current = current or self.store.get_segment(remote.segment_id)
            if current is not None:
                delete_segment(self.store, self.storage, current, now_ms=self.clock(), fence=lease)
        except (RlmError, OSError) as exc:
            log.warning("rolling back the copy of %s failed (cleanup will retry): %s", prepared.log_path, exc)
