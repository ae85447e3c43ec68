"""Generates realistic Kafka log directories for demos, tests and benchmarks.

The data looks like a busy cluster's: keys drawn from a skewed pool (so compaction has work),
tombstones, headers (some with null values), every codec, CreateTime timestamps that arrive out
of order, LogAppendTime topics, idempotent producers and transactions ending in commit or abort
markers, optionally a prefix of legacy v1 messages as left by an upgraded cluster. Everything is
derived from a seed, so the same arguments give the same bytes.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from rlm.log.dirwriter import LogDirWriter
from rlm.log.model import Codec, ControlType, Header, TimestampType
from rlm.log.writer import PartitionAppender, ProducerRecord, TopicConfig

SAMPLE_BASE_TIMESTAMP = 1_700_000_000_000
"""First timestamp of generated data: 2023-11-14T22:13:20Z."""

TOPIC_NAMES = ("orders", "clicks", "payments", "inventory", "audit", "sessions", "metrics", "users")
ProgressCallback = Callable[[int], None]


@dataclass(frozen=True)
class ProduceSpec:
    """What to generate."""

    topics: int = 2
    """Number of topics; odd-numbered ones (``clicks``, ...) use LogAppendTime."""
    partitions: int = 2
    """Partitions per topic."""
    records: int = 10_000
    """Records per partition."""
    max_batch_records: int = 64
    """Largest number of records in one batch (sizes vary from 1 up to this)."""
    value_bytes: int = 120
    """Typical value size; values vary around it."""
    key_pool: int = 500
    """Distinct keys; they repeat with a skew."""
    segment_bytes: int = 512 * 1024
    """``segment.bytes`` of every topic, small so the sample has several segments."""
    index_interval_bytes: int = 4096
    record_interval_ms: int = 50
    """Mean time between two records of a partition."""
    max_lateness_ms: int = 5_000
    """How far behind the clock a CreateTime timestamp may lag (out-of-order arrival)."""
    transaction_ratio: float = 0.15
    """Share of batches written by transactional producers."""
    abort_ratio: float = 0.3
    """Share of transactions that end in an ABORT marker."""
    codecs: tuple[Codec, ...] = tuple(Codec)
    legacy_batches: int = 0
    """Batches of legacy v1 messages at the start of each partition of the first topic."""
    base_timestamp: int = SAMPLE_BASE_TIMESTAMP
    seed: int = 0
    topic_names: tuple[str, ...] = field(default=TOPIC_NAMES)

    def topic_name(self, index: int) -> str:
        names = self.topic_names
        return names[index] if index < len(names) else f"{names[index % len(names)]}{index // len(names)}"


@dataclass
class ProduceSummary:
    """What was written."""

    partitions: int = 0
    records: int = 0
    batches: int = 0
    segments: int = 0
    bytes: int = 0
    transactions_committed: int = 0
    transactions_aborted: int = 0


class _Clock:
    """The simulated broker clock; it moves forward as records are generated."""

    def __init__(self, start: int) -> None:
        self.now = start

    def __call__(self) -> int:
        return self.now


def produce(
    out_dir: str | Path, spec: ProduceSpec, progress: ProgressCallback | None = None
) -> ProduceSummary:
    """Write a log directory into ``out_dir`` following ``spec``; returns a summary."""
    rng = random.Random(spec.seed)
    clock = _Clock(spec.base_timestamp)
    configs = {
        spec.topic_name(t): TopicConfig(
            segment_bytes=spec.segment_bytes,
            index_interval_bytes=spec.index_interval_bytes,
            timestamp_type=TimestampType.LOG_APPEND_TIME if t % 2 else TimestampType.CREATE_TIME,
        )
        for t in range(spec.topics)
    }
    summary = ProduceSummary()
    writer = LogDirWriter(out_dir, clock=clock, topic_configs=configs)
    for t in range(spec.topics):
        for p in range(spec.partitions):
            clock.now = spec.base_timestamp
            appender = writer.partition(spec.topic_name(t), p, leader_epoch=rng.randint(0, 3))
            _fill_partition(appender, spec, rng, clock, summary, progress, legacy=t == 0)
            summary.partitions += 1
    writer.close()
    for partition_dir in Path(out_dir).iterdir():
        if partition_dir.is_dir():
            logs = list(partition_dir.glob("*.log"))
            summary.segments += len(logs)
            summary.bytes += sum(f.stat().st_size for f in logs)
    return summary


def _fill_partition(
    appender: PartitionAppender,
    spec: ProduceSpec,
    rng: random.Random,
    clock: _Clock,
    summary: ProduceSummary,
    progress: ProgressCallback | None,
    *,
    legacy: bool,
) -> None:
    written = 0
    open_txn: tuple[int, int, int] | None = None  # producer id, epoch, batches left
    sequences: dict[int, int] = {}
    legacy_left = spec.legacy_batches if legacy else 0
    while written < spec.records:
        n = min(spec.records - written, rng.randint(1, spec.max_batch_records))
        records = [_record(spec, rng, clock) for _ in range(n)]
        if legacy_left > 0:
            legacy_left -= 1
            appender.append_legacy(
                [r._replace(headers=()) for r in records],
                magic=1,
                codec=rng.choice([c for c in spec.codecs if c != Codec.ZSTD] or [Codec.NONE]),
            )
        elif open_txn is None and rng.random() < spec.transaction_ratio:
            pid = rng.randint(1000, 1999)
            open_txn = (pid, rng.randint(0, 5), rng.randint(1, 4))
            _append_producer(appender, records, spec, rng, sequences, pid, open_txn[1], transactional=True)
            open_txn = _next_txn_step(appender, open_txn, spec, rng, summary)
        elif open_txn is not None:
            pid, epoch, _ = open_txn
            _append_producer(appender, records, spec, rng, sequences, pid, epoch, transactional=True)
            open_txn = _next_txn_step(appender, open_txn, spec, rng, summary)
        elif rng.random() < 0.3:
            pid = rng.randint(1, 999)
            _append_producer(appender, records, spec, rng, sequences, pid, 0, transactional=False)
        else:
            appender.append(records, codec=rng.choice(spec.codecs))
        written += n
        summary.records += n
        summary.batches += 1
        if progress is not None:
            progress(n)
    if open_txn is not None:
        _end_txn(appender, open_txn, ControlType.COMMIT, summary)


def _record(spec: ProduceSpec, rng: random.Random, clock: _Clock) -> ProducerRecord:
    clock.now += int(rng.expovariate(1 / spec.record_interval_ms)) if spec.record_interval_ms else 0
    late = rng.random() < 0.2
    timestamp = clock.now - (rng.randint(1, spec.max_lateness_ms) if late else 0)
    key: bytes | None = None
    if rng.random() < 0.9:
        key = f"key-{int(rng.paretovariate(1.2)) % spec.key_pool:06d}".encode()
    value: bytes | None
    if key is not None and rng.random() < 0.05:
        value = None  # tombstone
    else:
        size = max(0, int(rng.gauss(spec.value_bytes, spec.value_bytes / 4)))
        value = _payload(rng, size)
    headers: tuple[Header, ...] = ()
    if rng.random() < 0.3:
        headers = (("trace-id", f"{rng.getrandbits(64):016x}".encode()),)
        if rng.random() < 0.3:
            headers += (("schema", None),)
    return ProducerRecord(timestamp, key, value, headers)


_WORDS = (b"alpha ", b"bravo ", b"charlie ", b"delta ", b"echo ", b"foxtrot ", b"golf ", b"hotel ")


def _payload(rng: random.Random, size: int) -> bytes:
    # Text-like and therefore compressible, as most real payloads are.
    out = bytearray()
    while len(out) < size:
        out += rng.choice(_WORDS)
    return bytes(out[:size])


def _append_producer(
    appender: PartitionAppender,
    records: list[ProducerRecord],
    spec: ProduceSpec,
    rng: random.Random,
    sequences: dict[int, int],
    pid: int,
    epoch: int,
    *,
    transactional: bool,
) -> None:
    seq = sequences.get(pid, 0)
    appender.append(
        records,
        codec=rng.choice(spec.codecs),
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        transactional=transactional,
    )
    sequences[pid] = (seq + len(records)) % 2**31


def _next_txn_step(
    appender: PartitionAppender,
    txn: tuple[int, int, int],
    spec: ProduceSpec,
    rng: random.Random,
    summary: ProduceSummary,
) -> tuple[int, int, int] | None:
    pid, epoch, left = txn
    if left > 1:
        return (pid, epoch, left - 1)
    marker = ControlType.ABORT if rng.random() < spec.abort_ratio else ControlType.COMMIT
    _end_txn(appender, txn, marker, summary)
    return None


def _end_txn(
    appender: PartitionAppender,
    txn: tuple[int, int, int],
    marker: ControlType,
    summary: ProduceSummary,
) -> None:
    pid, epoch, _ = txn
    appender.append_control(marker, producer_id=pid, producer_epoch=epoch, coordinator_epoch=1)
    if marker == ControlType.ABORT:
        summary.transactions_aborted += 1
    else:
        summary.transactions_committed += 1
