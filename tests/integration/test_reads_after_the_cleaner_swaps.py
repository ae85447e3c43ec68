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

from collections.abc import Iterator
from pathlib import Path

import pytest

from rlm.log.byte_source import FileSource, read_batch_bytes
from rlm.log.logdir import PartitionDir
from rlm.log.recovery import rebuild_indexes
from rlm.log.segment import Segment
from rlm.log.writer import PartitionAppender, ProducerRecord, TopicConfig
from rlm.lookup.fetch import RecordFetcher
from rlm.lookup.service import LookupService
from rlm.metastore.model import TopicPartition
from rlm.stream.plan import RangeQuery
from tests.clock import FakeClock
from tests.integration.test_lookup_after_roll import _age
from tests.integration.test_reads_under_local_retention import last_offsets_sent
from tests.lookup_support import TOPIC, Backend, runtime

TS = 1_700_000_000_000
TP = TopicPartition(TOPIC, 0)
SUFFIXES = (".log", ".index", ".timeindex")


def swapping(directory: Path, bases: list[int], keep: set[int]) -> None:
    """As the log cleaner is halfway through swapping the segments at ``bases`` for one cleaned
    segment holding only the batches of ``keep``: the cleaned one renamed ``.swap``, the first
    old one renamed ``.deleted``, the others not yet (Kafka's ``LocalLog.replaceSegments``)."""
    first = Segment(directory, bases[0])
    with open(first.path(".log.cleaned"), "wb") as out:
        for base in bases:
            old = Segment(directory, base)
            with old.open() as source:
                for header in old.headers():
                    if header.last_offset in keep:
                        out.write(read_batch_bytes(source, header))
    with FileSource(first.path(".log.cleaned")) as source:
        rebuilt = rebuild_indexes(source, bases[0], index_interval_bytes=1)
    rebuilt.offset_index.write(first.path(".index.cleaned"))
    rebuilt.time_index.write(first.path(".timeindex.cleaned"))
    for suffix in SUFFIXES:
        first.path(suffix + ".cleaned").rename(first.path(suffix + ".swap"))
    for suffix in SUFFIXES:
        first.path(suffix).rename(first.path(suffix + ".deleted"))
    _age(directory)


def swapped(directory: Path, bases: list[int]) -> None:
    """The rest of :func:`swapping`: the other old segments renamed ``.deleted``, the cleaned one
    to the first one's names."""
    for base in bases[1:]:
        for suffix in SUFFIXES:
            Segment(directory, base).path(suffix).rename(Segment(directory, base).path(suffix + ".deleted"))
    first = Segment(directory, bases[0])
    for suffix in SUFFIXES:
        first.path(suffix + ".swap").rename(first.path(suffix))
    _age(directory)


def cleaned(directory: Path, bases: list[int], keep: set[int]) -> None:
    """As the log cleaner swaps in one segment for those at ``bases``, holding only ``keep``'s
    batches."""
    swapping(directory, bases, keep)
    swapped(directory, bases)


def written(directory: Path) -> None:
    """Segments 0 (offsets 0-9, keys alternating), 10 (10-19, likewise) and 20 (20-24, active)."""
    appender = PartitionAppender(
        directory, TopicConfig(index_interval_bytes=1, timestamp_after_max_ms=2**62), clock=lambda: TS
    )
    for offset in range(25):
        if offset in (10, 20):
            appender.roll()
        appender.append([ProducerRecord(TS + offset, b"k%d" % (offset % 2), b"v%d" % offset)])
    assert [s.base_offset for s in PartitionDir(directory).segments()] == [0, 10, 20]


@pytest.fixture
def fetcher(tmp_path: Path, sqlite_template: Path) -> Iterator[RecordFetcher]:
    """A fetcher of the log :func:`written` under ``tmp_path``, its lookup service's clock never
    moving (module docstring)."""
    log_dir = tmp_path / "logs"
    written(log_dir / f"{TOPIC}-0")
    rt = runtime(Backend("sqlite-fs", sqlite_template=sqlite_template), tmp_path, log_dir)
    try:
        service = LookupService(
            rt.store, rt.storage, rt.index_cache, rt.settings.log_dirs, clock=FakeClock(100.0)
        )
        yield RecordFetcher(service, rt.storage, rt.index_cache)
    finally:
        rt.close()


def fetched(fetcher: RecordFetcher, offset: int) -> list[int]:
    """The offsets of the records a fetch from ``offset`` answers."""
    return [r.offset for r in fetcher.fetch(TP, offset, 1 << 20).records]


ODD = set(range(1, 25, 2))


def test_a_fetch_of_a_segment_the_cleaner_rewrote_reads_it_by_its_new_index(
    tmp_path: Path, fetcher: RecordFetcher
) -> None:
    assert fetched(fetcher, 7) == list(range(7, 25))  # loads segment 0's indexes
    cleaned(tmp_path / "logs" / f"{TOPIC}-0", [0], keep=ODD)
    assert fetched(fetcher, 6) == [7, 9, *range(10, 25)]


@pytest.mark.parametrize(
    ("bases", "offset", "expected"),
    [
        ([10], 12, [13, 15, 17, 19, *range(20, 25)]),
        ([0, 10], 4, [5, 7, 9, 11, 13, 15, 17, 19, *range(20, 25)]),
    ],
    ids=["one segment", "two segments into one"],
)
def test_a_fetch_while_the_cleaner_swaps_a_segment_in_reads_the_cleaned_one(
    tmp_path: Path, fetcher: RecordFetcher, bases: list[int], offset: int, expected: list[int]
) -> None:
    """Listed while the old segment is renamed ``.deleted`` and the cleaned one still ``.swap``,
    the log has no ``.log`` for the offsets; the cleaned segment holds them, as in the broker's
    own view of its log: a read reads it, neither skips its offsets nor reads them twice."""
    directory = tmp_path / "logs" / f"{TOPIC}-0"
    swapping(directory, bases, keep={o for o in ODD if o < 20})
    assert fetched(fetcher, offset) == expected
    swapped(directory, bases)
    assert fetched(fetcher, offset) == expected


@pytest.mark.parametrize("planned", ["before the swap", "during the swap"])
@pytest.mark.parametrize(("bases", "offset"), [([10], 12), ([0, 10], 4), ([10], 2)])
def test_a_stream_across_a_swap_sends_the_cleaned_segment_s_records(
    tmp_path: Path, sqlite_template: Path, planned: str, bases: list[int], offset: int
) -> None:
    """A stream planned before the cleaner renamed the old segment ``.deleted`` finds it gone and
    lists the directory again; one planned after finds the cleaned one ``.swap``: both send the
    cleaned segment's records, none of the old one's twice, none skipped."""
    log_dir = tmp_path / "logs"
    directory = log_dir / f"{TOPIC}-0"
    written(directory)
    rt = runtime(Backend("sqlite-fs", sqlite_template=sqlite_template), tmp_path, log_dir)
    try:
        plan = rt.streams.plan(RangeQuery(TP, offset=offset)) if planned == "before the swap" else None
        swapping(directory, bases, keep={o for o in ODD if o < 20})
        plan = plan or rt.streams.plan(RangeQuery(TP, offset=offset))
        cleaned_away = range(bases[0], 20)
        kept = [o for o in range(offset, 25) if o not in cleaned_away or o in ODD]
        assert last_offsets_sent(rt, plan) == kept
    finally:
        rt.close()
