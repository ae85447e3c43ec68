"""Objects against rows: objects no live row references, and rows stuck in a STARTED state.

A live row is any row not in ``DELETE_SEGMENT_FINISHED``: an unfinished copy or delete references
its objects legitimately (the copier's cleanup or retention removes them), so its objects are not
orphans; the row itself is reported once it is older than the cleanup horizon, since by then a
running copier would have cleaned it up (a row a compaction replaced, once the horizon has passed
after its deletion delay). The objects a compaction job recorded as its outputs and has not
swapped in are not orphans either: the job is writing them, or its next run's cleanup deletes them.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator

from rlm.metastore.compaction import CompactionOutput
from rlm.metastore.model import RemoteSegment, SegmentState, TopicPartition
from rlm.pipeline.verify.problems import Problem, ProblemKind
from rlm.storage.layout import parse_segment_key, partition_hash
from rlm.storage.log_start import marker_partition
from rlm.storage.protocol import RemoteStorage

#: Rows in these states are unfinished work.
STARTED_STATES = (SegmentState.COPY_SEGMENT_STARTED, SegmentState.DELETE_SEGMENT_STARTED)
#: Rows in these states reference objects that should exist (or are being removed).
LIVE_STATES = (*STARTED_STATES, SegmentState.COPY_SEGMENT_FINISHED)
#: How old a STARTED row may be before it is reported (``--cleanup-horizon-ms``): one hour.
DEFAULT_CLEANUP_HORIZON_MS = 3_600_000


def referenced_keys(rows: Iterable[RemoteSegment]) -> set[str]:
    """The object keys the live rows among ``rows`` reference."""
    return {
        key
        for row in rows
        if row.state is not SegmentState.DELETE_SEGMENT_FINISHED
        for key in (row.layout.log_key, row.layout.index_key)
    }


def output_keys(outputs: Iterable[CompactionOutput]) -> set[str]:
    """The object keys of compaction outputs recorded and not yet swapped in."""
    return {key for output in outputs for key in (output.log_key, output.index_key)}


def partition_prefixes(partitions: Iterable[TopicPartition]) -> list[str]:
    """Listing prefixes that hold every object of ``partitions`` (and maybe a few others)."""
    return sorted(
        {f"{partition_hash(tp.topic, tp.partition)}/{tp.topic}-{tp.partition}-" for tp in partitions}
    )


def stored_keys(storage: RemoteStorage, partitions: Collection[TopicPartition] | None) -> Iterator[str]:
    """Every key under the store's prefix, or only the keys of ``partitions`` when given."""
    if partitions is None:
        yield from storage.list_keys("")
        return
    for prefix in partition_prefixes(partitions):
        for key in storage.list_keys(prefix):
            parsed = parse_segment_key(key)
            if parsed is not None and TopicPartition(parsed.topic, parsed.partition) in partitions:
                yield key


def orphan_objects(keys: Iterable[str], referenced: Collection[str]) -> list[Problem]:
    """One problem per key in ``keys`` that is not in ``referenced``."""
    problems = []
    for key in keys:
        if key in referenced or marker_partition(key) is not None:
            continue  # a marker is a partition's, no row's (rlm.storage.log_start)
        parsed = parse_segment_key(key)
        if parsed is None:
            problems.append(
                Problem(
                    ProblemKind.ORPHAN_OBJECT,
                    None,
                    None,
                    "an object under the store's prefix that is not a segment's (no row can reference it)",
                    object_key=key,
                )
            )
            continue
        problems.append(
            Problem(
                ProblemKind.ORPHAN_OBJECT,
                parsed.topic,
                parsed.partition,
                f"no live row references this object (segment id {parsed.segment_id}, start offset "
                f"{parsed.start_offset})",
                segment_id=str(parsed.segment_id),
                object_key=key,
                offset=parsed.start_offset,
            )
        )
    return problems


def stale_rows(rows: Iterable[RemoteSegment], *, now_ms: int, horizon_ms: int) -> list[Problem]:
    """Rows in a STARTED state whose last change is older than ``horizon_ms`` before ``now_ms``.

    A row a compaction replaced waits in ``DELETE_SEGMENT_STARTED`` until its ``delete_after_ms``
    (no cleanup touches it before): its horizon runs from then.
    """
    problems = []
    for row in rows:
        if row.state not in STARTED_STATES:
            continue
        age = now_ms - row.event_time_ms
        due = row.delete_after_ms
        if due is not None and row.state is SegmentState.DELETE_SEGMENT_STARTED:
            if now_ms - due <= horizon_ms:
                continue
            since = f", {(now_ms - due) // 1000} s after its deletion delay ended"
        else:
            if age <= horizon_ms:
                continue
            since = ""
        tp = row.topic_partition
        problems.append(
            Problem(
                ProblemKind.STALE_ROW,
                tp.topic,
                tp.partition,
                f"segment [{row.start_offset}, {row.end_offset}] has been {row.state.value} for "
                f"{age // 1000} s, past the cleanup horizon of {horizon_ms // 1000} s{since} (is the "
                "copier of this partition running?)",
                segment_id=str(row.segment_id),
                offset=row.start_offset,
            )
        )
    return problems
