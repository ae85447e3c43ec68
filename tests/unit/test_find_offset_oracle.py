"""find-offset against a brute-force oracle over random logs."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlm.log.logdir import PartitionDir
from rlm.log.model import Codec, TimestampAndOffset, TimestampType
from rlm.log.writer import PartitionAppender, ProducerRecord, TopicConfig

NOW = 1_700_000_000_000

batch_strategy = st.tuples(
    st.lists(st.integers(min_value=0, max_value=50_000), min_size=1, max_size=12),
    st.sampled_from(list(Codec)),
    st.integers(min_value=0, max_value=300),
)


def _oracle(records: list[tuple[int, int, int]], target: int, start: int) -> TimestampAndOffset | None:
    for offset, timestamp, epoch in records:
        if offset >= start and timestamp >= target:
            return TimestampAndOffset(timestamp, offset, epoch)
    return None


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    batches=st.lists(batch_strategy, min_size=1, max_size=40),
    log_append_time=st.booleans(),
    segment_bytes=st.integers(min_value=300, max_value=4000),
    interval=st.integers(min_value=1, max_value=2000),
    targets=st.lists(st.integers(min_value=-10, max_value=60_000), min_size=1, max_size=15),
    start_fraction=st.floats(min_value=0, max_value=1),
)
def test_find_offset_matches_brute_force(
    batches: list[tuple[list[int], Codec, int]],
    log_append_time: bool,
    segment_bytes: int,
    interval: int,
    targets: list[int],
    start_fraction: float,
) -> None:
    config = TopicConfig(
        segment_bytes=segment_bytes,
        index_interval_bytes=interval,
        timestamp_type=TimestampType.LOG_APPEND_TIME if log_append_time else TimestampType.CREATE_TIME,
    )
    clock = [NOW]
    oracle: list[tuple[int, int, int]] = []
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "t-0"
        appender = PartitionAppender(directory, config, clock=lambda: clock[0], leader_epoch=3)
        for stamps, codec, advance in batches:
            clock[0] += advance
            records = [ProducerRecord(NOW + s, b"k", b"v" * (s % 40)) for s in stamps]
            result = appender.append(records, codec=codec)
            for i, s in enumerate(stamps):
                ts = result.log_append_time if log_append_time else NOW + s
                oracle.append((result.base_offset + i, ts, 3))
        appender.close()
        partition = PartitionDir(directory)
        start = int(start_fraction * len(oracle))
        for t in targets:
            target = NOW + t
            assert partition.find_offset_by_timestamp(target) == _oracle(oracle, target, 0)
            assert partition.find_offset_by_timestamp(target, start) == _oracle(oracle, target, start)
        best = max(ts for _, ts, _ in oracle)
        expected_max = next((o, ts) for o, ts, _ in oracle if ts == best)
        got = partition.max_timestamp_offset()
        assert got is not None and (got.offset, got.timestamp) == expected_max
