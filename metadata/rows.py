"""Conversions between rlm's metadata records and table rows (including the JSON columns)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import Row

from rlm.metastore.model import (
    ByteRange,
    IndexType,
    LeaderEpochEntry,
    Lease,
    ObjectLayout,
    PartitionRecord,
    PartitionState,
    RemoteSegment,
    SegmentState,
    TopicPartition,
)


def layout_to_json(layout: ObjectLayout) -> dict[str, Any]:
    """``{"log_key", "index_key", "index_ranges": {"offset": [position, size], ...}}``."""
    return {
        "log_key": layout.log_key,
        "index_key": layout.index_key,
        "index_ranges": {kind.value: [r.position, r.size] for kind, r in layout.index_ranges},
    }


def layout_from_json(document: Mapping[str, Any]) -> ObjectLayout:
    """Inverse of :func:`layout_to_json`."""
    ranges = document["index_ranges"]
    return ObjectLayout(
        log_key=document["log_key"],
        index_key=document["index_key"],
        index_ranges=tuple(
            (IndexType(kind), ByteRange(int(value[0]), int(value[1]))) for kind, value in ranges.items()
        ),
    )


def epochs_to_json(entries: tuple[LeaderEpochEntry, ...]) -> list[list[int]]:
    """``[[epoch, start_offset], ...]`` in epoch order."""
    return [[entry.epoch, entry.start_offset] for entry in entries]


def epochs_from_json(document: list[list[int]]) -> tuple[LeaderEpochEntry, ...]:
    """Inverse of :func:`epochs_to_json`."""
    return tuple(LeaderEpochEntry(int(epoch), int(start)) for epoch, start in document)


def segment_values(segment: RemoteSegment, partition_id: int) -> dict[str, Any]:
    """Column values of ``segment``'s row."""
    return {
        "segment_id": segment.segment_id,
        "partition_id": partition_id,
        "topic_id": segment.topic_id,
        "start_offset": segment.start_offset,
        "end_offset": segment.end_offset,
        "max_timestamp_ms": segment.max_timestamp_ms,
        "size_bytes": segment.size_bytes,
        "broker_id": segment.broker_id,
        "event_time_ms": segment.event_time_ms,
        "state": segment.state.value,
        "leader_epochs": epochs_to_json(segment.leader_epochs),
        "object_layout": layout_to_json(segment.layout),
        "txn_index_empty": segment.txn_index_empty,
        "delete_after_ms": segment.delete_after_ms,
    }


def epoch_values(segment: RemoteSegment, partition_id: int) -> list[dict[str, Any]]:
    """Rows of ``rlm_segment_epoch`` for ``segment``: one per epoch that wrote records in it."""
    values = []
    for entry in segment.leader_epochs:
        epoch_range = segment.epoch_range(entry.epoch)
        if epoch_range is not None:
            values.append(
                {
                    "segment_id": segment.segment_id,
                    "leader_epoch": entry.epoch,
                    "partition_id": partition_id,
                    "segment_start_offset": segment.start_offset,
                    "last_offset": epoch_range[1],
                }
            )
    return values


def segment_from_row(row: Row[Any], tp: TopicPartition) -> RemoteSegment:
    """Build a segment from a ``rlm_segment`` row of partition ``tp``."""
    return RemoteSegment(
        segment_id=row.segment_id,
        topic_partition=tp,
        topic_id=row.topic_id,
        start_offset=int(row.start_offset),
        end_offset=int(row.end_offset),
        max_timestamp_ms=int(row.max_timestamp_ms),
        size_bytes=int(row.size_bytes),
        broker_id=int(row.broker_id),
        event_time_ms=int(row.event_time_ms),
        leader_epochs=epochs_from_json(row.leader_epochs),
        layout=layout_from_json(row.object_layout),
        txn_index_empty=bool(row.txn_index_empty),
        state=SegmentState(row.state),
        delete_after_ms=None if row.delete_after_ms is None else int(row.delete_after_ms),
    )


def partition_from_row(row: Row[Any]) -> PartitionRecord:
    """Build a partition record from a ``rlm_partition`` row."""
    return PartitionRecord(
        topic_partition=TopicPartition(row.topic, int(row.partition)),
        remote_log_start_offset=int(row.remote_log_start_offset),
        highest_copied_offset=int(row.highest_copied_offset),
        remote_log_size_bytes=int(row.remote_log_size_bytes),
        deletion_state=None if row.deletion_state is None else PartitionState(row.deletion_state),
        deletion_event_time_ms=(
            None if row.deletion_event_time_ms is None else int(row.deletion_event_time_ms)
        ),
        topic_id=row.topic_id,
        lineage=int(row.lineage),
    )


def lease_from_row(row: Row[Any]) -> Lease | None:
    """The lease recorded in a ``rlm_partition`` row, ``None`` when nobody holds it."""
    if row.lease_owner is None or row.lease_expires_at_ms is None:
        return None
    return Lease(
        topic_partition=TopicPartition(row.topic, int(row.partition)),
        owner=int(row.lease_owner),
        epoch=int(row.lease_epoch),
        expires_at_ms=int(row.lease_expires_at_ms),
        incarnation=row.lease_incarnation,
    )
