"""``rlm spark rebuild-metadata`` of a tier that retention cut and compaction rewrote.

Retention moves a partition's remote log start offset, which the segments left do not tell: its
marker object (:mod:`rlm.storage.log_start`) must bring it back, also when retention died after
moving it and before deleting anything. Compaction leaves its replaced segments in the bucket for
``remote.compaction.delete.delay.ms`` beside the outputs covering their offsets: the rebuild must
choose the outputs, as the original database does, and list the replaced segments as orphans.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from pyspark.sql import SparkSession

from metadata.store import SqlMetadataStore
from rlm.log.logdir import LogDir
from rlm.metastore.model import SegmentState, TopicPartition
from rlm.metrics import Metrics
from rlm.pipeline.compact.engine import InProcessEngine
from rlm.pipeline.compact.job import CompactOptions, compact
from rlm.pipeline.storage import StorageSpec
from rlm.storage.log_start import marker_key
from rlm.tiering.retention import Retention
from tests.pipeline.compact.support import WRITTEN_AT, compacting, write_keyed_log
from tests.pipeline.conftest import BACKENDS, make_tier
from tests.pipeline.test_rebuild import _empty_database, _finished, _lookups, _rebuild
from tests.tiering_support import set_log_start_offsets

pytestmark = pytest.mark.usefixtures("aws_env")


class _DiedError(Exception):
    """Retention killed right after it moved the log start offset."""


def _die_after_advance(step: str) -> None:
    if step == "log_start_advanced":
        raise _DiedError(step)


def _partition_view(url: str) -> dict[str, Any]:
    """Per partition: the remote log start offset and the remote tier's earliest offset (what
    ``ListOffsets`` EARLIEST answers from the tier: the first finished segment's start, never
    below the log start offset)."""
    view: dict[str, Any] = {}
    with SqlMetadataStore.open(url) as store:
        for record in store.list_partitions():
            tp = record.topic_partition
            rows = list(store.list_segments(tp, states=[SegmentState.COPY_SEGMENT_FINISHED]))
            first = min((r.start_offset for r in rows), default=None)
            earliest = None if first is None else max(first, record.remote_log_start_offset)
            view[str(tp)] = (record.remote_log_start_offset, earliest)
    return view


@pytest.mark.parametrize("kind", BACKENDS)
def test_the_remote_log_start_offset_is_rebuilt_from_the_markers(
    spark: SparkSession,
    kind: str,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    tier = make_tier(kind, request, tmp_path / "tier")
    store, storage = tier.open_store(), tier.open_storage()
    try:
        partitions = {
            (p.topic, p.partition): p for d in tier.settings.log_dirs for p in LogDir(d).partitions()
        }
        cut, died = sorted(partitions)[:2]
        cut_tp, died_tp = TopicPartition(*cut), TopicPartition(*died)
        cut_rows, died_rows = tier.finished(cut_tp), tier.finished(died_tp)
        assert len(cut_rows) >= 2 and len(died_rows) >= 2
        # The broker's log start inside the second segment: the first goes.
        set_log_start_offsets(
            tier.settings.log_dirs[0],
            {cut_tp: cut_rows[1].start_offset + 1, died_tp: died_rows[1].start_offset},
        )
        settings = tier.settings.replace(remote_log_start_offset_from_broker=True)  # DeleteRecords
        retention = Retention(settings, store, storage, Metrics(CollectorRegistry()))
        assert retention.enforce(partitions[cut]).deleted_segments == 1
        dying = Retention(settings, store, storage, Metrics(CollectorRegistry()), step=_die_after_advance)
        with pytest.raises(_DiedError):
            dying.enforce(partitions[died])
        assert storage.object_size(marker_key(cut_tp, cut_rows[0].topic_id)) is not None
    finally:
        store.close()
        storage.close()
    original = _partition_view(tier.settings.metadata_url)
    # Retention moved both; the died partition still has every segment, its first below the start.
    assert original[str(cut_tp)] == (cut_rows[1].start_offset, cut_rows[1].start_offset)
    assert original[str(died_tp)] == (died_rows[1].start_offset, died_rows[1].start_offset)

    url = _empty_database(request, tmp_path / "db")
    report = _rebuild(capsys, tier, url)
    assert report["orphans"] == []  # the markers are no orphans
    assert _partition_view(url) == original
    assert _lookups(tier, url) == _lookups(tier, tier.settings.metadata_url)


@pytest.mark.parametrize("kind", ["sqlite-fs"])
def test_after_compaction_the_outputs_are_rebuilt_and_the_replaced_segments_are_orphans(
    spark: SparkSession,
    kind: str,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    tier = make_tier(kind, request, tmp_path / "tier", lambda logs: write_keyed_log(logs, seed=5))
    before = {row.segment_id: row for row in _finished(tier.open_store())}
    settings = compacting(tier.settings)
    spec = StorageSpec.from_settings(settings)
    storage = tier.open_storage()
    try:
        with tier.open_store() as store:
            compact(
                store,
                storage,
                spec,
                InProcessEngine(spec),
                settings,
                CompactOptions(),
                now_ms=WRITTEN_AT + 3_600_000,
            )
    finally:
        storage.close()
    after = {row.segment_id: row for row in _finished(tier.open_store())}
    replaced = set(before) - set(after)
    assert replaced and set(after) - set(before)  # compaction replaced segments by outputs
    storage = tier.open_storage()
    try:  # kept for remote.compaction.delete.delay.ms
        assert all(storage.object_size(before[s].layout.log_key) is not None for s in replaced)
    finally:
        storage.close()

    url = _empty_database(request, tmp_path / "db")
    report = _rebuild(capsys, tier, url)
    assert {row.segment_id for row in _finished(SqlMetadataStore.open(url))} == set(after)
    orphaned = {key for o in report["orphans"] for key in o["keys"]}
    assert orphaned == {k for s in replaced for k in (before[s].layout.log_key, before[s].layout.index_key)}
    assert all(o["reason"].startswith("replaced by segment") for o in report["orphans"])
    assert _lookups(tier, url) == _lookups(tier, tier.settings.metadata_url)
