"""What the remote tier holds, per topic and partition, for operators (REST/gRPC read it).

A topic deleted and created again under the same name keeps its deleted incarnation's segments
in the metadata store until the copier retires them (:mod:`rlm.tiering.topic_identity`). Both
views tell them apart by the topic id of the broker's directory (its ``partition.metadata``), as
lookups, fetches and streams do (:mod:`rlm.lookup.topic_ids`):

* A partition's figures are those of the topic the broker holds: the deleted topic's segments,
  offsets, timestamps and skipped ranges are left out of them, and the copy lag is what the
  copier has to copy of the new topic (all of it, once it retires the old one's state). An
  operator reads them as the figures of the topic that is there now.
* The segment listing shows every segment the store holds, in every state, as its job is to show
  what the store holds: each with its topic id, and the deleted topic's marked as such
  (:meth:`SegmentPage.of_deleted_topic`); no read uses those, and the copier deletes them.

Where the broker's ``partition.metadata`` cannot be read, nothing tells the topics apart: the
figures are the store's, as it holds them, the listing marks no segment either way, and both say
what is wrong with the file (``topic_id_error``); reads of the partition fail meanwhile.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from uuid import UUID

from rlm.arguments import parse_int, shown
from rlm.errors import NotFoundError
from rlm.log.broker_dirs import list_log_dirs
from rlm.log.logdir import LogDir, PartitionDir
from rlm.lookup.topic_ids import UnreadableTopicIdError, is_other_topic, local_topic_id
from rlm.metastore.model import PartitionRecord, RemoteSegment, SegmentState, SkippedRange, TopicPartition
from rlm.metastore.protocol import MetadataStore
from rlm.storage.layout import validate_topic
from rlm.tiering.copy_plan import covered_through, plan_copy


@dataclass(frozen=True)
class PartitionOverview:
    """One partition: what is tiered, what is still to copy."""

    topic: str
    partition: int
    tiered_bytes: int
    tiered_segments: int
    remote_log_start_offset: int
    highest_tiered_offset: int
    max_remote_timestamp: int
    copy_lag_segments: int
    copy_lag_bytes: int
    local_log_start_offset: int
    high_watermark: int
    skipped_ranges: tuple[SkippedRange, ...] = ()
    """Offsets the remote tier will never hold, and why (``rlm copy skip``, or deleted locally
    before they were tiered)."""
    topic_id: UUID | None = None
    """The topic id of the broker's directory (``partition.metadata``), whose figures these are;
    None without one (no directory, or an older broker) or when it cannot be read."""
    topic_id_error: str | None = None
    """Why the broker's ``partition.metadata`` cannot be read (it names the file): the figures are
    then the store's, whichever topic's they are, and reads of the partition fail."""
    deletion_state: str | None = None
    """The partition's deletion from the remote tier (``DELETE_PARTITION_*``,
    :mod:`rlm.tiering.partition_deletion`); None while it is not deleted."""
    remote_topic_id: UUID | None = None
    """The topic id the store records for the partition (its copier adopted it); None while none
    is. A deleted topic's stays here once its directories are gone."""


def remote_log_start(record: PartitionRecord | None, finished: list[RemoteSegment]) -> int:
    """The first offset readable from the remote tier: the first finished segment's base offset, or
    the log start offset retention recorded inside it; -1 while nothing is tiered."""
    if not finished:
        return -1
    first = min(s.start_offset for s in finished)
    return first if record is None else max(first, record.remote_log_start_offset)


def broker_topic_id(partition: PartitionDir | None) -> tuple[UUID | None, str | None]:
    """The topic id of the broker's directory of a partition, as reads take it
    (:func:`~rlm.lookup.topic_ids.local_topic_id`): None without one; and why it cannot be read,
    or None."""
    try:
        return local_topic_id(partition), None
    except UnreadableTopicIdError as exc:
        return None, str(exc)


@dataclass(frozen=True)
class SegmentPage:
    """A page of a partition's remote segments, in offset order."""

    segments: tuple[RemoteSegment, ...]
    next_page_token: str | None
    """Pass back to get the next page; None on the last page."""
    topic_id: UUID | None = None
    """The topic id of the broker's directory of the partition; None without one (no directory,
    or an older broker) or when it cannot be read."""
    topic_id_error: str | None = None
    """Why the broker's ``partition.metadata`` cannot be read (it names the file); None when it
    can be, or there is none."""

    def of_deleted_topic(self, segment: RemoteSegment) -> bool | None:
        """Whether ``segment`` is of a topic deleted under the partition's name, not the one the
        broker holds: no read uses it, and the copier deletes it. False when either id is unknown
        (as reads take it); None when the broker's topic id cannot be read."""
        if self.topic_id_error is not None:
            return None
        return is_other_topic(segment.topic_id, self.topic_id)


