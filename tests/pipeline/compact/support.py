"""Compacted topics for the compaction tests: random keyed logs, tiered, and what they hold.

:func:`write_keyed_log` writes a topic ``users`` whose records exercise every rule: repeated keys,
tombstones, records without a key, an ordering header (8-byte values, duplicated, of other sizes,
absent), idempotent and transactional producers with commits and aborts, every codec, small
segments. :func:`survivors` reads back what the remote tier holds, with kafka-python.
"""

from __future__ import annotations

import contextlib
import random
import struct
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import yaml
from kafka.record import MemoryRecords

from rlm.config import Settings, TopicSettings
from rlm.log.dirwriter import LogDirWriter
from rlm.log.model import Codec, ControlType
from rlm.log.writer import PartitionAppender, ProducerRecord, TopicConfig
from rlm.metastore.model import SegmentState, TopicPartition
from rlm.pipeline.compact.engine import GroupResult, InProcessEngine
from rlm.pipeline.compact.job import CompactOptions, CompactReport, compact
from rlm.pipeline.compact.segment import OutputPlan
from rlm.pipeline.storage import StorageSpec
from rlm.storage.protocol import RemoteStorage
from tests.pipeline.tiers import Tier

TOPIC = "users"
#: The wall clock the logs are written at; compaction runs later.
WRITTEN_AT = 1_700_000_000_000
HEADER = "version"


class Survivor(NamedTuple):
    """One record of the remote tier as kafka-python reads it."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    control: bool


def write_keyed_log(
    logs: Path, *, seed: int, partitions: int = 2, batches: int = 60, topic: str = TOPIC
) -> None:
    """Write ``users-0`` … (``topic``'s partitions) with random keyed batches (see the module
    docstring)."""
    rng = random.Random(seed)
    now = [WRITTEN_AT]

    def clock() -> int:
        now[0] += 7
        return now[0]

    config = TopicConfig(segment_bytes=1500, index_interval_bytes=200)
    with LogDirWriter(logs, clock=clock, default_config=config) as writer:
        for p in range(partitions):
            _write_partition(writer.partition(topic, p), rng, now, batches)


def _write_partition(appender: PartitionAppender, rng: random.Random, now: list[int], batches: int) -> None:
    sequences: dict[int, int] = {}
    open_txn: int | None = None
    for _ in range(batches):
        pid = rng.choice([-1, -1, 11, 12])
        transactional = pid == 12
        if transactional and open_txn is None:
            open_txn = pid
        records = [_record(rng, now[0]) for _ in range(rng.randint(1, 4))]
        seq = sequences.get(pid, 0) if pid >= 0 else -1
        appender.append(
            records,
            codec=rng.choice(list(Codec)),
            producer_id=pid,
            producer_epoch=0 if pid >= 0 else -1,
            base_sequence=seq,
            transactional=transactional,
        )
        if pid >= 0:
            sequences[pid] = seq + len(records)
        if open_txn is not None and rng.random() < 0.3:
            kind = ControlType.ABORT if rng.random() < 0.4 else ControlType.COMMIT
            appender.append_control(kind, producer_id=open_txn, producer_epoch=0)
            open_txn = None
    if open_txn is not None:
        appender.append_control(ControlType.COMMIT, producer_id=open_txn, producer_epoch=0)
    appender.append([ProducerRecord(now[0], b"tail", b"active segment")])
    appender.roll()
    appender.append([ProducerRecord(now[0], b"tail", b"never tiered")])


def _record(rng: random.Random, now: int) -> ProducerRecord:
    key = None if rng.random() < 0.05 else b"k%d" % rng.randrange(12)
    value = None if rng.random() < 0.15 else b"v%d" % rng.randrange(10_000)
    headers: list[tuple[str, bytes | None]] = []
    for _ in range(rng.choice([0, 1, 1, 2])):
        size = rng.choice([8, 8, 8, 4])
        headers.append((HEADER, struct.pack(">q", rng.randrange(-5, 50))[:size]))
    if rng.random() < 0.2:
        headers.append(("other", b"x"))
    return ProducerRecord(now - rng.randrange(0, 5000), key, value, tuple(headers))


def compacted_config(tier: Tier, path: Path, **settings: object) -> Path:
    """An ``rlm.yaml`` at ``path`` naming ``tier``, ``users`` compacted as :func:`compacting` does
    (for ``rlm spark compact``), with ``settings`` (``remote.…`` keys) added."""
    config = yaml.safe_load(tier.config.read_text())
    config["topics"] = {
        TOPIC: {"cleanup.policy": "compact", "segment.bytes": 4000, "compaction.strategy.header": HEADER}
    }
    config.update(settings)
    path.write_text(yaml.safe_dump(config))
    return path


def compacting(settings: Settings, **topic: Any) -> Settings:
    """``settings`` with ``users`` compacted (``topic`` overrides its settings)."""
    base = TopicSettings(cleanup_policy="compact", segment_bytes=4000, compaction_strategy_header=HEADER)
    return settings.replace(topic_overrides={TOPIC: replace(base, **topic)})


def survivors(tier: Tier, tp: TopicPartition) -> list[Survivor]:
    """Every record (control records included) of the partition's finished segments, by offset."""
    out: list[Survivor] = []
    storage = tier.open_storage()
    try:
        for row in tier.finished(tp):
            out += read_records(storage.read_range(row.layout.log_key, 0, row.size_bytes))
    finally:
        storage.close()
    return sorted(out)


