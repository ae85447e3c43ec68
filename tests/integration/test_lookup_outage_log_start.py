"""Lookups while the metadata database does not answer, of a partition whose remote log start offset
rlm's own retention advanced above the broker's first local offset (retention.bytes counts the
remote tier: its oldest segments go while the broker still holds their offsets).

The real PostgreSQL sits behind a TCP proxy the test controls (:mod:`tests.tcp_proxy`). Whatever
the database does, no answer names an offset below the log start offset the store holds: with the
database refusing connections a lookup either answers as it did with the database up or fails with
the retriable ``MetadataUnavailableError``.

EARLIEST_LOCAL (the broker's first local offset at or above the log start) needs neither the store
nor the remote tier: with the database down it is answered as with it up.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from sqlalchemy.engine import make_url

from rlm.bootstrap import Runtime, build_runtime
from rlm.config import TopicSettings
from rlm.errors import MetadataUnavailableError, OffsetOutOfRangeError
from rlm.log.logdir import LogDir
from rlm.lookup.list_offsets import (
    ErrorCode,
    ListOffsetsRequest,
    PartitionQuery,
    PartitionResult,
    TopicQuery,
)
from rlm.lookup.plans import OffsetAnswer
from rlm.metastore.model import TopicPartition
from tests.lookup_support import Backend, runtime
from tests.s3_support import MotoS3
from tests.tcp_proxy import Mode, TcpProxy
from tests.tiering_support import (
    WRITER_NOW_MS,
    SegmentPlan,
    set_high_watermarks,
    set_log_start_offsets,
    write_scripted_log_dir,
)

pytestmark = pytest.mark.postgres

TP = TopicPartition("orders", 0)
EARLIEST = -2
#: The largest timestamp of the first segment (offsets 0-9), which remote retention deleted.
FIRST_SEGMENT_MAX = WRITER_NOW_MS - 1000


@contextlib.contextmanager
def proxied_sidecar(
    postgres_url: str, moto_s3: MotoS3, tmp_path: Path, topics: TopicSettings | None = None
) -> Iterator[tuple[Runtime, TcpProxy, Path]]:
    """A sidecar whose database is reached through a proxy, over 5 rolled segments of 10 records
    (and an active one) all tiered; its log directory."""
    log_dir = tmp_path / "logs"
    plans = [SegmentPlan(records=10, max_timestamp_ms=WRITER_NOW_MS - 1000 + i) for i in range(5)]
    write_scripted_log_dir(log_dir, {TP: plans}, seed=1)
    target = make_url(postgres_url)
    with TcpProxy((target.host or "127.0.0.1", target.port or 5432)) as proxy:
        proxied = target.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
        rt = runtime(
            Backend("postgres-s3", postgres_url=proxied, s3=moto_s3),
            tmp_path,
            log_dir,
            topic_defaults=topics or TopicSettings(retention_ms=-1),
        )
        try:
            assert [o.copied_segments for o in rt.copier.run_once()] == [5]
            yield rt, proxy, log_dir
        finally:
            proxy.set_mode(Mode.PASS)
            rt.close()


@pytest.fixture
def retained(postgres_url: str, moto_s3: MotoS3, tmp_path: Path) -> Iterator[tuple[Runtime, TcpProxy]]:
    """The tiered segments all deleted by remote retention (``retention.bytes`` 0): the remote
    log start offset is 50, while the broker's log still starts at offset 0 (its own retention
    deleted nothing)."""
    everything = TopicSettings(retention_ms=-1, retention_bytes=0)
    with proxied_sidecar(postgres_url, moto_s3, tmp_path, everything) as (rt, proxy, _):
        assert rt.lookup.find(TP, EARLIEST).offset == 0  # a view read before retention ran
        assert [o.deleted_segments for o in rt.retention.run_once()] == [5]
        yield rt, proxy


def answer_or_unavailable(rt: Runtime, timestamp: int) -> OffsetAnswer | None:
    """The lookup's answer; None when it failed as the store does not answer."""
    try:
        return rt.lookup.find(TP, timestamp)
    except MetadataUnavailableError as exc:
        assert exc.retriable
        return None


def test_with_the_database_down_no_lookup_answers_below_the_log_start_its_own_retention_advanced(
    retained: tuple[Runtime, TcpProxy],
) -> None:
    rt, proxy = retained
    up_earliest = rt.lookup.find(TP, EARLIEST)
    up_first = rt.lookup.find(TP, FIRST_SEGMENT_MAX)
    assert up_earliest.offset == 50
    assert up_first.offset >= 50

    proxy.set_mode(Mode.REFUSE)
    rt.lookup.invalidate(TP)  # as retention does after it advanced the log start (or the view expired)
    for timestamp, up in ((EARLIEST, up_earliest), (FIRST_SEGMENT_MAX, up_first)):
        down = answer_or_unavailable(rt, timestamp)
        assert down is None or down == up, f"timestamp {timestamp}: {down} with the database down, {up} up"


def test_with_the_database_down_no_fetch_reads_below_the_log_start_its_own_retention_advanced(
    retained: tuple[Runtime, TcpProxy],
) -> None:
    rt, proxy = retained
    with pytest.raises(OffsetOutOfRangeError):
        rt.fetcher.fetch(TP, 5, 1 << 20)

    proxy.set_mode(Mode.REFUSE)
    rt.lookup.invalidate(TP)  # as retention does after it advanced the log start
    with pytest.raises((OffsetOutOfRangeError, MetadataUnavailableError)):
        rt.fetcher.fetch(TP, 5, 1 << 20)


