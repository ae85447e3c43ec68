"""What a compaction job needs of the metadata store besides :class:`~rlm.metastore.MetadataStore`.

* A per-partition **compaction lease**, epoch-fenced like the copier's lease (a separate lease:
  the copier keeps copying above the compacted range while a job runs). Each acquisition starts a
  new epoch; the swap is refused to any older one, so a job that lost its lease cannot swap.
* **Outputs** recorded before their objects are written, so that the objects of a job killed
  before its swap can be found and deleted by the next job's cleanup.
* The **swap**: in one transaction, the new segments become ``COPY_SEGMENT_FINISHED`` and the
  replaced ones ``DELETE_SEGMENT_STARTED``, only if every replaced segment is still finished.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol
from uuid import UUID

from rlm.metastore.model import RemoteSegment, TopicPartition
from rlm.metastore.protocol import MetadataStore


@dataclass(frozen=True)
class CompactionLease:
    """The right to compact one partition, held by one job until ``expires_at_ms``."""

    topic_partition: TopicPartition
    owner: str
    """The job's id."""
    epoch: int
    expires_at_ms: int


class CompactionOutput(NamedTuple):
    """An output segment a job recorded before writing its objects."""

    segment_id: UUID
    log_key: str
    index_key: str
    lease_epoch: int
    recorded_at_ms: int


class CompactionStore(MetadataStore, Protocol):
    """The metadata store, with what compaction jobs need."""

    def acquire_compaction_lease(self, tp: TopicPartition, owner: str, ttl_ms: int) -> CompactionLease | None:
        """Take the partition's compaction lease if it is free, released, expired or ``owner``'s
        already; ``None`` while another job holds it. Each take starts a new epoch."""
        ...

    def renew_compaction_lease(self, lease: CompactionLease, ttl_ms: int) -> CompactionLease:
        """Extend a held lease.

        Raises:
            StaleLeaseError: The lease was taken over (its epoch is not the current one).
        """
        ...

    def release_compaction_lease(self, lease: CompactionLease) -> bool:
        """Give the lease up; False when it was no longer held at that epoch."""
        ...

    def get_compaction_lease(self, tp: TopicPartition) -> CompactionLease | None:
        """The partition's lease as stored (expired or not); ``None`` when none was ever taken or
        it was released."""
        ...

    def add_compaction_outputs(self, lease: CompactionLease, outputs: Sequence[CompactionOutput]) -> None:
        """Record outputs about to be written. Idempotent: an output recorded already is left
        as it is.

        Raises:
            StaleLeaseError: ``lease`` is no longer the partition's.
            DuplicateSegmentError: An output's id is recorded with other objects.
        """
        ...

    def compaction_outputs(self, tp: TopicPartition) -> list[CompactionOutput]:
        """The outputs recorded and not yet swapped in nor forgotten."""
        ...

    def forget_compaction_outputs(self, tp: TopicPartition, segment_ids: Sequence[UUID]) -> None:
        """Forget outputs whose objects were deleted."""
        ...

    def swap_compacted(
        self,
        lease: CompactionLease,
        new: Sequence[RemoteSegment],
        replaced: Sequence[UUID],
        *,
        now_ms: int,
        delete_after_ms: int,
    ) -> bool:
        """In one transaction: ``new`` become COPY_SEGMENT_FINISHED (as of ``now_ms``; those whose
        records carry no timestamp as of their own event time, their inputs' newest age), ``replaced``
        go DELETE_SEGMENT_STARTED with ``delete_after_ms``, when their objects may be deleted
        (:func:`rlm.tiering.deletion.deferred`), and the outputs recorded for ``new`` are forgotten.
        Returns False, changing nothing, when a replaced segment is no longer
        COPY_SEGMENT_FINISHED (retention or another job got to it), or when the partition is being
        deleted (:mod:`rlm.tiering.partition_deletion`). Idempotent: a retry of a
        swap that committed (its ``new`` segments are stored) returns True and changes nothing,
        even once the lease moved on.

        Raises:
            StaleLeaseError: ``lease`` is no longer the partition's (and the swap was not done).
        """
        ...
