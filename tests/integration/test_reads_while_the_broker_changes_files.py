"""Fetches and range streams reading the broker's files while it changes them between two steps
of the read: local retention deleting a segment, the log cleaner swapping a cleaned segment in.

Every change is made at a fixed point of the read (a hook), never raced with sleeps. The answer
is always one the log held at some moment: records from the offset asked for, none skipped.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rlm.cli import main
from rlm.log.logdir import LogDir
from rlm.lookup.fetch import RecordFetcher
from rlm.lookup.stats import FetchStats
from rlm.metastore.model import TopicPartition
from tests.integration.test_fetch import BACKEND_PARAMS, tiered_partition
from tests.integration.test_reads_under_local_retention import (
    deleted_by_the_broker,
    deleted_when_read,
    tiered_local_segments,
    written,
)
from tests.lookup_support import NOW, TOPIC, Tiered


@pytest.fixture(params=BACKEND_PARAMS)
def tiered(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Tiered]:
    yield from tiered_partition(request, tmp_path, auth_enabled=False)


def test_a_fetch_whose_segment_is_deleted_after_it_chose_the_local_log_skips_no_offset(
    tiered: Tiered, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fetch chose the broker's log from one look at its segments; the broker deleted the
    segment holding the offset before the records were read: the fetch still starts at the
    offset (from the remote tier), never at the next segment's first offset."""
    gone = tiered_local_segments(tiered)
    assert len(gone) >= 2, "fewer than two tiered local segments: the test would test little"
    offset = gone[0].base_offset + 1
    real = RecordFetcher._read_local
    deleted: list[int] = []

    def read_local(self: RecordFetcher, *args: Any) -> None:
        if not deleted:
            deleted_by_the_broker(gone[0])
            local = self.service.local_partition(tiered.tp)
            assert local is not None
            local.forget_listing()  # as the watcher or stat tells soon after
            deleted.append(gone[0].base_offset)
        real(self, *args)

    monkeypatch.setattr(RecordFetcher, "_read_local", read_local)
    result = tiered.runtime.fetcher.fetch(TopicPartition(TOPIC, 0), offset, 1 << 20, stats=FetchStats())
    assert deleted, "the local log was not read: the test tested nothing"
    assert result.records, "the fetch read nothing"
    assert result.records[0].offset == tiered.truth.data_records(offset)[0].offset
    assert result.records == tiered.truth.data_records(offset)[: len(result.records)]


def test_find_offset_whose_segment_is_deleted_as_it_searches_answers_from_the_log_as_it_is_now(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``rlm log find-offset`` listed the segments; local retention deleted the one the search
    was to read: the answer is the log's as it is once the segment is gone (the lookups' answer),
    not an error about a file the broker removed."""
    log_dir = tmp_path / "logs"
    written(log_dir, 30, rolls=(10, 20))
    first = LogDir(log_dir).partition(TOPIC, 0).segments()[0]
    deleted = deleted_when_read(monkeypatch, first)
    code = main(["log", "find-offset", str(first.directory), "--timestamp", str(NOW + 3), "--json"])
    out, err = capsys.readouterr()
    assert deleted, "the deleted segment was not searched: the test tested nothing"
    assert code == 0, err
    assert json.loads(out) == {"offset": 10, "timestamp": NOW + 10, "leader_epoch": 0}
