"""Contract of the export ledger (where the next incremental export starts), on SQLite and PostgreSQL."""

from __future__ import annotations

from metadata.store import SqlMetadataStore
from rlm.metastore import TopicPartition

A, B = TopicPartition("orders", 0), TopicPartition("orders", 1)
OUT = "file:///exports/orders"


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
