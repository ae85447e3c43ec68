"""The remote index cache over S3 (moto's server, over HTTP), with a real segment's index object."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from rlm.log.files import segment_file_name
from rlm.log.logdir import LEADER_EPOCH_CHECKPOINT
from rlm.log.recovery import RebuiltIndexes
from rlm.log.segment import Segment, rebuild_segment_indexes
from rlm.log.writer import PartitionAppender, ProducerRecord, TopicConfig
from rlm.lookup.index_cache import RemoteIndexCache
from rlm.lookup.stats import FetchStats
from rlm.metastore.model import IndexType, LeaderEpochEntry, RemoteSegment, SegmentState, TopicPartition
from rlm.metrics import Metrics
from rlm.storage.layout import IndexBlob, segment_keys
from rlm.storage.s3 import S3Storage
from tests.s3_support import MotoS3

NOW = 1_700_000_000_000
INDEX_INTERVAL_BYTES = 1024


@pytest.fixture(scope="module")
def bucket(moto_s3: MotoS3) -> str:
    return moto_s3.new_bucket()


@pytest.fixture
def s3(moto_s3: MotoS3, bucket: str) -> Iterator[S3Storage]:
    """A store under a fresh prefix of the module's bucket."""
    store = moto_s3.storage(bucket, f"cache-{uuid.uuid4().hex[:8]}/")
    yield store
    store.close()


@pytest.fixture(scope="module")
def rolled(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, RebuiltIndexes]:
    """A partition whose first segment is rolled, and the indexes rebuilt from its ``.log``."""
    directory = tmp_path_factory.mktemp("logs") / "orders-0"
    config = TopicConfig(segment_bytes=64 * 1024, index_interval_bytes=INDEX_INTERVAL_BYTES)
    appender = PartitionAppender(directory, config, clock=lambda: NOW, leader_epoch=3)
    while appender.next_offset < 2000:
        base = appender.next_offset
        appender.append([ProducerRecord(NOW - 100_000 + base + i, None, b"v" * 90) for i in range(10)])
    appender.close()
    rebuilt = rebuild_segment_indexes(Segment(directory, 0), index_interval_bytes=INDEX_INTERVAL_BYTES)
    assert rebuilt.error is None and len(rebuilt.offset_index) > 10 and len(rebuilt.time_index) > 10
    return directory, rebuilt


def upload(
    storage: S3Storage, directory: Path, rebuilt: RebuiltIndexes
) -> tuple[RemoteSegment, dict[IndexType, bytes]]:
    """Store the segment's index object as the copier does; returns its metadata and the files."""
    files = {
        IndexType.OFFSET: rebuilt.offset_index.to_bytes(),
        IndexType.TIMESTAMP: rebuilt.time_index.to_bytes(),
        IndexType.PRODUCER_SNAPSHOT: (
            directory / segment_file_name(rebuilt.next_offset, ".snapshot")
        ).read_bytes(),
        IndexType.LEADER_EPOCH: (directory / LEADER_EPOCH_CHECKPOINT).read_bytes(),
    }
    segment_id = uuid.uuid4()
    keys = segment_keys("orders", None, 0, 0, segment_id)
    blob = IndexBlob.build(files)
    storage.put_object(keys.indexes_key, blob.data)
    segment = RemoteSegment(
        segment_id=segment_id,
        topic_partition=TopicPartition("orders", 0),
        topic_id=None,
        start_offset=0,
        end_offset=rebuilt.next_offset - 1,
        max_timestamp_ms=rebuilt.max_timestamp,
        size_bytes=rebuilt.valid_bytes,
        broker_id=1,
        event_time_ms=NOW,
        leader_epochs=(LeaderEpochEntry(3, 0),),
        layout=blob.layout(keys),
        txn_index_empty=True,
        state=SegmentState.COPY_SEGMENT_FINISHED,
    )
    return segment, files


def test_each_index_is_fetched_once_with_its_own_range(
    s3: S3Storage, rolled: tuple[Path, RebuiltIndexes], tmp_path: Path
) -> None:
    segment, files = upload(s3, *rolled)
    metrics = Metrics(CollectorRegistry())
    with RemoteIndexCache(tmp_path / "cache", s3, metrics) as cache:
        for kind, content in files.items():
            cold, warm = FetchStats(), FetchStats()
            assert cache.get(segment, kind, cold) == content
            assert (cold.gets, cold.bytes) == (1, len(content))  # one ranged GET of that file only
            assert cache.get(segment, kind, warm) == content
            assert (warm.gets, warm.bytes) == (0, 0)
        assert cache.get(segment, IndexType.TRANSACTION) is None
        assert cache.entries == len(files)
    assert metrics.registry.get_sample_value("rlm_index_cache_remote_gets_total") == len(files)
    assert metrics.registry.get_sample_value("rlm_index_cache_hits_total") == len(files)


def test_parsed_indexes_match_the_rebuilt_ones_and_survive_a_restart(
    s3: S3Storage, rolled: tuple[Path, RebuiltIndexes], tmp_path: Path
) -> None:
    _, rebuilt = rolled
    segment, _ = upload(s3, *rolled)
    target = rebuilt.time_index.entry(len(rebuilt.time_index) // 2).timestamp - 1
    with RemoteIndexCache(tmp_path / "cache", s3, Metrics(CollectorRegistry())) as cache:
        stats = FetchStats()
        offsets, times = cache.offset_index(segment, stats), cache.time_index(segment, stats)
        assert stats.gets == 2
        assert list(offsets.entries()) == list(rebuilt.offset_index.entries())
        assert list(times.entries()) == list(rebuilt.time_index.entries())
        assert times.lookup(target) == rebuilt.time_index.lookup(target)
    with RemoteIndexCache(tmp_path / "cache", s3, Metrics(CollectorRegistry())) as restarted:
        stats = FetchStats()
        assert list(restarted.offset_index(segment, stats).entries()) == list(rebuilt.offset_index.entries())
        assert list(restarted.time_index(segment, stats).entries()) == list(rebuilt.time_index.entries())
        assert stats.gets == 0
