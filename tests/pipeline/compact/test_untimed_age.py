"""Records without timestamps keep their age through compaction (``cleanup.policy=compact,delete``).

Retention by time judges a segment whose records carry no timestamp (v0 messages, or -1) by when
it was tiered. A compaction output of such records is tiered anew: judged by the compaction's
time, it restarted the clock, and a topic compacted more often than ``retention.ms`` kept its
records forever. Kafka's cleaner keeps the cleaned segment's last-modified time for this reason.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from rlm.log.dirwriter import LogDirWriter
from rlm.log.logdir import LogDir
from rlm.log.writer import ProducerRecord, TopicConfig
from rlm.metastore.model import TopicPartition
from rlm.metrics import Metrics
from rlm.tiering.retention import Retention
from tests.pipeline.compact.support import TOPIC, WRITTEN_AT, compacting, survivors
from tests.pipeline.compact.test_reference_job import run
from tests.pipeline.conftest import make_tier

TP = TopicPartition(TOPIC, 0)
HOUR = 3_600_000
DAY = 24 * HOUR


def write_untimed_log(logs: Path) -> None:
    """Keyed records with timestamp -1, five keys written over and over, in small segments."""
    with LogDirWriter(
        logs, clock=lambda: WRITTEN_AT, default_config=TopicConfig(segment_bytes=1500)
    ) as writer:
        appender = writer.partition(TP.topic, TP.partition)
        for batch in range(40):
            appender.append([ProducerRecord(-1, b"k%d" % (i % 5), b"v%d-%d" % (batch, i)) for i in range(5)])


def test_a_compaction_output_of_untimed_records_keeps_its_inputs_age(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    tier = make_tier("sqlite-fs", request, tmp_path, write_untimed_log)
    inputs = tier.finished(TP)
    assert len(inputs) > 2 and {s.max_timestamp_ms for s in inputs} == {-1}
    tiered_at = max(s.event_time_ms for s in inputs)
    # Compacted within the day the records were tiered.
    report = run(tier, now_ms=tiered_at + 20 * HOUR, cleanup_policy="compact,delete", retention_ms=DAY)

    assert {p.status for p in report.partitions} == {"compacted"}, report.to_json()
    outputs = tier.finished(TP)
    assert {s.segment_id for s in outputs}.isdisjoint(s.segment_id for s in inputs)
    assert {s.max_timestamp_ms for s in outputs} == {-1}
    assert max(s.event_time_ms for s in outputs) == tiered_at  # not the compaction's time

    # A day after the records were tiered, retention deletes them, compacted or not.
    settings = compacting(tier.settings, cleanup_policy="compact,delete", retention_ms=DAY)
    partition = LogDir(settings.log_dirs[0]).partition(TP.topic, TP.partition)
    storage = tier.open_storage()
    try:
        with tier.open_store() as store:
            retention = Retention(
                settings, store, storage, Metrics(CollectorRegistry()), clock=lambda: tiered_at + DAY + 1
            )
            outcome = retention.enforce(partition)
    finally:
        storage.close()
    assert (outcome.error, outcome.deleted_segments) == (None, len(outputs))
    assert tier.finished(TP) == []


def test_untimed_records_younger_than_the_compaction_lag_by_their_segment_age_stay(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    # Kafka's cleaner judges min.compaction.lag.ms by a segment's largest timestamp, its file's
    # last modification when no record has one: untimed records just tiered are not cleanable.
    tier = make_tier("sqlite-fs", request, tmp_path, write_untimed_log)
    before = survivors(tier, TP)
    tiered_at = max(s.event_time_ms for s in tier.finished(TP))

    report = run(tier, now_ms=tiered_at + HOUR, min_compaction_lag_ms=DAY)

    assert {p.status for p in report.partitions} == {"unchanged"}, report.to_json()
    assert survivors(tier, TP) == before
    # a day later they are old enough, and compaction removes the superseded values
    later = run(tier, now_ms=tiered_at + DAY + HOUR, min_compaction_lag_ms=DAY)
    assert {p.status for p in later.partitions} == {"compacted"}, later.to_json()
    assert len(survivors(tier, TP)) < len(before)
