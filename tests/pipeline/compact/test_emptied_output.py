"""An output segment that lost every record: a header-only batch keeps its range's last offset,
and carries no timestamp of the records that went (Kafka's cleaner appends nothing to a cleaned
segment when no batch is retained, so that segment has no largest timestamp of its own)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlm.log.dirwriter import LogDirWriter
from rlm.log.writer import ProducerRecord, TopicConfig
from rlm.metastore.model import TopicPartition
from tests.pipeline.compact.support import TOPIC, WRITTEN_AT, assert_lookups_exact, survivors
from tests.pipeline.compact.test_reference_job import run
from tests.pipeline.conftest import make_tier

TP = TopicPartition(TOPIC, 0)
#: The timestamp of the record of segment [0, 0], superseded by the record of its key at 1.
NEWEST_GONE = WRITTEN_AT + 5000


def write_superseded_segment(logs: Path) -> None:
    with LogDirWriter(logs, clock=lambda: WRITTEN_AT, default_config=TopicConfig()) as writer:
        log = writer.partition(TOPIC, 0)
        log.append([ProducerRecord(NEWEST_GONE, b"a", b"old")])  # 0
        log.roll()
        log.append([ProducerRecord(WRITTEN_AT + 1000, b"a", b"new")])  # 1
        log.append([ProducerRecord(WRITTEN_AT + 1000, b"b", b"x")])  # 2
        log.roll()
        log.append([ProducerRecord(WRITTEN_AT, b"tail", b"active")])


def test_a_segment_that_lost_every_record_keeps_no_timestamp_of_them(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    tier = make_tier("sqlite-fs", request, tmp_path, write_superseded_segment)
    report = run(tier)
    assert {p.status for p in report.partitions} == {"compacted"}, report.to_json()
    assert [s.offset for s in survivors(tier, TP)] == [1, 2]
    emptied = tier.finished(TP)[0]
    assert (emptied.start_offset, emptied.end_offset) == (0, 0)
    assert emptied.max_timestamp_ms == -1
    # retention still judges it by the age of the records it held
    assert emptied.age_ms() == NEWEST_GONE
    # the newest timestamp the partition answers is one a record holds
    assert_lookups_exact(tier, TP, tmp_path / "cache")
