"""Objects no live row references, and rows stuck in a STARTED state past the cleanup horizon."""

from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path

from rlm.metastore.model import ObjectLayout, RemoteSegment, SegmentState, TopicPartition
from rlm.pipeline.verify.inventory import orphan_objects, referenced_keys, stale_rows, stored_keys
from rlm.pipeline.verify.problems import ProblemKind
from rlm.storage.filesystem import FilesystemStorage
from rlm.storage.layout import segment_keys
from rlm.storage.log_start import marker_key
from tests.metadata_support import segment

NOW = 1_800_000_000_000
HOUR = 3_600_000


def _row(tp: TopicPartition, start: int, state: SegmentState, event_time_ms: int = NOW) -> RemoteSegment:
    base = segment(start, start + 9, tp=tp, state=state)
    keys = segment_keys(tp.topic, None, tp.partition, start, base.segment_id)
    return dataclasses.replace(
        base, layout=ObjectLayout(keys.log_key, keys.indexes_key, ()), event_time_ms=event_time_ms
    )


def test_rows_started_before_the_horizon_are_stale() -> None:
    tp = TopicPartition("orders", 0)
    old_copy = _row(tp, 0, SegmentState.COPY_SEGMENT_STARTED, NOW - 2 * HOUR)
    old_delete = _row(tp, 10, SegmentState.DELETE_SEGMENT_STARTED, NOW - 2 * HOUR)
    recent = _row(tp, 20, SegmentState.COPY_SEGMENT_STARTED, NOW - HOUR + 1)
    finished = _row(tp, 30, SegmentState.COPY_SEGMENT_FINISHED, NOW - 10 * HOUR)
    problems = stale_rows([old_copy, old_delete, recent, finished], now_ms=NOW, horizon_ms=HOUR)
    assert [(p.kind, p.segment_id) for p in problems] == [
        (ProblemKind.STALE_ROW, str(old_copy.segment_id)),
        (ProblemKind.STALE_ROW, str(old_delete.segment_id)),
    ]
    assert (
        "has been COPY_SEGMENT_STARTED for 7200 s, past the cleanup horizon of 3600 s" in problems[0].message
    )


def test_objects_no_live_row_references_are_orphans() -> None:
    tp = TopicPartition("orders", 3)
    live = _row(tp, 0, SegmentState.COPY_SEGMENT_FINISHED)
    copying = _row(tp, 10, SegmentState.COPY_SEGMENT_STARTED)
    gone = _row(tp, 20, SegmentState.DELETE_SEGMENT_FINISHED)
    referenced = referenced_keys([live, copying, gone])
    assert referenced == {
        live.layout.log_key,
        live.layout.index_key,
        copying.layout.log_key,
        copying.layout.index_key,
    }
    # A partition's remote log start marker is no row's, and no orphan; a look-alike elsewhere is.
    marker = marker_key(tp, None)
    keys = [
        live.layout.log_key,
        gone.layout.log_key,
        copying.layout.index_key,
        marker,
        "notes/readme.txt",
        "notes/x/remote-log-start",
    ]
    orphans = orphan_objects(keys, referenced)
    assert [(p.kind, p.partition_name, p.object_key) for p in orphans] == [
        (ProblemKind.ORPHAN_OBJECT, "orders-3", gone.layout.log_key),
        (ProblemKind.ORPHAN_OBJECT, "-", "notes/readme.txt"),
        (ProblemKind.ORPHAN_OBJECT, "-", "notes/x/remote-log-start"),
    ]
    assert orphans[0].segment_id == str(gone.segment_id) and orphans[0].offset == 20


def test_listing_one_partition_leaves_out_its_namesakes(tmp_path: Path) -> None:
    storage = FilesystemStorage(tmp_path)
    mine = TopicPartition("t", 1)
    keys = {
        tp: segment_keys(tp.topic, None, tp.partition, 0, uuid.uuid4()).log_key
        for tp in (mine, TopicPartition("t", 10), TopicPartition("t-1", 0), TopicPartition("u", 1))
    }
    for key in keys.values():
        storage.put_object(key, b"x")
    assert list(stored_keys(storage, {mine})) == [keys[mine]]
    assert sorted(stored_keys(storage, None)) == sorted(keys.values())


def test_a_replaced_row_waiting_out_its_deletion_delay_is_not_stale() -> None:
    # A compaction swap leaves the rows it replaced DELETE_SEGMENT_STARTED until delete_after_ms
    # (remote.compaction.delete.delay.ms on): no cleanup may touch them before, so the horizon
    # runs from then.
    tp = TopicPartition("orders", 0)
    waiting = dataclasses.replace(
        _row(tp, 0, SegmentState.DELETE_SEGMENT_STARTED, NOW - 5 * HOUR), delete_after_ms=NOW + HOUR
    )
    just_due = dataclasses.replace(
        _row(tp, 10, SegmentState.DELETE_SEGMENT_STARTED, NOW - 5 * HOUR), delete_after_ms=NOW - HOUR + 1
    )
    overdue = dataclasses.replace(
        _row(tp, 20, SegmentState.DELETE_SEGMENT_STARTED, NOW - 5 * HOUR), delete_after_ms=NOW - 2 * HOUR
    )
    problems = stale_rows([waiting, just_due, overdue], now_ms=NOW, horizon_ms=HOUR)
    assert [p.segment_id for p in problems] == [str(overdue.segment_id)]
    assert "past the cleanup horizon of 3600 s, 7200 s after its deletion delay ended" in problems[0].message
