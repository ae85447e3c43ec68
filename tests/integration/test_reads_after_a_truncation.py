"""Reads of the broker's active segment after it truncated it under a reader, then appended.

A follower truncates its log at a leader change (to the new leader's end of its epoch) and
appends the new leader's batches from there. Kafka moves the end of the segment's indexes back in
memory without writing their files, and the first append after the truncation adds no entry: the
index files are left byte for byte as they were, their stamps too, and a reader keeps the
offset index it loaded before. Its entries past the truncation name positions that no longer
hold their offsets; reads must still find every record, as Kafka's own reads do.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from rlm.bootstrap import Runtime
from rlm.log.files import segment_file_name
from rlm.log.segment import STAMP_CHECK_INTERVAL_S
from rlm.log.writer import PartitionAppender, ProducerRecord, TopicConfig
from rlm.lookup.service import LookupService
from rlm.metastore.model import TopicPartition
from rlm.stream.plan import RangeQuery
from rlm.timestamps import SpecialTimestamp
from tests.clock import FakeClock
from tests.integration.test_reads_under_local_retention import last_offsets_sent
from tests.lookup_support import TOPIC, Backend, runtime

TS = 1_700_000_000_000
TP = TopicPartition(TOPIC, 0)
#: The new leader's log: the follower's first five batches, then one batch of offsets 5-9.
NEW_LEADER = [[0], [1], [2], [3], [4], [5, 6, 7, 8, 9]]
#: How much later than the new leader the old one stamped its records from offset 5 on.
OLD_LEADER_LATER = 1000


def appended(directory: Path, batches: list[list[int]], later: int = 0) -> None:
    """A log of ``batches`` (each a list of offsets), every batch indexed, the files closed; the
    records from offset 5 on stamped ``later`` ms later than the others."""
    appender = PartitionAppender(
        directory, TopicConfig(index_interval_bytes=1, timestamp_after_max_ms=2**62), clock=lambda: TS
    )
    for offsets in batches:
        stamped = [TS + o + (later if o >= 5 else 0) for o in offsets]
        appender.append(
            [
                ProducerRecord(ts, b"k", b"v%d" % o * (1 + o % 3))
                for ts, o in zip(stamped, offsets, strict=True)
            ]
        )
    appender.close()


@pytest.fixture
def truncated(tmp_path: Path, sqlite_template: Path) -> Iterator[tuple[Runtime, Path, Path]]:
    """A sidecar over a log of offsets 0-9 (one batch each); the new leader's ``.log`` beside it."""
    log_dir = tmp_path / "logs"
    appended(log_dir / f"{TOPIC}-0", [[o] for o in range(10)], later=OLD_LEADER_LATER)
    appended(tmp_path / "new" / f"{TOPIC}-0", NEW_LEADER)
    rt = runtime(Backend("sqlite-fs", sqlite_template=sqlite_template), tmp_path, log_dir)
    name = segment_file_name(0, ".log")
    try:
        yield rt, log_dir / f"{TOPIC}-0" / name, tmp_path / "new" / f"{TOPIC}-0" / name
    finally:
        rt.close()


def truncate_and_append(log: Path, new_leader: Path) -> None:
    """As the follower truncates its ``.log`` at offset 5 and appends the new leader's batch, in
    place (the same file); its index files are not touched (module docstring)."""
    data = new_leader.read_bytes()
    with open(log, "r+b") as out:
        out.truncate(0)
        out.write(data)


def test_a_fetch_after_the_broker_truncated_and_appended_reads_the_new_batches(
    truncated: tuple[Runtime, Path, Path],
) -> None:
    rt, log, new_leader = truncated
    assert [r.offset for r in rt.fetcher.fetch(TP, 0, 1 << 20).records] == list(range(10))
    truncate_and_append(log, new_leader)
    assert [r.offset for r in rt.fetcher.fetch(TP, 7, 1 << 20).records] == [7, 8, 9]


def test_a_timestamp_lookup_after_the_broker_truncated_and_appended_finds_the_record(
    truncated: tuple[Runtime, Path, Path],
) -> None:
    rt, log, new_leader = truncated
    assert rt.lookup.find(TP, TS + OLD_LEADER_LATER + 8).offset == 8
    truncate_and_append(log, new_leader)
    assert rt.lookup.find(TP, TS + 7).offset == 7


def test_a_stream_after_the_broker_truncated_and_appended_sends_the_new_batch(
    truncated: tuple[Runtime, Path, Path],
) -> None:
    rt, log, new_leader = truncated
    assert last_offsets_sent(rt, rt.streams.plan(RangeQuery(TP, offset=8))) == [8, 9]
    truncate_and_append(log, new_leader)
    assert last_offsets_sent(rt, rt.streams.plan(RangeQuery(TP, offset=7))) == [9]


def test_max_timestamp_after_the_broker_truncated_and_appended_is_the_new_records(
    truncated: tuple[Runtime, Path, Path],
) -> None:
    """The old leader's time index entries name timestamps no record in the log has any more:
    once the index files are looked at again (the stamp check interval), the truncation shows in
    the ``.log`` that got shorter, though the index files did not change."""
    rt, log, new_leader = truncated
    clock = FakeClock(100.0)
    service = LookupService(rt.store, rt.storage, rt.index_cache, rt.settings.log_dirs, clock=clock)
    before = service.find(TP, SpecialTimestamp.MAX_TIMESTAMP)
    assert (before.offset, before.timestamp) == (9, TS + OLD_LEADER_LATER + 9)
    truncate_and_append(log, new_leader)
    clock.advance(2 * STAMP_CHECK_INTERVAL_S)
    after = service.find(TP, SpecialTimestamp.MAX_TIMESTAMP)
    assert (after.offset, after.timestamp) == (9, TS + 9)