EARLIEST_LOCAL = -4


def list_offsets(rt: Runtime, timestamp: int) -> PartitionResult:
    """The answer of a ListOffsets request for ``TP`` alone."""
    query = TopicQuery(TP.topic, (PartitionQuery(TP.partition, timestamp),))
    [topic] = rt.list_offsets.handle(ListOffsetsRequest((query,), 30_000)).topics
    [answer] = topic.partitions
    return answer


def test_with_the_database_down_earliest_local_answers_from_the_brokers_log(
    postgres_url: str, moto_s3: MotoS3, tmp_path: Path
) -> None:
    with proxied_sidecar(postgres_url, moto_s3, tmp_path) as (rt, proxy, log_dir):
        local = LogDir(log_dir).partition(TP.topic, TP.partition)
        for segment in local.rolled_segments()[:2]:  # the broker's local retention
            for path in segment.log_path.parent.glob(f"{segment.base_offset:020d}.*"):
                path.unlink()
        up = list_offsets(rt, EARLIEST_LOCAL)
        assert (up.error_code, up.offset) == (ErrorCode.NONE, 20)

        proxy.set_mode(Mode.REFUSE)
        rt.lookup.views.ttl_s = 0.0  # the view read before the outage has expired
        down = list_offsets(rt, EARLIEST_LOCAL)
        assert down == up, down.error_message


#: The largest timestamp of the second segment (offsets 10-19), held by offset 15.
SECOND_SEGMENT_MAX = WRITER_NOW_MS - 999


def test_with_the_database_down_no_lookup_skips_offsets_another_sidecar_tiered_below_the_local_log(
    postgres_url: str, moto_s3: MotoS3, tmp_path: Path
) -> None:
    # The leader's log holds offsets 0-52; a follower's local retention deleted its 0-19 before
    # any but 0-9 were tiered. The leader's sidecar tiers 10-49 after the follower's read its view.
    leader_dir, follower_dir = tmp_path / "leader", tmp_path / "follower"
    plans = [SegmentPlan(records=10, max_timestamp_ms=WRITER_NOW_MS - 1000 + i) for i in range(5)]
    write_scripted_log_dir(leader_dir, {TP: plans}, high_watermarks={TP: 15}, seed=1)
    shutil.copytree(leader_dir, follower_dir)
    set_high_watermarks(follower_dir, {TP: 53})
    local = LogDir(follower_dir).partition(TP.topic, TP.partition)
    for segment in local.rolled_segments()[:2]:
        for path in segment.log_path.parent.glob(f"{segment.base_offset:020d}.*"):
            path.unlink()
    target = make_url(postgres_url)
    storage = moto_s3.storage(moto_s3.new_bucket(), "tier")
    with TcpProxy((target.host or "127.0.0.1", target.port or 5432)) as proxy:
        proxied = target.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
        settings = Backend("postgres-s3", postgres_url=proxied, s3=moto_s3).settings(tmp_path, follower_dir)
        follower = build_runtime(settings, registry=CollectorRegistry(), storage=storage)
        leader_settings = settings.replace(
            log_dirs=(leader_dir,),
            metadata_url=postgres_url,
            broker_id=settings.broker_id + 1,
            remote_log_index_cache_dir=tmp_path / "leader-cache",
        )
        leader = build_runtime(leader_settings, registry=CollectorRegistry(), storage=storage)
        try:
            assert [o.copied_segments for o in leader.copier.run_once()] == [1]
            assert follower.lookup.find(TP, SECOND_SEGMENT_MAX).offset >= 20  # 10-19 are nowhere yet
            set_high_watermarks(leader_dir, {TP: 53})
            assert [o.copied_segments for o in leader.copier.run_once()] == [4]
            assert leader.lookup.find(TP, SECOND_SEGMENT_MAX).offset == 15

            proxy.set_mode(Mode.REFUSE)
            follower.lookup.views.ttl_s = 0.0  # the view read before the outage has expired
            down = answer_or_unavailable(follower, SECOND_SEGMENT_MAX)
            assert down is None or down.offset == 15, down
        finally:
            proxy.set_mode(Mode.PASS)
            leader.close()
            follower.close()


def test_with_the_database_down_a_log_start_read_before_the_brokers_own_retention_still_bounds_lookups(
    retained: tuple[Runtime, TcpProxy], tmp_path: Path
) -> None:
    rt, proxy = retained
    up = rt.lookup.find(TP, EARLIEST)
    assert up.offset == 50  # the view now holds the log start retention advanced
    # The broker's own retention deletes its first segment and checkpoints its log start there.
    local = LogDir(tmp_path / "logs").partition(TP.topic, TP.partition)
    first = local.rolled_segments()[0]
    for path in first.log_path.parent.glob(f"{first.base_offset:020d}.*"):
        path.unlink()
    set_log_start_offsets(tmp_path / "logs", {TP: 10})

    proxy.set_mode(Mode.REFUSE)
    rt.lookup.views.ttl_s = 0.0  # the view read before the outage has expired
    for timestamp in (EARLIEST, FIRST_SEGMENT_MAX + 1):
        down = answer_or_unavailable(rt, timestamp)
        assert down is None or down.offset >= 50, f"timestamp {timestamp}: {down}"
