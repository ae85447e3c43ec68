"""The log of an unclean leader election, written and read back, for the tests of the remote
copies it truncated (:mod:`tests.integration.test_unclean_election`,
:mod:`tests.integration.test_reads_across_a_cut`)."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Mapping
from pathlib import Path

from prometheus_client import CollectorRegistry

from rlm.bootstrap import build_runtime
from rlm.log.logdir import PARTITION_METADATA, LogDir
from rlm.metastore.model import TopicPartition
from tests.lookup_support import parse_with_kafka_python
from tests.tiering_support import (
    WRITER_NOW_MS,
    Backend,
    SegmentPlan,
    Tiering,
    set_log_start_offsets,
    write_scripted_log_dir,
)

TP = TopicPartition("orders", 0)
SEGMENT_FILES = (".log", ".index", ".timeindex", ".txnindex")


def plans(
    *segments: int | tuple[int, ...], batch_records: int = 5, peaks: Mapping[int, int] | None = None
) -> list[SegmentPlan]:
    """One segment per argument: an epoch (10 records), or its records and epochs. ``peaks``: the
    largest timestamp of some segments, by position (its middle record holds it, the others lie
    a few milliseconds below it)."""
    shapes = [(10, s) if isinstance(s, int) else (s[0], *s[1:]) for s in segments]
    peaks = peaks or {}
    return [
        SegmentPlan(
            records=records,
            max_timestamp_ms=peaks.get(i, WRITER_NOW_MS - 1000 + i),
            leader_epochs=tuple(epochs),
            batch_records=batch_records,
        )
        for i, (records, *epochs) in enumerate(shapes)
    ]


def partition_path(log_dir: Path) -> Path:
    return log_dir / f"{TP.topic}-{TP.partition}"


def write_log(
    log_dir: Path,
    *segments: int | tuple[int, ...],
    batch_records: int = 5,
    peaks: Mapping[int, int] | None = None,
) -> None:
    """Write the partition's log (the same records while the epochs agree), keeping its topic id;
    ``peaks`` as :func:`plans` takes them."""
    metadata = partition_path(log_dir) / PARTITION_METADATA
    topic_id = metadata.read_bytes() if metadata.exists() else None
    if log_dir.exists():
        shutil.rmtree(log_dir)
    write_scripted_log_dir(log_dir, {TP: plans(*segments, batch_records=batch_records, peaks=peaks)}, seed=7)
    if topic_id is not None:
        metadata.write_bytes(topic_id)


def drop_local_segments_below(log_dir: Path, offset: int) -> None:
    """Delete the segments below ``offset`` as the broker's local retention does; the log starts there."""
    for path in partition_path(log_dir).iterdir():
        if path.suffix in SEGMENT_FILES and int(path.stem) < offset:
            path.unlink()
    set_log_start_offsets(log_dir, {TP: offset})
    assert LogDir(log_dir).partition(TP.topic, TP.partition).segments()[0].base_offset == offset


Fetched = tuple[str | None, int, list[tuple[int, int]]]


def fetched(tiering: Tiering, log_dir: Path, offsets: list[int]) -> dict[int, Fetched]:
    """A bounded fetch at each offset (the log start offset put at 0, so that the copies' first
    offsets are read): its tier, next offset, and each record's offset and batch leader epoch.
    Its raw batches, read by kafka-python, hold the same records from the offset on, and end
    below the next offset."""
    set_log_start_offsets(log_dir, {TP: 0})
    rt = build_runtime(tiering.settings, registry=CollectorRegistry(), storage=tiering.storage)
    try:
        answers = {}
        for offset in offsets:
            result = rt.fetcher.fetch(TP, offset, 1 << 20)
            records = [(r.offset, b.header.leader_epoch) for b in result.batches for r in b.records]
            parsed = parse_with_kafka_python(result.raw)
            assert [
                (r.offset, b.leader_epoch) for b in parsed for r in b.records if r.offset >= offset
            ] == records
            assert all(b.last_offset < result.next_offset for b in parsed)
            answers[offset] = (result.tier, result.next_offset, records)
        return answers
    finally:
        rt.close()


def new_leaders_from(offset: int, last: int) -> list[tuple[int, int]]:
    return [(o, 6) for o in range(offset, last + 1)]


def spans(tiering: Tiering) -> list[tuple[int, int, tuple[int, ...]]]:
    return [
        (s.start_offset, s.end_offset, tuple(e.epoch for e in s.leader_epochs)) for s in tiering.finished(TP)
    ]


def elected_past_the_cut(
    backend: Backend, tiering_factory: Callable[..., Tiering], tmp_path: Path, *, past_the_cut: int = 3
) -> tuple[Tiering, Path]:
    """The old leader's 0..39 tiered in batches of 10 (epoch 5 from 20), then the new leader's log
    (epoch 6 from 20; a segment of ``past_the_cut`` records from 25, then its active segment of 3:
    28.. by default) with its segments below 25 deleted: 20..24 are only in the old copy's batch
    of 20..29, which holds offsets on both sides of 25."""
    log_dir = tmp_path / "logs"
    write_log(log_dir, (10, 4), (10, 4), (20, 5), (10, 5), batch_records=10)
    tiering = tiering_factory(backend, log_dir)
    tiering.copier().run_once()
    write_log(log_dir, (10, 4), (10, 4), (5, 6), (past_the_cut, 6))
    drop_local_segments_below(log_dir, 25)
    return tiering, log_dir
