"""A range stream whose topic is deleted and made again while it reads the broker's files.

The broker renames a deleted topic's partition directory (``-delete``) and a topic made again
under the name gets a new ``orders-0`` with another topic id, whose segment files may bear the
same names. A stream of the old topic must not go on in the new one's files: it ends with an
error (Kafka's fetch of a deleted topic id fails), never with another topic's records.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rlm.errors import NotFoundError
from rlm.log.dirwriter import LogDirWriter
from rlm.log.logdir import LogDir
from rlm.log.model import TopicPartition as LogTopicPartition
from rlm.log.writer import ProducerRecord
from rlm.metastore.model import TopicPartition
from rlm.stream.chunks import StreamBatch
from rlm.stream.plan import RangeQuery
from tests.integration.test_reads_under_local_retention import batches_sent
from tests.lookup_support import NOW, TOPIC, Backend, runtime


def written(log_dir: Path, value: bytes) -> Path:
    """30 one-record batches in three segments, each value ``value`` and its offset; the
    partition's directory."""
    writer = LogDirWriter(log_dir, clock=lambda: NOW)
    appender = writer.partition(TOPIC, 0)
    for offset in range(30):
        if offset in (10, 20):
            appender.roll()
        appender.append([ProducerRecord(NOW + offset, None, value + b"%d" % offset)])
    writer.close({LogTopicPartition(TOPIC, 0): 30})
    return LogDir(log_dir).partition(TOPIC, 0).path


def test_a_stream_whose_topic_is_made_again_under_it_ends_with_an_error_not_the_new_topics_records(
    tmp_path: Path, sqlite_template: Path
) -> None:
    live = written(tmp_path / "logs", b"old-")
    made_again = written(tmp_path / "again", b"new-")
    rt = runtime(Backend("sqlite-fs", sqlite_template=sqlite_template), tmp_path, tmp_path / "logs")
    sent: list[StreamBatch] = []

    async def recreated_after_the_first(batch: StreamBatch) -> None:
        if not sent:  # the first segment is open: the topic is deleted, then made again
            live.rename(live.with_name(f"{live.name}.0123456789abcdef0123456789abcdef-delete"))
            made_again.rename(live)
        sent.append(batch)

    try:
        plan = rt.streams.plan(RangeQuery(TopicPartition(TOPIC, 0), offset=0))
        with pytest.raises(NotFoundError, match="topic"):
            batches_sent(rt, plan, recreated_after_the_first)
    finally:
        rt.close()
    assert sent, "no batch was read: the test tested nothing"
    values = [bytes(b.data) for b in sent]
    assert not [v for v in values if b"new-" in v], "the new topic's records were sent as the old one's"
