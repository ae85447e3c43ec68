"""Lookups of the lookup service right after the broker rolled a segment it had read as active.

The service keeps each partition's segments and their loaded indexes, and looks whether a
segment's index files changed at most every ``STAMP_CHECK_INTERVAL_S`` of its clock. A segment
read while it was active and then rolled must not be judged by the indexes loaded before the roll:
its largest timestamp would look too small and the search would skip it for a later segment. The
service's clock never moves here, so that nothing but the roll itself can make it look again.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from rlm.log.writer import PartitionAppender, ProducerRecord, TopicConfig
from rlm.lookup.service import LookupService
from rlm.metastore.model import TopicPartition
from rlm.timestamps import SpecialTimestamp
from tests.clock import FakeClock
from tests.lookup_support import TOPIC, Backend, Expected, runtime

TS = 1_700_000_000_000
TP = TopicPartition(TOPIC, 0)


def _age(directory: Path) -> None:
    """Date the directory's mtime back: a listing read within its mtime's tick is reused a
    little while (rlm.log.statcache); an older, changed one is read again at once."""
    past = time.time_ns() - 10_000_000_000
    os.utime(directory, ns=(past, past))


def test_a_segment_rolled_after_a_lookup_read_it_is_searched(tmp_path: Path, sqlite_template: Path) -> None:
    log_dir = tmp_path / "logs"
    directory = log_dir / f"{TOPIC}-0"
    appender = PartitionAppender(
        directory, TopicConfig(index_interval_bytes=1, timestamp_after_max_ms=2**62), clock=lambda: TS
    )
    for ts in (TS, TS + 1, TS + 2):
        appender.append([ProducerRecord(ts, b"k", b"v")])  # offsets 0-2
    appender.roll()
    for ts in (TS + 100, TS + 101, TS + 102):
        appender.append([ProducerRecord(ts, b"k", b"v")])  # offsets 3-5, segment 3 active
    rt = runtime(Backend("sqlite-fs", sqlite_template=sqlite_template), tmp_path, log_dir)
    try:
        service = LookupService(
            rt.store, rt.storage, rt.index_cache, rt.settings.log_dirs, clock=FakeClock(100.0)
        )

        def answer(timestamp: int) -> Expected:
            found = service.find(TP, timestamp)
            return Expected(found.offset, found.timestamp, found.leader_epoch)

        assert answer(TS + 101) == Expected(4, TS + 101, 0)  # loads segment 3's indexes
        appender.append([ProducerRecord(TS + 9000, b"k", b"v")])  # offset 6, still in segment 3
        appender.roll()
        appender.append([ProducerRecord(TS + 8000, b"k", b"v")])  # offset 7, segment 7 active
        _age(directory)
        assert answer(TS + 8000) == Expected(6, TS + 9000, 0)
        assert answer(TS + 9000) == Expected(6, TS + 9000, 0)
        assert answer(SpecialTimestamp.MAX_TIMESTAMP) == Expected(6, TS + 9000, 0)
    finally:
        rt.close()
