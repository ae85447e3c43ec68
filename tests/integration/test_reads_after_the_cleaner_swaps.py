"""Reads of a segment the broker's log cleaner rewrote after a read had loaded its indexes.

The cleaner writes the cleaned segment beside the old one (``.cleaned``), renames it ``.swap``,
renames the old segment's files ``.deleted`` and the new ones to the old names: the segment keeps
its base offset, with fewer batches at other positions. The lookup service keeps each segment and
its loaded indexes, and looks whether the index files changed at most every
``STAMP_CHECK_INTERVAL_S`` of its clock; its clock never moves here, so only the swap itself (the
directory's listing changed) can make it look again. A read by the old offset index in the new
file would start at a position past the records it asks for, or inside a batch.
"""

from __future__ import annotations

from pathlib import Path

from rlm.log.byte_source import FileSource, read_batch_bytes
from rlm.log.files import segment_file_name
from rlm.log.recovery import rebuild_indexes
from rlm.log.segment import Segment
from rlm.log.writer import PartitionAppender, ProducerRecord, TopicConfig
from rlm.lookup.fetch import RecordFetcher
from rlm.lookup.service import LookupService
from rlm.metastore.model import TopicPartition
from tests.clock import FakeClock
from tests.integration.test_lookup_after_roll import _age
from tests.lookup_support import TOPIC, Backend, runtime

TS = 1_700_000_000_000
TP = TopicPartition(TOPIC, 0)
SUFFIXES = (".log", ".index", ".timeindex")


def cleaned(directory: Path, base: int, keep: set[int]) -> None:
    """As the log cleaner swaps in the segment at ``base`` holding only the batches of ``keep``."""
    old = Segment(directory, base)
    with old.open() as source, open(old.path(".log.cleaned"), "wb") as out:
        for header in old.headers():
            if header.last_offset in keep:
                out.write(read_batch_bytes(source, header))
    with FileSource(old.path(".log.cleaned")) as source:
        rebuilt = rebuild_indexes(source, base, index_interval_bytes=1)
    rebuilt.offset_index.write(old.path(".index.cleaned"))
    rebuilt.time_index.write(old.path(".timeindex.cleaned"))
    for suffix in SUFFIXES:
        old.path(suffix + ".cleaned").rename(old.path(suffix + ".swap"))
    for suffix in SUFFIXES:
        old.path(suffix).rename(old.path(suffix + ".deleted"))
    for suffix in SUFFIXES:
        old.path(suffix + ".swap").rename(old.path(suffix))
    _age(directory)


def test_a_fetch_of_a_segment_the_cleaner_rewrote_reads_it_by_its_new_index(
    tmp_path: Path, sqlite_template: Path
) -> None:
    log_dir = tmp_path / "logs"
    directory = log_dir / f"{TOPIC}-0"
    appender = PartitionAppender(
        directory, TopicConfig(index_interval_bytes=1, timestamp_after_max_ms=2**62), clock=lambda: TS
    )
    for offset in range(10):
        appender.append([ProducerRecord(TS + offset, b"k%d" % (offset % 2), b"v%d" % offset)])
    appender.roll()
    for offset in range(10, 15):
        appender.append([ProducerRecord(TS + offset, b"k", b"v%d" % offset)])
    assert segment_file_name(10, ".log") in {p.name for p in directory.iterdir()}
    rt = runtime(Backend("sqlite-fs", sqlite_template=sqlite_template), tmp_path, log_dir)
    try:
        service = LookupService(
            rt.store, rt.storage, rt.index_cache, rt.settings.log_dirs, clock=FakeClock(100.0)
        )
        fetcher = RecordFetcher(service, rt.storage, rt.index_cache)
        before = fetcher.fetch(TP, 7, 1 << 20)  # loads segment 0's indexes
        assert [r.offset for r in before.records] == list(range(7, 15))
        cleaned(directory, 0, keep={1, 3, 5, 7, 9})
        after = fetcher.fetch(TP, 6, 1 << 20)
        assert [r.offset for r in after.records] == [7, 9, *range(10, 15)]
    finally:
        rt.close()