def read_records(data: bytes) -> list[Survivor]:
    """The records of a ``.log``'s bytes, as kafka-python reads them."""
    out = []
    memory = MemoryRecords(data)
    while (batch := memory.next_batch()) is not None:
        control = batch.magic >= 2 and batch.is_control_batch
        for r in batch:
            headers = tuple((k, v) for k, v in r.headers)
            out.append(Survivor(r.offset, r.timestamp, r.key, r.value, headers, control))
    return out


def object_keys(storage: RemoteStorage) -> set[str]:
    return set(storage.list_keys())


def stored_keys(tier: Tier) -> set[str]:
    """Every object of the tier's remote store."""
    storage = tier.open_storage()
    try:
        return object_keys(storage)
    finally:
        storage.close()


def live_keys(
    tier: Tier, states: tuple[SegmentState, ...] = (SegmentState.COPY_SEGMENT_FINISHED,)
) -> set[str]:
    keys: set[str] = set()
    with tier.open_store() as store:
        for record in store.list_partitions():
            for row in store.list_segments(record.topic_partition, states=list(states)):
                keys |= {row.layout.log_key, row.layout.index_key}
    return keys


Writer = Callable[[Path], object]


def orphans(tier: Tier) -> set[str]:
    """Objects no live row (finished, or replaced and waiting for its delay) references."""
    return stored_keys(tier) - live_keys(
        tier, (SegmentState.COPY_SEGMENT_FINISHED, SegmentState.DELETE_SEGMENT_STARTED)
    )


def assert_lookups_exact(tier: Tier, tp: TopicPartition, cache_dir: Path) -> None:
    """ListOffsets and record fetches over REST answer what a brute force over the survivors does."""
    from fastapi.testclient import TestClient

    from api.rest.app import create_app

    kept = survivors(tier, tp)
    # A query tier (no log directories) answers from the remote tier alone.
    settings = tier.settings.replace(log_dirs=(), auth_enabled=False, remote_log_index_cache_dir=cache_dir)
    stamps = sorted({s.timestamp for s in kept})

    def list_offsets(client: TestClient, timestamp: int) -> dict[str, Any]:
        where = {"partition_index": tp.partition, "timestamp": timestamp}
        body = {"topics": [{"name": tp.topic, "partitions": [where]}]}
        (answer,) = client.post("/v1/list-offsets", json=body).json()["topics"][0]["partitions"]
        return dict(answer)

    with TestClient(create_app(settings)) as client:
        for target in [stamps[0] - 1, *stamps[:: max(1, len(stamps) // 15)], stamps[-1], stamps[-1] + 1]:
            first = min((s for s in kept if s.timestamp >= target), key=lambda s: s.offset, default=None)
            assert list_offsets(client, target)["offset"] == (-1 if first is None else first.offset), target
        answer = list_offsets(client, -3)  # max-timestamp
        newest = max(s.timestamp for s in kept)
        assert answer["timestamp"] == newest
        assert answer["offset"] == min(s.offset for s in kept if s.timestamp == newest)
        fetched: list[int] = []
        offset = kept[0].offset
        path = f"/v1/topics/{tp.topic}/partitions/{tp.partition}/records"
        while offset <= kept[-1].offset:
            page = client.get(path, params={"offset": offset}).json()
            fetched += [r["offset"] for r in page["records"]]
            offset = page["next_offset"]
    assert fetched == [s.offset for s in kept if not s.control]


def assert_same_reports(got: Sequence[CompactReport], expected: Sequence[CompactReport]) -> None:
    """Runs of one engine (``got``) reported what the same runs of another did, partition by
    partition: each status and count."""
    for mine, theirs in zip(got, expected, strict=True):
        assert not mine.failed, mine.to_json()
        assert [(p.topic_partition, p.status, p.counts) for p in mine.partitions] == [
            (p.topic_partition, p.status, p.counts) for p in theirs.partitions
        ]


class KilledError(Exception):
    """A compaction job died between writing its outputs and its swap."""


def die_before_the_swap(tier: Tier, *, now_ms: int) -> None:
    """Run a compaction job over ``tier`` that writes its outputs and dies before its swap: the
    outputs are recorded and their objects stored, nothing swapped in."""
    settings = compacting(tier.settings)
    spec = StorageSpec.from_settings(settings)

    class DiesAfterWriting(InProcessEngine):
        def write(self, outputs: Sequence[OutputPlan], *, now_ms: int, write: bool) -> list[GroupResult]:
            super().write(outputs, now_ms=now_ms, write=write)
            raise KilledError("killed before the swap")

    with (
        tier.open_store() as store,
        contextlib.closing(tier.open_storage()) as storage,
        pytest.raises(KilledError),
    ):
        compact(store, storage, spec, DiesAfterWriting(spec), settings, CompactOptions(), now_ms=now_ms)