class Overview:
    """Reads the metadata store and the local log directories; changes nothing."""

    def __init__(self, store: MetadataStore, log_dirs: tuple[LogDir, ...]) -> None:
        self.store = store
        self.log_dirs = log_dirs

    def partitions(self, topic: str | None = None) -> list[PartitionOverview]:
        """Every partition of the local log directories and of the store (one ``topic`` if given).

        Raises:
            InvalidTopicNameError: ``topic`` breaks Kafka's rule.
        """
        if topic is not None:
            validate_topic(topic)
        # A log directory that cannot be read is passed over (the store still knows what it
        # tiered); of a partition in two, the first log directory's, as lookups read it.
        found = list_log_dirs(self.log_dirs)
        local = {p.tp: p for p in found.partitions} | {tp: dirs[0] for tp, dirs in found.duplicates.items()}
        known = set(local) | {r.topic_partition for r in self.store.list_partitions()}
        result = []
        for tp in sorted(known):
            if topic is not None and tp.topic != topic:
                continue
            partition = local.get(tp)
            topic_id, topic_id_error = broker_topic_id(partition)
            record = self.store.get_partition(tp)
            remote_topic_id = record.topic_id if record is not None else None
            skipped = self.store.list_skipped_ranges(tp)
            finished = list(self.store.list_segments(tp, states=[SegmentState.COPY_SEGMENT_FINISHED]))
            if record is not None and is_other_topic(record.topic_id, topic_id):
                # The deleted topic's offsets and skipped ranges, not yet retired: the new topic
                # has nothing tiered (the copier resets them as it retires its segments).
                record, skipped = None, []
            finished = [s for s in finished if not is_other_topic(s.topic_id, topic_id)]
            highest = record.highest_copied_offset if record is not None else -1
            lag_segments = lag_bytes = 0
            local_start = hw = -1
            if partition is not None:
                hw_value = partition.high_watermark()
                hw = hw_value if hw_value is not None else -1
                segments = partition.segments()
                local_start = segments[0].base_offset if segments else -1
                # The copier's own plan: what it has still to copy, however far it got.
                plan = plan_copy(
                    segments,
                    high_watermark=hw_value,
                    covered=covered_through(highest, skipped),
                    log_start_offset=partition.checkpointed_log_start_offset(),
                    skipped=skipped,
                )
                lag_segments, lag_bytes = plan.lag_segments, plan.lag_bytes()
            max_ts = max((s.max_timestamp_ms for s in finished), default=-1)
            deletion = record.deletion_state if record is not None else None
            result.append(
                PartitionOverview(
                    tp.topic,
                    tp.partition,
                    tiered_bytes=sum(s.size_bytes for s in finished),
                    tiered_segments=len(finished),
                    remote_log_start_offset=remote_log_start(record, finished),
                    highest_tiered_offset=highest,
                    max_remote_timestamp=max_ts,
                    copy_lag_segments=lag_segments,
                    copy_lag_bytes=lag_bytes,
                    local_log_start_offset=local_start,
                    high_watermark=hw,
                    skipped_ranges=tuple(skipped),
                    topic_id=topic_id,
                    topic_id_error=topic_id_error,
                    deletion_state=deletion.value if deletion is not None else None,
                    remote_topic_id=remote_topic_id,
                )
            )
        return result

    def segments(
        self,
        tp: TopicPartition,
        *,
        limit: int = 100,
        page_token: str | None = None,
        states: tuple[SegmentState, ...] | None = None,
    ) -> SegmentPage:
        """A page of ``tp``'s remote segments, of every topic the store holds under its name
        (module docstring); the token is the last segment's offset and id.

        Raises:
            InvalidTopicNameError: the topic name breaks Kafka's rule.
            ValueError: ``limit`` is not 1..1000 or the token is malformed.
            NotFoundError: the first page of a partition the store holds no segment of and no log
                directory has.
        """
        validate_topic(tp.topic)
        if not 1 <= limit <= 1000:
            raise ValueError(f"limit must be 1 to 1000, not {limit}")
        after: tuple[int, UUID] | None = None
        if page_token:
            try:
                offset_text, id_text = page_token.split(":", 1)
                after = (parse_int(offset_text, "page_token", 0), UUID(id_text))
            except ValueError:
                raise ValueError(f"page token {shown(page_token)} is malformed") from None
        stream = self.store.list_segments(tp, states=states)
        if after is not None:
            stream = itertools.dropwhile(
                lambda s: (s.start_offset, s.segment_id.int) <= (after[0], after[1].int), stream
            )
        page = tuple(itertools.islice(stream, limit + 1))
        more = len(page) > limit
        page = page[:limit]
        token = f"{page[-1].start_offset}:{page[-1].segment_id}" if more and page else None
        local = self._partition_dir(tp)
        if not page and after is None and local is None:
            # As lookups and fetches answer: an empty first page would say "known, nothing tiered".
            raise NotFoundError(f"unknown topic-partition {tp}: no local log and no remote segments")
        topic_id, topic_id_error = broker_topic_id(local)
        return SegmentPage(page, token, topic_id, topic_id_error)

    def _partition_dir(self, tp: TopicPartition) -> PartitionDir | None:
        """The broker's directory of ``tp``, or None when no log directory has one."""
        for log_dir in self.log_dirs:
            path = log_dir.partition_path(tp.topic, tp.partition)
            if path is not None:
                return PartitionDir(path, log_dir)
        return None
