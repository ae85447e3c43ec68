"""Contract of the export ledger (where the next incremental export starts), on SQLite and PostgreSQL."""

from __future__ import annotations

import dataclasses
import uuid

from metadata.store import SqlMetadataStore
from rlm.metastore import RemoteSegment, TopicPartition
from tests.metadata_support import TP, add_finished, segment

A, B = TopicPartition("orders", 0), TopicPartition("orders", 1)
OUT = "file:///exports/orders"
OLD = uuid.UUID("11111111-1111-4111-8111-111111111111")
NEW = uuid.UUID("22222222-2222-4222-8222-222222222222")


def of(topic_id: uuid.UUID, start: int, end: int) -> RemoteSegment:
    """A segment of ``TP`` copied from the topic with ``topic_id``."""
    return dataclasses.replace(segment(start, end), topic_id=topic_id)


def test_offsets_are_kept_per_output_and_partition(store: SqlMetadataStore) -> None:
    assert store.export_offsets(OUT) == {}
    store.record_export_offsets(OUT, {A: 100, B: 7})
    store.record_export_offsets("s3a://bucket/other", {A: 5})
    assert store.export_offsets(OUT) == {A: 100, B: 7}
    assert store.export_offsets("s3a://bucket/other") == {A: 5}
    store.record_export_offsets(OUT, {B: 50})
    assert store.export_offsets(OUT) == {A: 100, B: 50}


def test_an_offset_never_goes_down(store: SqlMetadataStore) -> None:
    store.record_export_offsets(OUT, {A: 100})
    store.record_export_offsets(OUT, {A: 60})  # a commit replayed after a later one
    assert store.export_offsets(OUT) == {A: 100}


def test_a_topic_created_again_starts_its_exports_over(store: SqlMetadataStore) -> None:
    add_finished(store, of(OLD, 0, 9_999))
    store.adopt_topic_id(TP, OLD, event_time_ms=1)
    store.record_export_offsets(OUT, {TP: 10_000}, {TP: OLD})
    assert store.export_offsets(OUT) == {TP: 10_000}

    # The topic is deleted and created again: a new id, offsets from 0 again.
    store.adopt_topic_id(TP, NEW, event_time_ms=2)
    assert store.export_offsets(OUT) == {}
    # A run planned before (its commit rolled forward now) does not bring the old offset back.
    store.record_export_offsets(OUT, {TP: 10_000}, {TP: OLD})
    assert store.export_offsets(OUT) == {}
    store.record_export_offsets(OUT, {TP: 40}, {TP: NEW})
    assert store.export_offsets(OUT) == {TP: 40}
    store.record_export_offsets(OUT, {TP: 30}, {TP: NEW})  # replayed: still only grows
    assert store.export_offsets(OUT) == {TP: 40}


def test_an_offset_of_the_new_topic_replaces_the_old_topics_even_when_lower(store: SqlMetadataStore) -> None:
    # Recorded while the store knew no id of the partition: the run's, kept with the offset.
    store.record_export_offsets(OUT, {TP: 10_000}, {TP: OLD})
    assert store.export_offsets(OUT) == {TP: 10_000}
    # The broker's id is another (nothing of the old topic was tiered: no reset, the row stays).
    change = store.adopt_topic_id(TP, NEW, event_time_ms=2)
    assert not change.reset
    assert store.export_offsets(OUT) == {}
    store.record_export_offsets(OUT, {TP: 40})  # no id given: the partition's current one
    assert store.export_offsets(OUT) == {TP: 40}
    store.adopt_topic_id(TP, OLD, event_time_ms=3)  # and back: the new topic's offset is not the old one's
    assert store.export_offsets(OUT) == {}
