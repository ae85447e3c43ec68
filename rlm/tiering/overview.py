"""What the remote tier holds, per topic and partition, for operators (REST/gRPC read it).

A topic deleted and created again under the same name keeps its deleted incarnation's segments
in the metadata store until the copier retires them (:mod:`rlm.tiering.topic_identity`). The
partitions' figures are those of the topic the broker's directory holds (its
``partition.metadata``), as lookups answer for it: the other topic's segments, offsets and
timestamps are left out of them. The segment listing shows every segment, each with its topic
id, so that an operator sees what the store holds and whose it is.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from uuid import UUID

from rlm.arguments import parse_int, shown
from rlm.errors import CorruptDataError
from rlm.log.checkpoints import topic_id_to_uuid
from rlm.log.logdir import LogDir, PartitionDir
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


def remote_log_start(record: PartitionRecord | None, finished: list[RemoteSegment]) -> int:
    """The first offset readable from the remote tier: the first finished segment's base offset, or
    the log start offset retention recorded inside it; -1 while nothing is tiered."""
    if not finished:
        return -1
    first = min(s.start_offset for s in finished)
    return first if record is None else max(first, record.remote_log_start_offset)


def _topic_id(partition: PartitionDir | None) -> UUID | None:
    """The broker's topic id of ``partition``; None without one, or when it cannot be read (an
    operator view still shows the figures then; lookups refuse the remote tier, the copier errs)."""
    if partition is None:
        return None
    try:
        text = partition.topic_id()
    except (CorruptDataError, OSError):
        return None
    return topic_id_to_uuid(text) if text is not None else None


@dataclass(frozen=True)
class SegmentPage:
    """A page of a partition's remote segments, in offset order."""

    segments: tuple[RemoteSegment, ...]
    next_page_token: str | None
    """Pass back to get the next page; None on the last page."""


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
        local = {
            TopicPartition(p.topic, p.partition): p
            for d in self.log_dirs
            if d.path.is_dir()
            for p in d.partitions()
        }
        known = set(local) | {r.topic_partition for r in self.store.list_partitions()}
        result = []
        for tp in sorted(known):
            if topic is not None and tp.topic != topic:
                continue
            record = self.store.get_partition(tp)
            highest = record.highest_copied_offset if record is not None else -1
            skipped = self.store.list_skipped_ranges(tp)
            lag_segments = lag_bytes = 0
            local_start = hw = -1
            partition = local.get(tp)
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
            finished = list(self.store.list_segments(tp, states=[SegmentState.COPY_SEGMENT_FINISHED]))
            topic_id = _topic_id(partition)
            if topic_id is not None:
                finished = [s for s in finished if s.topic_id in (None, topic_id)]
                if record is not None and record.topic_id not in (None, topic_id):
                    record, highest = None, -1  # the deleted topic's offsets, not yet retired
            max_ts = max((s.max_timestamp_ms for s in finished), default=-1)
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
        """A page of ``tp``'s remote segments; the token is the last segment's offset and id.

        Raises:
            InvalidTopicNameError: the topic name breaks Kafka's rule.
            ValueError: ``limit`` is not 1..1000 or the token is malformed.
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
        return SegmentPage(page, token)
