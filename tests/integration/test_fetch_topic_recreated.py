"""A bounded fetch whose topic is deleted and made again between its planning and its reading.

The fetch lists the broker's segments once it has checked the topic id of the partition's
directory; the broker may then rename the deleted topic's directory (``-delete``) and make a new
``orders-0`` with another topic id, whose segment files bear the same names. The fetch must not
read them as the old topic's: it fails with an error naming both ids, as a range stream does
(``test_stream_topic_recreated``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rlm.errors import NotFoundError
from rlm.log.byte_source import FileSource
from rlm.log.logdir import LogDir
from rlm.log.segment import Segment
from rlm.lookup.topic_ids import local_topic_id
from rlm.metastore.model import TopicPartition
from tests.integration.test_stream_topic_recreated import written
from tests.lookup_support import TOPIC, Backend, runtime


def test_a_fetch_whose_topic_is_made_again_before_it_reads_fails_naming_both_ids_not_the_new_topics_records(
    tmp_path: Path, sqlite_template: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    live = written(tmp_path / "logs", b"old-")
    made_again = written(tmp_path / "again", b"new-")
    rt = runtime(Backend("sqlite-fs", sqlite_template=sqlite_template), tmp_path, tmp_path / "logs")
    old_id = local_topic_id(LogDir(tmp_path / "logs").partition(TOPIC, 0))
    new_id = local_topic_id(LogDir(tmp_path / "again").partition(TOPIC, 0))
    assert old_id is not None and new_id is not None and old_id != new_id
    opened: list[Path] = []
    original_open = Segment.open

    def recreated_before_the_first_read(segment: Segment) -> FileSource:
        if not opened:  # planned and listed: the topic is deleted, then made again
            live.rename(live.with_name(f"{live.name}.0123456789abcdef0123456789abcdef-delete"))
            made_again.rename(live)
        opened.append(segment.log_path)
        return original_open(segment)

    monkeypatch.setattr(Segment, "open", recreated_before_the_first_read)
    try:
        with pytest.raises(NotFoundError) as raised:
            rt.fetcher.fetch(TopicPartition(TOPIC, 0), 0, 1 << 20)
    finally:
        rt.close()
    assert opened, "no segment was opened: the test tested nothing"
    assert str(old_id) in str(raised.value) and str(new_id) in str(raised.value)
