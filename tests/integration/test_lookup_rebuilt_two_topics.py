"""Lookups of a partition whose store was rebuilt while a deleted topic's segments lay beside
those of the topic created again under its name: the partition records no topic id until a
sidecar adopts the broker's, and until then the answers are still the broker's topic's alone."""

from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path

from rlm.log.checkpoints import topic_id_to_uuid
from rlm.log.logdir import LogDir
from rlm.metastore.model import SegmentState
from tests.integration.test_lookup_topic_recreate import LATEST_TIERED, TP, write_topic
from tests.lookup_support import Backend, runtime
from tests.metadata_support import segment

DELETED_TOPIC_ID = uuid.UUID("00000000-0000-4000-8000-0000000000dd")


def test_latest_tiered_of_a_rebuilt_partition_of_two_topics_is_the_brokers_topics(
    sqlite_template: Path, tmp_path: Path
) -> None:
    log_dir = tmp_path / "logs"
    write_topic(log_dir, 3, seed=2)  # offsets 0..29 of the topic created again
    text = LogDir(log_dir).partition(TP.topic, TP.partition).topic_id()
    assert text is not None
    rt = runtime(Backend("sqlite-fs", sqlite_template=sqlite_template), tmp_path, log_dir)
    try:
        # Rows as rebuild-metadata writes them: the deleted topic's [0, 49], the new one's [0, 19].
        rows = [dataclasses.replace(segment(0, 49), topic_id=DELETED_TOPIC_ID)]
        rows += [dataclasses.replace(segment(s, s + 9), topic_id=topic_id_to_uuid(text)) for s in (0, 10)]
        for row in rows:
            rt.store.add_segment(row)
            rt.store.update_segment_state(row.segment_id, SegmentState.COPY_SEGMENT_FINISHED, event_time_ms=1)
        record = rt.store.get_partition(TP)
        assert record is not None and record.topic_id is None and record.highest_copied_offset == 49

        assert rt.lookup.find(TP, LATEST_TIERED).offset == 19
    finally:
        rt.close()
