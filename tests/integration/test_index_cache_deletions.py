"""A segment deleted by any path of ``rlm serve``'s process leaves nothing in its remote index
cache, as Kafka's ``RemoteIndexCache.remove`` on delete: not only retention's expired segments,
but deletions finished later (a pass cut short after the state move, a compaction's replaced
segments after the swap delay, retired or diverged copies), by retention or by the copier."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from rlm.bootstrap import Runtime, build_runtime
from rlm.cli import main
from rlm.config import TopicSettings, load_settings
from rlm.log.logdir import LogDir
from rlm.log.produce import ProduceSpec, produce
from rlm.metastore.model import SegmentState, TopicPartition

TP = TopicPartition("orders", 0)


def _runtime(tmp_path: Path, sqlite_template: Path) -> tuple[Runtime, int]:
    """A runtime as ``rlm serve`` builds it over a tiered partition whose first segment only the
    remote tier holds; returns it and a timestamp in that segment."""
    logs, remote, db = tmp_path / "logs", tmp_path / "remote", tmp_path / "meta.db"
    remote.mkdir()
    shutil.copyfile(sqlite_template, db)
    produce(logs, ProduceSpec(topics=1, partitions=1, records=1500, segment_bytes=16 * 1024, seed=5))
    options = ["--log-dirs", str(logs), "--metadata-url", f"sqlite:///{db}", "--remote-url", remote.as_uri()]
    assert main(["copy", "--once", "--quiet", *options]) == 0
    first = LogDir(logs).partition(TP.topic, TP.partition).segments()[0]
    target = next(iter(first.headers())).max_timestamp
    for suffix in (".log", ".index", ".timeindex", ".txnindex"):
        first.path(suffix).unlink(missing_ok=True)  # the broker's local retention
    settings = load_settings(
        env={},
        log_dirs=(logs,),
        metadata_url=f"sqlite:///{db}",
        remote_url=remote.as_uri(),
        remote_log_index_cache_dir=tmp_path / "index-cache",
        topic_defaults=TopicSettings(retention_ms=-1),  # the sample's timestamps are years old
    )
    return build_runtime(settings), target


@pytest.mark.parametrize("deleter", ["retention", "copier"])
def test_a_deletion_finished_by_a_later_pass_removes_the_segments_cached_indexes(
    tmp_path: Path, sqlite_template: Path, deleter: str
) -> None:
    runtime, target = _runtime(tmp_path, sqlite_template)
    try:
        assert runtime.list_offsets.find_one(TP, target).tier == "remote"
        cache = runtime.index_cache
        assert cache.entries > 0
        cached = [p for p in cache.directory.iterdir() if p.name != ".lock"]
        first = next(iter(runtime.store.list_segments(TP, states=[SegmentState.COPY_SEGMENT_FINISHED])))
        # A deletion begun (the state moved) whose process died before the objects went.
        runtime.store.update_segment_state(
            first.segment_id,
            SegmentState.DELETE_SEGMENT_STARTED,
            event_time_ms=0,
            expected=SegmentState.COPY_SEGMENT_FINISHED,
        )
        loop = runtime.retention if deleter == "retention" else runtime.copier
        outcomes = loop.run_once()
        assert all(o.error is None for o in outcomes)
        deleted = runtime.store.get_segment(first.segment_id)
        assert deleted is not None and deleted.state is SegmentState.DELETE_SEGMENT_FINISHED
        assert cache.entries == 0
        assert cached and not any(p.exists() for p in cached)
    finally:
        runtime.close()
