"""The compaction job with the in-process engine (the reference): tier → compact → survivors."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest

from rlm.log.files import segment_file_name
from rlm.log.segment import Segment
from rlm.log.verify import verify_segment
from rlm.metastore.model import IndexType, SegmentState, TopicPartition
from rlm.pipeline.compact.engine import InProcessEngine
from rlm.pipeline.compact.job import CompactOptions, CompactReport, compact
from rlm.pipeline.storage import StorageSpec
from rlm.storage.description import Description, read_description
from rlm.storage.layout import IndexBlob
from tests.pipeline.compact.support import (
    TOPIC,
    WRITTEN_AT,
    assert_lookups_exact,
    compacting,
    read_records,
    survivors,
    write_keyed_log,
)
from tests.pipeline.conftest import make_tier
from tests.pipeline.tiers import Tier

NOW = WRITTEN_AT + 3_600_000


def run(tier: Tier, *, now_ms: int = NOW, dry_run: bool = False, **topic: Any) -> CompactReport:
    settings = compacting(tier.settings, **topic)
    storage = tier.open_storage()
    try:
        with tier.open_store() as store:
            spec = StorageSpec.from_settings(settings)
            return compact(
                store,
                storage,
                spec,
                InProcessEngine(spec),
                settings,
                CompactOptions(dry_run=dry_run),
                now_ms=now_ms,
            )
    finally:
        storage.close()


@pytest.fixture
def tier(request: pytest.FixtureRequest, tmp_path: Path) -> Tier:
    return make_tier("sqlite-fs", request, tmp_path, functools.partial(write_keyed_log, seed=5))


def _download(tier: Tier, tp: TopicPartition, into: Path) -> list[Segment]:
    """The finished segments as Kafka files in ``into`` (to check them as ``rlm log verify`` does)."""
    into.mkdir()
    storage = tier.open_storage()
    segments = []
    try:
        for row in tier.finished(tp):
            data = storage.read_range(row.layout.log_key, 0, row.size_bytes)
            (into / segment_file_name(row.start_offset, ".log")).write_bytes(data)
            size = storage.object_size(row.layout.index_key) or 0
            blob = IndexBlob(storage.read_range(row.layout.index_key, 0, size), row.layout.index_ranges)
            for kind, suffix in ((IndexType.OFFSET, ".index"), (IndexType.TIMESTAMP, ".timeindex")):
                (into / segment_file_name(row.start_offset, suffix)).write_bytes(blob.extract(kind) or b"")
            txn = blob.extract(IndexType.TRANSACTION)
            if txn:
                (into / segment_file_name(row.start_offset, ".txnindex")).write_bytes(txn)
            segments.append(Segment(into, row.start_offset))
    finally:
        storage.close()
    return segments


def test_compaction_keeps_winners_offsets_and_valid_segments(tier: Tier, tmp_path: Path) -> None:
    tp = TopicPartition(TOPIC, 0)
    before = survivors(tier, tp)
    highest = max(s.end_offset for s in tier.finished(tp))
    report = run(tier)
    assert not report.failed, report.to_json()
    assert {p.status for p in report.partitions} == {"compacted"}
    after = survivors(tier, tp)
    assert len(after) < len(before)
    assert after[-1].offset == highest  # the last record stays
    assert set(after) <= set(before)  # records are kept as they were, offsets included
    data = [s for s in after if not s.control]
    keys = [s.key for s in data if s.offset != highest]
    assert None not in keys
    # offset strategy: each key once at most, at its highest offset among the records that may go
    assert len(keys) == len(set(keys))
    for segment in _download(tier, tp, tmp_path / "check"):
        assert list(verify_segment(segment)) == []


def test_written_segments_describe_themselves_as_copied_ones_do(tier: Tier) -> None:
    tp = TopicPartition(TOPIC, 0)
    copied = {row.segment_id for row in tier.finished(tp)}
    assert not run(tier).failed
    written = [row for row in tier.finished(tp) if row.segment_id not in copied]
    assert written
    storage = tier.open_storage()
    try:
        for row in written:
            key = row.layout.index_key
            described = read_description(storage.object_metadata(key) or {}, key)
            assert described is not None, key
            assert described[:6] == Description.of(row)[:6]  # all but the broker and the time
    finally:
        storage.close()


def test_a_second_run_changes_nothing_and_a_run_past_the_horizon_drops_tombstones(tier: Tier) -> None:
    tp = TopicPartition(TOPIC, 1)
    run(tier)
    once = survivors(tier, tp)
    rows = {r.segment_id for r in tier.finished(tp)}
    again = run(tier)
    assert {p.status for p in again.partitions} == {"unchanged"}
    assert survivors(tier, tp) == once and {r.segment_id for r in tier.finished(tp)} == rows
    tombstones = [s for s in once if s.value is None and not s.control]
    assert tombstones
    later = run(tier, now_ms=NOW + 86_400_000 + 1)
    assert not later.failed
    left = [s for s in survivors(tier, tp) if s.value is None and not s.control]
    highest = max(s.end_offset for s in tier.finished(tp))
    assert all(s.offset == highest for s in left)


def test_dry_run_writes_nothing(tier: Tier) -> None:
    storage = tier.open_storage()
    keys = set(storage.list_keys())
    storage.close()
    report = run(tier, dry_run=True)
    assert {p.status for p in report.partitions} == {"would compact"}
    assert sum(p.counts.records_in - p.counts.records_out for p in report.partitions) > 0
    storage = tier.open_storage()
    assert set(storage.list_keys()) == keys
    storage.close()
    with tier.open_store() as store:
        assert not list(
            store.list_segments(TopicPartition(TOPIC, 0), states=[SegmentState.DELETE_SEGMENT_STARTED])
        )


def test_read_records_sees_what_rlm_wrote(tier: Tier) -> None:
    run(tier)
    storage = tier.open_storage()
    try:
        row = tier.finished(TopicPartition(TOPIC, 0))[0]
        assert read_records(storage.read_range(row.layout.log_key, 0, row.size_bytes))
    finally:
        storage.close()


def test_lookups_and_fetches_over_rest_answer_from_the_survivors(tier: Tier, tmp_path: Path) -> None:
    run(tier)
    assert_lookups_exact(tier, TopicPartition(TOPIC, 0), tmp_path / "cache")
