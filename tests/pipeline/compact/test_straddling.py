"""The segment the compactable end falls inside: its batches at or below the end are compacted as
those of the segments before it (Kafka's cleaner cleans the segment holding its upper bound too,
keeping what lies past it), so that no record the rules count as gone stays in the tier.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from rlm.log.dirwriter import LogDirWriter
from rlm.log.writer import ProducerRecord, TopicConfig
from rlm.metastore.model import TopicPartition
from rlm.pipeline.compact.engine import InProcessEngine
from rlm.pipeline.compact.job import CompactOptions, CompactReport, compact
from rlm.pipeline.storage import StorageSpec
from tests.pipeline.compact.support import WRITTEN_AT, compacting, survivors
from tests.pipeline.conftest import make_tier
from tests.pipeline.tiers import Tier

#: Timestamp strategy. Segment [0, 1]: K's tombstone, newer than the record of K at 2 in the
#: segment [2, 3], whose record at 3 is younger than ``min.compaction.lag.ms``.
STRADDLED = TopicPartition("straddled", 0)
NOW = WRITTEN_AT + 3_600_000
LAG_MS = 60_000
#: Past the delete horizon the first run stamps (``delete.retention.ms`` = 1000); the record at 3
#: is still young.
LATER = NOW + 5_000


def write_straddled_log(logs: Path) -> None:
    with LogDirWriter(logs, clock=lambda: WRITTEN_AT, default_config=TopicConfig()) as writer:
        log = writer.partition(STRADDLED.topic, 0)
        log.append([ProducerRecord(WRITTEN_AT + 500, b"K", None)])  # 0
        log.append([ProducerRecord(WRITTEN_AT, b"other", b"x")])  # 1
        log.roll()
        log.append([ProducerRecord(WRITTEN_AT, b"K", b"older")])  # 2: loses to the tombstone
        log.append([ProducerRecord(NOW - 1000, b"young", b"y")])  # 3
        log.roll()
        log.append([ProducerRecord(NOW, b"tail", b"active")])


def run(tier: Tier, now: int) -> CompactReport:
    base = compacting(tier.settings).topic("users")
    topic = dataclasses.replace(
        base, compaction_strategy="timestamp", delete_retention_ms=1000, min_compaction_lag_ms=LAG_MS
    )
    settings = tier.settings.replace(topic_overrides={STRADDLED.topic: topic})
    spec = StorageSpec.from_settings(settings)
    storage = tier.open_storage()
    try:
        with tier.open_store() as store:
            engine = InProcessEngine(spec)
            return compact(store, storage, spec, engine, settings, CompactOptions(), now_ms=now)
    finally:
        storage.close()


def test_a_record_below_the_end_in_the_segment_holding_it_goes_with_its_tombstone(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    tier = make_tier("sqlite-fs", request, tmp_path, write_straddled_log)
    first = run(tier, NOW)
    assert not first.failed, first.to_json()
    # the record of K at 2 lost to the tombstone: it goes now, not only once 3 has aged
    assert [(s.offset, s.key, s.value) for s in survivors(tier, STRADDLED)] == [
        (0, b"K", None),
        (1, b"other", b"x"),
        (3, b"young", b"y"),
    ]
    second = run(tier, LATER)
    assert not second.failed, second.to_json()
    # past its horizon the tombstone goes: K must not read "older" again
    assert [(s.offset, s.key, s.value) for s in survivors(tier, STRADDLED)] == [
        (1, b"other", b"x"),
        (3, b"young", b"y"),
    ]
